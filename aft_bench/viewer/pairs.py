"""Matched pairs as the analysis formed them: `DIR/analysis/pairs.parquet` when the analysis is of the current
results, else `analysis.pairs.match_pairs` over the runs table (never a second pairing rule); and a pair's two
traces aligned turn by turn."""

from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Any

import pandas as pd

from aft_bench.analysis.pairs import match_pairs
from aft_bench.analysis.table import results_sha256
from aft_bench.common.files import read_json
from aft_bench.episode.row import SCHEMA
from aft_bench.analysis.plan import plan_of
from aft_bench.experiment.comparisons import Comparison

LABELS = [c.name for c in SCHEMA.values() if c.group == "label"]


def comparisons(manifest: dict[str, Any]) -> tuple[Comparison, ...]:
    """The comparisons the experiment recorded in its manifest, else the shipped ones."""
    return plan_of(manifest).comparisons


def _clean(v: Any) -> Any:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def all_pairs(directory: Path, manifest: dict[str, Any], table: pd.DataFrame | None) -> tuple[list[dict[str, Any]], str]:
    """Every matched pair ({comparison, run ids, values, utility_diff, cluster, ...}) and where they came from."""
    path = directory / "analysis" / "pairs.parquet"
    meta_path = directory / "analysis" / "meta.json"
    if path.is_file() and meta_path.is_file() and (directory / "results.parquet").is_file():
        meta = read_json(meta_path, "analysis meta.json")
        if isinstance(meta, dict) and meta.get("input_sha256") == results_sha256(directory):
            df = pd.read_parquet(path)
            return _records(df), "analysis/pairs.parquet"
    if table is None or table.empty:
        return [], "none"
    frames, skipped = [], []
    for comp in comparisons(manifest):
        arms = [(table["workload"] == comp.workload) & (table["condition"] == c) for c in (comp.treatment, comp.control)]
        if not all(a.any() for a in arms):
            continue
        try:
            frames.append(match_pairs(table, comp))
        except Exception as exc:  # noqa: BLE001 - a partial directory: that comparison has no pairs yet
            skipped.append(f"{comp.id}: {exc}")
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    note = "matched here (no current analysis)" + (f"; not paired: {'; '.join(skipped)}" if skipped else "")
    return _records(df), note


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for rec in df.to_dict("records"):
        r = {k: _clean(v) for k, v in rec.items()}
        r["cluster"] = r.get("task_id")
        if r.get("catalog_size") in ("<NA>", "nan"):
            r["catalog_size"] = None
        out.append(r)
    return out


def label_diff(t: dict[str, Any], c: dict[str, Any]) -> list[dict[str, Any]]:
    """Every label column with both values and whether they differ."""
    return [{"label": k, "treatment": t.get(k), "control": c.get(k), "differs": t.get(k) != c.get(k)} for k in LABELS]


def align(t_turns: list[dict[str, Any]], c_turns: list[dict[str, Any]]) -> list[list[int | None]]:
    """Turn indices aligned step by step: equal actions side by side, an extra turn of one arm against a gap."""
    a = [f"{x.get('action')}:{x.get('tool')}" for x in t_turns]
    b = [f"{x.get('action')}:{x.get('tool')}" for x in c_turns]
    out: list[list[int | None]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            out += [[i1 + k, j1 + k] for k in range(i2 - i1)]
        else:
            n = max(i2 - i1, j2 - j1)
            out += [[i1 + k if i1 + k < i2 else None, j1 + k if j1 + k < j2 else None] for k in range(n)]
    return out
