"""ToolPro's latency model over recorded runs: a virtual clock, no sleeping. An episode's virtual latency is
its agent decisions x DEC + its round trips to the tool server x RTT + the programs it ran x BUILD; the
consolidation rule says when one program beats N stepwise calls: dT = (N - 1)(RTT + DEC) - BUILD > 0.
Pure functions of the row columns (`model_turns`, `round_trips`, `program_attempts`), so any RTT can be
evaluated on the same runs."""

from __future__ import annotations

import pandas as pd


def virtual_latency_s(rows: pd.DataFrame, rtt_ms: float, decision_ms: float, build_ms: float) -> pd.Series:
    """Seconds per run on the virtual clock."""
    return (rows["model_turns"] * decision_ms + rows["round_trips"] * rtt_ms
            + rows["program_attempts"] * build_ms) / 1000.0


def program_saves_ms(calls: int, rtt_ms: float, decision_ms: float, build_ms: float) -> float:
    """dT of consolidating `calls` stepwise calls into one program (positive: the program is faster)."""
    return (calls - 1) * (rtt_ms + decision_ms) - build_ms
