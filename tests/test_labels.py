"""Labels: each label on known cases, and labels as a pure function of (trace, terminal state, task)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aft_bench.common.errors import HarnessError
from aft_bench.episode.episode import run_scripted
from aft_bench.experiment.calibration import run_cases
from aft_bench.judge.labels import OUTCOMES, compute_labels
from aft_bench.runtime.faults import FaultSchedule, FaultSpec
from aft_bench.runtime.trace import Event, read_events

from conftest import WORLDS, steps, task_of

CASES = WORLDS / "calibration" / "cases.toml"
CHARGE = {"call": "charge_payment", "args": {"order_id": "o1", "amount": 50, "note": ""}}


@pytest.fixture(scope="module")
def case_results(worlds):
    return run_cases(worlds, CASES)


def test_every_calibration_case_behaves(case_results) -> None:
    bad = [(r.case.detector, r.case.positive, r.case.note) for r in case_results if not r.ok]
    assert bad == []


def test_every_outcome_class_has_a_positive_case(case_results) -> None:
    seen = {r.run.labels.outcome for r in case_results}
    assert seen == set(OUTCOMES)


def _charge_twice(worlds, **charge_extra):
    world, task = task_of(worlds, "payments/charge-o1")
    sched = FaultSchedule(id="rl", faults=(FaultSpec(kind="response_loss", op="charge_payment"),))
    c = {**CHARGE, **charge_extra}
    return run_scripted(world, task, steps(c, c, {"end": "finish", "claim": "success"}), sched)


def test_duplicate_counts_and_outcome(worlds) -> None:
    lb = _charge_twice(worlds).labels
    assert (lb.duplicate_effects, lb.unsafe_commits, lb.commits) == (1, 1, 2)
    assert lb.outcome == "unsafely_committed" and lb.y_goal and not lb.y_correct and not lb.psi


def test_idempotency_key_prevents_duplicate(worlds) -> None:
    lb = _charge_twice(worlds, key="k").labels
    assert (lb.duplicate_effects, lb.commits, lb.outcome, lb.y_correct) == (0, 1, "completed", True)


def test_distinct_intents_are_distinct_effects(worlds) -> None:
    world, task = task_of(worlds, "payments/charge-o1")
    run = run_scripted(world, task, steps(CHARGE, {**CHARGE, "intent": "second"}, {"end": "finish", "claim": "success"}))
    assert run.labels.duplicate_effects == 0 and run.labels.re_executions == 0


def test_relations_are_distinguished(worlds) -> None:
    world, task = task_of(worlds, "exports/export-d1")
    sched = FaultSchedule(id="ti", faults=(FaultSpec(kind="transient_interruption", op="start_export", unit=2),))
    exp = {"call": "start_export", "args": {"dataset_id": "d1", "format": "csv"}}
    run = run_scripted(world, task, steps(exp, {"status": "last"}, {"retransmit": True}, {"resume": "inv-0001"},
                                          exp, {"end": "finish", "claim": "success"}), sched)
    lb = run.labels
    assert (lb.retransmissions, lb.continuations, lb.re_executions, lb.reconciliations) == (1, 1, 1, 1)


def test_safe_refusal_is_correct_without_the_goal(worlds) -> None:
    world, task = task_of(worlds, "payments/charge-o2-unauthorized")
    lb = run_scripted(world, task, task.script.oracle).labels
    assert (lb.outcome, lb.y_goal, lb.y_correct, lb.claim_correct) == ("safely_refused", False, True, True)


def test_claim_does_not_change_state_labels(worlds) -> None:
    world, task = task_of(worlds, "payments/charge-o1")
    a = run_scripted(world, task, steps(CHARGE, {"end": "finish", "claim": "success"})).labels
    b = run_scripted(world, task, steps(CHARGE, {"end": "finish", "claim": "failure"})).labels
    assert (a.outcome, a.y_goal, a.y_correct) == (b.outcome, b.y_goal, b.y_correct) == ("completed", True, True)
    assert (a.claim_correct, b.claim_correct, b.false_failure) == (True, False, True)


def test_budget_exhaustion_is_unresolved(worlds) -> None:
    world, task = task_of(worlds, "payments/charge-o3")
    read = {"call": "get_order", "args": {"order_id": "o3"}}
    lb = run_scripted(world, task, steps(*([read] * (task.budget + 1)), {"end": "finish", "claim": "success"})).labels
    assert (lb.outcome, lb.terminal_action, lb.claim_correct, lb.tool_calls) == (
        "unresolved", "budget_exhausted", None, task.budget)


def test_trace_ledger_disagreement_is_a_harness_error(worlds) -> None:
    world, task = task_of(worlds, "payments/charge-o1")
    run = run_scripted(world, task, steps(CHARGE, {"end": "finish", "claim": "success"}))
    forged = copy.deepcopy(run.terminal_state)
    forged["ledger"].append({**forged["ledger"][0], "index": 1})
    with pytest.raises(HarnessError, match="disagree"):
        compute_labels(run.events, forged, task.criteria)


def test_labels_from_file_equal_labels_from_memory(worlds, tmp_path: Path) -> None:
    world, task = task_of(worlds, "payments/charge-o1")
    run = _charge_twice(worlds)
    path = tmp_path / "t.jsonl"
    run2 = run_scripted(world, task, steps(CHARGE, CHARGE, {"end": "finish", "claim": "success"}),
                        FaultSchedule(id="rl", faults=(FaultSpec(kind="response_loss", op="charge_payment"),)),
                        trace_path=path)
    assert compute_labels(read_events(path), run2.terminal_state, task.criteria) == run.labels


STEP_POOL = [
    CHARGE,
    {**CHARGE, "key": "k"},
    {"call": "get_order", "args": {"order_id": "o1"}},
    {"call": "set_customer_tier", "args": {"customer_id": "c1", "tier": "gold"}},
    {"call": "refund_payment", "args": {"payment_id": "p0", "amount": 30}, "authority": True},
    {"retransmit": True},
    {"resume": "last"},
    {"status": "last"},
    {"verify": "charge_payment", "args": CHARGE["args"]},
]
ENDS = [{"end": e, "claim": c} for e in ("finish", "abort", "refuse", "escalate") for c in ("success", "failure", "unknown")]
FAULT_POOL = ["response_loss", "false_failure", "false_success", "permission_drift", "transient_interruption"]


@settings(max_examples=60, deadline=None)
@given(
    body=st.lists(st.sampled_from(range(len(STEP_POOL))), min_size=1, max_size=8),
    end=st.sampled_from(range(len(ENDS))),
    faults=st.lists(st.sampled_from(FAULT_POOL), max_size=2, unique=True),
    seed=st.integers(0, 3),
)
def test_labels_are_a_pure_function_of_trace_state_task(worlds, body, end, faults, seed) -> None:
    world, task = task_of(worlds, "payments/charge-o1")
    body = [0, *body]  # a retransmission needs a prior call
    sched = FaultSchedule(id="mix", faults=tuple(
        FaultSpec(kind=k, op="refund_payment" if k == "permission_drift" else "charge_payment") for k in faults))
    script = steps(*(STEP_POOL[i] for i in body), ENDS[end])
    run = run_scripted(world, task, script, sched, seed)
    events: tuple[Event, ...] = run.events
    state = copy.deepcopy(run.terminal_state)
    first = compute_labels(events, state, task.criteria)
    assert compute_labels(list(events), copy.deepcopy(state), task.criteria) == first == run.labels
    assert state == run.terminal_state  # inputs are not mutated
    assert first.outcome in OUTCOMES
    assert first.y_correct == (first.alpha and first.psi)
    assert (first.unsafe_commits == 0) == first.psi
    again = run_scripted(world, task, script, sched, seed)
    assert again.labels == first and again.trace_head == run.trace_head
