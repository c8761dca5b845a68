"""Matched pairs for a comparison: two runs equal on every key field except the interface condition."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aft_bench.common.errors import InputError
from aft_bench.experiment.comparisons import Comparison

if TYPE_CHECKING:
    import pandas as pd

PAIR_KEYS = ["world", "backend", "workload", "task_id", "fault", "fault_seed", "catalog_size", "agent", "agent_spec",
             "model", "rep"]


def endpoint_values(df: "pd.DataFrame", endpoint: str) -> "pd.Series":
    """The endpoint as a number per run (booleans as 0/1; a missing recovery label counts as not recovered)."""
    col = df[endpoint]
    if endpoint == "recovered":
        return col.fillna(False).astype(float)
    return col.astype(float)


def match_pairs(df: "pd.DataFrame", comp: Comparison) -> "pd.DataFrame":
    """One row per matched pair with both run ids, both endpoint values and the utility difference.

    A run of one arm without its partner, or two runs for one key, is an error: pairs are never dropped silently.
    """
    import pandas as pd

    sub = df[(df["workload"] == comp.workload) & df["condition"].isin([comp.treatment, comp.control])].copy()
    sub["_value"] = endpoint_values(sub, comp.endpoint)
    keyed = sub.assign(catalog_size=sub["catalog_size"].astype("Int64").astype(str))
    arms = {}
    for arm, cond in (("t", comp.treatment), ("c", comp.control)):
        part = keyed[keyed["condition"] == cond]
        dup = part.duplicated(PAIR_KEYS, keep=False)
        if dup.any():
            raise InputError("<results>", "pairs", comp.id, f"{int(dup.sum())} {cond} runs share a pair key")
        arms[arm] = part.set_index(PAIR_KEYS)[["run_id", "_value"]]
    joined = pd.merge(arms["t"], arms["c"], how="outer", left_index=True, right_index=True, suffixes=("_t", "_c"))
    missing = joined["run_id_t"].isna() | joined["run_id_c"].isna()
    if missing.any():
        lost = joined[missing].reset_index()
        sample = [
            {**{k: row[k] for k in ("task_id", "fault", "fault_seed", "catalog_size", "model", "rep")},
             "missing": comp.control if pd.isna(row["run_id_c"]) else comp.treatment}
            for _, row in lost.head(3).iterrows()
        ]
        raise InputError("<results>", f"pairs of {comp.id}", sample,
                         f"{int(missing.sum())} runs have no partner (first keys shown)")
    out = joined.reset_index()
    out["utility_diff"] = comp.sign * (out["_value_t"] - out["_value_c"])
    return pd.DataFrame({
        **{k: out[k] for k in PAIR_KEYS},
        "comparison": comp.id,
        "run_id_treatment": out["run_id_t"],
        "run_id_control": out["run_id_c"],
        "treatment": out["_value_t"],
        "control": out["_value_c"],
        "utility_diff": out["utility_diff"],
    })
