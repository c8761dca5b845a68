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


KEYLESS = ROOT / "configs" / "negative" / "keyless_effects.toml"
BLIND = ROOT / "configs" / "negative" / "blind_discovery.toml"


def _capable(config: Path, tmp_path: Path, policy: str) -> dict[str, dict]:
    cfg = tmp_path / "capable.toml"
    cfg.write_text(config.read_text().replace(f"fake-{policy}", "fake-capability"))
    return _analyzed(cfg, tmp_path / "capable")


def test_an_agent_that_sends_no_idempotency_key_gains_nothing_from_keyed_effects(tmp_path: Path) -> None:
    keyless = _analyzed(KEYLESS, tmp_path / "keyless")
    capable = _capable(KEYLESS, tmp_path, "keyless")
    n, c = keyless["duplicate_effects"], capable["duplicate_effects"]
    assert n["clusters"] == c["clusters"] == 16 and n["caveat"] is None
    assert n["treatment_fault_fired_share"] == n["control_fault_fired_share"] == 1.0
    assert n["utility_diff"] == 0.0 and n["criterion_met"] is False
    # the known positive on the same tuples: significant alone (Holm over a family of seven, five of them not run
    # in this config and counted as p = 1, is what keeps its adjusted p above 0.05 here)
    assert c["utility_diff"] > 0 and c["p_raw"] < 0.05
    assert capable["unsafe_commits"]["criterion_met"] is True


def test_guards_still_stop_a_keyless_agent_s_unauthorized_commit_but_not_its_stale_one(tmp_path: Path) -> None:
    """unsafe_commits has no agent that can opt out of it: authority is checked at commit by the server, so even
    an agent that sends no expected version is stopped on permission drift; on stale state, where the guard needs
    the version from the client, it gains nothing."""
    import pandas as pd

    out = tmp_path / "keyless"
    assert main(["run", str(KEYLESS), "--out", str(out)]) == 0
    df = pd.read_parquet(out / "results.parquet")
    unsafe = df[df["workload"] == "stale_drift"].groupby(["fault", "condition"])["unsafe_commits"].sum()
    runs = df[df["workload"] == "stale_drift"].groupby(["fault", "condition"]).size()
    assert unsafe["stale_state", "I5"] == unsafe["stale_state", "I5-guards"] == runs["stale_state", "I5"]
    assert unsafe["permission_drift", "I5"] == 0 < unsafe["permission_drift", "I5-guards"]


def test_an_agent_that_does_nothing_meets_no_discovery_criterion(tmp_path: Path) -> None:
    """Fewer context tokens alone would reward doing nothing: discovery_context is met only jointly with
    discovery_recall, and the blind agent's recall collapses."""
    blind = _analyzed(BLIND, tmp_path / "blind")
    capable = _capable(BLIND, tmp_path, "blind")
    ctx, rec = blind["discovery_context"], blind["discovery_recall"]
    assert ctx["utility_diff"] > 0 and ctx["criterion_alone"] is True  # far fewer tokens: its own test passes ...
    assert ctx["criterion_met"] is False and ctx["joint_note"] == "jointly with discovery_recall (not met)"
    assert rec["utility_diff"] < 0 and rec["criterion_met"] is False  # ... because recall collapsed
    assert capable["discovery_context"]["criterion_met"] is True and capable["discovery_recall"]["criterion_met"]


DECLARED = ROOT / "configs" / "negative" / "declared_guards.toml"


def test_guards_that_are_only_declared_stop_nothing_while_enforced_ones_do(tmp_path: Path) -> None:
    """The negative of unsafe_commits comes from the interface, not the agent: I5's surface with guards that are
    declared and never enforced (I5-declared-guards) against I5-guards finds no effect with every fault fired in
    16 task clusters, while I5 against I5-guards on the same tasks, in the same run, does."""
    out = tmp_path / "declared"
    assert main(["run", str(DECLARED), "--out", str(out)]) == 0
    assert main(["analyze", str(out), "--resamples", "200", "--permutations", "500"]) == 0
    rows = {r["comparison"]: r for name in ("primary", "secondary")
            for r in json.loads((out / "analysis" / f"{name}.json").read_text())}
    n, p = rows["unsafe_commits_declared"], rows["unsafe_commits"]
    assert n["clusters"] == p["clusters"] == 16 and n["caveat"] is None  # the test could have convicted ...
    assert n["treatment_fault_fired_share"] == n["control_fault_fired_share"] == 1.0  # ... every fault fired
    assert n["utility_diff"] == 0.0 and n["criterion_met"] is False  # ... and there is no effect
    assert p["utility_diff"] > 0 and p["criterion_met"] is True  # the known positive, same run and tasks


GATEWAY_BLIND = ROOT / "configs" / "negative" / "gateway_blind_discovery.toml"


def _comparisons(config: Path, out: Path) -> dict[str, dict]:
    assert main(["run", str(config), "--out", str(out)]) == 0
    assert main(["analyze", str(out), "--resamples", "200", "--permutations", "500"]) == 0
    return {r["comparison"]: r for r in json.loads((out / "analysis" / "comparisons.json").read_text())}


def test_an_agent_that_does_nothing_behind_selective_discovery_at_a_real_server_meets_no_criterion(
        tmp_path: Path) -> None:
    """The gateway's discovery pair on the real git server (issue 41): fewer tokens for the blind agent, but its
    recall collapses, so neither is met; the capability-aware agent on the same tuples meets both."""
    blind = _comparisons(GATEWAY_BLIND, tmp_path / "blind")
    cfg = tmp_path / "capable.toml"
    cfg.write_text(GATEWAY_BLIND.read_text().replace("fake-blind", "fake-capability"))
    capable = _comparisons(cfg, tmp_path / "capable")
    ctx, rec = blind["gateway_discovery_context"], blind["gateway_discovery_recall"]
    assert ctx["clusters"] == rec["clusters"] == 16
    assert ctx["utility_diff"] > 0 and ctx["criterion_alone"] is True
    assert ctx["criterion_met"] is False and ctx["joint_note"] == "jointly with gateway_discovery_recall (not met)"
    assert rec["utility_diff"] == -1.0 and rec["criterion_met"] is False
    assert capable["gateway_discovery_context"]["criterion_met"] is True
    assert capable["gateway_discovery_recall"]["criterion_met"] is True
