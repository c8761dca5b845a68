"""`aft-bench analyze DIR`: matched pairs and the paper's statistics from a results table, for the comparisons
the experiment named, in the families its config declared (analysis/plan.py).

Writes `DIR/analysis/` atomically (a temp directory swapped in only when everything succeeded):
comparisons.csv/.json (every comparison of the experiment, its family and adjustment), primary.csv/.json (the rows
of Holm-adjusted families: Table 3), secondary.csv/.json (the rows reported with their unadjusted p),
per_model.csv/.json, lomo.csv/.json, pairs.parquet and meta.json (seeds, resample counts, input hash, the
families). Bad input raises InputError and writes nothing.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from aft_bench.analysis.cost import COST_COLUMNS, cost_table
from aft_bench.analysis.pairs import PAIR_KEYS, arm_rows, match_pairs
from aft_bench.analysis.plan import Plan, plan_of
from aft_bench.analysis.stats import (
    benjamini_hochberg,
    clopper_pearson_upper,
    cluster_bootstrap_ci,
    holm,
    sign_flip_test,
)
from aft_bench.analysis.table import read_results, results_sha256
from aft_bench.analysis.trials import COLUMNS as TRIAL_COLUMNS
from aft_bench.analysis.trials import trials_table
from aft_bench.common.errors import InputError
from aft_bench.common.files import read_json, write_folder
from aft_bench.common.secrets import redacted_dumps
from aft_bench.experiment.comparisons import DEFAULT_FAMILY, Comparison, Family

PRIMARY_COLUMNS = ["comparison", "pairs", "utility_diff", "ci_low", "ci_high", "p_raw", "p_adjusted", "criterion_met"]
COMPARISON_COLUMNS = ["family", "adjust", "comparison", "endpoint", "pairs", "clusters", "utility_diff", "ci_low",
                      "ci_high", "p_raw", "p_adjusted", "criterion_met", "not_computed"]
ALPHA = 0.05
COUNT_ENDPOINTS = {"duplicate_effects", "unsafe_commits", "incorrect_claim"}


@dataclass(frozen=True)
class Options:
    seed: int = 0
    resamples: int = 2000
    permutations: int = 10_000
    flip_unit: str = "cluster"
    level: float = 0.95


def _seed(opts: Options, *parts: Any) -> int:
    """A per-comparison seed derived from the base seed (stable across platforms)."""
    text = json.dumps([opts.seed, *parts])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def _needed_columns(comps: tuple[Comparison, ...]) -> list[str]:
    return sorted(set(PAIR_KEYS) | {"run_id", "condition"} | {c.endpoint for c in comps} | set(DISCOVERY_ENDPOINTS))


def current_lock(directory: Path) -> str | None:
    """The lock hash the config of these results is frozen under now (None if not frozen)."""
    mpath = directory / "manifest.json"
    if not mpath.exists():
        return None
    manifest = read_json(mpath, "aft-bench manifest")
    raw = manifest.get("config_path") if isinstance(manifest, dict) else None
    if not raw:  # served episodes have no config
        return None
    config = Path(str(raw))
    lock = config.with_name(f"{config.stem}.lock.json")
    if not lock.exists():
        return None
    data = read_json(lock, "lock file")
    return data.get("lock_hash") if isinstance(data, dict) else None


def load_results(directory: Path, comps: tuple[Comparison, ...], include_stale: bool = False) -> pd.DataFrame:
    path = directory / "results.parquet"
    df = read_results(directory)
    lock = current_lock(directory)
    if lock is not None and "lock_hash" in df.columns and not include_stale:
        stale = df["lock_hash"].fillna("") != lock
        if stale.any():
            print(f"aft-bench: excluding {int(stale.sum())} rows made before the current evidence freeze "
                  f"(--include-stale-lock to keep them)", file=sys.stderr)
            df = df[~stale]
    missing = [c for c in _needed_columns(comps) if c not in df.columns]
    if missing:
        users = [c.id for c in comps if c.endpoint in missing] or [c.id for c in comps]
        raise InputError(path, "columns", missing, f"missing columns needed by {', '.join(users)}")
    return df


def estimate(pairs: pd.DataFrame, comp: Comparison, opts: Options, tag: str = "") -> dict[str, Any]:
    """Pairs, mean utility difference, clustered CI and permutation p for one set of pairs."""
    n = len(pairs)
    if n == 0:
        return {"pairs": 0, "clusters": 0, "utility_diff": None, "ci_low": None, "ci_high": None, "p_raw": None}
    d = pairs["utility_diff"].to_numpy(float)
    clusters = pairs["task_id"].to_numpy()
    spread = pairs.groupby("task_id")["utility_diff"].agg(["size", "nunique"])
    lo, hi = cluster_bootstrap_ci(d, clusters, opts.resamples, _seed(opts, comp.id, tag, "boot"), opts.level)
    if comp.test == "noninferiority":
        test = sign_flip_test(d, clusters, unit=opts.flip_unit, n_permutations=opts.permutations,  # type: ignore[arg-type]
                              alternative="greater", seed=_seed(opts, comp.id, tag, "perm"), shift=comp.margin or 0.0)
    else:
        test = sign_flip_test(d, clusters, unit=opts.flip_unit, n_permutations=opts.permutations,  # type: ignore[arg-type]
                              alternative="two-sided", seed=_seed(opts, comp.id, tag, "perm"))
    return {"pairs": n, "clusters": len(spread), "utility_diff": float(d.mean()), "ci_low": lo, "ci_high": hi,
            "p_raw": test.pvalue, "exact": test.exact, "flip_unit": opts.flip_unit,
            # replicates inside every cluster agree: the pairs are copies, the clusters are the sample
            "pseudo_replicated": bool((spread["size"] > 1).any() and (spread["nunique"] == 1).all())}


def _criterion(row: dict[str, Any], comp: Comparison, p_key: str) -> bool | None:
    p = row.get(p_key)
    if p is None or (isinstance(p, float) and np.isnan(p)):
        return None
    if comp.test == "noninferiority":  # the test and the interval must both clear the margin
        low = row.get("ci_low")
        return bool(p < ALPHA and low is not None and low > -(comp.margin or 0.0))
    return bool(p < ALPHA and (row["utility_diff"] or 0) > 0)


def _joint(rows: list[dict[str, Any]], comps: tuple[Comparison, ...]) -> None:
    """A comparison declared `jointly_with` another is met only if that one is met too (its own test unchanged:
    `criterion_alone` keeps it); the partner's verdict is named in `joint_note`."""
    met = {r["comparison"]: r["criterion_met"] for r in rows}
    for r in rows:
        partner = _by_id(comps, r["comparison"]).jointly_with
        r["criterion_alone"] = r["criterion_met"]
        r["joint_note"] = None
        if partner is None:
            continue
        other = met.get(partner)
        if r["criterion_met"] and other is not True:
            r["criterion_met"] = False if other is False else None
        verdict = {True: "met", False: "not met", None: "not run"}[other]
        r["joint_note"] = f"jointly with {partner} ({verdict})"


def _events(df: pd.DataFrame, comp: Comparison) -> dict[str, Any]:
    """Event counts per arm for count endpoints, with Clopper-Pearson upper bounds on the rate of runs and
    of task clusters with an event (runs of one cluster are not independent; the cluster bound is the
    honest one when replicates repeat each other)."""
    if comp.endpoint not in COUNT_ENDPOINTS:
        return {}
    out: dict[str, Any] = {}
    for arm in ("treatment", "control"):
        runs = arm_rows(df, comp, arm)
        event = runs[comp.endpoint].astype(float) > 0
        hit = int(event.sum())
        out[f"{arm}_runs_with_event"] = hit
        out[f"{arm}_runs"] = len(runs)
        out[f"{arm}_rate_upper95"] = clopper_pearson_upper(hit, len(runs)) if len(runs) else None
        by_cluster = event.groupby(runs["task_id"]).any()
        out[f"{arm}_clusters_with_event"] = int(by_cluster.sum())
        out[f"{arm}_clusters"] = len(by_cluster)
        out[f"{arm}_cluster_rate_upper95"] = (clopper_pearson_upper(int(by_cluster.sum()), len(by_cluster))
                                              if len(by_cluster) else None)
    return out


def manipulation(df: pd.DataFrame, comp: Comparison, row: dict[str, Any], opts: Options) -> dict[str, Any]:
    """Did the comparison's manipulation happen, and can its test ever succeed? Per arm, the share of faulted
    runs whose planned fault fired (None without planned faults); the smallest p-value a sign flip of its task
    clusters can give; and a `caveat` naming what makes "no effect" unreadable (faults that never fired, too few
    clusters to reach significance), None when there is nothing to say."""
    out: dict[str, Any] = {}
    notes = []
    for arm in ("treatment", "control"):
        rows = arm_rows(df, comp, arm)
        planned = rows["fault_fired"].dropna() if "fault_fired" in rows.columns else rows.iloc[0:0]
        share = float(planned.astype(bool).mean()) if len(planned) else None
        out[f"{arm}_fault_fired_share"] = share
        if share is not None and share == 0.0:
            notes.append(f"its faults never fired in the {arm} arm ({len(planned)} faulted runs)")
    clusters = int(row.get("clusters") or 0)
    min_p = min(1.0, 2.0 ** (1 - clusters)) if clusters and opts.flip_unit == "cluster" else None
    out["min_p_possible"] = min_p
    if min_p is not None and min_p >= ALPHA:
        notes.append(f"{clusters} task cluster(s) cannot reach p < {ALPHA} (the smallest possible p is {min_p:.3g})")
    out["caveat"] = "; ".join(notes) or None
    return out


def _none(x: Any) -> Any:
    return None if isinstance(x, float) and np.isnan(x) else x


def plan_for(directory: Path) -> Plan:
    """The plan the results in `directory` record (their manifest's comparisons and families)."""
    path = directory / "manifest.json"
    manifest = read_json(path, "aft-bench manifest") if path.exists() else {}
    if not isinstance(manifest, dict):
        raise InputError(path, "<root>", type(manifest).__name__, "not an aft-bench manifest")
    if manifest.get("comparisons"):
        return plan_of(manifest)
    return plan_of(manifest, read_results(directory))


def _not_computed(df: pd.DataFrame, comp: Comparison) -> str | None:
    """Why a comparison has no pairs, in one phrase (None when it has arms to pair)."""
    for arm, cond in (("treatment", comp.treatment), ("control", comp.control)):
        if not len(arm_rows(df, comp, arm)):
            who = f" with agent {comp.treatment_agent if arm == 'treatment' else comp.control_agent}" \
                if comp.agent_contrast else ""
            return f"no runs of its {arm} arm ({cond}{who} on workload {comp.workload})"
    return None


def analyze(directory: Path, opts: Options = Options(), plan: Plan | tuple[Comparison, ...] | None = None,
            include_stale: bool = False) -> dict:
    """Compute every table for the experiment's plan (its recorded comparisons and families unless given; a
    tuple of comparisons is one Holm family); returns them as plain data (also written to DIR/analysis/)."""
    if plan is None:
        plan = plan_for(directory)
    elif not isinstance(plan, Plan):
        plan = Plan(plan, (Family(name=DEFAULT_FAMILY, comparisons=tuple(c.id for c in plan)),) if plan else ())
    comps = plan.comparisons
    df = load_results(directory, comps, include_stale)
    all_pairs = []
    by_id: dict[str, dict[str, Any]] = {}
    per_model, lomo = [], []
    for comp in comps:
        why = _not_computed(df, comp)
        # a comparison whose arm was never run has no pairs (reported as not run); a partial arm is an error
        pairs = match_pairs(df, comp) if why is None else _empty_pairs()
        all_pairs.append(pairs)
        row = {"comparison": comp.id, **estimate(pairs, comp, opts), "test": comp.test, "margin": comp.margin,
               "endpoint": comp.endpoint, "direction": comp.direction, **_events(df, comp)}
        row.update(manipulation(df, comp, row, opts))
        row["not_computed"] = why if why is not None or row["pairs"] else "no matched pairs"
        by_id[comp.id] = row
        models = sorted(pairs["model"].unique()) if len(pairs) else []
        for model in models:
            sub = pairs[pairs["model"] == model]
            per_model.append({"model": model, "comparison": comp.id, **estimate(sub, comp, opts, f"model={model}"),
                              "treatment_mean": float(sub["treatment"].mean()),
                              "control_mean": float(sub["control"].mean())})
        if len(models) >= 2:
            for left in models:
                sub = pairs[pairs["model"] != left]
                lomo.append({"left_out": left, "comparison": comp.id, **estimate(sub, comp, opts, f"lomo={left}")})
    # Each Holm family is the configured set: a comparison without runs keeps its place (as p = 1), so a missing
    # one can never make the others look stronger; the analysis says the family is incomplete.
    primary, secondary, families = [], [], []
    for fam in plan.families:
        rows = [dict(by_id[cid], family=fam.name, adjust=fam.adjust) for cid in fam.comparisons]
        missing = [r["comparison"] for r in rows if r["p_raw"] is None]
        if fam.adjust == "holm":
            adj = holm(np.array([1.0 if r["p_raw"] is None else r["p_raw"] for r in rows]))
            for r, p in zip(rows, adj):
                r["p_adjusted"] = None if r["p_raw"] is None else float(p)
                r["criterion_met"] = _criterion(r, _by_id(comps, r["comparison"]), "p_adjusted")
            primary += rows
        else:
            for r in rows:
                r["p_adjusted"] = None  # outside any Holm family: reported unadjusted
                r["criterion_met"] = _criterion(r, _by_id(comps, r["comparison"]), "p_raw")
            secondary += rows
        families.append({"name": fam.name, "adjust": fam.adjust, "comparisons": list(fam.comparisons),
                         "size": len(rows), "missing": missing, "complete": not missing})
    _joint(primary + secondary, comps)
    ordered = {r["comparison"]: r for r in primary + secondary}
    table = [ordered[cid] for fam in plan.families for cid in fam.comparisons]
    bh = benjamini_hochberg(np.array([np.nan if r["p_raw"] is None else r["p_raw"] for r in per_model]))
    pooled = {r["comparison"]: r["utility_diff"] for r in primary + secondary}
    for r, p in zip(per_model, bh):
        r["p_bh"] = _none(float(p))
        base = pooled.get(r["comparison"])
        r["interaction"] = None if base is None or r["utility_diff"] is None else r["utility_diff"] - base
    pairs_df = pd.concat(all_pairs, ignore_index=True) if all_pairs else _empty_pairs()
    meta = {**asdict(opts), "alpha": ALPHA, "input": str(directory / "results.parquet"),
            "input_sha256": results_sha256(directory),
            "comparisons": [c.model_dump(mode="json") for c in comps],
            "families": families, "plan_note": plan.note,
            "pseudo_replicated": [r["comparison"] for r in primary + secondary if r.get("pseudo_replicated")]}
    tables = {"comparisons": table, "primary": primary, "secondary": secondary, "per_model": per_model, "lomo": lomo,
              "discovery": discovery_by_size(df, comps), "trials": trials_table(df, comps),
              "cost": cost_table(df, comps, opts.resamples, _seed(opts, "cost")), "meta": meta}
    _write(directory, tables, pairs_df)
    return tables


DISCOVERY_ENDPOINTS = ("context_tokens", "recall", "y_correct", "unintended_effects")


def discovery_by_size(df: pd.DataFrame, comps: tuple[Comparison, ...]) -> list[dict[str, Any]]:
    """Per catalog size and arm of the discovery comparisons: mean context tokens, recall, correctness and
    wrong-tool effects side by side, so a token saving is never read without what it cost."""
    comp = next((c for c in comps if c.endpoint == "context_tokens"), None)
    if comp is None:
        return []
    sub = df[(df["workload"] == comp.workload) & df["condition"].isin([comp.treatment, comp.control])]
    cols = [c for c in DISCOVERY_ENDPOINTS if c in sub.columns]
    out = []
    for (size, cond), g in sub.groupby(["catalog_size", "condition"], sort=True):
        out.append({"catalog_size": int(size), "condition": cond, "runs": len(g),
                    **{c: float(g[c].astype(float).mean()) for c in cols}})
    return out


def _by_id(comps: tuple[Comparison, ...], cid: str) -> Comparison:
    return next(c for c in comps if c.id == cid)


def _empty_pairs() -> pd.DataFrame:
    return pd.DataFrame(columns=[*PAIR_KEYS, "comparison", "run_id_treatment", "run_id_control", "treatment",
                                 "control", "utility_diff"])


CSV_COLUMNS = {
    "comparisons": COMPARISON_COLUMNS,
    "primary": PRIMARY_COLUMNS,
    "secondary": PRIMARY_COLUMNS,
    "per_model": ["model", "comparison", "pairs", "utility_diff", "ci_low", "ci_high", "p_raw", "p_bh",
                  "treatment_mean", "control_mean", "interaction"],
    "lomo": ["left_out", "comparison", "pairs", "utility_diff", "ci_low", "ci_high", "p_raw"],
    "discovery": ["catalog_size", "condition", "runs", *DISCOVERY_ENDPOINTS],
    "trials": TRIAL_COLUMNS,
    "cost": COST_COLUMNS,
}


def _write(directory: Path, tables: dict[str, Any], pairs: pd.DataFrame) -> None:
    """Write every output into a temp directory, then swap it in: never a partial analysis."""
    final = directory / "analysis"

    def fill(tmp: Path) -> None:
        for name, cols in CSV_COLUMNS.items():
            pd.DataFrame(tables[name], columns=cols).to_csv(tmp / f"{name}.csv", index=False, float_format="%.10g")
            (tmp / f"{name}.json").write_text(redacted_dumps(tables[name]))
        (tmp / "meta.json").write_text(redacted_dumps(tables["meta"]))
        pairs.to_parquet(tmp / "pairs.parquet", index=False)

    write_folder(final, fill)


def family_title(fam: dict[str, Any]) -> str:
    """How a family is named above its table: its name and its adjustment."""
    n = fam["size"]
    how = (f"Holm across its {n} comparisons" if n > 1 else "one comparison: its Holm p is its raw p") \
        if fam["adjust"] == "holm" else "unadjusted p (outside any Holm family)"
    return f"{fam['name']}: {how}"


def format_table3(rows: list[dict[str, Any]], meta: dict[str, Any] | None = None) -> str:
    """The experiment's comparisons for the terminal, family by family (as `meta` names them), with the inference
    unit, each comparison that could not be computed and why, and any incompleteness of a Holm family."""
    fams = (meta or {}).get("families") or [{"name": "", "adjust": "holm", "size": len(rows), "missing": [],
                                              "complete": True, "comparisons": [r["comparison"] for r in rows]}]
    by = {r["comparison"]: r for r in rows}
    width = max([24, *(len(c) + 2 for c in by)])
    lines: list[str] = []
    for fam in fams:
        shown = [by[c] for c in fam["comparisons"] if c in by]
        if not shown:
            continue
        holm_p = fam["adjust"] == "holm"  # an unadjusted family's p is its raw p: one column
        head = (f"{'comparison':<{width}}{'pairs':>6}{'clusters':>9}  {'utility diff':>13}  "
                f"{'95% task-clustered CI':>26}  {'p raw':>8}  " + (f"{'p Holm':>8}  " if holm_p else "") + "met")
        if fam["name"]:
            lines += ["" if lines else None, family_title(fam)]  # type: ignore[list-item]
        lines += [head, "-" * len(head)]
        for r in shown:
            if not r["pairs"]:
                lines.append(f"{r['comparison']:<{width}}{0:>6}{0:>9}  {'not computed':>13}")
                continue
            ci = f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}]"
            lines.append(f"{r['comparison']:<{width}}{r['pairs']:>6}{r['clusters']:>9}  {r['utility_diff']:>13.4f}  "
                         f"{ci:>26}  {r['p_raw']:>8.4f}  " + (f"{r['p_adjusted']:>8.4f}  " if holm_p else "")
                         + ("yes" if r["criterion_met"] else "no"))
    lines = [x for x in lines if x is not None]
    if meta is not None:
        unit = meta["flip_unit"]
        lines.append("p values: sign flips of whole task clusters" if unit == "cluster" else
                     "p values: sign flips of single pairs (the paper's method; treats replicates as independent)")
        for r in rows:
            if not r["pairs"]:
                lines.append(f"not computed: {r['comparison']}: {r.get('not_computed') or 'no matched pairs'}")
        for fam in fams:
            if fam["adjust"] == "holm" and not fam["complete"]:
                lines.append(f"Holm family {fam['name']} incomplete: no pairs for " + ", ".join(fam["missing"])
                             + " (counted as p = 1)")
        if meta.get("plan_note"):
            lines.append(f"comparisons: {meta['plan_note']}")
        if meta["pseudo_replicated"]:
            lines.append("replicates identical within every cluster (the clusters are the sample): "
                         + ", ".join(meta["pseudo_replicated"]))
    return "\n".join(lines)
