"""Imported catalogs (Tool Forge governance): `aft-bench catalog import-mcp` lists a real MCP server's tools with
the official SDK client and writes them as catalog cards in pending review (annotations kept only as untrusted
hints; effect class unknown); `catalog review` approves (with an effect class), blocks or pins tools;
`catalog resolve` resolves a session in such a catalog under a profile, so only reviewed tools are resolvable.
A catalog file is JSON, rewritten atomically."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shlex
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field

from aft_bench.common.datafile import validate
from aft_bench.common.errors import InputError
from aft_bench.common.files import read_json, write_atomic
from aft_bench.common.lifetime import pid_namespace
from aft_bench.common.secrets import redact, redacted_dumps
from aft_bench.interface.ranking import Candidate
from aft_bench.interface.router import Router

Effect = Literal["unknown", "read", "reversible", "compensatable", "irreversible"]
State = Literal["pending", "approved", "blocked", "pinned"]


# MCP's rule for tool names (2025-11-25): 1-128 characters of ASCII letters, digits, '_', '-' and '.'. A name
# outside it (zero-width or right-to-left marks, newlines, spaces) is not imported, nor a second tool of one name.
TOOL_NAME = r"^[A-Za-z0-9_.-]{1,128}$"


class Card(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(pattern=TOOL_NAME)
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)
    hints: dict[str, Any] = Field(default_factory=dict)  # the server's annotations: untrusted
    effect: Effect = "unknown"
    state: State = "pending"

    def card(self) -> str:
        return f"{self.name}: {self.description.split('.')[0]}." if self.description else self.name


class CatalogFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    source: dict[str, str] = Field(default_factory=dict)
    tools: tuple[Card, ...] = ()


def load_catalog(path: Path) -> CatalogFile:
    cat = validate(CatalogFile, read_json(path, "catalog file"), path)
    seen: set[str] = set()
    for i, t in enumerate(cat.tools):
        if t.name in seen:
            raise InputError(path, f"tools.{i}.name", t.name, "duplicate tool name")
        seen.add(t.name)
    return cat


def save_catalog(cat: CatalogFile, path: Path) -> None:
    write_atomic(path, redacted_dumps(cat.model_dump(mode="json")))


IMPORT_TIMEOUT_S = 60.0  # a server that never answers its listing is a failed import, not a hang (--timeout)


def import_mcp(cmd: str | None = None, url: str | None = None, timeout_s: float = IMPORT_TIMEOUT_S) -> CatalogFile:
    """A real MCP server's tools (started by `cmd` over stdio, or at `url` over HTTP) as pending cards, within
    `timeout_s`. The command or URL is stored as the catalog's source with any credential in it redacted."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    if (cmd is None) == (url is None):
        raise InputError("--cmd/--url", "--cmd", cmd, "give exactly one of --cmd and --url")
    argv = shlex.split(cmd) if cmd is not None else []
    if cmd is not None and not argv:
        raise InputError("--cmd", "--cmd", cmd, "empty command")

    async def listing(errlog: Any) -> tuple[str, list[Any]]:
        # started through the lifetime launcher: the server gets SIGTERM when this process dies, however it dies
        # (a SIGTERM'd import once left its stdio server running for 43 minutes); and as the first process of a PID
        # namespace of its own where the machine allows one, so what it started in sessions of its own, or a server
        # that ignores SIGTERM, dies with it (unshare gets the SIGTERM and kills its child)
        # (SIGKILL where a namespace holds it: unshare ignores SIGTERM while it waits for its child)
        ns = pid_namespace()
        lifetime = [sys.executable, "-m", "aft_bench.common.lifetime", *(["--sigkill"] if ns else []), *ns]
        target: Any = url if cmd is None else stdio_client(StdioServerParameters(command=lifetime[0],
                                                                                 args=[*lifetime[1:], *argv]),
                                                           errlog=errlog)
        async with Client(target) as client:
            info = getattr(client, "server_info", None) or getattr(getattr(client, "initialize_result", None),
                                                                   "server_info", None)
            server = f"{info.name}/{info.version}" if info is not None else "unknown"
            return server, list((await client.list_tools()).tools)

    # the server's own stderr and the SDK's log lines (a page that is not MCP, junk on a stdio server's stdout,
    # each logged with a traceback), quoted only if the import fails: never printed between command and result
    with tempfile.TemporaryFile("w+") as errlog, _sdk_log_into(errlog):
        try:
            server, tools = asyncio.run(asyncio.wait_for(listing(errlog), timeout_s))
        except TimeoutError:
            flag, value = ("--cmd", cmd) if cmd is not None else ("--url", url)
            raise InputError(flag, flag, redact(value or ""), f"the MCP server did not list its tools within "
                             f"{timeout_s:g} s (give it longer with --timeout SECONDS)") from None
        except Exception as exc:  # noqa: BLE001 - whatever the server or transport did: one line naming it
            errlog.seek(0)
            said = " ".join(errlog.read().split()[-40:])
            flag, value = ("--cmd", cmd) if cmd is not None else ("--url", url)
            raise InputError(flag, flag, value, f"the MCP server could not be listed ({_cause(exc)}"
                             f"{'; it said: ' + said if said else ''})") from None
    cards, skipped, seen = [], [], set()
    for t in tools:
        # a name shaped like a credential would be written redacted, and no longer a name: not imported either
        if not re.fullmatch(TOOL_NAME, t.name) or t.name in seen or redact(t.name) != t.name:
            skipped.append(t.name)
            continue
        seen.add(t.name)
        hints = t.annotations.model_dump(exclude_none=True) if t.annotations is not None else {}
        cards.append(Card(name=t.name, description=t.description or "", input_schema=dict(t.input_schema or {}),
                          hints=hints))
    source = {"server": server, **({"cmd": redact(cmd)} if cmd else {"url": _without_userinfo(redact(url or ""))})}
    if skipped:  # said in the file, so a reviewer sees what the server offered and was not imported
        source["skipped"] = json.dumps(skipped, ensure_ascii=True)
    return CatalogFile(source=source, tools=tuple(cards))


def _cause(exc: BaseException) -> str:
    """The error inside a task group's ExceptionGroup (the SDK's transports raise those), named with its text."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@contextmanager
def _sdk_log_into(stream: Any) -> Iterator[None]:
    """The `mcp` SDK's log records go to `stream` (one line each, no traceback) instead of the terminal."""
    sdk = logging.getLogger("mcp")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_OneLine())
    saved = sdk.handlers, sdk.propagate
    sdk.handlers, sdk.propagate = [handler], False
    try:
        yield
    finally:
        sdk.handlers, sdk.propagate = saved


class _OneLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {' '.join(record.getMessage().split())[:300]}"


def _without_userinfo(url: str) -> str:
    """A URL with any user:password part replaced (it is a credential)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    return urlunsplit(parts._replace(netloc=f"[redacted]@{host}" + (f":{parts.port}" if parts.port else "")))


def review(cat: CatalogFile, path: Path, approve: list[str], block: list[str], pin: list[str],
           effect: str | None) -> CatalogFile:
    """New lifecycle states (and, for approved or pinned tools, the reviewed effect class)."""
    names = {t.name for t in cat.tools}
    for flag, chosen in (("--approve", approve), ("--block", block), ("--pin", pin)):
        for n in chosen:
            if n not in names:
                raise InputError(path, flag, n, f"no such tool in the catalog; known: {', '.join(sorted(names))}")
    if effect is not None and effect not in Effect.__args__:  # type: ignore[attr-defined]
        raise InputError("--effect", "--effect", effect, f"not one of {', '.join(Effect.__args__)}")  # type: ignore[attr-defined]
    if (approve or pin) and effect in (None, "unknown") and any(
            t.effect == "unknown" for t in cat.tools if t.name in {*approve, *pin}):
        raise InputError("--effect", "--effect", effect, "approving or pinning a tool needs its reviewed effect class")
    out = []
    for t in cat.tools:
        state = "approved" if t.name in approve else "blocked" if t.name in block else "pinned" if t.name in pin else t.state
        new_effect = effect if effect is not None and t.name in {*approve, *pin} else t.effect
        out.append(t.model_copy(update={"state": state, "effect": new_effect}))
    return cat.model_copy(update={"tools": tuple(out)})


def router_for(cat: CatalogFile, profile: str) -> Router:
    """A router over an imported catalog: only tools the profile permits (by state and effect) resolve."""
    cands = [Candidate.of(t.name, t.card(), t.effect == "read") for t in cat.tools]
    return Router(cands, {t.name: t.effect for t in cat.tools}, profile, {t.name: t.state for t in cat.tools})
