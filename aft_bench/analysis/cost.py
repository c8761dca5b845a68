"""What runs cost, where decisions are made: per condition and per comparison arm, pooled and per model, the mean
cost, tokens, model calls and wall time of a run, and the cost per completed task (all runs' cost over the runs
labelled completed) with a task-clustered bootstrap interval. A model without a known price is "unknown", never 0."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from aft_bench.analysis.pairs import arm_rows
from aft_bench.experiment.comparisons import Comparison

COST_COLUMNS = ["scope", "group", "arm", "condition", "model", "runs", "completed", "cost_known", "cost_per_run",
                "prompt_tokens_per_run", "completion_tokens_per_run", "model_calls_per_run", "wall_s_per_run",
                "cost_per_completed", "ci_low", "ci_high"]
USAGE = ("cost_usd", "prompt_tokens", "completion_tokens", "model_calls", "wall_s")
POOLED = "pooled"


def per_completed_ci(cost: np.ndarray, completed: np.ndarray, clusters: np.ndarray, n_resamples: int, seed: int
                     ) -> tuple[float | None, float | None]:
    """95 % percentile interval of sum(cost) / sum(completed), resampling whole task clusters; resamples with no
    completed run have no ratio and are left out (None when every resample is such)."""
    codes, uniq = pd.factorize(clusters)
    k = len(uniq)
    cost_c = np.bincount(codes, weights=cost, minlength=k)
    done_c = np.bincount(codes, weights=completed, minlength=k)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, k, size=(n_resamples, k))
    num, den = cost_c[picks].sum(axis=1), done_c[picks].sum(axis=1)
    ratios = num[den > 0] / den[den > 0]
    if not len(ratios):
        return None, None
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return float(lo), float(hi)


def summarize_runs(runs: pd.DataFrame, n_resamples: int, seed: int) -> dict[str, Any]:
    """The cost figures of one set of runs (see the module docstring)."""
    n = len(runs)
    completed = (runs["outcome"] == "completed").to_numpy()
    known = bool(n) and not runs["cost_usd"].isna().any()
    mean = {c: float(runs[c].astype(float).mean()) if n else None for c in USAGE}
    out: dict[str, Any] = {"runs": n, "completed": int(completed.sum()), "cost_known": known,
                           "cost_per_run": mean["cost_usd"] if known else None,
                           "prompt_tokens_per_run": mean["prompt_tokens"],
                           "completion_tokens_per_run": mean["completion_tokens"],
                           "model_calls_per_run": mean["model_calls"], "wall_s_per_run": mean["wall_s"],
                           "cost_per_completed": None, "ci_low": None, "ci_high": None}
    if known and completed.any():
        cost = runs["cost_usd"].astype(float).to_numpy()
        out["cost_per_completed"] = float(cost.sum() / completed.sum())
        out["ci_low"], out["ci_high"] = per_completed_ci(cost, completed.astype(float), runs["task_id"].to_numpy(),
                                                         n_resamples, seed)
    return out


def _groups(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The runs pooled over models, then per model (only when there are several)."""
    models = sorted(df["model"].unique()) if len(df) else []
    return [(POOLED, df)] + ([(m, df[df["model"] == m]) for m in models] if len(models) > 1 else [])


def cost_table(df: pd.DataFrame, comps: tuple[Comparison, ...], n_resamples: int = 2000, seed: int = 0
               ) -> list[dict[str, Any]]:
    """Rows per workload x condition (scope "condition") and per comparison arm (scope "arm"), pooled and per
    model; only results whose agents call a model (any model call recorded) are worth a row."""
    if df.empty or not (df["model_calls"] > 0).any():
        return []
    out = []
    for (workload, cond), runs in df.groupby(["workload", "condition"], sort=True):
        for model, sub in _groups(runs):
            out.append({"scope": "condition", "group": workload, "arm": None, "condition": cond, "model": model,
                        **summarize_runs(sub, n_resamples, seed)})
    for comp in comps:
        for arm in ("treatment", "control"):
            runs = arm_rows(df, comp, arm)
            if runs.empty:
                continue
            for model, sub in _groups(runs):
                out.append({"scope": "arm", "group": comp.id, "arm": arm,
                            "condition": comp.treatment if arm == "treatment" else comp.control, "model": model,
                            **summarize_runs(sub, n_resamples, seed)})
    return out
