"""Tool programs (ToolPro): the agent submits one Python program whose only contact with the world is
`CALL(tool, arguments, effect)`; it runs in pydantic-monty's sandbox (a Rust interpreter in worker
processes, with time, memory and recursion limits), never in this process.

Before execution the program is parsed and projected onto the surface: no imports, no dunder names, no
eval/exec/open/compile or other escapes, no `while True`, and every `CALL` names a tool of the surface with
a literal effect label that matches the tool's declared effect. The host `CALL` is the enforcement point at
run time too (program order, effect labels, the surface), and every call goes through the interface and the
stage pipeline, so faults, trace and labels apply unchanged.

Re-execution after a failure (`replay`) follows ToolPro's Algorithm 1: the history H gains the last
execution's log W; a WRITE whose (tool, arguments) matches the earliest unused completed H entry returns its
cached outcome instead of being emitted again. Fail-closed: a repaired program that changes the arguments or
order of the completed WRITE prefix disables replay, and the episode falls back to stepwise calls. Under
`plain` every re-execution emits every call again.
"""

from __future__ import annotations

import ast
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aft_bench.interface.tools import MAX_ARGS_CHARS, Observation

MAX_SOURCE_CHARS = 64 * 1024
MAX_ATTEMPTS = 3
FORBIDDEN_CALLS = frozenset({"eval", "exec", "open", "compile", "getattr", "setattr", "delattr", "globals",
                             "locals", "vars", "input", "breakpoint", "__import__", "exit", "quit", "help",
                             "memoryview", "type", "object"})
LIMITS = {"max_feed_duration_secs": 5.0, "max_memory": 64 * 1024 * 1024, "max_recursion_depth": 200}


@dataclass(frozen=True)
class Diagnostic:
    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


def validate(source: str, effects: dict[str, str]) -> list[Diagnostic]:
    """Everything that keeps `source` from running, with its line; [] when it may run.
    `effects` maps each callable tool to "READ" or "WRITE"."""
    if len(source) > MAX_SOURCE_CHARS:
        return [Diagnostic(0, f"program of {len(source)} characters; the limit is {MAX_SOURCE_CHARS}")]
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [Diagnostic(exc.lineno or 0, f"syntax error: {exc.msg}")]
    except (ValueError, RecursionError, MemoryError) as exc:
        return [Diagnostic(0, f"cannot parse: {type(exc).__name__}")]
    out: list[Diagnostic] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(Diagnostic(line, "imports are outside the surface"))
        elif isinstance(node, ast.Name) and (node.id.startswith("__") or node.id in FORBIDDEN_CALLS):
            out.append(Diagnostic(line, f"'{node.id}' is outside the surface"))
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            out.append(Diagnostic(line, f"attribute '{node.attr}' is outside the surface"))
        elif isinstance(node, ast.While) and isinstance(node.test, ast.Constant) and node.test.value:
            out.append(Diagnostic(line, "an unbounded loop (while True) is outside the surface"))
        elif isinstance(node, (ast.Global, ast.Nonlocal, ast.AsyncFunctionDef, ast.Await)):
            out.append(Diagnostic(line, f"{type(node).__name__} is outside the surface"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "CALL":
            out += _check_call_site(node, effects)
    return sorted(set(out), key=lambda d: (d.line, d.reason))


def _check_call_site(node: ast.Call, effects: dict[str, str]) -> list[Diagnostic]:
    line = node.lineno
    if len(node.args) != 3 or node.keywords:
        return [Diagnostic(line, "CALL takes exactly (tool, arguments, effect)")]
    tool, _args, effect = node.args
    out = []
    if not (isinstance(tool, ast.Constant) and isinstance(tool.value, str)):
        out.append(Diagnostic(line, "CALL's tool must be a literal name"))
    elif tool.value not in effects:
        out.append(Diagnostic(line, f"unknown tool '{tool.value}'"))
    if not (isinstance(effect, ast.Constant) and effect.value in ("READ", "WRITE")):
        out.append(Diagnostic(line, "CALL's effect must be the literal \"READ\" or \"WRITE\""))
    elif isinstance(tool, ast.Constant) and tool.value in effects and effects[tool.value] != effect.value:
        out.append(Diagnostic(line, f"'{tool.value}' is a {effects[tool.value]} tool, labelled {effect.value}"))
    return out


class _ProgramError(Exception):
    """A CALL the host refused: the program stops here."""


_POOL: dict[str, Any] = {}
_POOL_LOCK = threading.Lock()


def _pool() -> Any:
    """One pydantic-monty worker pool per process, started on first use."""
    with _POOL_LOCK:
        if "pool" not in _POOL:
            import pydantic_monty

            pool = pydantic_monty.Monty(min_processes=1, max_processes=2, request_timeout=10.0)
            pool.__enter__()
            _POOL["pool"] = pool
        return _POOL["pool"]


PRINT_CAP = 4096  # characters of a program's printed output kept in the trace


@dataclass
class ProgramRunner:
    """Program submissions of one episode: attempts, the replay history H and the fallback state."""

    mode: str  # plain | replay
    history: list[tuple[str, str, Any]] = field(default_factory=list)  # H: (tool, args json, outcome) of WRITEs
    log: list[tuple[str, str, Any]] = field(default_factory=list)  # W of the last execution
    attempts: int = 0
    fallback: bool = False
    replayed: int = 0

    def run(self, source: str, effects: dict[str, str], call: Callable[[str, dict[str, Any]], Observation],
            note: Callable[..., None]) -> dict[str, Any]:
        """Validate and execute one program against the tools `effects` names (READ/WRITE each); returns the
        result record the agent sees."""
        note("program_submitted", chars=len(source), attempt=self.attempts + 1, mode=self.mode)
        if self.fallback:
            return self._refused(note, [Diagnostic(0, "replay was disabled for this episode: continue stepwise")])
        if self.attempts >= MAX_ATTEMPTS:
            return self._refused(note, [Diagnostic(0, f"the attempt budget ({MAX_ATTEMPTS}) is spent")])
        diagnostics = validate(source, effects)
        if diagnostics:
            return self._refused(note, diagnostics)
        self.attempts += 1
        if self.mode == "replay":
            self.history += self.log  # H <- H ++ W
        self.log = []
        used: set[int] = set()
        prefix = [h for h in self.history if _ok(h[2])]
        writes = 0
        made: list[dict[str, Any]] = []

        def host_call(tool: Any, args: Any, effect: Any) -> Any:
            nonlocal writes
            if not isinstance(tool, str) or tool not in effects:
                raise _ProgramError(f"unknown tool {tool!r}")
            if effect != effects[tool]:
                raise _ProgramError(f"'{tool}' is a {effects[tool]} tool, labelled {effect!r}")
            if not isinstance(args, dict):
                raise _ProgramError("CALL's arguments must be a dict")
            key = json.dumps(args, sort_keys=True)
            if len(key) > MAX_ARGS_CHARS:  # as at the MCP boundary: no trace outgrows what the audit reads
                raise _ProgramError(f"'{tool}' arguments of {len(key)} characters; the limit is {MAX_ARGS_CHARS}")
            if effect == "WRITE":
                if self.mode == "replay" and writes < len(prefix) and (prefix[writes][0], prefix[writes][1]) != (tool, key):
                    self.fallback = True
                    note("program_fallback", reason="the repaired program changes the completed write prefix",
                         write=writes + 1)
                    raise _ProgramError(f"replay disabled: write #{writes + 1} differs from the completed one; "
                                        f"continue stepwise")
                writes += 1
                if self.mode == "replay":
                    hit = next((i for i, h in enumerate(self.history)
                                if i not in used and h[0] == tool and h[1] == key and _ok(h[2])), None)
                    if hit is not None:
                        used.add(hit)
                        self.replayed += 1
                        note("write_replayed", tool=tool, args=args)
                        made.append({"tool": tool, "replayed": True})
                        return self.history[hit][2]
            content = call(tool, args).content
            if effect == "WRITE":
                self.log.append((tool, key, content))
            made.append({"tool": tool})
            return content

        import pydantic_monty

        printed: list[str] = []
        chars = 0

        def on_print(_stream: str, text: str) -> None:  # kept (capped) in the trace, never on the host's stderr
            nonlocal chars
            if chars < PRINT_CAP:
                printed.append(text[: PRINT_CAP - chars])
            chars += len(text)

        try:
            try:
                with _pool().checkout(limits=pydantic_monty.ResourceLimits(**LIMITS)) as session:  # type: ignore[typeddict-item]
                    value = session.feed_run(source, external_lookup={"CALL": host_call}, print_callback=on_print)
            finally:
                if chars:
                    note("program_output", text="".join(printed), chars=chars, truncated=chars > PRINT_CAP)
        except pydantic_monty.MontyError as exc:
            text = str(exc).strip().splitlines()
            note("program_failed", error=(text[-1] if text else type(exc).__name__)[:300], calls=len(made))
            return {"status": "error", "error": "program_failed", "detail": (text[-1] if text else "")[:300],
                    "calls_made": made, "attempt": self.attempts}
        note("program_completed", calls=len(made))
        return {"status": "ok", "result": _plain(value), "calls_made": made, "attempt": self.attempts}

    def _refused(self, note: Callable[..., None], diagnostics: list[Diagnostic]) -> dict[str, Any]:
        note("program_rejected", diagnostics=[str(d) for d in diagnostics[:20]])
        return {"status": "error", "error": "program_rejected", "detail": "; ".join(map(str, diagnostics[:5]))}


def _ok(content: Any) -> bool:
    """Did this call's observation say it succeeded (structured or text result)?"""
    if isinstance(content, dict):
        return content.get("status") == "ok"
    return isinstance(content, str) and content.startswith("OK")


def _plain(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)
