"""`aft-bench validate PATH...`: check any data file, recognised by its content (its top-level tables), not by
its name: world folders and manifests, task files, workloads, fault schedules, calibration cases, experiment
configs, CI expectations, the comparison and condition tables, the catalog vocabulary, and the router's data
(routing suites and their templates, profiles, the reranker's lexicon)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from aft_bench.common.datafile import read_toml
from aft_bench.common.errors import InputError


def _world(p: Path, data: dict[str, Any], worlds: Path) -> str:
    from aft_bench.tasks.task import load_tasks
    from aft_bench.world.manifest import load_world

    world = load_world(p)
    tasks = p.parent / "tasks.toml"
    n = len(load_tasks(tasks, world)) if tasks.exists() else 0
    return f"'{world.id}', {len(world.operations)} operations, {n} tasks"


def _external(p: Path, data: dict[str, Any], worlds: Path) -> str:
    from aft_bench.world.external import load_external

    w = load_external(p)
    writes = w.writes()
    return (f"'{w.id}', {w.server.package} {w.server.version}, {len(w.tools)} tools ({len(writes)} writing; the "
            "overlay is checked against the live server when an episode opens)")


def _tasks(p: Path, data: dict[str, Any], worlds: Path) -> str:
    from aft_bench.tasks.task import load_tasks
    from aft_bench.world.manifest import load_world

    world_file = p.parent / "world.toml"
    if not world_file.exists():
        raise InputError(p, "tasks", str(world_file), "a task file is checked against the world.toml beside it; "
                         "there is none")
    return f"{len(load_tasks(p, load_world(world_file)))} tasks of world '{load_world(world_file).id}'"


def _workload(p: Path, data: dict[str, Any], worlds: Path) -> str:
    from aft_bench.tasks.workloads import load_workload

    # a workload under <worlds>/workloads/ is checked against the worlds beside it
    wl = load_workload(p, p.parent.parent if p.parent.name == "workloads" else worlds)
    return f"'{wl.id}', {len(wl.tasks)} tasks, {len(wl.variants)} fault variants"


def _schedule(p: Path, data: dict[str, Any], worlds: Path) -> str:
    from aft_bench.runtime.faults import check_schedule, load_schedule
    from aft_bench.world.manifest import load_world

    sched = load_schedule(p)
    if p.parent.name == "faults" and (p.parent.parent / "world.toml").exists():
        check_schedule(sched, load_world(p.parent.parent).operations, p)
    return f"'{sched.id}', {len(sched.faults)} faults"


def _cases(p: Path, data: dict[str, Any], worlds: Path) -> str:
    from aft_bench.experiment.calibration import load_cases

    return f"{len(load_cases(p))} cases"


def _config(p: Path, data: dict[str, Any], worlds: Path) -> str:
    from aft_bench.experiment.config import load_matrix

    m = load_matrix(p, worlds)
    return f"'{m.experiment.id}', {len(m.cells)} runs"


def _expect(p: Path, data: dict[str, Any], worlds: Path) -> str:
    from aft_bench.analysis.gate import Expectations
    from aft_bench.common.datafile import validate

    return f"{len(validate(Expectations, data, p).bounds)} bounds"


def _comparisons(p: Path, data: dict[str, Any], worlds: Path) -> str:
    from aft_bench.experiment.comparisons import load_comparisons

    return f"{len(load_comparisons(p))} comparisons"


def _conditions(p: Path, data: dict[str, Any], worlds: Path) -> str:
    from aft_bench.interface.mechanisms import load_conditions

    return f"{len(load_conditions(p).names())} conditions"


def _vocab(p: Path, data: dict[str, Any], worlds: Path) -> str:
    from aft_bench.world.catalog import load_vocab

    return f"sizes {list(load_vocab(p).sizes)}"


def _suite(p: Path, data: dict[str, Any], worlds: Path) -> str:
    from aft_bench.routing.suites import load_suite

    s = load_suite(str(p))
    return f"'{s.suite.id}', {len(s.cases)} cases over {s.suite.catalog_size} tools"


def _templates(p: Path, data: dict[str, Any], worlds: Path) -> str:
    from aft_bench.routing.suites import HELD_OUT, SHAPES, generate

    held_out = next((n for n, f in HELD_OUT.items() if f.name == p.name), "l3h")  # it makes only its own suite
    names = [n for n in SHAPES if n not in HELD_OUT] if "lite" in data else [held_out]
    return ", ".join(f"{name} {len(generate(name, p).cases)} cases" for name in names)


def _profiles(p: Path, data: dict[str, Any], worlds: Path) -> str:
    from aft_bench.interface.router import load_profiles

    return f"{len(load_profiles(p))} router profiles"


def _lexicon(p: Path, data: dict[str, Any], worlds: Path) -> str:
    from aft_bench.interface.ranking import load_lexicon

    return f"{len(load_lexicon(p).verbs)} actions"


# The first top-level table that identifies a kind wins; order matters where kinds share a table name.
KINDS: dict[str, tuple[str, Callable[[Path, dict[str, Any], Path], str]]] = {
    "world": ("world manifest", _world),
    "workload": ("workload", _workload),
    "experiment": ("experiment config", _config),
    "suite": ("routing suite", _suite),
    "cases": ("calibration cases", _cases),
    "bounds": ("CI expectations", _expect),
    "comparisons": ("comparisons", _comparisons),
    "ladder": ("conditions", _conditions),
    "actions": ("catalog vocabulary", _vocab),
    "faults": ("fault schedule", _schedule),
    "tasks": ("task file", _tasks),
    "l3": ("routing templates", _templates),
    "profiles": ("router profiles", _profiles),
    "negation": ("reranker lexicon", _lexicon),
}


def validate_path(raw: str, worlds: Path, live: bool = False) -> str:
    """Check one path; returns the line to print, raises InputError naming the problem."""
    p = Path(raw)
    if p.is_dir():
        if not (p / "world.toml").exists():
            raise InputError(p, "<dir>", str(p), "a folder is validated as a world and holds no world.toml")
        p = p / "world.toml"
    if p.suffix == ".json":  # the one JSON data file: a tool catalog (what `catalog import-mcp` writes)
        from aft_bench.routing.imported import load_catalog

        cat = load_catalog(p)
        states = sorted({t.state for t in cat.tools})
        return f"ok  {raw}: tool catalog: {len(cat.tools)} tools ({', '.join(states) or 'none'})"
    data = read_toml(p)
    if data.get("kind") in ("mcp_stdio", "mcp_http"):  # an external world: a real MCP server as data
        line = f"ok  {raw}: external world: {_external(p, data, worlds)}"
        if live:
            from aft_bench.cli.scorecard import live_check
            from aft_bench.world.external import load_external

            line += f"; live: {live_check(load_external(p), p, examples=True)}"
        return line
    for key, (kind, check) in KINDS.items():
        if key in data:
            return f"ok  {raw}: {kind}: {check(p, data, worlds)}"
    raise InputError(p, "<root>", sorted(data), "not an aft-bench data file: no table says what it is "
                     f"(one of {', '.join(KINDS)})")
