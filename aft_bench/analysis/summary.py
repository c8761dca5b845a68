"""`aft-bench summarize`: a per workload x condition table of a results directory."""

from __future__ import annotations

from pathlib import Path

from aft_bench.analysis.table import read_results

COLS = ["runs", "fault_fired", "completed", "recovered", "duplicates", "unsafe", "bad_claims", "tokens", "recall"]


def summarize(directory: Path) -> str:
    import pandas as pd

    df = read_results(directory)
    g = df.groupby(["workload", "condition"], sort=True)
    table = pd.DataFrame({
        "runs": g.size(),
        "fault_fired": g["fault_fired"].apply(lambda s: s.dropna().astype(float).mean() if s.notna().any() else float("nan")),
        "completed": g["outcome"].apply(lambda s: (s == "completed").mean()),
        "recovered": g["recovered"].apply(lambda s: s.dropna().astype(float).mean() if s.notna().any() else float("nan")),
        "duplicates": g["duplicate_effects"].sum(),
        "unsafe": g["unsafe_commits"].sum(),
        "bad_claims": g["incorrect_claim"].sum(),
        "tokens": g["context_tokens"].mean().round(1),
        "recall": g["recall"].mean(),
    })[COLS]
    with pd.option_context("display.max_rows", None, "display.width", 160, "display.float_format", "{:.3f}".format):
        return table.to_string() + "".join(f"\n{line}" for line in endpoint_limits(directory))


def endpoint_limits(directory: Path) -> list[str]:
    """The adaptive (AIMD) in-flight limit of each provider endpoint over each session, from sessions.jsonl."""
    from aft_bench.experiment.journal import read_records

    out = []
    for rec in read_records(directory / "sessions.jsonl"):
        for endpoint, history in sorted((rec.get("endpoint_limits") or {}).items()):
            limits = [int(h[1]) for h in history]
            steps = " -> ".join(str(v) for v in limits[:12]) + (" -> ..." if len(limits) > 12 else "")
            out.append(f"session {rec.get('session')}: adaptive limit of {endpoint}: {steps} (final {limits[-1]}, "
                       f"lowest {min(limits)}, {len(limits) - 1} changes)")
    return out
