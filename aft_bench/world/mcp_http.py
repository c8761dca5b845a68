"""A real MCP server that offers only streamable HTTP, driven synchronously like `mcp_stdio.StdioServer`: its
command started on a free port of 127.0.0.1 (`{port}`), then JSON-RPC over POST to its URL, answers read as JSON
or as an event stream, the session id carried. Every wait is bounded; the process is killed with its group."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import httpx

from aft_bench.common.lifetime import contained
from aft_bench.common.secrets import redact
from aft_bench.world.mcp_stdio import (CLIENT_INFO, MAX_LINE, PROTOCOL_VERSION, Connection, ServerFailed,
                                       ToolAnswer, _start_in_own_group, loads, malformed, rpc_error)


def free_port() -> int:
    """A port of 127.0.0.1 nobody listens on now (the server binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpServer(Connection):
    """One server process behind a URL on 127.0.0.1. `start()`, then `tools()` / `call()`, then `stop()`."""

    def __init__(self, command: Sequence[str], url: str, *, cwd: Path, env: Mapping[str, str] | None = None,
                 stderr_path: Path | None = None, timeout_s: float = 30.0) -> None:
        self.command = list(command)
        self.url = url
        self.cwd = cwd
        self.env = dict(env or {})
        self.timeout_s = timeout_s
        self.stderr_path = stderr_path
        self.server_info: dict[str, Any] = {}
        self.protocol: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._session: str | None = None
        self._client: httpx.Client | None = None
        self._next_id = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> HttpServer:
        err = open(self.stderr_path, "ab") if self.stderr_path is not None else subprocess.DEVNULL
        try:
            env = {**os.environ, **self.env}
            argv, fds = contained(self.command, env, str(self.cwd))
            self.proc = subprocess.Popen(argv, cwd=self.cwd, env=env, pass_fds=fds,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                         preexec_fn=_start_in_own_group)
        except OSError as exc:
            raise ServerFailed(f"cannot start {self.command[0]!r}: {exc.strerror or exc}") from None
        finally:
            if err is not subprocess.DEVNULL:
                err.close()
        self._client = httpx.Client(timeout=self.timeout_s, trust_env=False)  # 127.0.0.1 only: no proxy
        try:
            self._initialize()
        except BaseException:
            self.stop()
            raise
        return self

    def _initialize(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        params = {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": CLIENT_INFO}
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise ServerFailed(f"the server exited (status {self.proc.returncode}) before it answered initialize"
                                   + self._last_words())
            try:
                result = self._request("initialize", params)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise ServerFailed(f"no answer to initialize within {self.timeout_s:g} s at {self.url}") from None
                time.sleep(0.1)
        self._initialized(result)
        self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _last_words(self) -> str:
        if self.stderr_path is None or not self.stderr_path.exists():
            return ""
        lines = self.stderr_path.read_bytes()[-4096:].decode(errors="replace").strip().splitlines()
        return f"; its last words: {redact(lines[-1][:300])}" if lines else ""  # a server's stderr may hold a key

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - a process SIGKILL cannot end is the kernel's
            pass

    def __enter__(self) -> HttpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- protocol --------------------------------------------------------------------------------------------
    def call(self, name: str, arguments: Mapping[str, Any]) -> ToolAnswer:
        try:
            return super().call(name, arguments)
        except httpx.TransportError as exc:
            raise ServerFailed(f"the server at {self.url} failed while answering {name}: {exc}") from None

    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self._session:
            h["Mcp-Session-Id"] = self._session
        if self.protocol:
            h["MCP-Protocol-Version"] = self.protocol
        return h

    def _post(self, message: dict[str, Any]) -> httpx.Response:
        """POST one message and read its answer whole, within the call's time and MAX_LINE bytes: a body that
        never ends or that would not fit is the server failing, not a hang or an exhausted memory. An event
        stream is read until the response to this message has arrived."""
        assert self._client is not None
        deadline = time.monotonic() + self.timeout_s
        rid = message.get("id")
        with self._client.stream("POST", self.url, content=json.dumps(message), headers=self._headers(),
                                 timeout=self.timeout_s) as r:
            if r.headers.get("mcp-session-id"):
                self._session = r.headers["mcp-session-id"]
            stream = r.headers.get("content-type", "").startswith("text/event-stream")
            headers = {k: v for k, v in r.headers.items() if k.lower() not in ("content-encoding", "content-length")}
            body = bytearray()
            for chunk in r.iter_bytes():  # decoded: what the cap counts is what would be parsed
                body += chunk
                if len(body) > MAX_LINE:
                    raise malformed(f"an answer longer than {MAX_LINE // 2 ** 20} MB")
                tail = bytes(body[-(len(chunk) + 3):])
                if stream and rid is not None and (b"\n\n" in tail or b"\r\n\r\n" in tail):
                    done = httpx.Response(r.status_code, headers=headers, content=bytes(body))
                    if any(m.get("id") == rid for m in _messages(done)):
                        return done  # the response to this message: the rest of the stream is not ours to wait for
                if time.monotonic() > deadline:
                    raise ServerFailed(f"no complete answer within {self.timeout_s:g} s (the server kept sending)")
            return httpx.Response(r.status_code, headers=headers, content=bytes(body))

    def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next_id += 1
        rid = self._next_id
        try:
            r = self._post({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        except httpx.TimeoutException:
            raise ServerFailed(f"no answer to {method} within {self.timeout_s:g} s") from None
        except (httpx.ConnectError, httpx.ConnectTimeout):
            raise  # not listening (yet): start waits for it
        except httpx.HTTPError as exc:  # a broken chunked body, a bad encoding, a dropped answer: its failure
            raise ServerFailed(f"the server at {self.url} broke its answer to {method}: {exc}") from None
        if r.status_code >= 400:
            raise ServerFailed(f"the server answered {method} with HTTP {r.status_code}: {r.text[:200]}")
        for msg in _messages(r):
            if msg.get("id") != rid:
                continue
            if "error" in msg:
                raise rpc_error(msg["error"])
            result = msg.get("result")
            if not isinstance(result, dict):
                raise ServerFailed(f"answered {method} with a result that is not an object")
            return result
        raise ServerFailed(f"the server's answer to {method} held no response to it")


def _messages(r: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an answer: one JSON body, or the `data:` lines of an event stream."""
    kind = r.headers.get("content-type", "")
    if kind.startswith("text/event-stream"):
        out, data = [], []
        for line in r.text.splitlines() + [""]:
            if line.startswith("data:"):
                data.append(line[5:].lstrip())
            elif not line and data:
                try:
                    msg = loads("\n".join(data))
                except ValueError:
                    msg = None
                if isinstance(msg, dict):
                    out.append(msg)
                data = []
        return out
    try:
        body = loads(r.content)
    except ValueError:
        return []
    return [m for m in (body if isinstance(body, list) else [body]) if isinstance(m, dict)]
