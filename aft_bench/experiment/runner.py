"""Run an experiment matrix: each cell resets its world, runs the controller through the interface, seals
the trace and labels it; rows go to `results.parquet`, traces to `traces/`, provenance to `manifest.json`."""

from __future__ import annotations

import fcntl
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterable

from aft_bench import __version__, controller
from aft_bench.canonical import canonical_json
from aft_bench.config import Cell, Plan
from aft_bench.errors import InputError, OutputError
from aft_bench.journal import Journal, append_record, ids, read_records
from aft_bench.interface import Interface
from aft_bench.results import write_parquet
from aft_bench.run import finish_run, start_run
from aft_bench.tasks import Task
from aft_bench.tokens import TOKENIZER_MODEL
from aft_bench.trace import Trace
from aft_bench.workloads import world_for


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


def _code() -> dict[str, Any]:
    git = _git()
    sha = git["git_sha"] or "unknown"
    return {"package_version": __version__, **git,
            "version": f"{__version__}+{sha[:12]}{'.dirty' if git['git_dirty'] else ''}"}


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
        "code": _code(),
        "packages": _versions(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


_WORKER: dict[str, Any] = {}


def _init_worker(config: str, worlds: str, traces: str) -> None:
    from aft_bench.config import load_plan

    _WORKER.update(plan=load_plan(config, Path(worlds)), traces=Path(traces))


def _secrets() -> list[str]:
    """Values of environment variables that look like credentials, to scrub from any failure text."""
    return [v for k, v in os.environ.items() if len(v) >= 8 and any(w in k.upper() for w in SECRET_WORDS)]


SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


def redact(text: str) -> str:
    for value in _secrets():
        text = text.replace(value, "[redacted]")
    return text


def _attempt(plan: Plan, index: int, traces: Path) -> tuple[str, dict[str, Any]]:
    """Run one cell; an exception is an infrastructure failure record, never a result row."""
    cell = plan.cells[index]
    try:
        return "row", run_cell(plan, cell, traces)
    except Exception as exc:  # noqa: BLE001 - every harness/backend failure is recorded, then the tuple stays pending
        return "failure", {"run_id": cell.run_id, **cell.key(), "error": type(exc).__name__,
                           "message": redact(str(exc))[:2000]}


def _run_index(i: int) -> tuple[int, str, dict[str, Any]]:
    kind, data = _attempt(_WORKER["plan"], i, _WORKER["traces"])
    return i, kind, data


def run_plan(plan: Plan, out: Path, progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
             workers: int = 1) -> list[dict]:
    """Run every pending cell of a plan into `out`, resuming whatever is already recorded there.

    Rows are durable (fsync'd journal) before they count; results.parquet is compacted atomically at the
    end. Returns the rows of the whole matrix recorded so far, in plan order.
    """
    from aft_bench import freeze

    lock_hash = freeze.check(plan)
    current_inputs = freeze.inputs(plan)
    with RunDirectory(out) as rundir:
        try:
            manifest_data = rundir.admit(plan, current_inputs, lock_hash)
            journal = Journal(out / "journal.jsonl")
        except OSError as exc:
            raise OutputError(out, exc) from None
        try:
            done = set(ids(journal.rows))
            pending = [i for i, c in enumerate(plan.cells) if c.run_id not in done]
            session = rundir.start_session(len(pending))
            rundir.quarantine([plan.cells[i].run_id for i in pending], session)
            traces = out / "traces"
            traces.mkdir(exist_ok=True)
            extra = {"config_hash": plan.config_hash, "lock_hash": lock_hash,
                     "code_version": manifest_data["code"]["version"], "session": session}
            wrap = progress or (lambda it: it)
            if workers > 1 and len(pending) > 1:
                import multiprocessing as mp
                from concurrent.futures import ProcessPoolExecutor
                from concurrent.futures.process import BrokenProcessPool

                with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"), initializer=_init_worker,
                                         initargs=(str(plan.path), str(plan.worlds_dir), str(traces))) as pool:
                    results = pool.map(_run_index, pending, chunksize=8)
                    try:
                        for _i, kind, data in wrap(_Sized(results, len(pending))):
                            _record(journal, out, kind, data, extra)
                    except BrokenProcessPool:
                        append_record(out / "failures.jsonl", {"run_id": None, "session": session,
                                                               "error": "BrokenProcessPool",
                                                               "message": "a worker process died"})
            else:
                for i in wrap(pending):
                    kind, data = _attempt(plan, i, traces)
                    _record(journal, out, kind, data, extra)
        finally:
            journal.close()
        order = {c.run_id: i for i, c in enumerate(plan.cells)}
        rows = sorted(journal.rows, key=lambda r: order.get(r["run_id"], len(order)))
        try:
            write_parquet(rows, out / "results.parquet")
        except OSError as exc:
            raise OutputError(out / "results.parquet", exc) from None
    return rows


class _Sized:
    """An iterator that knows its length (for progress display)."""

    def __init__(self, it: Iterable[Any], n: int) -> None:
        self._it, self._n = it, n

    def __iter__(self) -> Any:
        return iter(self._it)

    def __len__(self) -> int:
        return self._n


def _record(journal: Journal, out: Path, kind: str, data: dict[str, Any], extra: dict[str, Any]) -> None:
    try:
        if kind == "row":
            journal.append({**data, **extra})
        else:
            append_record(out / "failures.jsonl", {**data, "session": extra["session"]})
    except OSError as exc:
        raise OutputError(out / ("journal.jsonl" if kind == "row" else "failures.jsonl"), exc) from None


class RunDirectory:
    """An output directory held by one runner at a time (an exclusive lock file)."""

    LOCK = ".runner.lock"

    def __init__(self, out: Path) -> None:
        self.out = out
        self._fh: Any = None

    def __enter__(self) -> RunDirectory:
        if self.out.exists() and any(self.out.iterdir()) and not (self.out / "manifest.json").exists():
            raise InputError(self.out, "--out", str(self.out),
                             "directory holds files but no aft-bench manifest.json; choose a new or empty one")
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.out / self.LOCK, "a")
        except OSError as exc:
            raise OutputError(self.out, exc) from None
        try:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fh.close()
            raise InputError(self.out, "--out", str(self.out),
                             "another aft-bench runner is writing this directory; wait for it or choose another") from None
        return self

    def __exit__(self, *exc: Any) -> None:
        fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
        self._fh.close()

    def admit(self, plan: Plan, inputs: dict[str, str], lock_hash: str | None) -> dict[str, Any]:
        """Write the manifest, or check that the existing one describes the same resolved config."""
        path = self.out / "manifest.json"
        fresh = manifest(plan)
        fresh.update(inputs=inputs, lock_hash=lock_hash, run_ids=[c.run_id for c in plan.cells])
        if path.exists():
            old = json.loads(path.read_text())
            diffs = _differences(old, fresh)
            if diffs:
                raise InputError(path, "resolved config", diffs[:8],
                                 "this directory holds results of a different config or inputs; use a new --out")
            return old
        _atomic_write(path, json.dumps(fresh, indent=2, sort_keys=True) + "\n")
        return fresh

    def start_session(self, pending: int) -> int:
        sessions = read_records(self.out / "sessions.jsonl")
        n = len(sessions) + 1
        append_record(self.out / "sessions.jsonl", {"session": n, "pid": os.getpid(), "pending": pending})
        return n

    def quarantine(self, run_ids: list[str], session: int) -> None:
        """Move leftovers of unfinished attempts (partial traces, databases) aside, never deleting them."""
        for sub, suffix in (("traces", ".jsonl"), ("db", ".sqlite")):
            for rid in run_ids:
                for f in (self.out / sub).glob(f"{rid}{suffix}*"):
                    dest = self.out / "quarantine" / f"session-{session}" / sub
                    dest.mkdir(parents=True, exist_ok=True)
                    os.replace(f, dest / f.name)


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = []
    for k in sorted(set(old["experiment"]) | set(new["experiment"])):
        if old["experiment"].get(k) != new["experiment"].get(k):
            out.append(f"experiment.{k}: {old['experiment'].get(k)!r} -> {new['experiment'].get(k)!r}")
    oi, ni = old.get("inputs", {}), new.get("inputs", {})
    out += [f"input {k} changed" for k in sorted(set(oi) | set(ni)) if oi.get(k) != ni.get(k)]
    if old.get("lock_hash") != new.get("lock_hash"):
        out.append(f"lock {old.get('lock_hash')} -> {new.get('lock_hash')}")
    return out


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
