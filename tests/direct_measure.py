"""A direct measurement of a re-issued call, independent of aft-bench's code: the official MCP SDK client starts the
server on a fresh folder, makes an example's set-up calls, reads the state by hand (every SQLite table, a file's
text, a JSON-lines file's lines), calls the tool, reads the state, calls it again with the same arguments and reads
the state again. What a scorecard says of the same example is checked against this (tests/test_any_server.py)."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Direct:
    """Three readings of the state (before, after the call, after the re-issue) and the two answers."""

    states: tuple[Any, Any, Any]
    first: tuple[bool, str]  # (isError, text)
    second: tuple[bool, str]

    @property
    def state_class(self) -> str:
        """duplicate (both calls changed the state), once (one did), or no_effect (neither)."""
        s0, s1, s2 = self.states
        changed = (s1 != s0) + (s2 != s1)
        return {0: "no_effect", 1: "once", 2: "duplicate"}[changed]


def read_state(kind: str, path: Path) -> Any:
    """The state as a person would read it: every table's rows (and the schema), a file's text, a file's lines."""
    if not path.exists():
        return None
    if kind == "sqlite":
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            schema = con.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
            tables = {name: con.execute(f'SELECT rowid, * FROM "{name}" ORDER BY rowid').fetchall()
                      for name, sql in schema if sql and sql.upper().startswith("CREATE TABLE")}
            return schema, tables
        finally:
            con.close()
    if kind == "jsonl":
        return sorted(line for line in path.read_text().splitlines() if line.strip())
    return path.read_text()


def _fill(args: Any, answers: list[Any]) -> Any:
    """`{before.N.a.b}` from the N-th set-up answer's JSON text (written here again, not borrowed)."""
    if isinstance(args, dict):
        return {k: _fill(v, answers) for k, v in args.items()}
    if isinstance(args, list):
        return [_fill(v, answers) for v in args]
    m = re.fullmatch(r"\{before\.(\d+)\.(.+)\}", args) if isinstance(args, str) else None
    if not m:
        return args
    value = answers[int(m.group(1))]
    for part in m.group(2).split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def _text(result: Any) -> str:
    return "\n".join(getattr(b, "text", "") for b in result.content)


async def _measure(argv: list[str], state: dict[str, str], example: dict[str, Any], tool: str,
                   root: Path) -> Direct:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(root))
    target = root / state["path"]
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        answers = []
        for call in example.get("before", []):
            res = await s.call_tool(call["tool"], _fill(call.get("args", {}), answers))
            try:
                answers.append(json.loads(_text(res)))
            except ValueError:
                answers.append(None)
        args = _fill(example.get("args", {}), answers)
        s0 = read_state(state["kind"], target)
        first = await s.call_tool(tool, args)
        s1 = read_state(state["kind"], target)
        second = await s.call_tool(tool, args)
        s2 = read_state(state["kind"], target)
    return Direct((s0, s1, s2), (bool(first.is_error), _text(first)), (bool(second.is_error), _text(second)))


def measure(command: list[str], servers: Path, state: dict[str, str], example: dict[str, Any], tool: str) -> Direct:
    """One example measured directly on a fresh folder and a fresh server."""
    with tempfile.TemporaryDirectory(prefix="direct-") as tmp:
        root = Path(tmp)
        argv = [c.replace("{servers}", str(servers)).replace("{root}", str(root)) for c in command]
        return asyncio.run(_measure(argv, state, example, tool, root))
