"""A real MCP server over stdio, driven synchronously: start it, initialize, list its tools, call one, stop it.

The world layer's own small client (newline-delimited JSON-RPC, the MCP stdio transport), so that a world can
be reset, probed and called from the episode loop's synchronous surface without an event loop. Every wait is
bounded; the server runs in its own process group and dies with the thread that started it, so neither a hung
server nor a killed runner leaves a process behind.
"""

from __future__ import annotations

import functools
import json
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from aft_bench.common import untrusted_json
from aft_bench.common.lifetime import contained, die_with_parent
from aft_bench.common.secrets import redact
from aft_bench.world.launcher import ForkedProcess, LaunchFailed, launcher

PROTOCOL_VERSION = "2025-06-18"  # what we ask for; the server's answer is recorded, whatever it picks
CLIENT_INFO = {"name": "aft-bench-gateway", "version": "1"}
MAX_LINE = 16 * 1024 * 1024  # a message larger than this is a misbehaving server, not an answer


class ServerFailed(Exception):
    """The server did not start, crashed, hung past a deadline, or broke the protocol; the message says which."""


@dataclass(frozen=True)
class ToolAnswer:
    """A server's answer to tools/call, as it gave it: its content blocks, `isError`, any structured content."""

    content: tuple[dict[str, Any], ...]
    is_error: bool
    structured: Any = None

    @property
    def text(self) -> str:
        """The text blocks joined, the way a person reads the answer."""
        return "\n".join(str(b.get("text", "")) for b in self.content if b.get("type") == "text")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"content": list(self.content), "isError": self.is_error}
        if self.structured is not None:
            out["structuredContent"] = self.structured
        return out


def _start_in_own_group() -> None:
    """In the child before exec: its own process group (killed whole) and SIGKILL when its starter dies."""
    os.setpgid(0, 0)
    die_with_parent(signal.SIGKILL)


HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


def malformed(what: str) -> ServerFailed:
    """A server's answer in a shape MCP does not allow: an error naming what was wrong, never a crash."""
    return ServerFailed(f"the server sent a malformed answer: {what}")


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def check_tool(i: int, tool: Any) -> dict[str, Any]:
    """One entry of tools/list: an object with a name, an input schema that is a JSON Schema, annotations that are
    an object of booleans (where given)."""
    if not isinstance(tool, dict):
        raise malformed(f"tools/list's tool {i} is a {_kind(tool)}, not an object")
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise malformed(f"tools/list's tool {i} has no name (its name is {name!r})")
    schema = tool.get("inputSchema", {})
    if not isinstance(schema, dict):
        raise malformed(f"tool {name!r}: its inputSchema is a {_kind(schema)}, not an object")
    problem = _schema_problem(json.dumps(schema, sort_keys=True))
    if problem is not None:
        raise malformed(f"tool {name!r}: {problem}")
    notes = tool.get("annotations")
    if notes is not None:
        if not isinstance(notes, dict):
            raise malformed(f"tool {name!r}: its annotations are a {_kind(notes)}, not an object")
        for hint in HINTS:
            if hint in notes and not isinstance(notes[hint], bool):
                raise malformed(f"tool {name!r}: its {hint} is {notes[hint]!r}, not true or false")
    return tool


def rpc_error(err: Any) -> _RpcError:
    """A JSON-RPC error object: an integer code and a text message, or a malformed answer."""
    if not isinstance(err, dict) or not isinstance(err.get("code"), int) or isinstance(err.get("code"), bool):
        code = err.get("code") if isinstance(err, dict) else err
        raise malformed(f"an error whose code is {code!r}, not an integer")
    message = err.get("message", "")
    if not isinstance(message, str):
        raise malformed(f"an error whose message is a {_kind(message)}, not text")
    return _RpcError(err["code"], message)


def _kept(msg: Any) -> bool:
    """A message the client acts on: an answer (it has an id). Notifications are read and dropped unwalked, so a
    server that floods them costs a parse each, not a walk each."""
    return not isinstance(msg, dict) or "id" in msg


@functools.lru_cache(maxsize=4096)
def _schema_problem(text: str) -> str | None:
    """What is wrong with an inputSchema (its canonical text), or None; checked once per distinct schema, since a
    server is listed at every episode's start and may list thousands of tools with one schema."""
    import jsonschema

    schema = json.loads(text)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:  # every fault, the first by place and text: check_schema's pick among several varied with the hash seed
        faults = sorted(cls(cls.META_SCHEMA).iter_errors(schema), key=lambda e: (list(map(str, e.path)), e.message))
    except RecursionError:
        return "its inputSchema is nested too deep"
    if faults:
        return f"its inputSchema is not a JSON Schema: {faults[0].message[:120]}"
    return None


def loads(data: str | bytes) -> Any:
    """JSON from a server: what is not JSON, or holds NaN, a lone surrogate or nesting too deep for the rest of
    the harness to read, is a malformed answer, not a crash."""
    try:
        return untrusted_json.parse(data, only_if=_kept)
    except untrusted_json.UntrustedJson as exc:
        raise malformed(str(exc)) from None


class Connection:
    """What every transport shares: initialize's, tools/list's and tools/call's answers checked for the shapes
    the client relies on (a malformed one is a ServerFailed naming what), over its `_request`."""

    server_info: dict[str, Any]
    protocol: str | None

    def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def _initialized(self, result: dict[str, Any]) -> None:
        info = result.get("serverInfo", {})
        if not isinstance(info, dict):
            raise malformed(f"initialize's serverInfo is a {_kind(info)}, not an object")
        protocol = result.get("protocolVersion")
        if protocol is not None and not isinstance(protocol, str):
            raise malformed(f"initialize's protocolVersion is {protocol!r}, not text")
        self.server_info, self.protocol = dict(info), protocol

    def tools(self) -> list[dict[str, Any]]:
        """Every tool the server lists (following pagination), as the server describes them."""
        out: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(100):
            result = self._request("tools/list", {"cursor": cursor} if cursor else {})
            listed = result.get("tools", [])
            if not isinstance(listed, list):
                raise malformed(f"tools/list's tools are a {_kind(listed)}, not a list")
            out += [check_tool(len(out) + i, t) for i, t in enumerate(listed)]
            names = [t["name"] for t in out]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise malformed(f"tools/list lists {twice[0]!r} twice (a client could call only one of them)")
            cursor = result.get("nextCursor")
            if cursor is not None and not isinstance(cursor, str):
                raise malformed(f"tools/list's nextCursor is {cursor!r}, not text")
            if not cursor:
                return out
        raise ServerFailed("tools/list never stopped paginating (100 pages)")

    def call(self, name: str, arguments: Mapping[str, Any]) -> ToolAnswer:
        """tools/call; a JSON-RPC error (an unknown tool, refused arguments) is an answer with `isError`."""
        try:
            result = self._request("tools/call", {"name": name, "arguments": dict(arguments)})
        except _RpcError as exc:
            return ToolAnswer(({"type": "text", "text": str(exc)},), True)
        content = result.get("content", [])
        if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
            raise malformed(f"{name}'s answer content is not a list of objects")
        failed = result.get("isError", False)
        if not isinstance(failed, bool):
            raise malformed(f"{name}'s answer isError is {failed!r}, not true or false")
        return ToolAnswer(tuple(content), failed, result.get("structuredContent"))


class StdioServer(Connection):
    """One server process. Use `start()`, then `tools()` / `call()`, then `stop()` (also on every error path)."""

    def __init__(self, command: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None,
                 stderr_path: Path | None = None, timeout_s: float = 30.0,
                 fork: tuple[str, str, Sequence[str]] | None = None) -> None:
        """`fork`: (interpreter, `module:function`, preloads) to fork the server from a pre-imported launcher
        instead of starting `command` (whose arguments it then gets as sys.argv)."""
        self.command = list(command)
        self.fork = fork
        self.cwd = cwd
        self.env = dict(env or {})
        self.timeout_s = timeout_s
        self.stderr_path = stderr_path
        self.server_info: dict[str, Any] = {}
        self.protocol: str | None = None
        self.proc: subprocess.Popen[bytes] | ForkedProcess | None = None
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._next_id = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> StdioServer:
        env = {**os.environ, **self.env}
        if self.fork is not None:
            try:
                self.proc = launcher(*self.fork, self.timeout_s).spawn(self.command, self.cwd, env, self.stderr_path,
                                                                      self.timeout_s)
            except LaunchFailed as exc:
                raise ServerFailed(str(exc)) from None
            return self._begin()
        err = open(self.stderr_path, "ab") if self.stderr_path is not None else subprocess.DEVNULL
        try:
            argv, fds = contained(self.command, env, str(self.cwd))
            self.proc = subprocess.Popen(argv, cwd=self.cwd, env=env, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, pass_fds=fds,
                                         preexec_fn=_start_in_own_group)
        except OSError as exc:
            raise ServerFailed(f"cannot start {self.command[0]!r}: {exc.strerror or exc}") from None
        finally:
            if err is not subprocess.DEVNULL:
                err.close()
        return self._begin()

    def _begin(self) -> StdioServer:
        """Read the started process's output and initialize the session."""
        assert self.proc is not None
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()
        try:
            result = self._request("initialize", {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                                  "clientInfo": CLIENT_INFO})
            self._initialized(result)
            self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Close stdin, then kill the process group if it has not gone within a moment; reap it."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything it started too
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - a process SIGKILL cannot end is the kernel's
            pass
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> StdioServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- protocol --------------------------------------------------------------------------------------------
    def _read(self, stream: Any) -> None:
        try:
            for line in iter(lambda: stream.readline(MAX_LINE), b""):
                self._lines.put(line)
        except (OSError, ValueError):
            pass
        self._lines.put(None)  # end of output: the server has gone

    def _send(self, message: dict[str, Any]) -> None:
        if self.proc is None or self.proc.stdin is None:
            raise ServerFailed("the server is not running")
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise ServerFailed(self._gone("while we wrote to it")) from None

    def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next_id += 1
        rid = self._next_id
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        deadline = time.monotonic() + self.timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerFailed(f"no answer to {method} within {self.timeout_s:g} s")
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise ServerFailed(self._gone(f"before it answered {method}"))
            msg = _parse(line)
            if msg is None:
                continue  # a log line on stdout, or a blank line: not ours to answer
            if "method" in msg and "id" in msg:  # a request from the server (sampling, roots): we offer none
                self._send({"jsonrpc": "2.0", "id": msg["id"],
                            "error": {"code": -32601, "message": "the client offers no such capability"}})
                continue
            if msg.get("id") != rid:
                continue  # a notification, or an answer to something we gave up on
            if "error" in msg:
                raise rpc_error(msg["error"])
            result = msg.get("result")
            if not isinstance(result, dict):
                raise ServerFailed(f"answered {method} with a result that is not an object")
            return result

    def _gone(self, when: str) -> str:
        code = self.proc.poll() if self.proc is not None else None
        if code is None and self.proc is not None:
            try:
                code = self.proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        said = self._last_words()
        head = f"the server exited (status {code}) {when}" if code is not None else f"the server closed its output {when}"
        return f"{head}; its last words: {said}" if said else head

    def _last_words(self) -> str:
        """The last line the server wrote to stderr (where a crash says why), if it was kept."""
        if self.stderr_path is None:
            return ""
        try:
            lines = self.stderr_path.read_bytes()[-4096:].decode(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return redact(lines[-1][:300]) if lines else ""  # a server's stderr may hold a key


class _RpcError(ServerFailed):
    """A JSON-RPC error answer (for tools/call, an answer with `isError`; anywhere else the server failed)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"MCP error {code}: {message}")
        self.code, self.message = code, message


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        msg = loads(line)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None
