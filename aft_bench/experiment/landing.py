"""Evidence that comes home from a worker: the sealed trace (and SQLite database) of a row are verified on the
driver (hash chain, seal, head equal to the row's `trace_head`; a database that opens and holds the trace's
commits) and written into the run directory before the row may be journaled. Nothing a worker wrote on its own
disk counts."""

from __future__ import annotations

import os
from pathlib import Path

from aft_bench.common.errors import InputError, TraceIntegrityError
from aft_bench.common.files import write_atomic
from aft_bench.common.secrets import holds_secret
from aft_bench.experiment.evidence import database_problem
from aft_bench.experiment.shipping import Returned
from aft_bench.runtime.trace import read_events, verify


def land(out: Path, got: Returned) -> str | None:
    """Verify `got`'s evidence and move it into `out/traces/` (and `out/db/`); returns what is wrong instead
    (the final names then untouched: a rejected transfer stays as `*.part`, quarantined by the next session)."""
    rid = got.run_id
    if got.data.get("run_id") != rid:
        return f"the worker sent the row of run {got.data.get('run_id')} for run {rid}"
    if got.trace is None:
        return "no trace came back with the row"
    if holds_secret(got.trace):  # redacted on the worker against its own environment; this one's may hold others
        return "the trace carries a credential of the driver's environment; not recorded"
    part = out / "traces" / f"{rid}.jsonl.part"
    write_atomic(part, got.trace)
    try:
        events = read_events(part)
        verify(events, got.data.get("trace_head"), where=f"trace of {rid} from {got.worker}")
    except (TraceIntegrityError, InputError) as exc:
        return f"trace fails verification ({exc})"
    if got.data.get("backend") == "sqlite":
        if got.database is None:
            return "no database came back with the SQLite run"
        (out / "db").mkdir(exist_ok=True)
        db_part = out / "db" / f"{rid}.sqlite.part"
        _write_database(db_part, got.database)
        problem = database_problem(db_part, events)
        _drop_empty_sidecars(db_part)
        if problem is not None:
            return problem
        os.replace(db_part, out / "db" / f"{rid}.sqlite")
    os.replace(part, out / "traces" / f"{rid}.jsonl")
    return None


def _write_database(path: Path, data: bytes) -> None:
    """The SQLite file as the worker's SQLite wrote it (locally SQLite writes it in place, unredacted as well)."""
    path.write_bytes(data)
    with open(path, "rb+") as fh:
        os.fsync(fh.fileno())


def _drop_empty_sidecars(path: Path) -> None:
    """The `-wal`/`-shm` files the read-only check left beside a database whose log the worker had folded in
    (an empty log holds nothing; a non-empty one is kept)."""
    wal, shm = path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")
    if wal.exists() and wal.stat().st_size == 0:
        wal.unlink()
        shm.unlink(missing_ok=True)
    elif not wal.exists():
        shm.unlink(missing_ok=True)
