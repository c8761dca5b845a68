"""`aft-bench audit DIR [--manuscript FILE]`: release checks over a results directory, each pass/fail.

Manuscript numbers are checked where they are linked to the analysis: `[0.5000](aft:primary/duplicate_effects/utility_diff)`
quotes `utility_diff` of `duplicate_effects` from `analysis/primary.json`, rounded to the decimals written.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from aft_bench.analysis.table import problems as table_problems
from aft_bench.analysis.table import with_late_columns
from aft_bench.common.errors import EvidenceError, HarnessError, InputError, TraceIntegrityError
from aft_bench.common.files import read_json, read_text, refuse_special
from aft_bench.common.memory import ensure_arrow_room
from aft_bench.common.paths import WORLDS
from aft_bench.episode.row import SCHEMA, label_columns
from aft_bench.experiment.config import Cell
from aft_bench.experiment.evidence import database_problem
from aft_bench.experiment.journal import read_records, read_rows
from aft_bench.judge.rejudge import rejudge
from aft_bench.runtime.trace import read_events, verify
from aft_bench.tasks.workloads import load_workloads

LINK = re.compile(r"\[([^\]]+)\]\(aft:([a-z_]+)/([A-Za-z0-9_.-]+)/([a-z_]+)\)")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def _manifest(d: Path) -> dict[str, Any]:
    m = read_json(d / "manifest.json", "aft-bench manifest")
    missing = [k for k in ("run_ids", "config_hash", "config_path") if not isinstance(m, dict) or k not in m]
    assert not missing, f"manifest.json lacks {', '.join(missing)}"
    return m


def _plain(v: Any) -> Any:
    """A table value as the journal holds it: NaN/NA -> None, numpy scalars -> Python."""
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if isinstance(v, np.generic) else v


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same kind (True is not 1, "1" is not 1; 1 and 1.0 are the same number)."""
    kinds = (bool, str, type(None))
    return a == b and all(isinstance(a, k) == isinstance(b, k) for k in kinds)


def _named(bad: dict[str, list[str]], what: str) -> str:
    """`what` for the first runs and columns of `bad` (run id -> columns)."""
    shown = "; ".join(f"{rid} ({', '.join(cols[:4])})" for rid, cols in list(bad.items())[:4])
    return f"{len(bad)} run(s) {what}: {shown}{' ...' if len(bad) > 4 else ''}"


def audit(d: Path, manuscript: Path | None = None) -> list[Check]:
    """Every release check over results directory `d`; each names the runs and columns it finds wrong."""
    if not d.is_dir():
        raise InputError(d, "<dir>", str(d), "no such results folder")
    if not (d / "manifest.json").exists():
        raise InputError(d, "<dir>", str(d), "not an aft-bench results folder (no manifest.json)")
    refuse_special(d)  # a FIFO where a journal or trace should be: refused, never read (it would block)
    text = None if manuscript is None else _manuscript_text(manuscript)  # refused before any check runs
    checks: list[Check] = []

    def run(name: str, fn: Callable[[], str]) -> None:
        try:
            checks.append(Check(name, True, fn()))
        except AssertionError as exc:
            checks.append(Check(name, False, str(exc)))
        except (OSError, ValueError, KeyError, TypeError, TraceIntegrityError, InputError, HarnessError,
                EvidenceError) as exc:
            checks.append(Check(name, False, f"{type(exc).__name__}: {exc}"))

    state: dict[str, Any] = {}

    def manifest_ok() -> str:
        state["m"] = _manifest(d)
        return f"{len(state['m']['run_ids'])} tuples expected, config {state['m']['config_hash'][:12]}"

    def journal_ok() -> str:
        rows = read_rows(d / "journal.jsonl")
        state["rows"] = {r["run_id"]: r for r in rows}
        assert len(rows) == len(state["rows"]), f"{len(rows) - len(state['rows'])} duplicate run ids in the journal"
        return f"{len(rows)} verified rows, no duplicates"

    def model_ok() -> str:
        ensure_arrow_room(f"reading {d / 'results.parquet'}")  # under `ulimit -v`: MemoryError, never a hang
        df = with_late_columns(pd.read_parquet(d / "results.parquet"))
        state["df"] = df
        found = table_problems(df)
        assert not found, "; ".join(map(str, found[:3])) + (f"; {len(found) - 3} more" if len(found) > 3 else "")
        return f"{len(df)} rows, columns and types of the row model, one row per run and per tuple"

    def equal_journal() -> str:
        rows, df = state["rows"], state["df"]
        got = set(df["run_id"])
        assert got == set(rows), (f"results.parquet and journal hold different runs: {len(got - set(rows))} only "
                                  f"in results, {len(set(rows) - got)} only in the journal")
        bad: dict[str, list[str]] = {}
        cols = [c for c in SCHEMA if c in df.columns]
        for rec in df[cols].to_dict("records"):
            j = rows[rec["run_id"]]
            diff = [c for c in cols if not _same(_plain(rec[c]), j.get(c))]
            if diff:
                bad[rec["run_id"]] = diff
        assert not bad, _named(bad, "differ from their journal record")
        return f"every row equals its journal record, value for value ({len(cols)} columns)"

    def complete() -> str:
        expected, got = set(state["m"]["run_ids"]), set(state["df"]["run_id"])
        assert not got - expected, f"{len(got - expected)} rows for tuples not in the manifest"
        assert got == expected, f"{len(expected - got)} of {len(expected)} tuples have no row"
        return f"all {len(expected)} tuples present"

    def keys_ok() -> str:
        keys = [f.name for f in fields(Cell) if f.name in state["df"].columns]  # `network`: not in older results
        bad = {}
        for rec in state["df"][["run_id", *keys]].to_dict("records"):
            cell = Cell(**{k: _plain(rec[k]) for k in keys})
            if cell.run_id != rec["run_id"]:
                bad[rec["run_id"]] = keys
        assert not bad, _named(bad, "whose key columns do not hash to their run id")
        return "every row's key columns hash to its run id"

    def consistent() -> str:
        df, m = state["df"], state["m"]
        bad = df[df["config_hash"] != m["config_hash"]]
        assert bad.empty, f"{len(bad)} rows from another config"
        stale = df[df["lock_hash"].fillna("") != (m.get("lock_hash") or "")]
        assert stale.empty, f"{len(stale)} rows made under another lock"
        return "every row carries the manifest's config and lock"

    def lock_ok() -> str:
        lock_hash = state["m"].get("lock_hash")
        if not lock_hash:
            return "config not frozen (no lock)"
        lock = Path(state["m"]["config_path"]).with_name(Path(state["m"]["config_path"]).stem + ".lock.json")
        assert lock.exists(), f"lock file {lock} is missing"
        data = read_json(lock, "lock file")
        assert isinstance(data, dict) and data.get("lock_hash") == lock_hash, f"{lock} no longer matches the results"
        return f"lock {lock_hash[:12]} matches {lock.name}"

    run("manifest", manifest_ok)
    run("journal integrity", journal_ok)
    run("results = row model", model_ok)
    run("results = journal, value for value", equal_journal)
    run("matrix complete", complete)
    run("run ids = key columns", keys_ok)
    run("rows match manifest", consistent)
    run("lock", lock_ok)
    if "df" in state:
        checks.extend(_traces_and_labels(d, state["df"], state.get("m", {})))
    run("no rows for failed attempts", lambda: _failures(d, state.get("rows", {})))
    if "df" in state and (state["df"]["backend"] == "sqlite").any():
        run("SQLite databases", lambda: _databases(d, state["df"]))
    if manuscript is not None:
        run("manuscript numbers", lambda: _manuscript(d, manuscript, text or ""))
    return checks


def _databases(d: Path, df: pd.DataFrame) -> str:
    """Every SQLite run's database exists, opens as SQLite and holds exactly its trace's commits."""
    bad: dict[str, list[str]] = {}
    runs = df.loc[df["backend"] == "sqlite", "run_id"].tolist()
    for rid in runs:
        trace = d / "traces" / f"{rid}.jsonl"
        try:
            problem = database_problem(d / "db" / f"{rid}.sqlite", read_events(trace))
        except (OSError, InputError, TraceIntegrityError) as exc:
            problem = f"trace unreadable ({exc})"
        if problem is not None:
            bad[rid] = [problem]
    assert not bad, _named(bad, "whose databases do not hold up")
    return f"{len(runs)} SQLite databases open and hold their traces' commits"


def _failures(d: Path, rows: dict[str, dict[str, Any]]) -> str:
    failures = read_records(d / "failures.jsonl")
    done = {(r["run_id"], r["session"]) for r in rows.values()}
    clash = [f for f in failures if (f.get("run_id"), f.get("session")) in done]
    assert not clash, f"{len(clash)} tuples have a row from the same attempt that failed"
    return f"{len(failures)} recorded failures, none became a row"


def _traces_and_labels(d: Path, df: pd.DataFrame, m: dict[str, Any]) -> list[Check]:
    """Verify every trace (chain, seal, canonical bytes, head) and re-judge its labels from the trace's
    recorded terminal state and the task's criteria; both checks name the runs (and columns) that differ."""
    worlds = Path(m["worlds_dir"]) if m.get("worlds_dir") else WORLDS
    try:
        workloads = load_workloads(worlds)
    except InputError as exc:
        workloads, why = None, f"cannot load the workloads to re-judge with: {exc}"
    broken: dict[str, list[str]] = {}
    differ: dict[str, list[str]] = {}
    for rec in df.to_dict("records"):
        rid = rec["run_id"]
        try:
            events = read_events(d / "traces" / f"{rid}.jsonl")
            verify(events, rec["trace_head"], where=f"{rid}")
        except (TraceIntegrityError, InputError) as exc:
            broken[rid] = [str(exc).split(": ", 1)[-1]]
            continue
        if workloads is None:
            continue
        try:
            task = next(t for t in workloads.get(rec["workload"]).tasks if t.id == rec["task_id"])
            if task.hash != rec["task_hash"]:
                differ[rid] = ["task definition changed since the run"]
                continue
            expect = label_columns(rejudge(events, task.criteria))
        except (StopIteration, InputError, TraceIntegrityError, HarnessError, KeyError) as exc:
            differ[rid] = [f"cannot re-judge: {type(exc).__name__}: {exc}"]
            continue
        cols = [c for c, v in expect.items() if _plain(rec[c]) != v]
        if cols:
            differ[rid] = cols
    traces = Check("trace hash chains", not broken,
                   _named(broken, "with broken traces") if broken else f"{len(df)} traces sealed, canonical, "
                   f"chains intact, heads match")
    if workloads is None:
        labels = Check("labels re-judged", False, why)
    else:
        labels = Check("labels re-judged", not differ,
                       _named(differ, "whose labels differ from the re-judged trace") if differ else
                       f"{len(df) - len(broken)} runs re-judged from trace and terminal state: labels equal")
    return [traces, labels]


def _rounded(value: float, written: str) -> str:
    decimals = len(written.split(".")[1]) if "." in written else 0
    q = Decimal(1).scaleb(-decimals)
    return str(Decimal(repr(value)).quantize(q, rounding=ROUND_HALF_EVEN))


def _manuscript_text(path: Path) -> str:
    """The manuscript given with --manuscript, as UTF-8 text; missing, a folder, unreadable or not text is bad
    input naming the file and the flag (exit 2), never a failed check after every other check ran."""
    try:
        return read_text(path)
    except InputError as exc:
        raise InputError(path, "--manuscript", exc.value, exc.problem) from None


def _manuscript(d: Path, path: Path, text: str) -> str:
    links = LINK.findall(text)
    assert links, f"{path} links no number to the analysis (use [0.50](aft:primary/<comparison>/<field>))"
    tables: dict[str, list[dict[str, Any]]] = {}
    wrong = []
    for written, table, key, field in links:
        if table not in tables:
            tables[table] = read_json(d / "analysis" / f"{table}.json", "analysis table")
        row = next((r for r in tables[table] if r.get("comparison") == key), None)
        assert row is not None, f"{table} has no comparison {key}"
        value = row.get(field)
        expect = "missing" if value is None else _rounded(float(value), written.strip())
        if written.strip() != expect:
            wrong.append(f"{key}.{field}: manuscript {written.strip()} != analysis {expect}")
    assert not wrong, "; ".join(wrong[:5])
    return f"{len(links)} quoted numbers equal the analysis at the precision written"
