"""Matched pairs for a comparison: two runs equal on every key field except the interface condition."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aft_bench.common.errors import InputError
from aft_bench.experiment.comparisons import Comparison

if TYPE_CHECKING:
    import pandas as pd

PAIR_KEYS = ["world", "backend", "workload", "task_id", "fault", "fault_seed", "catalog_size", "agent", "agent_spec",
             "model", "rep", "network"]  # network: under a network axis, two runs pair only on the same network


def arm_rows(df: "pd.DataFrame", comp: Comparison, arm: str) -> "pd.DataFrame":
    """The runs of one arm ("treatment" or "control"): its workload and condition, and for an agent contrast
    the runs whose agent spec has the arm's parameters."""
    import json

    cond, spec = (comp.treatment, comp.treatment_agent) if arm == "treatment" else (comp.control, comp.control_agent)
    rows = df[(df["workload"] == comp.workload) & (df["condition"] == cond)]
    if spec is None or rows.empty:
        return rows
    parsed = {s: json.loads(s) for s in rows["agent_spec"].unique()}
    keep = rows["agent_spec"].map(lambda s: all(parsed[s].get(k) == v for k, v in spec.items()))
    return rows[keep]


def pair_keys(comp: Comparison) -> list[str]:
    """What two runs of a pair share: every key but the condition, and but the agent spec in an agent contrast."""
    return [k for k in PAIR_KEYS if not (comp.agent_contrast and k == "agent_spec")]


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

    keys = pair_keys(comp)
    arms = {}
    for arm, which, cond in (("t", "treatment", comp.treatment), ("c", "control", comp.control)):
        rows = arm_rows(df, comp, which)
        part = rows[[*keys, "run_id"]].assign(  # only what a pair holds: indexing all columns costs ten times more
            _value=endpoint_values(rows, comp.endpoint), catalog_size=rows["catalog_size"].astype("Int64").astype(str))
        dup = part.duplicated(keys, keep=False)
        if dup.any():
            raise InputError("<results>", "pairs", comp.id, f"{int(dup.sum())} {cond} runs share a pair key")
        arms[arm] = part.set_index(keys)
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
        **{k: out[k] if k in out else None for k in PAIR_KEYS},
        "comparison": comp.id,
        "run_id_treatment": out["run_id_t"],
        "run_id_control": out["run_id_c"],
        "treatment": out["_value_t"],
        "control": out["_value_c"],
        "utility_diff": out["utility_diff"],
    })
