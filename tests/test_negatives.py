"""Endpoints that can fail, end to end: a committed known-negative configuration (an agent that ignores the
mechanism) whose analysis shows no effect and criterion not met although every fault fired and 16 task clusters
could convict, beside the same configuration with the capability-aware policy, which meets each criterion."""

from __future__ import annotations

import json
from pathlib import Path

from aft_bench.cli.main import main

from conftest import ROOT

NEGATIVE = ROOT / "configs" / "negative" / "naive_lifecycle.toml"
COMPARISONS = ("resume_recovery", "durable_recovery", "terminal_verification")


def _analyzed(config: Path, out: Path) -> dict[str, dict]:
    assert main(["run", str(config), "--out", str(out)]) == 0
    assert main(["analyze", str(out), "--resamples", "200", "--permutations", "500"]) == 0
    return {r["comparison"]: r for r in json.loads((out / "analysis" / "primary.json").read_text())}


def test_an_agent_that_ignores_lifecycle_and_verification_gains_nothing_from_them(tmp_path: Path) -> None:
    naive = _analyzed(NEGATIVE, tmp_path / "naive")
    capable_cfg = tmp_path / "capable.toml"
    capable_cfg.write_text(NEGATIVE.read_text().replace("fake-naive", "fake-capability"))
    capable = _analyzed(capable_cfg, tmp_path / "capable")
    for comp in COMPARISONS:
        n, c = naive[comp], capable[comp]
        assert n["clusters"] == c["clusters"] == 16 and n["caveat"] is None  # the test could have convicted ...
        assert n["treatment_fault_fired_share"] == n["control_fault_fired_share"] == 1.0  # ... every fault fired
        assert n["utility_diff"] == 0.0 and n["criterion_met"] is False, comp  # ... and there is no effect
        assert c["utility_diff"] > 0 and c["criterion_met"] is True, comp  # the known positive on the same tuples
