"""One atlas cell: one release of one server, installed (once, in the cache), drafted as a world from its live tools
with the atlas entry's example calls, and scored. Everything that can go wrong is the cell's record, never an
exception: a release that will not install or start is untestable with its reason, and a tool whose example breaks
its server is untestable alone while the server's other tools are still measured."""

from __future__ import annotations

import json
import shutil
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
from aft_bench.scorecard.drafting import WORLD_FILE, NothingToDraft, draft_folder
from aft_bench.scorecard.schemas import refusal
from aft_bench.world.draft import TODO
from aft_bench.world.external import ExternalWorld, load_external
from aft_bench.world.mcp_stdio import ServerFailed

DRAFT_TIMEOUT_S = 60.0
CELL_VERSION = 1  # the record's shape: a cell recorded by another shape is measured again


def _has_todo(value: Any) -> bool:
    if isinstance(value, str):
        return TODO in value
    if isinstance(value, dict):
        return any(_has_todo(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_todo(v) for v in value)
    return False


def _untestable(entry: Entry, release: str, reason: str, started: float) -> dict[str, Any]:
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
        return json.loads(redacted_dumps(measure(world).to_dict())), {}
    except WorldFailed:
        pass
    cards: list[dict[str, Any]] = []
    failed: dict[str, str] = {}
    for name in sorted(n for n, t in world.tools.items() if t.examples):
        try:
            cards.append(json.loads(redacted_dumps(measure(_only(world, name)).to_dict())))
        except WorldFailed as exc:
            failed[name] = redact(str(exc))[:600]
    if not cards:
        raise WorldFailed("; ".join(f"{n}: {w}" for n, w in sorted(failed.items())) or "no tool could be measured")
    card = {**cards[0], "tools": [t for c in cards for t in c["tools"]]}
    return card, failed


def measure_cell(entry: Entry, release: str, cache: Path, work: Path, published: str | None = None
                 ) -> dict[str, Any]:
    """The cell's record (JSON-shaped): measured with its card and each tool's status, or untestable with why.
    `work` is the cell's own scratch folder (made afresh)."""
    started = time.monotonic()
    try:
        folder = ensure(cache, entry, release, published)
    except InstallFailed as exc:
        return _untestable(entry, release, f"install: {exc}", started)
    command = [c.replace(INSTALL, str(folder)) for c in entry.command]
    shutil.rmtree(work, ignore_errors=True)
    target = work / "world"
    try:
        d = draft_folder(entry.name, command, target, DRAFT_TIMEOUT_S)
    except (ServerFailed, NothingToDraft, WorldFailed) as exc:
        return _untestable(entry, release, f"start: {exc}", started)
    except InputError as exc:
        return _untestable(entry, release, f"draft: {exc}", started)
    drafted = tomllib.loads(d.path.read_text(encoding="utf-8"))
    if entry.world is not None:  # a person's world: its overlay for the tools this release lists
        shutil.copytree(entry.world, target, dirs_exist_ok=True)
        drafted, unknown = from_world(entry, command, tomllib.loads((target / WORLD_FILE).read_text(encoding="utf-8")),
                                      d.listed, release)
    else:
        unknown = {}
    data, skipped = world_data(entry, release, drafted, d.listed)
    skipped.update(unknown)
    env = data["server"].get("env") or {}
    if env:  # `{install}` in the environment too (a server that finds its data files beside its install)
        data["server"]["env"] = {k: str(v).replace(INSTALL, str(folder)) for k, v in env.items()}
    (target / WORLD_FILE).write_text(tomli_w.dumps(data), encoding="utf-8")
    try:
        world = load_external(target)
    except InputError as exc:
        return _untestable(entry, release, f"the atlas entry: {exc}", started)
    try:
        card, failed = _card(world)
    except WorldFailed as exc:
        return _untestable(entry, release, f"measure: {exc}", started)
    tools: dict[str, dict[str, str]] = {}
    for t in card["tools"]:
        tools.setdefault(t["tool"], {"status": "measured", "reason": ""})
    for name, why in {**skipped, **failed}.items():
        tools[name] = {"status": "untestable", "reason": why}
    for name in card.get("untested", []):
        tools.setdefault(name, {"status": "untestable", "reason": "a write with no example call"})
    return {**_head(entry, release), "status": "measured", "reason": "", "card": card,
            "tools": dict(sorted(tools.items())), "seconds": round(time.monotonic() - started, 1)}
