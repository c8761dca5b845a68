"""The analysis checks its own manipulations: per comparison and arm, the share of faulted runs whose fault
fired, and a caveat (in analysis/ and the report) when faults never fired or the task clusters are too few for
the test ever to reach significance, so that neither is read as "no effect"."""

from __future__ import annotations

import json
from pathlib import Path

from aft_bench.cli.main import main

CONFIG = """[experiment]
id = "m"
comparisons = ["duplicate_effects"]
tasks_per_workload = {tasks}
[[experiment.agents]]
name = "llm"
model = "openai/fake-{policy}"
api_base = "offline"
backoff_s = 0.05
"""


def _primary(tmp_path: Path, policy: str, tasks: int = 2) -> tuple[dict, str]:
    cfg = tmp_path / f"{policy}.toml"
    cfg.write_text(CONFIG.format(policy=policy, tasks=tasks))
    out = tmp_path / policy
    assert main(["run", str(cfg), "--out", str(out)]) == 0
    assert main(["analyze", str(out), "--resamples", "50", "--permutations", "50"]) == 0
    assert main(["report", str(out)]) == 0
    rows = {r["comparison"]: r for r in json.loads((out / "analysis" / "primary.json").read_text())}
    return rows["duplicate_effects"], (out / "report" / "report.md").read_text()


def test_an_arm_whose_faults_never_fired_is_flagged_not_reported_as_no_effect(tmp_path: Path) -> None:
    """The blind policy ignores discovery, so under I5 it never reaches the tool its fault is planned on."""
    blind, report = _primary(tmp_path, "blind")
    assert blind["treatment_fault_fired_share"] == 0.0 and blind["control_fault_fired_share"] == 0.0
    assert "faults never fired in the treatment arm" in blind["caveat"] and blind["criterion_met"] is not True
    assert "duplicate_effects: not evidence of no effect, because its faults never fired" in report
    capable, report = _primary(tmp_path, "capability")  # the known negative: every fault fired
    assert capable["treatment_fault_fired_share"] == 1.0 and capable["control_fault_fired_share"] == 1.0
    assert "never fired" not in (capable["caveat"] or "") and "never fired" not in report
    assert "100% / 100%" in report


def test_too_few_task_clusters_are_said_to_be_too_few(tmp_path: Path) -> None:
    two, _ = _primary(tmp_path, "capability", tasks=2)
    assert two["clusters"] == 2 and two["min_p_possible"] == 0.5 and "cannot reach p < 0.05" in two["caveat"]
