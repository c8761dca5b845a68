"""ToolPro's profile-driven policy against RTT, cold and warm start, on the virtual clock: runs
configs/toolpro_profile.toml (stepwise, program, cold-start policy), measures the profile from it
(`aft-bench profile`; the warm config reads the committed copy, checked equal), runs
configs/toolpro_profile_warm.toml (warm-start policy) and prints two tables: ToolPro's Table 3 setting (Memos.w,
N = 8) with each policy's gap to the better fixed mode, and the 16 toolpro_memos workflows (N = 5-20) with how often
each policy chose program mode; ToolPro's reported choice counts beside them as a reference (its runs: LLM-written
programs on cbench, not these tasks). With --jitter: configs/toolpro_profile_jitter{,_warm}.toml, the Table 3 setting
over 15 seeds on a clock whose charges are lognormal draws (coefficient of variation 0.5), and how many of the 15
seeds each policy ran as a program."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
CLI = [str(Path(sys.executable).parent / "aft-bench")]
ARMS = ("step", "program", "profile (cold)", "profile (warm)")


def run(*args: str) -> None:
    subprocess.run([*CLI, *args], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def rows(name: str) -> pd.DataFrame:
    cold, warm = ROOT / "results" / name, ROOT / "results" / f"{name}_warm"
    run("run", f"configs/{name}.toml", "--out", str(cold))
    run("profile", str(cold), "--out", str(cold / "profile.json"))
    committed = ROOT / "configs" / f"{name}.profile.json"  # what the warm config reads
    same = json.loads(committed.read_text())["profiles"] == json.loads((cold / "profile.json").read_text())["profiles"]
    print(f"{committed.relative_to(ROOT)}: {'equals' if same else 'DIFFERS FROM'} the profile measured now\n")
    run("run", f"configs/{name}_warm.toml", "--out", str(warm))
    df = pd.concat([pd.read_parquet(cold / "results.parquet"), pd.read_parquet(warm / "results.parquet")])
    df["rtt_ms"] = df["network"].map(lambda n: json.loads(n)["rtt_ms"])
    df["arm"] = df["agent_spec"].map(lambda s: json.loads(s)["mode"]) + df["policy_start"].fillna("").map(
        lambda p: f" ({p})" if p else "")
    return df


def table3(df: pd.DataFrame) -> None:
    """Memos.w with N = 8: each arm's mean virtual latency over the seeds, the policies' program-mode share and
    their gaps to the better fixed mode."""
    n8 = df[df["workload"] == "toolpro_sweep"]
    seeds = n8["fault_seed"].nunique()
    print(f"Table 3 setting (memos-w-08, N = 8), {seeds} seed(s):\n")
    print("| RTT ms | stepwise s | program s | cold s (program chosen, gap) | warm s (program chosen, gap) |")
    print("|---:|---:|---:|---:|---:|")
    for rtt, g in n8.groupby("rtt_ms"):
        mean = g.groupby("arm")["virtual_latency_s"].mean()
        chosen = g.groupby("arm")["mode"].apply(lambda m: int((m == "program").sum()))
        best = min(mean["step"], mean["program"])
        cells = [f"{mean[a]:.2f} ({chosen[a]}/{seeds}, {100 * (mean[a] - best) / best:+.1f} %)" for a in ARMS[2:]]
        print(f"| {rtt:g} | {mean['step']:.2f} | {mean['program']:.2f} | {cells[0]} | {cells[1]} |")


def workflows(df: pd.DataFrame) -> None:
    """The 16 workflows: mean virtual latency per arm and how many runs each policy ran as a program."""
    print("\nThe 16 toolpro_memos workflows (N = 5-20):\n")
    print("| RTT ms | stepwise s | program s | policy, cold s (program chosen) | policy, warm s (program chosen) |")
    print("|---:|---:|---:|---:|---:|")
    memos = df[df["workload"] == "toolpro_memos"]
    for rtt, g in memos.groupby("rtt_ms"):
        mean = g.groupby("arm")["virtual_latency_s"].mean()
        chosen = g[g["policy_start"].notna()].groupby("arm")["mode"].apply(lambda m: (m == "program").sum())
        n = int((g["arm"] == "profile (cold)").sum())
        print(f"| {rtt:g} | {mean['step']:.2f} | {mean['program']:.2f} | {mean['profile (cold)']:.2f} "
              f"({chosen['profile (cold)']}/{n}) | {mean['profile (warm)']:.2f} ({chosen['profile (warm)']}/{n}) |")
    print("\nToolPro (reference, its cbench runs): program mode chosen in 12/15 cold-start and 12/12 warm-start runs")


def main() -> None:
    if "--jitter" in sys.argv[1:]:
        table3(rows("toolpro_profile_jitter"))
        print("\nToolPro (reference, its cbench runs): program mode chosen in 12/15 cold-start and 12/12 warm-start runs")
        return
    df = rows("toolpro_profile")
    table3(df)
    workflows(df)


if __name__ == "__main__":
    main()
