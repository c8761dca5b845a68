"""The evidence behind finished runs: every journaled row's trace must exist and verify against the row's
head, and a SQLite run's database must exist, open as SQLite and hold the trace's commits. Checked on every resume; `--rerun-missing` retracts the rows
whose evidence is gone (the old journal is kept under quarantine/) so those runs are pending again."""

from __future__ import annotations

import os
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from aft_bench.common.errors import InputError, OutputError, TraceIntegrityError
from aft_bench.experiment.journal import encode
from aft_bench.runtime.trace import read_events, verify


def problems(out: Path, rows: list[dict[str, Any]]) -> dict[str, str]:
    """run_id -> what is wrong with its evidence, for every finished row whose evidence is not intact."""
    bad: dict[str, str] = {}
    for row in rows:
        rid = row["run_id"]
        trace = out / "traces" / f"{rid}.jsonl"
        if not trace.exists():
            bad[rid] = "trace missing"
            continue
        try:
            events = read_events(trace)
            verify(events, row.get("trace_head"), where=str(trace))
        except (TraceIntegrityError, InputError) as exc:
            bad[rid] = f"trace fails verification ({str(exc).rsplit(': ', 1)[-1]})"
            continue
        if row.get("backend") == "sqlite":
            problem = database_problem(out / "db" / f"{rid}.sqlite", events)
            if problem is not None:
                bad[rid] = problem
    return bad


def database_problem(path: Path, events: list[Any]) -> str | None:
    """What is wrong with a SQLite run's database against its verified trace: missing, not a SQLite database,
    or a ledger whose commits are not the trace's (a garbage or swapped file); None if it holds up."""
    if not path.exists():
        return "database missing"
    committed = sum(1 for e in events if e.kind == "commit")
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            (rows,) = db.execute("SELECT count(*) FROM ledger").fetchone()
    except sqlite3.Error as exc:
        return f"database unreadable ({exc})"
    if rows != committed:  # s0's ledger is empty: every row is a commit of this episode
        return f"database ledger holds {rows} commit(s), the trace {committed}"
    return None


def retract(out: Path, rows: list[dict[str, Any]], run_ids: set[str], session: int) -> list[dict[str, Any]]:
    """Rewrite the journal without `run_ids` (atomically, after copying the old one and the runs' leftover
    evidence to quarantine/session-N/); returns the rows that remain."""
    journal = out / "journal.jsonl"
    dest = out / "quarantine" / f"session-{session}"
    keep = [r for r in rows if r["run_id"] not in run_ids]
    try:
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(journal, dest / "journal.before-retraction.jsonl")
        tmp = journal.with_suffix(".jsonl.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.writelines(encode(r) for r in keep)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, journal)
    except OSError as exc:
        raise OutputError(journal, exc) from None
    return keep
