"""Reliability over repeated trials (`repetitions`): a reducer over the results table, not part of the runner.

For each comparison's arms and each k up to the trials per tuple n: pass^k (every one of k trials succeeds,
tau-bench's definition) and pass@k (at least one does), each by its unbiased estimator from the n trials of
every tuple, C(c, k) / C(n, k) and 1 - C(n - c, k) / C(n, k) with c successes; and the verdict-flip rate, the
share of tuples whose trials disagree. A trial succeeds when the run is correct (`y_correct`: policy
acceptance and trace safety).
"""

from __future__ import annotations

from math import comb
from typing import Any

import pandas as pd

from aft_bench.analysis.pairs import arm_rows
from aft_bench.experiment.comparisons import Comparison

TUPLE = ["world", "backend", "workload", "task_id", "condition", "fault", "fault_seed", "catalog_size", "agent",
         "agent_spec"]
COLUMNS = ["comparison", "arm", "condition", "tuples", "trials", "k", "pass_hat_k", "pass_at_k", "flip_rate"]


def pass_hat(n: int, c: int, k: int) -> float:
    """Unbiased estimate of P(all k of k trials succeed) from c successes in n trials (k <= n)."""
    return comb(c, k) / comb(n, k)


def pass_at(n: int, c: int, k: int) -> float:
    """Unbiased estimate of P(at least one of k trials succeeds) from c successes in n trials (k <= n)."""
    return 1.0 - comb(n - c, k) / comb(n, k)


def trials_table(df: pd.DataFrame, comps: tuple[Comparison, ...]) -> list[dict[str, Any]]:
    """Rows of pass^k, pass@k and the flip rate per comparison arm and k (empty without repetitions)."""
    out: list[dict[str, Any]] = []
    if "rep" not in df.columns or df["rep"].nunique() < 2:
        return out
    for comp in comps:
        for arm, cond in (("treatment", comp.treatment), ("control", comp.control)):
            runs = arm_rows(df, comp, arm)
            if runs.empty:
                continue
            keys = [k for k in TUPLE if k in runs.columns]
            grouped = runs.groupby(keys, dropna=False)["y_correct"].agg(["size", "sum"])
            n = int(grouped["size"].min())  # every tuple is judged on the same number of trials
            counts = [(int(s), int(c)) for s, c in zip(grouped["size"], grouped["sum"])]
            flips = sum(1 for s, c in counts if 0 < c < s) / len(counts)
            for k in range(1, n + 1):
                out.append({"comparison": comp.id, "arm": arm, "condition": cond, "tuples": len(counts),
                            "trials": n, "k": k,
                            "pass_hat_k": sum(pass_hat(s, c, k) for s, c in counts) / len(counts),
                            "pass_at_k": sum(pass_at(s, c, k) for s, c in counts) / len(counts),
                            "flip_rate": flips})
    return out
