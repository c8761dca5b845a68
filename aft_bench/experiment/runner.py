"""The batch layer: run every pending cell of a matrix into a run directory, resuming whatever is already
recorded there. It owns concurrency (executors), durability (the fsync'd journal), provenance and the
quarantine of unfinished attempts; one episode is the builder's and the episode loop's business."""

from __future__ import annotations

import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from aft_bench.agents.endpoints import forget as forget_limits
from aft_bench.agents.endpoints import snapshot as endpoint_limits
from aft_bench.agents.registry import AgentSpec
from aft_bench.common.errors import CeilingReached, EvidenceError, OutputError
from aft_bench.episode.row import write_parquet
from aft_bench.experiment import evidence, executors, freeze
from aft_bench.experiment.config import Matrix
from aft_bench.experiment.journal import Journal, UnrecordableRow, append_record, ids
from aft_bench.experiment.rundir import RunDirectory
from aft_bench.experiment.spend import Spend
from aft_bench.world import pool

Progress = Callable[[Iterable[Any]], Iterable[Any]]


SCRATCH = ".scratch"  # under a run directory: the folders external worlds' episodes work in, never evidence


def run_matrix(matrix: Matrix, out: Path, progress: Progress | None = None, workers: int = 1,
               rerun_missing: bool = False, max_cost: float | None = None, loops: int = 1,
               scheduler: str | None = None, row_extra: dict[str, Any] | None = None) -> list[dict]:
    """Run every pending cell of `matrix` into `out`, resuming whatever is already recorded there.

    Rows are durable (fsync'd journal) before they count; results.parquet is compacted atomically at the
    end. A finished run whose trace or database is missing or fails verification stops the resume
    (EvidenceError naming the runs) unless `rerun_missing`, which makes those runs pending again.
    Returns the rows of the whole matrix recorded so far, in matrix order. When the spend ceiling
    (`max_cost`, else the config's `max_cost_usd`; `max_tokens_total`) is reached no new tuple starts, the
    ones in flight finish, results are written, and CeilingReached is raised. `scheduler` (`tcp://host:port` or
    `local[:N]`) runs the cells on a Dask cluster instead of this machine's executors: the same rows either way.
    """
    current_inputs = freeze.inputs(matrix)  # hashed once: the lock check and the manifest share them
    lock_hash = freeze.check(matrix, current_inputs)
    with RunDirectory(out) as rundir:
        try:
            manifest_data = rundir.admit(matrix, current_inputs, lock_hash)
            journal = Journal(out / "journal.jsonl")
        except OSError as exc:
            raise OutputError(out, exc) from None
        journal = _check_evidence(out, journal, rundir, rerun_missing)
        try:
            done = set(ids(journal.rows))
            pending = [i for i, c in enumerate(matrix.cells) if c.run_id not in done]
            session = rundir.start_session(len(pending))
            rundir.quarantine([matrix.cells[i].run_id for i in pending], session)
            (out / "traces").mkdir(exist_ok=True)
            # external worlds' episode folders: what a killed session left (its servers died with it) goes now
            pool.drain(out / SCRATCH)
            shutil.rmtree(out / SCRATCH, ignore_errors=True)
            extra = {"config_hash": matrix.config_hash, "lock_hash": lock_hash,
                     "code_version": manifest_data["code"]["version"], "session": session, **(row_extra or {})}
            spend = Spend(journal.rows, max_cost if max_cost is not None else matrix.experiment.max_cost_usd,
                          matrix.experiment.max_tokens_total)
            forget_limits()  # adaptive endpoint limits start from their ceilings in each session
            if len(pending) > 1 and (workers > 1 or loops > 1 or scheduler):
                _preload_writer()
            _drain(_outcomes(matrix, pending, out, workers, spend, loops, scheduler), journal, out, extra, progress,
                   len(pending), spend)
            limits = endpoint_limits()
            if limits:  # the AIMD limit of each endpoint over the session (this process's loop)
                append_record(out / "sessions.jsonl", {"session": session, "endpoint_limits": limits})
        finally:
            journal.close()
            pool.drain(out / SCRATCH)  # worlds this process prepared ahead for episodes that never came
            shutil.rmtree(out / SCRATCH, ignore_errors=True)
        order = {c.run_id: i for i, c in enumerate(matrix.cells)}
        rows = sorted(journal.rows, key=lambda r: order.get(r["run_id"], len(order)))
        try:
            write_parquet(rows, out / "results.parquet")
        except OSError as exc:
            raise OutputError(out / "results.parquet", exc) from None
    left = len(matrix.cells) - len(rows)
    over = spend.overshoot()
    if over is not None:  # episodes in flight when the ceiling was reached finished, as they must: say by how much
        print(f"aft-bench: spend ${spend.cost:.4f} passed the ceiling ${spend.max_cost} by ${over:.4f} (episodes "
              f"already in flight finish; each new one reserved the largest tuple so far, ${spend.peak_cost:.4f})",
              file=sys.stderr)
    if left and not spend.open():
        raise CeilingReached(f"spend ceiling reached (${spend.cost:.4f} of ${spend.max_cost}, "
                             f"{spend.tokens} tokens of {spend.max_tokens}; the next tuple could cost as much as "
                             f"the largest so far, ${spend.peak_cost:.4f} / {spend.peak_tokens} tokens): {left} "
                             f"tuples not started; rerun with a higher --max-cost (or max_cost_usd / "
                             f"max_tokens_total) to continue")
    return rows


def _preload_writer() -> None:
    """Import what `write_parquet` needs (pandas, pyarrow) on a background thread while the cells run elsewhere and
    this process mostly waits for their rows: otherwise about 0.3 s spent after the last row."""

    def load() -> None:
        import pandas  # noqa: F401
        import pyarrow.parquet  # noqa: F401

    threading.Thread(target=load, name="preload-results-writer", daemon=True).start()


def _check_evidence(out: Path, journal: Journal, rundir: RunDirectory, rerun_missing: bool) -> Journal:
    bad = evidence.problems(out, journal.rows)
    if not bad:
        return journal
    if not rerun_missing:
        journal.close()
        shown = "; ".join(f"{rid} ({why})" for rid, why in list(bad.items())[:5])
        raise EvidenceError(f"{out}: {len(bad)} finished run(s) lack intact evidence: {shown}"
                            f"{' ...' if len(bad) > 5 else ''}; rerun with --rerun-missing to run them again "
                            f"(their rows are kept under quarantine/)")
    journal.close()
    evidence.retract(out, journal.rows, set(bad), rundir.next_session())
    print(f"aft-bench: {len(bad)} finished run(s) without intact evidence moved back to pending", file=sys.stderr)
    return Journal(out / "journal.jsonl")


def _outcomes(matrix: Matrix, pending: list[int], out: Path, workers: int, spend: Spend, loops: int = 1,
              scheduler: str | None = None) -> Iterator[list[executors.Outcome]]:
    """Cells of agents that wait on the network run concurrently on one event loop (up to each agent's
    `concurrency`), or on `loops` loops in as many processes; the others in worker processes, or in this
    process. With a `scheduler`, every cell runs on that Dask cluster (each networked agent's `concurrency` its
    limit in flight there). Outcomes come in groups recorded with one fsync: a worker process's chunk, else one."""
    yield from _singles(_sources(matrix, pending, out, workers, spend, loops, scheduler))


def _singles(items: Iterator[Any]) -> Iterator[list[executors.Outcome]]:
    """Groups as they come: a worker chunk (a list) as is, any single outcome as a group of one."""
    for item in items:
        yield item if isinstance(item, list) else [item]


def _sources(matrix: Matrix, pending: list[int], out: Path, workers: int, spend: Spend, loops: int,
             scheduler: str | None) -> Iterator[Any]:
    specs = {s: AgentSpec.parse(s) for s in {matrix.cells[i].agent_spec for i in pending}}
    if scheduler is not None:
        from aft_bench.experiment.distributed import dask_outcomes

        limits = {s: int(spec.params.get("concurrency", 1)) for s, spec in specs.items() if spec.kind.concurrent}
        yield from dask_outcomes(matrix, pending, out, scheduler, limits, spend.begin, spend.end)
        return
    networked = [i for i in pending if specs[matrix.cells[i].agent_spec].kind.concurrent]
    local = [i for i in pending if not specs[matrix.cells[i].agent_spec].kind.concurrent]
    if networked:
        limits = {s: int(spec.params.get("concurrency", 1)) for s, spec in specs.items() if spec.kind.concurrent}
        if loops > 1 and len(networked) > 1:
            yield from executors.concurrent_processes(matrix, networked, out, limits, spend,
                                                      min(loops, len(networked)))
        else:
            yield from executors.concurrent(matrix, networked, out, limits, spend.begin, spend.end)  # counted
            # before the slot frees, so the next tuple sees it (before: only once the runner received the row)
    if workers > 1 and len(local) > 1:
        yield from executors.process_pool(matrix, local, out, min(workers, len(local)))
    else:
        yield from executors.serial(matrix, local, out, spend.open)


GROUP_COMMIT_S = 0.1  # worker chunks arriving within this long share one fsync (each costs 1-2 ms next to traces)


def _synced(groups: Iterator[list[executors.Outcome]], journal: Journal) -> Iterator[executors.Outcome]:
    """The outcomes of each group, then an fsync once the consumer has recorded the group's last one (a group
    commit: the rows count from then on). A group of one (an episode on the network, or in this process) is
    synced at once; worker chunks are synced together while they keep arriving within GROUP_COMMIT_S."""
    last = time.monotonic()
    for group in groups:
        yield from group
        if len(group) == 1 or time.monotonic() - last >= GROUP_COMMIT_S:
            _sync(journal)
            last = time.monotonic()
    _sync(journal)


def _sync(journal: Journal) -> None:
    try:
        journal.sync()
    except OSError as exc:
        raise OutputError(journal.path, exc) from None


def _drain(groups: Iterator[list[executors.Outcome]], journal: Journal, out: Path, extra: dict[str, Any],
           progress: Progress | None, total: int, spend: Spend) -> None:
    """Record every outcome as it arrives (a group's rows made durable together); a dead worker process is a
    failure record, not a crash."""
    from concurrent.futures.process import BrokenProcessPool

    wrap = progress or (lambda it: it)
    try:
        for _i, kind, data in wrap(_Sized(_synced(groups, journal), total)):
            _record(journal, out, kind, data, extra)
            if kind == "row":
                spend.add(data)
    except BrokenProcessPool:
        append_record(out / "failures.jsonl", {"run_id": None, "session": extra["session"],
                                               "error": "BrokenProcessPool", "message": "a worker process died"})


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
            try:
                journal.write({**data, **extra})
            except UnrecordableRow as exc:  # e.g. a provider's impossible usage: never journaled, the tuple pending
                append_record(out / "failures.jsonl", {"run_id": data.get("run_id"), "session": extra["session"],
                                                       "error": "UnrecordableRow", "message": str(exc)[:2000]})
        else:
            append_record(out / "failures.jsonl", {**data, "session": extra["session"]})
    except OSError as exc:
        raise OutputError(out / ("journal.jsonl" if kind == "row" else "failures.jsonl"), exc) from None
