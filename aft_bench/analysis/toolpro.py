"""ToolPro's latency model over recorded runs: a virtual clock, no sleeping. An episode's virtual latency is
its agent decisions x DEC + its round trips to the tool server x RTT + the programs it ran x BUILD; the
consolidation rule says when one program beats N stepwise calls: dT = (N - 1)(RTT + DEC) - BUILD > 0.
Pure functions of the row columns (`model_turns`, `round_trips`, `program_attempts`), so any RTT can be
evaluated on the same runs."""

from __future__ import annotations

import json
import tomllib

import pandas as pd

from aft_bench.agents.program import program_saves_ms
from aft_bench.common.paths import REFERENCE
from aft_bench.episode.row import virtual_clock_s

__all__ = ["program_saves_ms", "rtt_sweep", "virtual_latency_s"]  # the rule lives with the policy that uses it


def virtual_latency_s(rows: pd.DataFrame, rtt_ms: float, decision_ms: float, build_ms: float) -> pd.Series:
    """Seconds per run on the virtual clock."""
    return virtual_clock_s(rows["model_turns"], rows["round_trips"], rows["program_attempts"], rtt_ms, decision_ms,
                           build_ms)




TOOLPRO_VALUES = REFERENCE / "toolpro_values.toml"


def rtt_sweep(rows: pd.DataFrame) -> pd.DataFrame | None:
    """ToolPro's RTT sweep from `program`-agent runs: at each RTT a policy run was told (with its DEC and BUILD),
    the mean virtual latency of the stepwise runs (whole context, and skeleton-guided where run: ToolPro-step), the
    program runs and that policy's runs, the mode the policy chose, its gap to the better fixed mode, and ToolPro's
    Table 3 beside them (reference). None without policy runs."""
    runs = rows[rows["agent"] == "program"]
    if runs.empty:
        return None
    spec = runs["agent_spec"].map(json.loads)
    mode = spec.map(lambda s: s.get("mode", "program"))
    policies = runs[mode == "policy"]
    if policies.empty:
        return None
    ref = _reference()
    out = []
    for profile, group in policies.groupby(policies["agent_spec"].map(
            lambda t: tuple(json.loads(t)[k] for k in ("rtt_ms", "decision_ms", "build_ms")))):
        rtt, dec, build = profile
        step = virtual_latency_s(runs[mode == "step"], rtt, dec, build).mean()
        skeleton = virtual_latency_s(runs[mode == "skeleton"], rtt, dec, build).mean()  # NaN when not run
        prog = virtual_latency_s(runs[mode == "program"], rtt, dec, build).mean()
        pol = virtual_latency_s(group, rtt, dec, build).mean()
        best = min(step, prog)
        chose = "/".join(sorted(set(group["mode"])))
        r = ref.get(float(rtt), {})
        out.append({"rtt_ms": rtt, "decision_ms": dec, "build_ms": build, "step_s": step, "skeleton_s": skeleton,
                    "program_s": prog,
                    "policy_s": pol, "policy_mode": chose, "policy_gap_pct": 100 * (pol - best) / best,
                    "ToolPro step (reference)": r.get("step_s"), "ToolPro program (reference)": r.get("program_s"),
                    "ToolPro policy (reference)": r.get("policy_s")})
    return pd.DataFrame(out).sort_values(["decision_ms", "build_ms", "rtt_ms"]).reset_index(drop=True)


def _reference() -> dict[float, dict[str, float]]:
    """ToolPro's Table 3 by RTT (reference only)."""
    if not TOOLPRO_VALUES.exists():
        return {}
    t = tomllib.loads(TOOLPRO_VALUES.read_text())["rtt_sweep"]
    return {float(rtt): {k: t[k][i] for k in ("step_s", "program_s", "policy_s")} for i, rtt in enumerate(t["rtt_ms"])}
