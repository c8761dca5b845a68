"""The batch layer: run every pending cell of a matrix into a run directory, resuming whatever is already
recorded there. It owns concurrency (executors), durability (the fsync'd journal), provenance and the
quarantine of unfinished attempts; one episode is the builder's and the episode loop's business."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from aft_bench.common.errors import EvidenceError, OutputError
from aft_bench.episode.row import write_parquet
from aft_bench.experiment import evidence, executors, freeze
from aft_bench.experiment.config import Matrix
from aft_bench.experiment.journal import Journal, append_record, ids
from aft_bench.experiment.rundir import RunDirectory

Progress = Callable[[Iterable[Any]], Iterable[Any]]


def run_matrix(matrix: Matrix, out: Path, progress: Progress | None = None, workers: int = 1,
               rerun_missing: bool = False) -> list[dict]:
    """Run every pending cell of `matrix` into `out`, resuming whatever is already recorded there.

    Rows are durable (fsync'd journal) before they count; results.parquet is compacted atomically at the
    end. A finished run whose trace or database is missing or fails verification stops the resume
    (EvidenceError naming the runs) unless `rerun_missing`, which makes those runs pending again.
    Returns the rows of the whole matrix recorded so far, in matrix order.
    """
    lock_hash = freeze.check(matrix)
    current_inputs = freeze.inputs(matrix)
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
            extra = {"config_hash": matrix.config_hash, "lock_hash": lock_hash,
                     "code_version": manifest_data["code"]["version"], "session": session}
            _drain(_outcomes(matrix, pending, out, workers), journal, out, extra, progress, len(pending))
        finally:
            journal.close()
        order = {c.run_id: i for i, c in enumerate(matrix.cells)}
        rows = sorted(journal.rows, key=lambda r: order.get(r["run_id"], len(order)))
        try:
            write_parquet(rows, out / "results.parquet")
        except OSError as exc:
            raise OutputError(out / "results.parquet", exc) from None
    return rows


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


def _outcomes(matrix: Matrix, pending: list[int], out: Path, workers: int) -> Iterator[executors.Outcome]:
    if workers > 1 and len(pending) > 1:
        return executors.process_pool(matrix, pending, out, min(workers, len(pending)))
    return executors.serial(matrix, pending, out)


def _drain(outcomes: Iterator[executors.Outcome], journal: Journal, out: Path, extra: dict[str, Any],
           progress: Progress | None, total: int) -> None:
    """Record every outcome as it arrives; a dead worker process is a failure record, not a crash."""
    from concurrent.futures.process import BrokenProcessPool

    wrap = progress or (lambda it: it)
    try:
        for _i, kind, data in wrap(_Sized(outcomes, total)):
            _record(journal, out, kind, data, extra)
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
            journal.append({**data, **extra})
        else:
            append_record(out / "failures.jsonl", {**data, "session": extra["session"]})
    except OSError as exc:
        raise OutputError(out / ("journal.jsonl" if kind == "row" else "failures.jsonl"), exc) from None
