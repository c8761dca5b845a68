"""One atlas cell: one release of one server, installed (once, in the cache), drafted as a world from its live tools
with the atlas entry's example calls, and scored. Everything that can go wrong is the cell's record, never an
exception: a release that will not install or start is untestable with its reason, and a tool whose example breaks
its server is untestable alone while the server's other tools are still measured."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from aft_bench.atlas.cache import InstallFailed, ensure
from aft_bench.atlas.spec import INSTALL, Entry
from aft_bench.common.errors import InputError
from aft_bench.common.secrets import redact, redacted_dumps
from aft_bench.runtime.gateway import WorldFailed
from aft_bench.scorecard.card import measure
from aft_bench.common.scratch import scratch_dir
from aft_bench.scorecard.drafting import WORLD_FILE, list_tools
from aft_bench.scorecard.effects import measure_effects
from aft_bench.scorecard.schemas import refusal
from aft_bench.world import install
from aft_bench.world.draft import TODO, draft, pick_probe
from aft_bench.world.external import ExternalWorld, Fixture, Probe, Server, ToolOverlay, expand, load_external
from aft_bench.world.resource import Resource, ResourceFailed
from aft_bench.world.mcp_stdio import ServerFailed

DRAFT_TIMEOUT_S = 60.0
CELL_VERSION = 4  # the record's shape and how it was measured: a cell recorded by another is measured again
# (4: an example's three treatments measured from one server, scorecard.card._run_shared)


def _has_todo(value: Any) -> bool:
    if isinstance(value, str):
        return TODO in value
    if isinstance(value, dict):
        return any(_has_todo(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_todo(v) for v in value)
    return False


def untestable(entry: Entry, release: str, reason: str, started: float) -> dict[str, Any]:
    return {**_head(entry, release), "status": "untestable", "reason": redact(reason)[:2000], "card": None,
            "tools": {}, "seconds": round(time.monotonic() - started, 1)}


def _head(entry: Entry, release: str) -> dict[str, Any]:
    return {"cell": CELL_VERSION, "server": entry.name, "registry": entry.registry, "package": entry.package,
            "release": release, "claims": {t: c.model_dump(mode="json") for t, c in sorted(entry.claims.items())}}


def world_data(entry: Entry, release: str, drafted: dict[str, Any], listed: list[dict[str, Any]]
               ) -> tuple[dict[str, Any], dict[str, str]]:
    """The drafted world with the entry's say: package and release, environment, probe, fixture, answers, and its
    example calls in place of the draft's templates. Also each tool that cannot be measured here, with why."""
    data = dict(drafted)
    data["server"] = {**data["server"], "package": entry.package, "version": release}
    if entry.env:
        data["server"]["env"] = {**data["server"].get("env", {}), **entry.env}
    if entry.probe is not None:
        data["probe"] = entry.probe.model_dump(mode="json", exclude_defaults=True)
    if entry.fixture.model_dump(exclude_defaults=True):
        data["fixture"] = entry.fixture.model_dump(mode="json", exclude_defaults=True)
    if entry.answers.model_dump(exclude_defaults=True):
        data["answers"] = entry.answers.model_dump(mode="json")
    schemas = {str(t.get("name")): t.get("inputSchema") or {} for t in listed}
    skipped: dict[str, str] = {}
    tools = {name: dict(t) for name, t in data["tools"].items()}
    for name, tool in tools.items():
        given = entry.examples.get(name)
        if given:
            tool["examples"] = [e.model_dump(mode="json", exclude_defaults=True) for e in given]
            tool["note"] = f"{tool.get('note', '')}; examples from the atlas entry".lstrip("; ")
        elif _has_todo(tool.get("examples", [])):
            tool.pop("examples")
            if tool.get("effect") == "write":
                skipped[name] = "it needs arguments and the atlas entry gives no example call"
        for i, ex in enumerate(tool.get("examples", [])):
            for call_tool, args in [(name, ex.get("args", {}))] + [(c["tool"], c.get("args", {}))
                                                                   for c in ex.get("before", [])]:
                said = refusal(args, schemas.get(call_tool, {}))
                if said is not None:
                    skipped[name] = f"example {i + 1}: the server's schema for {call_tool} {said}"
        if name in skipped and "examples" in tool:
            tool.pop("examples")
    for name in sorted(set(entry.examples) - set(tools)):
        skipped[name] = f"the atlas entry gives examples, but release {release} does not list this tool"
    data["tools"] = tools
    return data, skipped


def from_world(entry: Entry, command: list[str], world: dict[str, Any], listed: list[dict[str, Any]], release: str
               ) -> tuple[dict[str, Any], dict[str, str]]:
    """A world file's data on this release: its command the entry's (a world's own launcher left out), and of its
    tools those the release lists; the tools it lists that the world does not describe, and those the world names
    that this release lacks, untestable with why."""
    live = {str(t.get("name")) for t in listed}
    server = {k: v for k, v in world["server"].items() if k != "fork"}
    out = {**world, "server": {**server, "command": command}}
    out["tools"] = {n: t for n, t in world["tools"].items() if n in live}
    unknown = {n: f"release {release} does not list this tool the world describes"
               for n, t in world["tools"].items() if n not in live and t.get("effect") == "write"}
    unknown.update({n: "the world file does not describe this tool" for n in sorted(live - set(world["tools"]))})
    return out, unknown


def _only(world: ExternalWorld, name: str) -> ExternalWorld:
    """The world with only `name`'s examples: one tool measured alone."""
    tools = {n: (t if n == name else t.model_copy(update={"examples": ()})) for n, t in world.tools.items()}
    copy = world.model_copy(update={"tools": tools})
    copy._source = world._source
    return copy


def _card(world: ExternalWorld) -> tuple[dict[str, Any], dict[str, str]]:
    """The world's card, every tool in one go; where that fails, each tool with examples measured alone, a tool
    that fails alone untestable with why."""
    try:
        return json.loads(redacted_dumps(measure(world, shared=True).to_dict())), {}
    except WorldFailed:
        pass
    cards: list[dict[str, Any]] = []
    failed: dict[str, str] = {}
    for name in sorted(n for n, t in world.tools.items() if t.examples):
        try:
            cards.append(json.loads(redacted_dumps(measure(_only(world, name), shared=True).to_dict())))
        except WorldFailed as exc:
            failed[name] = redact(str(exc))[:600]
    if not cards:
        raise WorldFailed("; ".join(f"{n}: {w}" for n, w in sorted(failed.items())) or "no tool could be measured")
    untested = sorted(n for n, t in world.tools.items() if t.is_write and not t.examples)
    card = {**cards[0], "tools": [t for c in cards for t in c["tools"]], "untested": untested}
    return card, failed


def _write_world(target: Path, data: dict[str, Any]) -> ExternalWorld:
    (target / WORLD_FILE).write_text(tomli_w.dumps(data), encoding="utf-8")
    return load_external(target)


def _drafted(entry: Entry, release: str, command: list[str], folder: Path, target: Path, listed: list[dict[str, Any]],
             info: dict[str, Any], measured: dict[str, bool]) -> tuple[dict[str, Any], dict[str, str]]:
    """The world for this release: drafted from its live tools (or the entry's world file), then the entry's say."""
    installed = install.identify([expand(c, Path("/nonexistent-aft-root"), "", target) for c in command])
    probe = pick_probe(command, installed[0] if installed else None)
    data = tomllib.loads(draft(entry.name, command, listed, info, installed, probe, measured))
    unknown: dict[str, str] = {}
    if entry.world is not None:  # a person's world: its overlay for the tools this release lists
        data, unknown = from_world(entry, command, tomllib.loads((Path(entry.world) / WORLD_FILE).read_text(
            encoding="utf-8")), listed, release)
    data, skipped = world_data(entry, release, data, listed)
    env = data["server"].get("env") or {}
    if env:  # `{install}` in the environment too (a server that finds its data files beside its install)
        data["server"]["env"] = {k: str(v).replace(INSTALL, str(folder)) for k, v in env.items()}
    return data, {**skipped, **unknown}


def _listed(entry: Entry, command: list[str], env: dict[str, str], fixture: Fixture, target: Path
            ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The live tools, listed in a folder the fixture prepared (a server that checks its folder at start needs it;
    a placeholder world carries the fixture to the resource that makes it)."""
    holder = ExternalWorld(kind="mcp_stdio", id=entry.name, server=Server(package=entry.package, version="0",
                           command=tuple(command)), fixture=fixture, probe=Probe(builtin="folder"),
                           tools={"placeholder": ToolOverlay(effect="read")})
    holder._source = str(target / WORLD_FILE)
    res = Resource(holder).make()
    try:
        return list_tools(command, target, DRAFT_TIMEOUT_S, {**res.env(), **env}, root=res.root)
    finally:
        res.remove()


def _measure(entry: Entry, release: str, folder: Path, target: Path, started: float) -> dict[str, Any]:
    command = [c.replace(INSTALL, str(folder)) for c in entry.command]
    env = {k: v.replace(INSTALL, str(folder)) for k, v in entry.env.items()}
    if entry.world is not None:
        shutil.copytree(entry.world, target)
        env = {**{k: v.replace(INSTALL, str(folder)) for k, v in tomllib.loads(
            (target / WORLD_FILE).read_text(encoding="utf-8"))["server"].get("env", {}).items()}, **env}
    else:
        target.mkdir(parents=True)
    fixture = entry.fixture
    if entry.world is not None and not entry.fixture.model_dump(exclude_defaults=True):
        fixture = load_external(target).fixture
    try:  # the server started once, with the entry's environment, in a folder its fixture prepared, to list tools
        listed, info = _listed(entry, command, env, fixture, target)
    except ServerFailed as exc:
        return untestable(entry, release, f"start: {exc}", started)
    except ResourceFailed as exc:
        return untestable(entry, release, f"fixture: {exc}", started)
    if not listed:
        return untestable(entry, release, "start: the server lists no tools", started)
    try:  # each tool that needs no arguments measured on the world as the entry says it (env, probe, fixture)
        data, skipped = _drafted(entry, release, command, folder, target, listed, info, {})
        measured = measure_effects(_write_world(target, data), listed)
        data, skipped = _drafted(entry, release, command, folder, target, listed, info, measured)
        world = _write_world(target, data)
    except InputError as exc:
        return untestable(entry, release, f"the atlas entry: {exc}", started)
    try:
        card, failed = _card(world)
    except WorldFailed as exc:
        return untestable(entry, release, f"measure: {exc}", started)
    tools: dict[str, dict[str, str]] = {}
    for t in card["tools"]:
        tools.setdefault(t["tool"], {"status": "measured", "reason": ""})
    live = {str(t.get("name")) for t in listed}
    for name, why in {**skipped, **failed}.items():
        if name in live:  # a tool this release does not list is no tool of it: named apart, never counted
            tools[name] = {"status": "untestable", "reason": why}
    for name in card.get("untested", []):
        tools.setdefault(name, {"status": "untestable", "reason": "a write with no example call"})
    absent = {n: why for n, why in sorted(skipped.items()) if n not in live}
    return {**_head(entry, release), "status": "measured", "reason": "", "card": card,
            "tools": dict(sorted(tools.items())), "absent": absent, "seconds": round(time.monotonic() - started, 1)}


def measure_cell(entry: Entry, release: str, cache: Path, published: str | None = None) -> dict[str, Any]:
    """The cell's record (JSON-shaped): measured with its card and each tool's status, or untestable with why.
    The drafted world lives in a scratch folder of its own, removed afterwards (it may hold the entry's env)."""
    started = time.monotonic()
    try:
        folder = ensure(cache, entry, release, published)
    except InstallFailed as exc:
        return untestable(entry, release, f"install: {exc}", started)
    with tempfile.TemporaryDirectory(prefix="aft-atlas-", dir=scratch_dir()) as tmp:
        return _measure(entry, release, folder, Path(tmp) / "world", started)
