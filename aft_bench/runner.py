"""Run an experiment matrix: each cell resets its world, runs the controller through the interface, seals
the trace and labels it; rows go to `results.parquet`, traces to `traces/`, provenance to `manifest.json`."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterable

from aft_bench import __version__, controller
from aft_bench.canonical import canonical_json
from aft_bench.config import Cell, Plan
from aft_bench.errors import InputError
from aft_bench.interface import Interface
from aft_bench.results import write_parquet
from aft_bench.run import finish_run, start_run
from aft_bench.tasks import Task
from aft_bench.tokens import TOKENIZER_MODEL
from aft_bench.trace import Trace
from aft_bench.workloads import world_for


@dataclass(frozen=True)
class CellRun:
    row: dict[str, Any]


def _task(plan: Plan, cell: Cell) -> Task:
    wl = plan.workloads.get(cell.workload)
    return next(t for t in wl.tasks if t.id == cell.task_id)


def run_cell(plan: Plan, cell: Cell, trace_dir: Path | None) -> dict[str, Any]:
    """Run one cell and return its result row."""
    t0 = time.perf_counter()
    wl = plan.workloads.get(cell.workload)
    task = _task(plan, cell)
    variant = next(v for v in wl.variants if v.id == cell.fault)
    schedule = wl.schedule(variant, task)
    world = world_for(wl, task, cell.catalog_size, cell.fault_seed)
    mech = plan.conditions.resolve(cell.condition)
    store = None
    if cell.backend == "sqlite":
        from aft_bench.sqlite_store import SqliteStore

        db_dir = trace_dir.parent / "db" if trace_dir else Path(tempfile.mkdtemp(prefix="aft-db-"))
        store = SqliteStore(db_dir / f"{cell.run_id}.sqlite", world)
    try:
        return _run_cell(plan, cell, trace_dir, task, schedule, world, mech, store, t0)
    finally:
        if store is not None:
            store.close()


def _run_cell(plan: Plan, cell: Cell, trace_dir: Path | None, task: Task, schedule: Any, world: Any, mech: Any,
              store: Any, t0: float) -> dict[str, Any]:
    trace = Trace(trace_dir / f"{cell.run_id}.jsonl" if trace_dir else None)
    pipeline = start_run(world, task, schedule, cell.fault_seed, trace, durable_state=mech.durable, store=store)
    trace.append("cell", **cell.key(), run_id=cell.run_id, mechanisms=mech.to_dict())
    iface = Interface(pipeline, mech)
    state = controller.init(task, iface.surface())
    obs = None
    calls = turns = 0
    while True:
        state, action = controller.decide(state, obs)
        turns += 1
        if isinstance(action, controller.End):
            terminal, claim = action.action, action.claim
            break
        if calls >= task.budget:
            terminal, claim = "budget_exhausted", None
            break
        calls += 1
        obs = iface.call(action.tool, action.args)
        if obs.lost:  # process-local state loss: the agent's own state is dropped too
            trace.append("controller_restart")
            state = controller.init(task, iface.surface(), recovering=True)
            obs = None
    result = finish_run(pipeline, task, terminal, claim)
    lb = result.labels
    return {
        **cell.key(),
        "run_id": cell.run_id,
        "mechanisms": canonical_json(mech.to_dict()),
        "fault_fired": lb.fault_fired,
        "outcome": lb.outcome,
        "y_goal": lb.y_goal,
        "y_correct": lb.y_correct,
        "recovered": lb.recovered,
        "duplicate_effects": lb.duplicate_effects,
        "unsafe_commits": lb.unsafe_commits,
        "unauthorized_effects": lb.unauthorized_effects,
        "stale_writes": lb.stale_writes,
        "unintended_effects": lb.unintended_effects,
        "residual_effects": lb.residual_effects,
        "terminal_action": lb.terminal_action,
        "terminal_claim": lb.terminal_claim,
        "claim_correct": lb.claim_correct,
        "incorrect_claim": int(lb.claim_correct is False),
        "context_tokens": lb.context_tokens,
        "recall": lb.capability_recall,
        "tool_calls": lb.tool_calls,
        "model_turns": turns,
        "wall_s": round(time.perf_counter() - t0, 6),
        "trace_head": result.trace_head,
        "world_hash": world.hash,
        "task_hash": task.hash,
        "schedule_hash": schedule.hash,
    }


def _git() -> dict[str, Any]:
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=True)
        return {"git_sha": sha.stdout.strip(), "git_dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.CalledProcessError):
        return {"git_sha": None, "git_dirty": None}


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in ("pydantic", "litellm", "rank-bm25", "pandas", "pyarrow", "numpy", "scipy", "statsmodels",
                 "sqlalchemy", "matplotlib"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def manifest(plan: Plan) -> dict[str, Any]:
    """Provenance of a run directory: resolved config, input hashes, code and package versions."""
    workloads = {w: plan.workloads.get(w) for w in dict.fromkeys(c.workload for c in plan.cells)}
    return {
        "config_path": str(plan.path),
        "config_hash": plan.config_hash,
        "experiment": plan.resolved(),
        "runs": len(plan.cells),
        "conditions": {n: plan.conditions.resolve(n).to_dict()
                       for n in dict.fromkeys(c.condition for c in plan.cells)},
        "conditions_hash": plan.conditions.hash,
        "comparisons": [c.model_dump(mode="json") for c in plan.comparisons],
        "workloads": {w: {"path": str(wl.path), "hash": wl.hash,
                          "tasks": {t.id: t.hash for t in wl.tasks}} for w, wl in workloads.items()},
        "tokenizer": {"counter": "litellm.token_counter", "model": TOKENIZER_MODEL},
        "code": {"package_version": __version__, **_git()},
        "packages": _versions(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


_WORKER: dict[str, Any] = {}


def _init_worker(config: str, worlds: str, traces: str) -> None:
    from aft_bench.config import load_plan

    _WORKER.update(plan=load_plan(config, Path(worlds)), traces=Path(traces))


def _run_index(i: int) -> dict[str, Any]:
    return run_cell(_WORKER["plan"], _WORKER["plan"].cells[i], _WORKER["traces"])


def run_plan(plan: Plan, out: Path, progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
             workers: int = 1) -> list[dict]:
    """Run every cell of a plan into a new output directory; rows come back in plan order."""
    if out.exists() and any(out.iterdir()):
        raise InputError(out, "--out", str(out), "output directory is not empty; choose a new one")
    traces = out / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    wrap = progress or (lambda it: it)
    if workers > 1:
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        with ctx.Pool(workers, _init_worker, (str(plan.path), str(plan.worlds_dir), str(traces))) as pool:
            rows = list(wrap(pool.imap(_run_index, range(len(plan.cells)), chunksize=16)))
    else:
        rows = [run_cell(plan, cell, traces) for cell in wrap(plan.cells)]
    write_parquet(rows, out / "results.parquet")
    (out / "manifest.json").write_text(json.dumps(manifest(plan), indent=2, sort_keys=True) + "\n")
    return rows
