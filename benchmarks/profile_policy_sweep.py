"""ToolPro's profile-driven policy against RTT, cold and warm start, on the virtual clock: runs
configs/toolpro_profile.toml (stepwise, program, cold-start policy), measures the profile from it
(`aft-bench profile`; the warm config reads the committed copy, checked equal), runs
configs/toolpro_profile_warm.toml (warm-start policy) and prints, per RTT, the mean
virtual latency of each arm and how often each policy chose program mode, with ToolPro's reported choice counts
beside it as a reference (its runs: LLM-written programs on cbench, not these tasks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
CLI = [str(Path(sys.executable).parent / "aft-bench")]


def run(*args: str) -> None:
    subprocess.run([*CLI, *args], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    cold, warm = ROOT / "results" / "toolpro_profile", ROOT / "results" / "toolpro_profile_warm"
    run("run", "configs/toolpro_profile.toml", "--out", str(cold))
    run("profile", str(cold), "--out", str(cold / "profile.json"))
    committed = ROOT / "configs" / "toolpro_profile.profile.json"  # what the warm config reads
    same = json.loads(committed.read_text())["profiles"] == json.loads((cold / "profile.json").read_text())["profiles"]
    print(f"{committed.relative_to(ROOT)}: {'equals' if same else 'DIFFERS FROM'} the profile measured now\n")
    run("run", "configs/toolpro_profile_warm.toml", "--out", str(warm))
    df = pd.concat([pd.read_parquet(cold / "results.parquet"), pd.read_parquet(warm / "results.parquet")])
    df["rtt_ms"] = df["network"].map(lambda n: json.loads(n)["rtt_ms"])
    df["arm"] = df["agent_spec"].map(lambda s: json.loads(s)["mode"]) + df["policy_start"].fillna("").map(
        lambda p: f" ({p})" if p else "")
    print("| RTT ms | stepwise s | program s | policy, cold s (program chosen) | policy, warm s (program chosen) |")
    print("|---:|---:|---:|---:|---:|")
    for rtt, g in df.groupby("rtt_ms"):
        mean = g.groupby("arm")["virtual_latency_s"].mean()
        chosen = g[g["policy_start"].notna()].groupby("arm")["mode"].apply(lambda m: (m == "program").sum())
        n = len(g[g["arm"] == "profile (cold)"])
        print(f"| {rtt:g} | {mean['step']:.2f} | {mean['program']:.2f} | {mean['profile (cold)']:.2f} "
              f"({chosen['profile (cold)']}/{n}) | {mean['profile (warm)']:.2f} ({chosen['profile (warm)']}/{n}) |")
    print("\nToolPro (reference, its cbench runs): program mode chosen in 12/15 cold-start and 12/12 warm-start runs")


if __name__ == "__main__":
    main()
