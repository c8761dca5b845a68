"""`aft-bench report DIR`: Table 3, per-model and leave-one-model-out tables and Figures 2-4, as Markdown
and HTML with PNG figures, built from `DIR/analysis/` (run `aft-bench analyze` first).

The paper's reported values appear only in a column labelled "paper (reference)", read from
`analysis/paper_values.toml`; every other number comes from the analysis of runs.
"""

from __future__ import annotations

import html
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pandas as pd

from aft_bench.analysis.table import read_analysis, read_table
from aft_bench.analysis.toolpro import rtt_sweep
from aft_bench.common.files import write_folder
from aft_bench.common.paths import REFERENCE
from aft_bench.common.secrets import redact

PAPER_VALUES = REFERENCE / "paper_values.toml"


VIEW_URL = "http://127.0.0.1:8600/"  # `aft-bench view DIR` on its default port


@dataclass
class Section:
    title: str
    text: str = ""
    table: pd.DataFrame | None = None
    image: str | None = None
    notes: list[str] = field(default_factory=list)


def _fmt(x: Any, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and pd.isna(x)):
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _load(directory: Path, stale_ok: bool) -> dict[str, Any]:
    """The analysis tables, refused when they were made from other results (unless `stale_ok`)."""
    meta, stale, results = read_analysis(directory, stale_ok)
    data: dict[str, Any] = {name: read_table(directory, name)
                            for name in ("primary", "secondary", "per_model", "lomo", "discovery", "trials")}
    # added later: an analysis made before families has no comparisons table (its primary and secondary rows are)
    data["comparisons"] = (read_table(directory, "comparisons") if (directory / "analysis" / "comparisons.json").exists()
                           else data["primary"] + data["secondary"])
    # added later: an analysis made before it has no cost table (re-analyze to get one)
    data["cost"] = read_table(directory, "cost") if (directory / "analysis" / "cost.json").exists() else []
    return {**data, "meta": meta, "stale": stale, "results": results}


def _cost(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The cost table as shown: a model without a known price is "unknown", never 0."""
    out = []
    for r in rows:
        unknown = "unknown" if not r["cost_known"] else None
        ci = "–" if r["ci_low"] is None else f"[{r['ci_low']:.4g}, {r['ci_high']:.4g}]"
        per_done = unknown or ("no task completed" if r["cost_per_completed"] is None
                               else f"{r['cost_per_completed']:.4g}")
        out.append({"scope": r["scope"], "workload / comparison": r["group"], "arm": r["arm"] or "–",
                    "condition": r["condition"], "model": r["model"], "runs": r["runs"], "completed": r["completed"],
                    "USD per run": unknown or f"{r['cost_per_run']:.4g}",
                    "prompt tok / run": _fmt(r["prompt_tokens_per_run"]),
                    "completion tok / run": _fmt(r["completion_tokens_per_run"]),
                    "model calls / run": _fmt(r["model_calls_per_run"]), "wall s / run": _fmt(r["wall_s_per_run"]),
                    "USD per completed task": per_done, "95% task-clustered CI": unknown or ci})
    return pd.DataFrame(out)


def _reference() -> dict[str, Any]:
    if not PAPER_VALUES.exists():
        return {}
    return tomllib.loads(PAPER_VALUES.read_text()).get("reference", {})


def _table3(rows: list[dict[str, Any]], ref: dict[str, Any], p_col: str = "p_adjusted") -> pd.DataFrame:
    """A family's comparisons that were computed; the paper's value beside them only where the paper reports one
    for some comparison of the table (its column means nothing for another experiment's comparisons)."""
    out = []
    with_ref = any(r["comparison"] in ref for r in rows)
    for r in rows:
        if not r["pairs"]:
            continue  # named below the table, with why
        pr = ref.get(r["comparison"], {})
        ci = "–" if r["ci_low"] is None else f"[{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]"
        ref_text = "–" if not pr else f"{pr['utility_diff']} [{pr['ci'][0]}, {pr['ci'][1]}] (n={pr['pairs']})"
        row = {"comparison": r["comparison"], "pairs": r["pairs"], "clusters": r.get("clusters"),
               "utility diff": _fmt(r["utility_diff"]),
               "95% task-clustered CI": ci, "p raw": _fmt(r["p_raw"]),
               "p (Holm)" if p_col == "p_adjusted" else "p (unadjusted)": _fmt(r[p_col]),
               "criterion met": _fmt(r["criterion_met"]) + (f" ({r['joint_note']})" if r.get("joint_note") else ""),
               "faults fired (T / C)": _fired(r)}
        if with_ref:
            row["paper (reference)"] = ref_text
        out.append(row)
    return pd.DataFrame(out)


def _not_computed(rows: list[dict[str, Any]]) -> list[str]:
    """Each comparison of a family without pairs, and why, one sentence each."""
    return [f"Not computed: {r['comparison']}, {r.get('not_computed') or 'no matched pairs'}." for r in rows
            if not r["pairs"]]


def _families(meta: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The analysis's families (an analysis made before families: its primary set under Holm, its secondary
    unadjusted)."""
    if meta.get("families"):
        return list(meta["families"])
    out = []
    for name, adjust in (("primary", "holm"), ("secondary", "none")):
        ids = [r["comparison"] for r in rows if (r.get("p_adjusted") is not None or adjust == "holm") == (
            name == "primary")]
        if ids:
            out.append({"name": name, "adjust": adjust, "comparisons": ids, "size": len(ids),
                        "missing": [r["comparison"] for r in rows if r["comparison"] in ids and r["p_raw"] is None],
                        "complete": True})
    return out


def _fired(r: dict[str, Any]) -> str:
    """Share of each arm's faulted runs whose fault fired ('–' for an arm without planned faults)."""
    t, c = r.get("treatment_fault_fired_share"), r.get("control_fault_fired_share")
    return " / ".join("–" if v is None else f"{v:.0%}" for v in (t, c))


def _caveats(rows: list[dict[str, Any]]) -> list[str]:
    """What makes a comparison's absence of an effect unreadable, one sentence each."""
    return [f"{r['comparison']}: not evidence of no effect, because {r['caveat']}." for r in rows if r.get("caveat")]


def _pyplot() -> Any:
    """matplotlib's pyplot on the non-interactive Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, path: Path, title: str) -> None:
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _figure2(primary: list[dict[str, Any]], path: Path) -> bool:
    plt = _pyplot()

    rows = [r for r in primary if r["pairs"]]
    if not rows:
        return False
    tokens = [r for r in rows if r["comparison"] == "discovery_context"]
    rest = [r for r in rows if r["comparison"] != "discovery_context"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [1, 3]})
    for ax, group, label in ((axes[0], tokens, "fewer exposed tool-context tokens"),
                             (axes[1], rest, "paired utility difference")):
        names = [r["comparison"] for r in group]
        mean = [r["utility_diff"] for r in group]
        err = [[m - r["ci_low"] for m, r in zip(mean, group)], [r["ci_high"] - m for m, r in zip(mean, group)]]
        ax.errorbar(mean, range(len(group)), xerr=err, fmt="o", capsize=4)
        ax.set_yticks(range(len(group)), names)
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_xlabel(label)
        ax.invert_yaxis()
    _save(plt, fig, path, "Pooled primary mechanism effects (95% task-clustered CI; positive favours the treatment)")
    return True


def _figure3(results: pd.DataFrame, path: Path) -> pd.DataFrame | None:
    """Duplicate effects (response loss) and unsafe commits (stale state, permission drift) per condition and
    backend: the persistent-backend replication beside the in-memory one."""
    if "sqlite" not in set(results.get("backend", pd.Series(dtype=str))):
        return None
    plt = _pyplot()

    dup = results[results["workload"] == "response_loss"].groupby(["condition", "backend"])["duplicate_effects"].sum()
    unsafe = results[results["workload"] == "stale_drift"].groupby(["condition", "backend"])["unsafe_commits"].sum()
    effects = results.drop_duplicates("condition").set_index("condition")["mechanisms"].map(
        lambda m: json.loads(m)["effects"])
    table = pd.DataFrame({"duplicate_effects": dup, "unsafe_commits": unsafe}).astype("Int64").reset_index()
    table.insert(1, "effects", table["condition"].map(effects))
    backends = sorted(table["backend"].unique())
    conds = list(dict.fromkeys(table["condition"]))
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=False)
    width = 0.8 / len(backends)
    for ax, col, title in ((axes[0], "duplicate_effects", "duplicate effects (response loss)"),
                           (axes[1], "unsafe_commits", "unsafe commits (stale state, drift)")):
        for j, b in enumerate(backends):
            vals = table[table["backend"] == b].set_index("condition")[col]
            heights = [0 if pd.isna(vals.get(c)) else vals.get(c) for c in conds]
            ax.bar([i + j * width for i in range(len(conds))], heights, width, label=b)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(conds))], conds, rotation=20, ha="right")
        ax.set_title(title)
        ax.legend()
    _save(plt, fig, path, "Persistent-backend safety replication: SQLite beside in-memory")
    return table


def _figure_trials(rows: list[dict[str, Any]], path: Path) -> bool:
    """pass^k against k, one line per comparison arm (from repeated trials)."""
    if not rows:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    df = pd.DataFrame(rows)
    for (comp, arm, cond), g in df.groupby(["comparison", "arm", "condition"], sort=True):
        ax.plot(g["k"], g["pass_hat_k"], marker="o", ls="-" if arm == "treatment" else "--",
                label=f"{comp}: {cond} ({arm})")
    ax.set_xlabel("k (trials that must all succeed)")
    ax.set_ylabel("pass^k")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7)
    _save(plt, fig, path, "Reliability over repeated trials (unbiased pass^k)")
    return True


def _figure_sweep(sweep: pd.DataFrame, path: Path) -> bool:
    """Virtual latency against RTT for stepwise, program and policy, ToolPro's Table 3 dashed (reference)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for col, ref, label in (("step_s", "ToolPro step (reference)", "stepwise"),
                            ("program_s", "ToolPro program (reference)", "program"),
                            ("policy_s", "ToolPro policy (reference)", "policy")):
        line = ax.plot(sweep["rtt_ms"], sweep[col], marker="o", label=f"{label} (this harness)")[0]
        if sweep[ref].notna().any():
            ax.plot(sweep["rtt_ms"], sweep[ref], linestyle="--", color=line.get_color(), alpha=0.6,
                    label=f"{label} (ToolPro, reference)")
    ax.set_xscale("log")
    ax.set_xlabel("round-trip time (ms)")
    ax.set_ylabel("seconds per episode")
    ax.legend(fontsize=7)
    _save(plt, fig, path, "Stepwise vs program vs policy against RTT")
    return True


def _figure4(per_model: list[dict[str, Any]], path: Path) -> bool:
    models = sorted({r["model"] for r in per_model})
    if len(models) < 2:
        return False
    plt = _pyplot()

    comps = list(dict.fromkeys(r["comparison"] for r in per_model if r["comparison"] != "discovery_context"))
    fig, ax = plt.subplots(figsize=(9, 3.8))
    width = 0.8 / len(models)
    for j, m in enumerate(models):
        vals = {r["comparison"]: r["utility_diff"] for r in per_model if r["model"] == m}
        ax.bar([i + j * width for i in range(len(comps))], [vals.get(c) or 0 for c in comps], width, label=m)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(comps))], comps, rotation=20, ha="right")
    ax.set_ylabel("utility difference")
    ax.legend()
    _save(plt, fig, path, "Model-specific effects")
    return True


def build(directory: Path, out_dir: Path, stale_ok: bool = False) -> list[Section]:
    """Every section of the report; figures are written into `out_dir`."""
    data = _load(directory, stale_ok)
    ref = _reference()
    meta = data["meta"]
    unit = ("whole task clusters flipped together (the clusters are the sample)" if meta["flip_unit"] == "cluster"
            else "single pairs flipped independently (the paper's method; it treats replicates of a task as "
                 "independent and overstates the evidence when they repeat each other)")
    notes = []
    if meta.get("plan_note"):
        notes.append(f"Comparisons: {meta['plan_note']}.")
    if meta["pseudo_replicated"]:
        notes.append(f"Pseudo-replication: within every task cluster the replicates give the same difference for "
                     f"{', '.join(meta['pseudo_replicated'])}; the number of clusters, not of pairs, is the "
                     f"sample size there.")
    sections = []
    if data["stale"]:
        sections.append(Section("STALE ANALYSIS", "Made with --stale-ok: the analysis below was computed from "
                                "other results than results.parquet holds now. Run `aft-bench analyze` again."))
    by_id = {r["comparison"]: r for r in data["comparisons"]}
    method = (f"Paired utility differences (positive favours the treatment), task-clustered "
              f"{meta['resamples']}-resample percentile bootstrap intervals, paired sign-flip permutation tests "
              f"({meta['permutations']} flips, seed {meta['seed']}; {unit}); a non-inferiority comparison is "
              f"one-sided at its margin (p and the interval's lower bound).")
    for i, fam in enumerate(_families(meta, data["comparisons"])):
        rows = [by_id[c] for c in fam["comparisons"] if c in by_id]
        table = _table3(rows, ref, "p_adjusted" if fam["adjust"] == "holm" else "p_raw")
        text = [method if i == 0 else ""]
        text.append(f"Holm across the {fam['size']} comparisons of this family." if fam["adjust"] == "holm"
                    else "Outside any Holm family; unadjusted p.")
        if "paper (reference)" in table.columns:
            text.append("The last column is the paper's reported value for reference only (a different evidence "
                        "layer).")
        if fam["adjust"] == "holm" and fam["missing"]:
            text.append(f"The family is incomplete: {', '.join(fam['missing'])} counted as p = 1.")
        text += (notes if i == 0 else []) + _caveats(rows) + _not_computed(rows)
        paper = bool(rows) and all(r["comparison"] in ref for r in rows) and fam["adjust"] == "holm"
        sections.append(Section(f"Comparisons: {fam['name']}" + (" (the paper's Table 3)" if paper else ""),
                                " ".join(t for t in text if t),
                                table if len(table) else None))
    disc = pd.DataFrame(data["discovery"])
    sections.append(Section("Discovery by catalog size",
                            "Means per catalog size and arm: context tokens beside recall, policy correctness "
                            "(y_correct) and wrong-tool effects (unintended_effects)." if len(disc) else
                            "Not available: these results hold no discovery runs.",
                            disc.map(_fmt) if len(disc) else None))
    fig2 = out_dir / "fig2_primary_effects.png"
    if _figure2(data["primary"], fig2):
        sections.append(Section("Figure 2: pooled primary effects", image=fig2.name))
    results = data["results"]
    fig3 = out_dir / "fig3_backend_safety.png"
    t3 = _figure3(results, fig3)
    shown = None if t3 is None else t3.astype(object).where(t3.notna(), "–")
    sections.append(Section("Figure 3: persistent-backend safety replication",
                            "Sums over runs; – where the condition was not run on that workload." if t3 is not None
                            else "Not available: these results contain no SQLite-backend runs.",
                            shown, fig3.name if t3 is not None else None))
    sweep = rtt_sweep(results)
    fig6 = out_dir / "fig6_rtt_sweep.png"
    sections.append(Section(
        "ToolPro RTT sweep (virtual clock)",
        "Mean seconds per episode on the virtual clock (decisions x DEC + round trips x RTT + programs x BUILD; "
        "decisions, round trips and programs measured from the runs; DEC and BUILD are the policy's declared "
        "profile) for always-stepwise (with the whole tool context; skeleton-guided, ToolPro-step, where run: it "
        "makes the same calls and decisions, so on this clock it costs the same and differs only in traffic), "
        "always-program and the consolidation policy told that RTT; the mode it chose and its gap to the better "
        "fixed mode. ToolPro's Table 3 is shown for reference only: measured end to end against real services, "
        "including service time this clock leaves out." if sweep is not None
        else "Not available: these results hold no runs of the `program` agent's policy mode.",
        sweep.map(_fmt) if sweep is not None else None,
        fig6.name if sweep is not None and _figure_sweep(sweep, fig6) else None))
    pm = pd.DataFrame(data["per_model"])
    if len(pm):
        pm = pm[["model", "comparison", "pairs", "utility_diff", "ci_low", "ci_high", "p_raw", "p_bh", "interaction"]]
        pm = pm.map(_fmt) if hasattr(pm, "map") else pm
    sections.append(Section("Model-specific effects", "Benjamini-Hochberg across model-specific contrasts; "
                            "`interaction` is the model's effect minus the pooled effect (descriptive).",
                            pm if len(pm) else None))
    lomo = pd.DataFrame(data["lomo"])
    sections.append(Section("Leave-one-model-out", "" if len(lomo) else
                            "Not available: leave-one-model-out needs at least two models.",
                            lomo.map(_fmt) if len(lomo) else None))
    trials = pd.DataFrame(data["trials"])
    fig5 = out_dir / "fig5_pass_hat_k.png"
    sections.append(Section("Reliability over trials (pass^k)",
                            "Per comparison arm and k: unbiased pass^k (all k trials correct) and pass@k (at least "
                            "one), and the share of tuples whose trials disagree (verdict flips)." if len(trials) else
                            "Not available: these results hold one trial per tuple (set `repetitions`).",
                            trials.map(_fmt) if len(trials) else None,
                            fig5.name if _figure_trials(data["trials"], fig5) else None))
    sections.append(Section("Cost", "Per workload and condition and per comparison arm, pooled and per model: means "
                            "per run, and the cost per completed task (all runs' cost over the runs labelled "
                            "completed) with a task-clustered bootstrap interval; a model without a known price is "
                            "unknown, never 0." if data["cost"] else
                            "Not available: no run of these results called a model.",
                            _cost(data["cost"]) if data["cost"] else None))
    fig4 = out_dir / "fig4_model_heterogeneity.png"
    if _figure4(data["per_model"], fig4):
        sections.append(Section("Figure 4: model heterogeneity", image=fig4.name))
    else:
        sections.append(Section("Figure 4: model heterogeneity", "Not available: these results hold one model."))
    return sections


def _pair_links(table: pd.DataFrame) -> list[str]:
    """Each comparison of a table linked to its matched pairs in `aft-bench view` (served on its default port; a
    bundle rewrites VIEW_URL to its own pages)."""
    if "comparison" not in table.columns:
        return []
    names = list(dict.fromkeys(str(c) for c in table["comparison"]))
    links = [f'<a class="aft-pairs" data-comparison="{html.escape(n)}" '
             f'href="{VIEW_URL}#/pairs?comparison={quote(n)}">{html.escape(n)}</a>' for n in names]
    return [f"<p>Matched pairs (<code>aft-bench view</code>): {', '.join(links)}</p>"]


def _md_table(df: pd.DataFrame) -> str:
    return df.to_markdown(index=False, disable_numparse=True)


def render(directory: Path, stale_ok: bool = False) -> tuple[Path, Path]:
    """Write DIR/report/ (report.md, report.html, figures) atomically: built in a temp folder and swapped in
    only when every part succeeded, so a failure leaves the previous report, or none, untouched."""
    final = directory / "report"
    write_folder(final, lambda tmp: _render_into(directory, tmp, stale_ok))
    return final / "report.md", final / "report.html"


def _render_into(directory: Path, out_dir: Path, stale_ok: bool) -> None:
    sections = build(directory, out_dir, stale_ok)
    md = [f"# aft-bench report: {directory.name}", ""]
    body = [f"<h1>aft-bench report: {html.escape(directory.name)}</h1>"]
    for s in sections:
        md += [f"## {s.title}", ""]
        body.append(f"<h2>{html.escape(s.title)}</h2>")
        if s.text:
            md += [s.text, ""]
            body.append(f"<p>{html.escape(s.text)}</p>")
        if s.table is not None:
            md += [_md_table(s.table), ""]
            body.append(s.table.to_html(index=False, border=0, classes="t"))
            body += _pair_links(s.table)
        if s.image:
            md += [f"![{s.title}]({s.image})", ""]
            body.append(f'<img src="{html.escape(s.image)}" alt="{html.escape(s.title)}">')
    md_path, html_path = out_dir / "report.md", out_dir / "report.html"
    md_path.write_text(redact("\n".join(md)))
    style = "body{font-family:sans-serif;max-width:72rem;margin:2rem auto}table.t{border-collapse:collapse}" \
            "table.t td,table.t th{padding:.2rem .6rem;border-bottom:1px solid #ddd;text-align:right}img{max-width:100%}"
    html_path.write_text(redact(f"<!doctype html><html><head><meta charset='utf-8'><title>aft-bench report</title>"
                         f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n"))
