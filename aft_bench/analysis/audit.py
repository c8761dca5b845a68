"""`aft-bench audit DIR [--manuscript FILE]`: release checks over a results directory, each pass/fail.

Manuscript numbers are checked where they are linked to the analysis: `[0.5000](aft:primary/duplicate_effects/utility_diff)`
quotes `utility_diff` of `duplicate_effects` from `analysis/primary.json`, rounded to the decimals written.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any, Callable

from aft_bench.common.errors import TraceIntegrityError
from aft_bench.episode.row import SCHEMA
from aft_bench.experiment.journal import read_records, read_rows
from aft_bench.runtime.trace import verify_file

LINK = re.compile(r"\[([^\]]+)\]\(aft:([a-z_]+)/([A-Za-z0-9_.-]+)/([a-z_]+)\)")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def _manifest(d: Path) -> dict[str, Any]:
    return json.loads((d / "manifest.json").read_text())


def audit(d: Path, manuscript: Path | None = None) -> list[Check]:
    checks: list[Check] = []

    def run(name: str, fn: Callable[[], str]) -> None:
        try:
            checks.append(Check(name, True, fn()))
        except AssertionError as exc:
            checks.append(Check(name, False, str(exc)))
        except (OSError, ValueError, KeyError, TraceIntegrityError) as exc:
            checks.append(Check(name, False, f"{type(exc).__name__}: {exc}"))

    state: dict[str, Any] = {}

    def manifest_ok() -> str:
        state["m"] = _manifest(d)
        return f"{len(state['m']['run_ids'])} tuples expected, config {state['m']['config_hash'][:12]}"

    def journal_ok() -> str:
        rows = read_rows(d / "journal.jsonl")
        state["rows"] = rows
        ids = [r["run_id"] for r in rows]
        assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} duplicate run ids in the journal"
        return f"{len(rows)} verified rows, no duplicates"

    def results_ok() -> str:
        import pandas as pd

        df = pd.read_parquet(d / "results.parquet")
        state["df"] = df
        missing, extra = [c for c in SCHEMA if c not in df.columns], [c for c in df.columns if c not in SCHEMA]
        assert not missing and not extra, f"columns differ from the row model: missing {missing}, extra {extra}"
        assert df["run_id"].is_unique, "duplicate run ids in results.parquet"
        assert set(df["run_id"]) == {r["run_id"] for r in state["rows"]}, "results.parquet and journal differ"
        return f"{len(df)} rows with the row model's columns, unique, equal to the journal"

    def complete() -> str:
        expected, got = set(state["m"]["run_ids"]), set(state["df"]["run_id"])
        assert not got - expected, f"{len(got - expected)} rows for tuples not in the manifest"
        assert got == expected, f"{len(expected - got)} of {len(expected)} tuples have no row"
        return f"all {len(expected)} tuples present"

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
        assert json.loads(lock.read_text())["lock_hash"] == lock_hash, f"{lock} no longer matches the results"
        return f"lock {lock_hash[:12]} matches {lock.name}"

    def traces_ok() -> str:
        n = 0
        for _, row in state["df"].iterrows():
            verify_file(d / "traces" / f"{row['run_id']}.jsonl", row["trace_head"])
            n += 1
        return f"{n} traces sealed, chains intact, heads match"

    def failures_ok() -> str:
        failures = read_records(d / "failures.jsonl")
        rows = {(r["run_id"], r["session"]) for r in state["rows"]}
        clash = [f for f in failures if (f["run_id"], f.get("session")) in rows]
        assert not clash, f"{len(clash)} tuples have a row from the same attempt that failed"
        return f"{len(failures)} recorded failures, none became a row"

    run("manifest", manifest_ok)
    run("journal integrity", journal_ok)
    run("results = journal, unique", results_ok)
    run("matrix complete", complete)
    run("rows match manifest", consistent)
    run("lock", lock_ok)
    run("trace hash chains", traces_ok)
    run("no rows for failed attempts", failures_ok)
    if manuscript is not None:
        run("manuscript numbers", lambda: _manuscript(d, manuscript))
    return checks


def _rounded(value: float, written: str) -> str:
    decimals = len(written.split(".")[1]) if "." in written else 0
    q = Decimal(1).scaleb(-decimals)
    return str(Decimal(repr(value)).quantize(q, rounding=ROUND_HALF_EVEN))


def _manuscript(d: Path, path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    links = LINK.findall(text)
    assert links, f"{path} links no number to the analysis (use [0.50](aft:primary/<comparison>/<field>))"
    tables: dict[str, list[dict[str, Any]]] = {}
    wrong = []
    for written, table, key, field in links:
        if table not in tables:
            tables[table] = json.loads((d / "analysis" / f"{table}.json").read_text())
        row = next((r for r in tables[table] if r.get("comparison") == key), None)
        assert row is not None, f"{table} has no comparison {key}"
        value = row.get(field)
        expect = "missing" if value is None else _rounded(float(value), written.strip())
        if written.strip() != expect:
            wrong.append(f"{key}.{field}: manuscript {written.strip()} != analysis {expect}")
    assert not wrong, "; ".join(wrong[:5])
    return f"{len(links)} quoted numbers equal the analysis at the precision written"
