"""`aft-bench profile DIR --out P.json`: the warm start of ToolPro's profile-driven policy, measured from earlier
runs. Per deployment (world and network profile) and model, the mean over DIR's runs of what cold starts measured (RTT + DEC per stepwise call)
and of what programs cost to build (BUILD), as ToolPro keeps moving averages over recent runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from aft_bench.agents.program import PROFILE_VERSION
from aft_bench.analysis.table import read_results
from aft_bench.common.errors import InputError
from aft_bench.common.files import write_atomic


def profiles(df: pd.DataFrame, source: Path) -> list[dict[str, Any]]:
    """One entry per deployment and model: RTT + DEC from its cold starts, BUILD from the programs its cold starts
    ran (null when none ran), `runs` the cold starts measured."""
    measured = df[df["policy_start"].notna()]
    if measured.empty:
        raise InputError(source, "policy_start", None, "no run here used the profile-driven policy "
                         "(program agent, mode = \"profile\")")
    if measured["network"].isna().any():
        raise InputError(source, "network", None, "these runs do not record their network (a single "
                         "[experiment.network] table): run the cold starts with [[experiment.network]], a list "
                         "even of one, so that a warm start can read the profile of its own network")
    out = []
    for (world, model, network), runs in measured.groupby(["world", "model", measured["network"].fillna("")],
                                                          sort=True):
        # cold starts only, for BUILD too: a warm start's step is the one it copied from the old profile, and its
        # program's BUILD is measured as clock time less that copied step (agents/program.py), so both would drag
        # the new profile towards the old one
        starts = runs[runs["policy_start"] == "cold"]
        cold = starts["policy_step_ms"].dropna()
        built = starts["measured_build_ms"].dropna()
        if cold.empty:
            raise InputError(source, "world", world, f"no cold start measured a step for this world, model {model!r} "
                             f"and network {network or 'none'}")
        out.append({"world": str(world), "model": str(model), "network": network or None,
                    "step_ms": round(float(cold.mean()), 6),
                    # no program ran there: no BUILD measured (a warm start then decides with its prior)
                    "build_ms": round(float(built.mean()), 6) if len(built) else None, "runs": int(len(starts))})
    return out


def write_profile(directory: Path, out: Path) -> list[dict[str, Any]]:
    """Measure the profile of `directory`'s runs and write it to `out` (atomically); returns its entries."""
    entries = profiles(read_results(directory), directory / "results.parquet")
    doc = {"version": PROFILE_VERSION, "source": str(directory), "profiles": entries}
    write_atomic(out, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return entries
