"""The analysis (`analysis/pairs.py`, `analysis/trials.py`, `analysis/analyze.py`) on small synthetic results
tables whose every statistic is computed by hand: which runs form an arm and a pair, the endpoint as a number,
exact sign-flip p-values, Holm and Benjamini-Hochberg adjustment, the criterion in both directions, joint
criteria, event bounds, manipulation checks, per-model and leave-one-model-out tables, the written files and
Table 3 as printed. Written for `make mutants` (each test has a known-positive and a known-negative case), and
fast: no episode is run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from aft_bench.analysis import analyze as an
from aft_bench.analysis.pairs import PAIR_KEYS, arm_rows, endpoint_values, match_pairs, pair_keys
from aft_bench.analysis.stats import clopper_pearson_upper
from aft_bench.analysis.trials import pass_at, pass_hat, trials_table
from aft_bench.common.errors import InputError
from aft_bench.episode.row import SCHEMA, write_parquet
from aft_bench.analysis.plan import Plan
from aft_bench.experiment.comparisons import Comparison, Family

DEFAULTS = {"str": "x", "int": 0, "float": 0.0, "bool": False, "json": "{}"}


def row(**kw: Any) -> dict[str, Any]:
    """A full result row: every column of the row model at a neutral value, `kw` over it, a unique run id."""
    out: dict[str, Any] = {}
    for name, col in SCHEMA.items():
        out[name] = None if col.type.endswith("?") else DEFAULTS[col.type]
    out.update(world="w", backend="memory", fault="f", agent="deterministic", agent_spec='{"name":"d"}',
               model="m1", mechanisms="{}", outcome="ok", terminal_action="finish", mode="step")
    out.update(kw)
    out["run_id"] = kw.get("run_id") or "|".join(str(out[k]) for k in ("workload", "task_id", "condition", "model",
                                                                        "rep", "agent_spec", "catalog_size"))
    return out


FAMILY: dict[str, str] = {}  # each comparison's family here: "primary" (Holm) or "secondary" (unadjusted)


def comp(cid: str, endpoint: str, workload: str, control: str, direction: str = "lower", test: str = "two_sided",
         family: str = "primary", **kw: Any) -> Comparison:
    FAMILY[cid] = family
    return Comparison(id=cid, treatment="I5", control=control, workload=workload, endpoint=endpoint,
                      direction=direction, test=test, **kw)  # type: ignore[arg-type]


def plan(comps: tuple[Comparison, ...]) -> Plan:
    """The comparisons as an experiment's plan: the primary ones one Holm family, the secondary ones unadjusted."""
    prim = tuple(c.id for c in comps if FAMILY.get(c.id, "primary") == "primary")
    sec = tuple(c.id for c in comps if FAMILY.get(c.id) == "secondary")
    return Plan(comps, tuple(f for f in (Family(name="primary", comparisons=prim) if prim else None,
                                         Family(name="secondary", comparisons=sec, adjust="none") if sec else None)
                             if f is not None))


DUP = comp("dup", "duplicate_effects", "response_loss", "I5-effects")
REC = comp("rec", "recovered", "interruption", "I5-resume", direction="higher", test="noninferiority", margin=0.1)
GONE = comp("gone", "recovered", "state_loss", "I5-durable", direction="higher")
SEC = comp("sec", "incorrect_claim", "terminal_reports", "I5-verification", family="secondary")
COMPS = (DUP, REC, GONE, SEC)
OPTS = an.Options(resamples=200)


def results() -> list[dict[str, Any]]:
    rows = []
    for i in range(1, 7):  # dup: 6 tasks x 2 models; control duplicates 1 (model m1) or 2 (m2), treatment none
        for model, dups in (("m1", 1), ("m2", 2)):
            rows.append(row(workload="response_loss", task_id=f"t{i}", condition="I5", model=model,
                            y_correct=i % 2 == 0, cost_usd=0.01 * i * dups, model_calls=1,
                            outcome="completed" if i % 2 == 0 else "ok"))
            rows.append(row(workload="response_loss", task_id=f"t{i}", condition="I5-effects", model=model,
                            duplicate_effects=dups, y_correct=i % 3 == 0, cost_usd=0.02 * i, model_calls=1,
                            outcome="completed" if i % 3 == 0 else "ok"))
        # rec: the treatment recovers; the control's interruption never fired (no recovery label)
        rows.append(row(workload="interruption", task_id=f"t{i}", condition="I5", recovered=True, fault_fired=True))
        rows.append(row(workload="interruption", task_id=f"t{i}", condition="I5-resume", recovered=None,
                        fault_fired=False))
    for i in range(1, 6):  # sec: 5 tasks x 2 identical replicates; the control's claims are wrong
        for rep in (0, 1):
            rows.append(row(workload="terminal_reports", task_id=f"t{i}", condition="I5", rep=rep))
            rows.append(row(workload="terminal_reports", task_id=f"t{i}", condition="I5-verification", rep=rep,
                            incorrect_claim=1))
    return rows


def write(directory: Path, rows: list[dict[str, Any]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    write_parquet(rows, directory / "results.parquet")
    return directory


@pytest.fixture()
def analyzed(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    # per test, not per module: mutation testing selects the tests that call `analyze` themselves
    out = write(tmp_path / "out", results())
    return out, an.analyze(out, OPTS, plan(COMPS))


def by(rows: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    (found,) = [r for r in rows if all(r[k] == v for k, v in kw.items())]
    return found


# -- pairs.py --------------------------------------------------------------------------------------------------
def test_an_arm_is_its_workload_and_condition() -> None:
    df = pd.DataFrame(results())
    t, c = arm_rows(df, DUP, "treatment"), arm_rows(df, DUP, "control")
    assert len(t) == len(c) == 12
    assert set(t["condition"]) == {"I5"} and set(c["condition"]) == {"I5-effects"}
    assert set(t["workload"]) == set(c["workload"]) == {"response_loss"}


def test_an_agent_contrast_keeps_the_runs_whose_spec_has_the_arms_parameters() -> None:
    ac = comp("ac", "y_correct", "wl", "I5", direction="higher", treatment_agent={"mode": "program"},
              control_agent={"mode": "step"})
    specs = ['{"mode":"program","name":"a"}', '{"mode":"step","name":"a"}', '{"name":"a"}',
             '{"mode":"program","name":"b"}']
    df = pd.DataFrame([row(workload="wl", task_id="t", condition="I5", agent_spec=s) for s in specs]
                      + [row(workload="other", task_id="t", condition="I5", agent_spec=specs[0])])
    assert list(arm_rows(df, ac, "treatment")["agent_spec"]) == [specs[0], specs[3]]
    assert list(arm_rows(df, ac, "control")["agent_spec"]) == [specs[1]]
    assert arm_rows(df[df["workload"] == "none"], ac, "treatment").empty
    assert "agent_spec" not in pair_keys(ac) and pair_keys(DUP) == PAIR_KEYS
    # pairs of an agent contrast match across agent specs
    t = row(workload="wl", task_id="t", condition="I5", agent_spec=specs[0], y_correct=True)
    c = row(workload="wl", task_id="t", condition="I5", agent_spec=specs[1], y_correct=False)
    pairs = match_pairs(pd.DataFrame([t, c]), ac)
    assert list(pairs["utility_diff"]) == [1.0] and list(pairs["run_id_treatment"]) == [t["run_id"]]
    assert list(pairs["agent_spec"]) == [None]


def test_a_missing_recovery_label_counts_as_not_recovered_and_other_endpoints_stay_numbers() -> None:
    df = pd.DataFrame({"recovered": [True, None, False], "y_goal": [True, False, True],
                       "duplicate_effects": [0, 2, 1]})
    assert list(endpoint_values(df, "recovered")) == [1.0, 0.0, 0.0]
    assert list(endpoint_values(df, "y_goal")) == [1.0, 0.0, 1.0]
    assert list(endpoint_values(df, "duplicate_effects")) == [0.0, 2.0, 1.0]
    assert endpoint_values(df, "recovered").dtype == float


def test_pairs_match_within_their_network_and_keep_a_null_network_null() -> None:
    """On a network axis each run pairs with its partner under the same network (two runs of a task and arm on
    two networks are not a duplicate); without one the pairs' network stays null, never a placeholder."""
    nets = ('{"rtt_ms":1.0}', '{"rtt_ms":2000.0}')
    axis = [row(workload="response_loss", task_id="t", condition=c, network=n, run_id=f"{c}{n}",
                duplicate_effects=d + 10 * i)
            for i, n in enumerate(nets) for c, d in (("I5", 0), ("I5-effects", 1))]
    pairs = match_pairs(pd.DataFrame(axis), DUP).sort_values("network").reset_index(drop=True)
    assert list(pairs["network"]) == list(nets)
    assert [(p.run_id_treatment, p.run_id_control) for p in pairs.itertuples()] == [
        (f"I5{n}", f"I5-effects{n}") for n in nets]
    assert list(pairs["utility_diff"]) == [1.0, 1.0]  # each against its own network's partner (not 11 or -9)
    plain = match_pairs(pd.DataFrame(results()), DUP)
    assert plain["network"].isna().all()  # null, not "" nor a placeholder


def test_pairs_carry_both_runs_both_values_and_the_signed_difference() -> None:
    df = pd.DataFrame(results())
    pairs = match_pairs(df, DUP).sort_values(["task_id", "model"]).reset_index(drop=True)
    assert list(pairs.columns) == [*PAIR_KEYS, "comparison", "run_id_treatment", "run_id_control", "treatment",
                                   "control", "utility_diff"]
    assert len(pairs) == 12 and set(pairs["comparison"]) == {"dup"}
    first = pairs.iloc[0]
    assert (first["task_id"], first["model"], first["treatment"], first["control"]) == ("t1", "m1", 0.0, 1.0)
    assert first["utility_diff"] == 1.0  # lower is better: fewer duplicates in the treatment is a gain
    assert first["run_id_treatment"] == "response_loss|t1|I5|m1|0|{\"name\":\"d\"}|None"
    assert first["run_id_control"] == "response_loss|t1|I5-effects|m1|0|{\"name\":\"d\"}|None"
    assert list(pairs["utility_diff"]) == [1.0, 2.0] * 6
    up = comp("up", "duplicate_effects", "response_loss", "I5-effects", direction="higher")
    assert list(match_pairs(df, up)["utility_diff"].unique()) == [-1.0, -2.0]
    sized = [row(workload="response_loss", task_id="t", condition=c, catalog_size=size, duplicate_effects=d * size)
             for c, d in (("I5", 0), ("I5-effects", 1)) for size in (5, 20)]
    by_size = match_pairs(pd.DataFrame(sized), DUP)
    assert sorted(zip(by_size["catalog_size"].astype(int), by_size["utility_diff"])) == [(5, 5.0), (20, 20.0)]
    # pairs.parquet carries the catalog size as the text of the integer (null sizes as "<NA>"), never 5.0
    assert sorted(by_size["catalog_size"]) == ["20", "5"]
    rec = match_pairs(df, REC)
    assert list(rec["treatment"].unique()) == [1.0] and list(rec["control"].unique()) == [0.0]


def test_a_run_without_its_partner_is_an_error_naming_the_missing_arm() -> None:
    df = pd.DataFrame(results())
    lone = df[~((df["condition"] == "I5-effects") & (df["task_id"] == "t2") & (df["model"] == "m2"))]
    with pytest.raises(InputError) as err:
        match_pairs(lone, DUP)
    assert err.value.field == "pairs of dup" and err.value.problem == "1 runs have no partner (first keys shown)"
    assert err.value.path == "<results>"
    (sample,) = err.value.value
    assert pd.isna(sample.pop("catalog_size"))
    assert sample == {"task_id": "t2", "fault": "f", "fault_seed": 0, "model": "m2", "rep": 0, "missing": "I5-effects"}
    lone_t = df[~((df["condition"] == "I5") & (df["workload"] == "response_loss") & (df["task_id"].isin(
        ["t1", "t3", "t4", "t5"])))]
    with pytest.raises(InputError) as err:
        match_pairs(lone_t, DUP)
    assert err.value.problem.startswith("8 runs") and len(err.value.value) == 3
    assert {s["missing"] for s in err.value.value} == {"I5"}


def test_two_runs_for_one_pair_key_are_an_error() -> None:
    rows = results()
    twin = dict(rows[1], run_id="twin", mechanisms='{"other":1}')
    with pytest.raises(InputError) as err:
        match_pairs(pd.DataFrame(rows + [twin]), DUP)
    assert (err.value.path, err.value.field, err.value.value) == ("<results>", "pairs", "dup")
    assert err.value.problem == "2 I5-effects runs share a pair key"
    t_twin = dict(rows[0], run_id="twin", mechanisms='{"other":1}')
    with pytest.raises(InputError, match="2 I5 runs share"):
        match_pairs(pd.DataFrame(rows + [t_twin]), DUP)


# -- trials.py -------------------------------------------------------------------------------------------------
def trial_rows(outcomes: dict[str, tuple[list[int], list[int]]], c: Comparison = DUP) -> list[dict[str, Any]]:
    out = []
    for task, (treat, ctrl) in outcomes.items():
        for cond, oks in ((c.treatment, treat), (c.control, ctrl)):
            for rep, ok in enumerate(oks):
                out.append(row(workload=c.workload, task_id=task, condition=cond, rep=rep, y_correct=bool(ok)))
    return out


def test_two_trials_per_tuple_give_a_table_and_one_none() -> None:
    table = trials_table(pd.DataFrame(trial_rows({"a": ([1, 0], [0, 0])})), (DUP,))
    assert [(r["arm"], r["k"]) for r in table] == [("treatment", 1), ("treatment", 2), ("control", 1),
                                                  ("control", 2)]
    assert table[0] == {"comparison": "dup", "arm": "treatment", "condition": "I5", "tuples": 1, "trials": 2, "k": 1,
                        "pass_hat_k": 0.5, "pass_at_k": 0.5, "flip_rate": 1.0}
    assert table[3]["condition"] == "I5-effects" and table[3]["flip_rate"] == 0.0
    assert trials_table(pd.DataFrame(trial_rows({"a": ([1], [0])})), (DUP,)) == []
    assert trials_table(pd.DataFrame(trial_rows({"a": ([1], [0])})).drop(columns="rep"), (DUP,)) == []


def test_a_flip_is_a_tuple_whose_trials_disagree() -> None:
    table = trials_table(pd.DataFrame(trial_rows({"a": ([1, 0, 0], [0, 0, 0]), "b": ([1, 1, 1], [1, 1, 0]),
                                                  "c": ([0, 0, 0], [1, 0, 0])})), (DUP,))
    t = [r for r in table if r["arm"] == "treatment"]
    c = [r for r in table if r["arm"] == "control"]
    assert [r["k"] for r in t] == [1, 2, 3] and all(r["tuples"] == 3 and r["trials"] == 3 for r in t)
    assert t[0]["flip_rate"] == pytest.approx(1 / 3)  # a: one success of three; b, c agree
    assert c[0]["flip_rate"] == pytest.approx(2 / 3)
    assert t[0]["pass_hat_k"] == pytest.approx((1 / 3 + 1 + 0) / 3)
    assert t[1]["pass_at_k"] == pytest.approx((pass_at(3, 1, 2) + 1 + 0) / 3)
    assert c[2]["pass_hat_k"] == pytest.approx(pass_hat(3, 2, 3) / 3) and c[2]["pass_hat_k"] == 0.0


def test_an_arm_without_runs_is_skipped_and_later_arms_and_comparisons_still_count() -> None:
    df = pd.DataFrame(trial_rows({"a": ([1, 0], [1, 1])}))
    only_control = df[df["condition"] == "I5-effects"]
    table = trials_table(only_control, (DUP,))
    assert {r["arm"] for r in table} == {"control"} and len(table) == 2
    table = trials_table(df, (GONE, DUP))
    assert {r["comparison"] for r in table} == {"dup"} and len(table) == 4


def test_a_missing_catalog_size_is_a_tuple_not_dropped() -> None:
    rows = trial_rows({"a": ([1, 0], [1, 1])})
    table = trials_table(pd.DataFrame(rows).assign(catalog_size=None), (DUP,))
    assert len(table) == 4 and table[0]["tuples"] == 1


# -- analyze.py: the tables ------------------------------------------------------------------------------------
def test_primary_estimates_exact_p_holm_and_criterion(analyzed) -> None:
    _, tables = analyzed
    dup, rec, gone = (by(tables["primary"], comparison=c) for c in ("dup", "rec", "gone"))
    assert [r["comparison"] for r in tables["primary"]] == ["dup", "rec", "gone"]
    assert (dup["pairs"], dup["clusters"], dup["utility_diff"], dup["ci_low"], dup["ci_high"]) == (12, 6, 1.5, 1.5,
                                                                                                   1.5)
    assert dup["p_raw"] == pytest.approx(2 / 64) and dup["exact"] is True and dup["flip_unit"] == "cluster"
    assert rec["p_raw"] == pytest.approx(1 / 64)  # one-sided, shifted by the margin
    # Holm over the configured family of three, the missing one counted as p = 1
    assert rec["p_adjusted"] == pytest.approx(3 / 64) and dup["p_adjusted"] == pytest.approx(2 * 2 / 64)
    assert rec["criterion_met"] is True and dup["criterion_met"] is False
    assert (gone["pairs"], gone["p_raw"], gone["p_adjusted"], gone["criterion_met"]) == (0, None, None, None)
    assert gone["utility_diff"] is None and gone["clusters"] == 0
    assert dup["test"] == "two_sided" and rec["margin"] == 0.1 and rec["endpoint"] == "recovered"
    assert dup["direction"] == "lower" and dup["pseudo_replicated"] is False
    assert tables["meta"]["families"][0] == {"name": "primary", "adjust": "holm", "comparisons": ["dup", "rec", "gone"],
                                             "size": 3, "missing": ["gone"], "complete": False}
    assert gone["not_computed"] == "no runs of its treatment arm (I5 on workload state_loss)"
    assert dup["not_computed"] is None and dup["family"] == "primary" and dup["adjust"] == "holm"


def test_secondary_is_unadjusted_and_pseudo_replication_is_named(analyzed) -> None:
    _, tables = analyzed
    (sec,) = tables["secondary"]
    assert (sec["pairs"], sec["clusters"], sec["utility_diff"]) == (10, 5, 1.0)
    assert sec["p_raw"] == pytest.approx(2 / 32) and sec["p_adjusted"] is None and sec["criterion_met"] is False
    assert sec["pseudo_replicated"] is True
    assert tables["meta"]["pseudo_replicated"] == ["sec"]


def test_count_endpoints_carry_event_counts_and_bounds(analyzed) -> None:
    _, tables = analyzed
    dup = by(tables["primary"], comparison="dup")
    assert (dup["treatment_runs_with_event"], dup["treatment_runs"], dup["control_runs_with_event"],
            dup["control_runs"]) == (0, 12, 12, 12)
    assert (dup["treatment_clusters_with_event"], dup["treatment_clusters"], dup["control_clusters_with_event"],
            dup["control_clusters"]) == (0, 6, 6, 6)
    assert dup["treatment_rate_upper95"] == pytest.approx(clopper_pearson_upper(0, 12))
    assert dup["treatment_cluster_rate_upper95"] == pytest.approx(clopper_pearson_upper(0, 6))
    assert dup["control_rate_upper95"] == 1.0 and dup["control_cluster_rate_upper95"] == 1.0
    assert "treatment_runs" not in by(tables["primary"], comparison="rec")


def test_events_of_an_arm_without_runs_have_no_bound() -> None:
    df = pd.DataFrame(results())
    ev = an._events(df[df["condition"] != "I5-effects"], DUP)
    assert ev["control_runs"] == 0 and ev["control_rate_upper95"] is None
    assert ev["control_clusters"] == 0 and ev["control_cluster_rate_upper95"] is None
    assert ev["treatment_runs"] == 12
    one = an._events(df[~((df["condition"] == "I5-effects") & (df["task_id"] != "t1"))], DUP)
    assert (one["control_runs_with_event"], one["control_runs"], one["control_clusters_with_event"]) == (2, 2, 1)
    assert one["control_rate_upper95"] == pytest.approx(clopper_pearson_upper(2, 2))


def test_manipulation_names_faults_that_never_fired_and_too_few_clusters(analyzed) -> None:
    _, tables = analyzed
    rec, dup, sec = (by(tables["primary"] + tables["secondary"], comparison=c) for c in ("rec", "dup", "sec"))
    assert rec["treatment_fault_fired_share"] == 1.0 and rec["control_fault_fired_share"] == 0.0
    assert rec["caveat"] == "its faults never fired in the control arm (6 faulted runs)"
    assert rec["min_p_possible"] == pytest.approx(2 ** -5)
    assert dup["treatment_fault_fired_share"] is None and dup["caveat"] is None
    assert sec["min_p_possible"] == pytest.approx(2 ** -4)
    assert sec["caveat"] == "5 task cluster(s) cannot reach p < 0.05 (the smallest possible p is 0.0625)"


def test_manipulation_shares_and_cluster_bounds() -> None:
    df = pd.DataFrame(results())
    df.loc[(df["workload"] == "interruption") & (df["task_id"] == "t1"), "fault_fired"] = True
    m = an.manipulation(df, REC, {"clusters": 1}, OPTS)
    assert m["control_fault_fired_share"] == pytest.approx(1 / 6) and m["min_p_possible"] == 1.0
    assert m["caveat"] == "1 task cluster(s) cannot reach p < 0.05 (the smallest possible p is 1)"
    both = df.assign(fault_fired=False)
    m = an.manipulation(both, REC, {"clusters": 6}, OPTS)
    assert m["caveat"] == ("its faults never fired in the treatment arm (6 faulted runs); "
                           "its faults never fired in the control arm (6 faulted runs)")
    assert an.manipulation(df, REC, {"clusters": 0}, OPTS)["min_p_possible"] is None
    assert an.manipulation(df, REC, {}, OPTS)["min_p_possible"] is None
    pair = an.manipulation(df, REC, {"clusters": 2}, an.Options(flip_unit="pair"))
    assert pair["min_p_possible"] is None and pair["caveat"] is None
    assert an.manipulation(df.drop(columns="fault_fired"), REC, {"clusters": 9}, OPTS)["caveat"] is None


def test_per_model_bh_interaction_and_leave_one_model_out(analyzed) -> None:
    _, tables = analyzed
    pm = tables["per_model"]
    assert [(r["model"], r["comparison"]) for r in pm] == [("m1", "dup"), ("m2", "dup"), ("m1", "rec"),
                                                           ("m1", "sec")]
    m1, m2 = by(pm, model="m1", comparison="dup"), by(pm, model="m2", comparison="dup")
    assert (m1["utility_diff"], m2["utility_diff"]) == (1.0, 2.0)
    assert (m1["interaction"], m2["interaction"]) == (-0.5, 0.5)
    assert (m1["treatment_mean"], m1["control_mean"], m2["control_mean"]) == (0.0, 1.0, 2.0)
    assert m1["pairs"] == 6 and m1["p_raw"] == pytest.approx(2 / 64)
    # Benjamini-Hochberg over the four per-model p-values 1/64, 2/64, 2/64, 4/64
    assert [r["p_bh"] for r in pm] == pytest.approx([1 / 24, 1 / 24, 1 / 24, 1 / 16])
    lomo = tables["lomo"]
    assert [(r["left_out"], r["comparison"], r["utility_diff"], r["pairs"]) for r in lomo] == [
        ("m1", "dup", 2.0, 6), ("m2", "dup", 1.0, 6)]


def test_interaction_is_none_without_a_pooled_estimate() -> None:
    df = pd.DataFrame(results())
    assert an._none(float("nan")) is None and an._none(0.5) == 0.5 and an._none(None) is None
    assert an._by_id(COMPS, "rec") is REC
    empty = an._empty_pairs()
    assert len(empty) == 0 and list(empty.columns)[-3:] == ["treatment", "control", "utility_diff"]
    assert an.estimate(empty, DUP, OPTS) == {"pairs": 0, "clusters": 0, "utility_diff": None, "ci_low": None,
                                             "ci_high": None, "p_raw": None}
    assert len(df) == 56


def test_seeds_are_stable_per_comparison_and_change_the_resampling() -> None:
    # published analyses are re-derivable: the seed of a comparison is a fixed function of the base seed
    assert an._seed(an.Options(), "dup", "", "boot") == 7653912645726831598
    assert an._seed(an.Options(seed=7), "dup", "", "perm") == 10082059934417935662
    assert an._seed(an.Options(seed=1), "dup", "", "boot") != an._seed(an.Options(seed=0), "dup", "", "boot")
    rng = np.random.default_rng(3)
    pairs = pd.DataFrame({"utility_diff": rng.normal(size=40), "task_id": [f"t{i % 10}" for i in range(40)]})
    a = an.estimate(pairs, DUP, an.Options(resamples=300, permutations=200))
    b = an.estimate(pairs, DUP, an.Options(resamples=300, permutations=200, seed=5))
    c = an.estimate(pairs, DUP, an.Options(resamples=300, permutations=200), tag="model=m1")
    assert a["ci_low"] != b["ci_low"] and a["ci_low"] != c["ci_low"] and a["p_raw"] != b["p_raw"]
    assert a["exact"] is False and a == an.estimate(pairs, DUP, an.Options(resamples=300, permutations=200))
    wide = an.estimate(pairs, DUP, an.Options(resamples=300, permutations=200, level=0.99))
    assert wide["ci_low"] < a["ci_low"] < a["ci_high"] < wide["ci_high"]
    single = an.estimate(pairs, DUP, an.Options(resamples=300, permutations=200, flip_unit="pair"))
    assert single["flip_unit"] == "pair" and single["p_raw"] != a["p_raw"]
    assert pytest.approx(pairs["utility_diff"].mean()) == a["utility_diff"]
    ni = comp("ni", "recall", "wl", "I5-x", direction="higher", test="noninferiority", margin=0.3)
    shifted = an.estimate(pairs, ni, an.Options(resamples=300, permutations=200))
    assert shifted["p_raw"] < a["p_raw"]
    no_margin = comp("nm", "recall", "wl", "I5-x", direction="higher", test="noninferiority")
    one_sided = an.estimate(pairs, no_margin, an.Options(resamples=300, permutations=200))
    assert one_sided["p_raw"] != a["p_raw"] and one_sided["p_raw"] != shifted["p_raw"]


@pytest.mark.parametrize("row_, c, expected", [
    ({"p": 0.01, "ci_low": -0.05, "utility_diff": -0.01}, REC, True),
    ({"p": 0.01, "ci_low": -0.1, "utility_diff": 0.2}, REC, False),
    ({"p": 0.05, "ci_low": 0.2, "utility_diff": 0.2}, REC, False),
    ({"p": 0.01, "ci_low": None, "utility_diff": 0.2}, REC, False),
    ({"p": 0.01, "ci_low": -0.01, "utility_diff": 0.2}, comp("nm", "recall", "wl", "I5-x", test="noninferiority"),
     False),
    ({"p": 0.01, "ci_low": 0.01, "utility_diff": 0.2}, comp("nm", "recall", "wl", "I5-x", test="noninferiority"),
     True),
    ({"p": 0.049, "utility_diff": 0.2}, DUP, True),
    ({"p": 0.01, "utility_diff": -0.2}, DUP, False),  # significant, but it favours the control
    ({"p": 0.01, "utility_diff": 0.0}, DUP, False),
    ({"p": 0.01, "utility_diff": None}, DUP, False),
    ({"p": 0.05, "utility_diff": 0.2}, DUP, False),
    ({"p": None, "utility_diff": 0.2}, DUP, None),
    ({"p": float("nan"), "utility_diff": 0.2}, DUP, None),
    ({"utility_diff": 0.2}, DUP, None),
])
def test_the_criterion(row_: dict[str, Any], c: Comparison, expected: bool | None) -> None:
    assert an._criterion(row_, c, "p") is expected


def test_a_joint_criterion_is_met_only_with_its_partner() -> None:
    a = comp("a", "context_tokens", "wl", "I5-x", jointly_with="b")
    b = comp("b", "recall", "wl", "I5-x")
    for mine, theirs, expected, note in ((True, True, True, "met"), (True, False, False, "not met"),
                                         (True, None, None, "not run"), (False, True, False, "met"),
                                         (None, True, None, "met")):
        rows = [{"comparison": "a", "criterion_met": mine}, {"comparison": "b", "criterion_met": theirs}]
        an._joint(rows, (a, b))
        assert rows[0]["criterion_met"] is expected and rows[0]["criterion_alone"] is mine
        assert rows[0]["joint_note"] == f"jointly with b ({note})"
        assert rows[1]["criterion_met"] is theirs and rows[1]["joint_note"] is None
        assert rows[1]["criterion_alone"] is theirs
    rows = [{"comparison": "a", "criterion_met": True}]
    an._joint(rows, (a, b))
    assert rows[0]["criterion_met"] is None and rows[0]["joint_note"] == "jointly with b (not run)"


def test_joint_criteria_in_a_whole_analysis(tmp_path: Path) -> None:
    dup = comp("dup", "duplicate_effects", "response_loss", "I5-effects", jointly_with="rec")
    tables = an.analyze(write(tmp_path / "o", results()), OPTS, plan((dup, REC, SEC)))
    d = by(tables["primary"], comparison="dup")
    # Holm over two: dup 2 x 2/64 < 0.05, met alone; rec met too
    assert d["criterion_alone"] is True and d["criterion_met"] is True and d["joint_note"] == "jointly with rec (met)"
    assert tables["meta"]["families"][0] == {"name": "primary", "adjust": "holm", "comparisons": ["dup", "rec"],
                                             "size": 2, "missing": [], "complete": True}


def test_discovery_by_size_reports_what_a_saving_cost() -> None:
    disc = comp("disc", "context_tokens", "discovery", "I5-discovery")
    rows = []
    for size, tokens in ((20, (100, 300)), (5, (50, 70))):
        for i in range(2):
            rows.append(row(workload="discovery", task_id=f"t{i}", condition="I5", catalog_size=size,
                            context_tokens=tokens[0] + i, recall=1.0, y_correct=True))
            rows.append(row(workload="discovery", task_id=f"t{i}", condition="I5-discovery", catalog_size=size,
                            context_tokens=tokens[1], recall=0.5, unintended_effects=i))
    rows.append(row(workload="other", task_id="t0", condition="I5", catalog_size=5, context_tokens=9))
    rows.append(row(workload="discovery", task_id="t0", condition="I3", catalog_size=5, context_tokens=9))
    out = an.discovery_by_size(pd.DataFrame(rows), (DUP, disc))
    assert out == [
        {"catalog_size": 5, "condition": "I5", "runs": 2, "context_tokens": 50.5, "recall": 1.0, "y_correct": 1.0,
         "unintended_effects": 0.0},
        {"catalog_size": 5, "condition": "I5-discovery", "runs": 2, "context_tokens": 70.0, "recall": 0.5,
         "y_correct": 0.0, "unintended_effects": 0.5},
        {"catalog_size": 20, "condition": "I5", "runs": 2, "context_tokens": 100.5, "recall": 1.0, "y_correct": 1.0,
         "unintended_effects": 0.0},
        {"catalog_size": 20, "condition": "I5-discovery", "runs": 2, "context_tokens": 300.0, "recall": 0.5,
         "y_correct": 0.0, "unintended_effects": 0.5}]
    assert an.discovery_by_size(pd.DataFrame(rows), (DUP,)) == []
    assert an.discovery_by_size(pd.DataFrame(rows).drop(columns="recall"), (disc,))[0] == {
        "catalog_size": 5, "condition": "I5", "runs": 2, "context_tokens": 50.5, "y_correct": 1.0,
        "unintended_effects": 0.0}


# -- analyze.py: files, locks, meta ----------------------------------------------------------------------------
def test_written_files_equal_the_returned_tables(analyzed) -> None:
    out, tables = analyzed
    a = out / "analysis"
    assert sorted(p.name for p in a.iterdir()) == sorted(
        [f"{n}.{e}" for n in ("comparisons", "primary", "secondary", "per_model", "lomo", "discovery", "trials",
                              "cost") for e in ("csv", "json")] + ["meta.json", "pairs.parquet"])
    table = pd.read_csv(a / "comparisons.csv")
    assert list(table.columns) == an.COMPARISON_COLUMNS and list(table["comparison"]) == ["dup", "rec", "gone", "sec"]
    assert list(table["family"]) == ["primary"] * 3 + ["secondary"] and list(table["adjust"]) == ["holm"] * 3 + ["none"]
    primary = pd.read_csv(a / "primary.csv")
    assert list(primary.columns) == an.PRIMARY_COLUMNS and list(primary["comparison"]) == ["dup", "rec", "gone"]
    assert (a / "primary.csv").read_text().splitlines()[2].startswith("rec,6,1,1,1,0.015625,0.046875,True")
    assert json.loads((a / "primary.json").read_text())[0]["p_raw"] == pytest.approx(2 / 64)
    assert list(pd.read_csv(a / "per_model.csv").columns) == an.CSV_COLUMNS["per_model"]
    assert list(pd.read_csv(a / "lomo.csv")["left_out"]) == ["m1", "m2"]
    assert list(pd.read_csv(a / "secondary.csv")["comparison"]) == ["sec"]
    assert json.loads((a / "trials.json").read_text()) == tables["trials"] != []
    assert tables["trials"] == trials_table(pd.read_parquet(out / "results.parquet"), COMPS)
    assert json.loads((a / "discovery.json").read_text()) == [] == tables["discovery"]
    meta = json.loads((a / "meta.json").read_text())
    assert meta == tables["meta"]
    assert meta["alpha"] == 0.05 and meta["resamples"] == 200 and meta["seed"] == 0
    assert meta["input"] == str(out / "results.parquet")
    assert meta["input_sha256"] == an.results_sha256(out)
    assert [c["id"] for c in meta["comparisons"]] == ["dup", "rec", "gone", "sec"]
    pairs = pd.read_parquet(a / "pairs.parquet")
    assert len(pairs) == 12 + 6 + 10 and sorted(pairs["comparison"].unique()) == ["dup", "rec", "sec"]
    assert (a / "primary.csv").read_text().count("\n") == 4


def test_rows_made_before_the_current_freeze_are_excluded(tmp_path: Path, capsys) -> None:
    rows = results()
    for r in rows:
        r["lock_hash"] = "new"
    rows[0]["lock_hash"] = "old"
    rows[2]["lock_hash"] = None
    out = write(tmp_path / "o", rows)
    cfg = tmp_path / "cfg.toml"
    (out / "manifest.json").write_text(json.dumps({"config_path": str(cfg)}))
    assert an.current_lock(out) is None  # no lock file next to the config
    (tmp_path / "cfg.lock.json").write_text(json.dumps({"lock_hash": "new"}))
    assert an.current_lock(out) == "new"
    assert len(an.load_results(out, COMPS)) == len(rows) - 2
    assert "excluding 2 rows made before the current evidence freeze" in capsys.readouterr().err
    assert len(an.load_results(out, COMPS, include_stale=True)) == len(rows)
    assert capsys.readouterr().err == ""
    for r in rows:
        r["lock_hash"] = "new"
    write(out, rows)
    assert len(an.load_results(out, COMPS)) == len(rows) and capsys.readouterr().err == ""
    (tmp_path / "cfg.lock.json").write_text(json.dumps(["not", "a", "lock"]))
    assert an.current_lock(out) is None


def test_no_lock_without_a_manifest_or_a_config(tmp_path: Path) -> None:
    out = write(tmp_path / "o", results())
    assert an.current_lock(out) is None
    (out / "manifest.json").write_text(json.dumps({"config_path": None}))
    assert an.current_lock(out) is None
    (out / "manifest.json").write_text(json.dumps(["x"]))
    assert an.current_lock(out) is None
    (tmp_path / "served.lock.json").write_text(json.dumps({"lock_hash": "h"}))
    (out / "manifest.json").write_text(json.dumps({"config_path": str(tmp_path / "served.toml")}))
    assert an.current_lock(out) == "h"


def test_missing_columns_name_the_comparisons_that_need_them(tmp_path: Path) -> None:
    out = write(tmp_path / "o", results())
    df = pd.read_parquet(out / "results.parquet").drop(columns=["duplicate_effects"])
    df.to_parquet(out / "results.parquet")
    with pytest.raises(InputError) as err:
        an.load_results(out, COMPS)
    # the table check names the missing column first
    assert err.value.field == "duplicate_effects"
    needed = an._needed_columns((DUP, REC))
    assert {"duplicate_effects", "recovered", "run_id", "condition", "task_id", "rep", "context_tokens", "recall",
            "y_correct", "unintended_effects"} <= set(needed) and needed == sorted(needed)
    assert "incorrect_claim" not in needed


def test_missing_columns_after_the_table_check(tmp_path: Path, monkeypatch) -> None:
    out = write(tmp_path / "o", results())
    df = pd.read_parquet(out / "results.parquet")
    monkeypatch.setattr(an, "read_results", lambda d: df.drop(columns=["duplicate_effects", "task_id"]))
    with pytest.raises(InputError) as err:
        an.load_results(out, COMPS)
    assert (err.value.field, err.value.value) == ("columns", ["duplicate_effects", "task_id"])
    assert err.value.problem == "missing columns needed by dup"
    monkeypatch.setattr(an, "read_results", lambda d: df.drop(columns=["task_id"]))
    with pytest.raises(InputError) as err:
        an.load_results(out, COMPS)
    assert err.value.problem == "missing columns needed by dup, rec, gone, sec"
    assert err.value.path == str(out / "results.parquet")


def test_table3_as_printed(analyzed) -> None:
    _, tables = analyzed
    text = an.format_table3(tables["comparisons"], tables["meta"])
    assert text.splitlines() == [
        "primary: Holm across its 3 comparisons",
        "comparison               pairs clusters   utility diff       95% task-clustered CI     p raw    p Holm  met",
        "-" * 107,
        "dup                         12        6         1.5000            [1.5000, 1.5000]    0.0312    0.0625  no",
        "rec                          6        6         1.0000            [1.0000, 1.0000]    0.0156    0.0469  yes",
        "gone                         0        0   not computed",
        "",
        "secondary: unadjusted p (outside any Holm family)",
        "comparison               pairs clusters   utility diff       95% task-clustered CI     p raw  met",
        "-" * 97,
        "sec                         10        5         1.0000            [1.0000, 1.0000]    0.0625  no",
        "p values: sign flips of whole task clusters",
        "not computed: gone: no runs of its treatment arm (I5 on workload state_loss)",
        "Holm family primary incomplete: no pairs for gone (counted as p = 1)",
        "replicates identical within every cluster (the clusters are the sample): sec",
    ]
    one = {**tables["meta"]["families"][0], "comparisons": ["dup"], "size": 1, "missing": [], "complete": True}
    meta = {**tables["meta"], "flip_unit": "pair", "families": [one], "pseudo_replicated": ["dup", "rec"]}
    tail = an.format_table3(tables["primary"][:1], meta).splitlines()
    assert tail == ["primary: one comparison: its Holm p is its raw p", *text.splitlines()[1:4],
                    "p values: sign flips of single pairs (the paper's method; treats replicates as independent)",
                    "replicates identical within every cluster (the clusters are the sample): dup, rec"]
    assert len(an.format_table3(tables["primary"]).splitlines()) == 5  # no meta: one table, no title or notes
    assert "replicates identical" not in an.format_table3(tables["primary"], {**meta, "pseudo_replicated": []})
    long = [dict(tables["primary"][0], comparison="a_comparison_named_at_length_x")]
    assert an.format_table3(long).splitlines()[2].startswith("a_comparison_named_at_length_x  ")


def test_the_cost_table_is_part_of_the_analysis(analyzed) -> None:
    from aft_bench.analysis.cost import cost_table

    out, tables = analyzed
    df = pd.read_parquet(out / "results.parquet")
    assert tables["cost"] == cost_table(df, COMPS, OPTS.resamples, an._seed(OPTS, "cost")) != []
    assert tables["cost"] != cost_table(df, COMPS, OPTS.resamples, an._seed(OPTS, "other"))
    assert tables["cost"] != cost_table(df, COMPS, 50, an._seed(OPTS, "cost"))
    assert json.loads((out / "analysis" / "cost.json").read_text()) == json.loads(json.dumps(tables["cost"]))


def test_analyze_excludes_stale_rows_unless_asked(tmp_path: Path) -> None:
    rows = results()
    for r in rows:
        r["lock_hash"] = "new" if r["task_id"] != "t6" else "old"
    out = write(tmp_path / "o", rows)
    (out / "manifest.json").write_text(json.dumps({"config_path": str(tmp_path / "c.toml")}))
    (tmp_path / "c.lock.json").write_text(json.dumps({"lock_hash": "new"}))
    assert by(an.analyze(out, OPTS, plan(COMPS))["primary"], comparison="dup")["pairs"] == 10
    assert by(an.analyze(out, OPTS, plan(COMPS), include_stale=True)["primary"], comparison="dup")["pairs"] == 12


@pytest.mark.parametrize("kept", ["I5", "I5-effects"])
def test_a_comparison_with_one_arm_never_run_has_no_pairs(tmp_path: Path, kept: str) -> None:
    rows = [r for r in results() if r["workload"] != "response_loss" or r["condition"] == kept]
    tables = an.analyze(write(tmp_path / "o", rows), OPTS, plan(COMPS))
    dup = by(tables["primary"], comparison="dup")
    assert (dup["pairs"], dup["p_raw"], dup["criterion_met"]) == (0, None, None)
    assert not [r for r in tables["per_model"] if r["comparison"] == "dup"]
    assert tables["meta"]["families"][0]["missing"] == ["dup", "gone"]
    assert dup["not_computed"] == f"no runs of its {'control' if kept == 'I5' else 'treatment'} arm " \
        f"({'I5-effects' if kept == 'I5' else 'I5'} on workload response_loss)"


def test_a_single_model_has_no_leave_one_out_and_per_model_rows_are_that_model(tmp_path: Path) -> None:
    rows = [r for r in results() if r["model"] == "m1"]
    tables = an.analyze(write(tmp_path / "o", rows), OPTS, plan(COMPS))
    assert tables["lomo"] == []
    pm = by(tables["per_model"], comparison="dup")
    assert (pm["model"], pm["pairs"], pm["utility_diff"], pm["interaction"]) == ("m1", 6, 1.0, 0.0)
    three = results() + [dict(r, model="m3", run_id=r["run_id"] + "3") for r in results()
                         if r["workload"] == "response_loss" and r["model"] == "m1"]
    tables = an.analyze(write(tmp_path / "o3", three), OPTS, plan(COMPS))
    assert [(r["left_out"], r["pairs"]) for r in tables["lomo"]] == [("m1", 12), ("m2", 12), ("m3", 12)]
    assert by(tables["lomo"], left_out="m2")["utility_diff"] == 1.0


def test_secondary_criterion_uses_the_raw_p(tmp_path: Path) -> None:
    sec = comp("sec", "incorrect_claim", "terminal_reports", "I5-verification", family="secondary")
    rows = results() + [dict(r, task_id=r["task_id"] + "b", run_id=r["run_id"] + "b") for r in results()
                        if r["workload"] == "terminal_reports"]
    tables = an.analyze(write(tmp_path / "o", rows), OPTS, plan((DUP, sec)))
    (s,) = tables["secondary"]
    assert s["p_raw"] == pytest.approx(2 / 1024) and s["p_adjusted"] is None and s["criterion_met"] is True
    assert "p_adjusted" in s


def test_the_written_csv_and_json(tmp_path: Path) -> None:
    tables = {name: [] for name in an.CSV_COLUMNS}
    tables["primary"] = [{"comparison": "a", "pairs": 3, "utility_diff": 1 / 3, "ci_low": 1e-05, "ci_high": 2.0,
                          "p_raw": 0.5, "p_adjusted": None, "criterion_met": False, "extra": "not in the csv"}]
    tables["lomo"] = [{"left_out": "m", "comparison": "a", "pairs": 1, "utility_diff": 0.25, "ci_low": 0,
                       "ci_high": 1, "p_raw": 1.0}]
    tables["meta"] = {"seed": 3, "api_key": "sk-not-a-real-key-0123456789abcdef"}
    pairs = pd.DataFrame({"comparison": ["a", "a"], "utility_diff": [1.0, -1.0]})
    an._write(tmp_path, tables, pairs)
    a = tmp_path / "analysis"
    assert (a / "primary.csv").read_text().splitlines() == [
        "comparison,pairs,utility_diff,ci_low,ci_high,p_raw,p_adjusted,criterion_met",
        "a,3,0.3333333333,1e-05,2,0.5,,False"]
    assert (a / "lomo.csv").read_text().splitlines()[1] == "m,a,1,0.25,0,1,1"
    assert (a / "secondary.csv").read_text() == ",".join(an.PRIMARY_COLUMNS) + "\n"
    assert json.loads((a / "primary.json").read_text()) == tables["primary"]
    assert json.loads((a / "lomo.json").read_text()) == tables["lomo"]
    assert json.loads((a / "trials.json").read_text()) == []
    meta = json.loads((a / "meta.json").read_text())
    assert meta["seed"] == 3 and "sk-not-a-real-key" not in (a / "meta.json").read_text()
    back = pd.read_parquet(a / "pairs.parquet")
    assert back.equals(pairs) and list(back.columns) == ["comparison", "utility_diff"]


def test_table3_lists_every_missing_comparison() -> None:
    missing = {"comparison": "m1", "pairs": 0, "not_computed": "no runs of its control arm (C on workload w)"}
    present = {"comparison": "x", "pairs": 2, "clusters": 2, "utility_diff": -0.25, "ci_low": -1.0, "ci_high": 0.5,
               "p_raw": 0.5, "p_adjusted": 1.0, "criterion_met": None}
    fam = {"name": "f", "adjust": "holm", "comparisons": ["m1", "m2", "x"], "size": 3, "complete": False,
           "missing": ["m1", "m2"]}
    meta = {"flip_unit": "cluster", "families": [fam], "pseudo_replicated": []}
    lines = an.format_table3([missing, dict(missing, comparison="m2", not_computed=None), present], meta).splitlines()
    assert lines[0] == "f: Holm across its 3 comparisons" and lines[3:] == [
        "m1                           0        0   not computed",
        "m2                           0        0   not computed",
        "x                            2        2        -0.2500           [-1.0000, 0.5000]    0.5000    1.0000  no",
        "p values: sign flips of whole task clusters",
        "not computed: m1: no runs of its control arm (C on workload w)",
        "not computed: m2: no matched pairs",
        "Holm family f incomplete: no pairs for m1, m2 (counted as p = 1)"]


def test_empty_pairs_have_every_pair_column() -> None:
    assert list(an._empty_pairs().columns) == [*PAIR_KEYS, "comparison", "run_id_treatment", "run_id_control",
                                               "treatment", "control", "utility_diff"]


def test_estimates_are_reproducible_to_the_digit() -> None:
    """A published analysis is re-derivable: the same pairs, options and comparison give the same interval and
    p-value in every later version (random flips, not exact enumeration, so the seeds matter)."""
    rng = np.random.default_rng(3)
    pairs = pd.DataFrame({"utility_diff": rng.normal(size=40), "task_id": [f"t{i % 10}" for i in range(40)]})
    o = an.Options(resamples=300, permutations=200)
    nm = comp("nm", "recall", "wl", "I5-x", direction="higher", test="noninferiority")
    ni = comp("ni", "recall", "wl", "I5-x", direction="higher", test="noninferiority", margin=0.3)
    got = {"dup": an.estimate(pairs, DUP, o), "other": an.estimate(pairs, comp("other", "duplicate_effects", "wl",
                                                                                "I5-x"), o),
           "ni": an.estimate(pairs, ni, o), "nm": an.estimate(pairs, nm, o),
           "nm_pair": an.estimate(pairs, nm, an.Options(resamples=300, permutations=200, flip_unit="pair"))}
    expected = {"dup": (-0.2586943946373923, 0.21812873518867168, 0.7512437810945274),
                "other": (-0.2737178359023087, 0.2032758249426386, 0.8059701492537313),
                "ni": (-0.2695172705743279, 0.20612070096717108, 0.06467661691542288),
                "nm": (-0.2655260238178949, 0.17619944035314486, 0.582089552238806),
                "nm_pair": (-0.2655260238178949, 0.17619944035314486, 0.5870646766169154)}
    for name, (lo, hi, p) in expected.items():
        assert (got[name]["ci_low"], got[name]["ci_high"], got[name]["p_raw"]) == pytest.approx((lo, hi, p), abs=1e-12)
        assert got[name]["pairs"] == 40 and got[name]["clusters"] == 10 and got[name]["pseudo_replicated"] is False
    assert got["nm_pair"]["flip_unit"] == "pair" and got["nm"]["exact"] is False


def test_pseudo_replication_needs_replicates_that_all_agree() -> None:
    one_each = pd.DataFrame({"utility_diff": [1.0, 0.0, 1.0], "task_id": ["a", "b", "c"]})
    assert an.estimate(one_each, DUP, OPTS)["pseudo_replicated"] is False
    twins = pd.DataFrame({"utility_diff": [1.0, 1.0, 0.0, 0.0], "task_id": ["a", "a", "b", "b"]})
    assert an.estimate(twins, DUP, OPTS)["pseudo_replicated"] is True
    mixed = pd.DataFrame({"utility_diff": [1.0, 1.0, 0.0, 1.0], "task_id": ["a", "a", "b", "b"]})
    assert an.estimate(mixed, DUP, OPTS)["pseudo_replicated"] is False


def test_a_joint_criterion_after_a_comparison_without_partner() -> None:
    a = comp("a", "context_tokens", "wl", "I5-x", jointly_with="b")
    b = comp("b", "recall", "wl", "I5-x")
    rows = [{"comparison": "b", "criterion_met": False}, {"comparison": "a", "criterion_met": True}]
    an._joint(rows, (a, b))
    assert rows[1]["criterion_met"] is False and rows[1]["joint_note"] == "jointly with b (not met)"


def test_events_count_only_runs_with_an_event() -> None:
    df = pd.DataFrame(results())
    ev = an._events(df, DUP)
    assert ev["treatment_runs_with_event"] == 0 and ev["treatment_clusters_with_event"] == 0
    assert ev["treatment_cluster_rate_upper95"] == pytest.approx(clopper_pearson_upper(0, 6))
    assert an._events(df, REC) == {}


def test_manipulation_share_per_arm() -> None:
    df = pd.DataFrame(results())
    df.loc[(df["workload"] == "interruption") & (df["condition"] == "I5") & (df["task_id"] == "t1"),
           "fault_fired"] = False
    m = an.manipulation(df, REC, {"clusters": 6}, OPTS)
    assert m["treatment_fault_fired_share"] == pytest.approx(5 / 6) and m["control_fault_fired_share"] == 0.0
    df.loc[(df["workload"] == "interruption") & (df["condition"] == "I5"), "fault_fired"] = None
    m = an.manipulation(df, REC, {"clusters": 6}, OPTS)
    assert m["treatment_fault_fired_share"] is None
    assert m["caveat"] == "its faults never fired in the control arm (6 faulted runs)"


def test_an_unreadable_manifest_or_lock_is_named(tmp_path: Path) -> None:
    out = write(tmp_path / "o", results())
    (out / "manifest.json").write_text("{not json")
    with pytest.raises(InputError, match="not a valid aft-bench manifest"):
        an.current_lock(out)
    (out / "manifest.json").write_text(json.dumps({"config_path": str(tmp_path / "c.toml")}))
    (tmp_path / "c.lock.json").write_text("{not json")
    with pytest.raises(InputError, match="not a valid lock file"):
        an.current_lock(out)


def test_per_model_and_leave_one_out_estimates_have_their_own_seeds(tmp_path: Path) -> None:
    """Each per-model and leave-one-model-out estimate is the estimate of its own pairs under its own seed tag
    (`model=<m>`, `lomo=<m>`), so their intervals are re-derivable one by one."""
    rows = results()
    for r in rows:  # varied differences within each model, so the intervals depend on the resampling
        if r["workload"] == "response_loss" and r["condition"] == "I5-effects":
            r["duplicate_effects"] = int(r["task_id"][1:]) % 3 + (r["model"] == "m2")
    out = write(tmp_path / "o", rows)
    opts = an.Options(resamples=200, permutations=20)
    tables = an.analyze(out, opts, plan(COMPS))
    pairs = match_pairs(pd.read_parquet(out / "results.parquet"), DUP)
    for m in ("m1", "m2"):
        own = an.estimate(pairs[pairs["model"] == m], DUP, opts, f"model={m}")
        untagged = an.estimate(pairs[pairs["model"] == m], DUP, opts)
        row_ = by(tables["per_model"], model=m, comparison="dup")
        assert (row_["ci_low"], row_["ci_high"], row_["p_raw"]) == (own["ci_low"], own["ci_high"], own["p_raw"])
        assert (own["ci_low"], own["ci_high"], own["p_raw"]) != (untagged["ci_low"], untagged["ci_high"],
                                                                 untagged["p_raw"])
        left = an.estimate(pairs[pairs["model"] != m], DUP, opts, f"lomo={m}")
        untagged = an.estimate(pairs[pairs["model"] != m], DUP, opts)
        row_ = by(tables["lomo"], left_out=m, comparison="dup")
        assert (row_["ci_low"], row_["ci_high"], row_["p_raw"]) == (left["ci_low"], left["ci_high"], left["p_raw"])
        assert (left["ci_low"], left["ci_high"], left["p_raw"]) != (untagged["ci_low"], untagged["ci_high"],
                                                                    untagged["p_raw"])


def test_the_discovery_table_is_part_of_the_analysis(tmp_path: Path) -> None:
    disc = comp("disc", "context_tokens", "discovery", "I5-discovery")
    rows = [row(workload="discovery", task_id=f"t{i}", condition=c, catalog_size=size, context_tokens=tokens)
            for i in range(3) for size in (5, 50) for c, tokens in (("I5", 10 * size), ("I5-discovery", 30 * size))]
    out = write(tmp_path / "o", rows)
    tables = an.analyze(out, OPTS, plan((disc,)))
    assert tables["discovery"] == an.discovery_by_size(pd.read_parquet(out / "results.parquet"), (disc,))
    assert [(r["catalog_size"], r["condition"], r["context_tokens"]) for r in tables["discovery"]] == [
        (5, "I5", 50.0), (5, "I5-discovery", 150.0), (50, "I5", 500.0), (50, "I5-discovery", 1500.0)]
    assert json.loads((out / "analysis" / "discovery.json").read_text()) == tables["discovery"]


def test_pairs_parquet_has_no_index_column_for_other_readers(analyzed) -> None:
    import pyarrow.parquet as pq

    out, _ = analyzed
    names = pq.read_schema(out / "analysis" / "pairs.parquet").names
    assert names == [*PAIR_KEYS, "comparison", "run_id_treatment", "run_id_control", "treatment", "control",
                     "utility_diff"]
