"""Every fault kind fires exactly at its stage boundary, on its target invocation, once, and does what it says."""

from __future__ import annotations

from pathlib import Path

import pytest

from aft_bench.common.errors import InputError
from aft_bench.episode.episode import EpisodeResult, run_scripted
from aft_bench.runtime.faults import FAULT_STAGES, FaultSchedule, FaultSpec, load_schedule, realize
from aft_bench.runtime.trace import Event

from conftest import WORLDS, steps, task_of

CHARGE = {"call": "charge_payment", "args": {"order_id": "o1", "amount": 50, "note": ""}}
EMAIL = {"call": "update_customer_email", "args": {"customer_id": "c1", "email": "ada@new.example.org"}}
FULFIL = {"call": "fulfil_order", "args": {"order_id": "o2"}}
REFUND = {"call": "refund_payment", "args": {"payment_id": "p0", "amount": 30}}
EXPORT = {"call": "start_export", "args": {"dataset_id": "d1", "format": "csv"}}
FINISH = {"end": "finish", "claim": "success"}

# kind -> (task, fault extras, script). Each script calls the target twice so "only once" is observable.
SCENARIOS = {
    "response_loss": ("payments/charge-o1", {}, [CHARGE, CHARGE, FINISH]),
    "false_failure": ("payments/charge-o1", {}, [CHARGE, CHARGE, FINISH]),
    "false_success": ("payments/email-c1", {}, [EMAIL, EMAIL, FINISH]),
    "stale_state": ("payments/email-c1", {"fields": {"email": "z@z"}}, [{"call": "get_customer", "args": {"customer_id": "c1"}}, EMAIL, EMAIL, FINISH]),
    "permission_drift": ("payments/refund-p0", {}, [REFUND, REFUND, FINISH]),
    "partial_completion": ("payments/fulfil-o2", {"parts": 1}, [FULFIL, FULFIL, FINISH]),
    "transient_interruption": ("exports/export-d1", {"unit": 2}, [EXPORT, EXPORT, FINISH]),
    "state_loss": ("exports/export-d1", {"unit": 3}, [EXPORT, EXPORT, FINISH]),
}


def _run(worlds, kind: str, **over) -> EpisodeResult:
    ref, extra, script = SCENARIOS[kind]
    world, task = task_of(worlds, ref)
    op = next(s["call"] for s in script if s.get("call") not in (None, "get_customer"))
    spec = FaultSpec(kind=kind, op=op, **{**extra, **over})
    return run_scripted(world, task, steps(*script), FaultSchedule(id=kind, faults=(spec,)), seed=0)


def _fault_events(events: tuple[Event, ...], kind: str) -> list[Event]:
    return [e for e in events if e.kind == kind]


COMMIT_ALTERING = {"false_success", "partial_completion"}


def _acting_stage(events: tuple[Event, ...], fired: Event) -> str:
    """The stage at which the fault acted: the invocation's last stage before it, or for commit-altering
    faults the stage event right after it (which records the altered commit)."""
    inv = fired.data["inv"]
    own = [e for e in events if e.kind == "stage" and e.data["inv"] == inv]
    if fired.data["kind"] in COMMIT_ALTERING:
        return next(e for e in own if e.seq > fired.seq).data["stage"]
    return [e for e in own if e.seq < fired.seq][-1].data["stage"]


def test_every_fault_kind_has_a_scenario() -> None:
    assert set(SCENARIOS) == set(FAULT_STAGES)


@pytest.mark.parametrize("kind", sorted(SCENARIOS))
def test_fault_fires_once_at_its_stage_on_its_invocation(worlds, kind: str) -> None:
    run = _run(worlds, kind)
    ev = run.events
    planned, armed, fired = (_fault_events(ev, k) for k in ("fault_planned", "fault_armed", "fault_fired"))
    assert len(planned) == len(armed) == len(fired) == 1
    assert planned[0].seq < armed[0].seq < fired[0].seq
    first_inv = next(e for e in ev if e.kind == "invocation" and e.data["op"] != "get_customer").data["inv"]
    assert armed[0].data["inv"] == fired[0].data["inv"] == first_inv
    assert fired[0].data["stage"] == str(FAULT_STAGES[kind][0])
    assert _acting_stage(ev, fired[0]) == str(FAULT_STAGES[kind][0])
    assert run.labels.fault_fired is True


@pytest.mark.parametrize("kind", sorted(SCENARIOS))
def test_fault_on_a_later_occurrence_leaves_the_first_call_alone(worlds, kind: str) -> None:
    run = _run(worlds, kind, occurrence=2)
    ev = run.events
    invs = [e.data["inv"] for e in ev if e.kind == "invocation" and e.data["op"] != "get_customer"]
    fired = _fault_events(ev, "fault_fired")
    assert len(fired) == 1 and fired[0].data["inv"] == invs[1]


def test_unfired_fault_is_marked_not_fired(worlds) -> None:
    run = _run(worlds, "response_loss", occurrence=3)
    assert run.labels.faults_planned == 1 and run.labels.faults_fired == 0
    assert run.labels.fault_fired is False


def _stages(ev: tuple[Event, ...], inv: str) -> list[str]:
    return [e.data["stage"] for e in ev if e.kind == "stage" and e.data["inv"] == inv]


def test_clean_invocation_passes_every_stage_in_order(worlds) -> None:
    world, task = task_of(worlds, "payments/charge-o1")
    run = run_scripted(world, task, steps(CHARGE, FINISH))
    assert _stages(run.events, "inv-0001") == [
        "REQUEST_ACCEPTED", "BACKEND_STARTED", "EFFECT_COMMITTED", "RESPONSE_GENERATED", "RESPONSE_DELIVERED"
    ]


def test_response_loss_commits_then_drops(worlds) -> None:
    run = _run(worlds, "response_loss")
    assert _stages(run.events, "inv-0001")[-3:] == ["EFFECT_COMMITTED", "RESPONSE_GENERATED", "RESPONSE_DROPPED"]
    assert run.terminal_state["ledger"][0]["invocation"] == "inv-0001"
    assert run.labels.duplicate_effects == 1 and run.labels.re_executions == 1


def test_false_success_reports_ok_without_committing(worlds) -> None:
    run = _run(worlds, "false_success")
    gen = next(e for e in run.events if e.kind == "stage" and e.data["stage"] == "RESPONSE_GENERATED")
    assert gen.data["response"]["status"] == "ok"
    assert [x["invocation"] for x in run.terminal_state["ledger"]] == ["inv-0002"]  # only the 2nd call commits


def test_false_failure_commits_but_reports_error(worlds) -> None:
    run = _run(worlds, "false_failure")
    first = next(e for e in run.events if e.kind == "stage" and e.data["stage"] == "RESPONSE_DELIVERED")
    assert first.data["response"]["status"] == "error"
    assert run.terminal_state["ledger"][0]["invocation"] == "inv-0001"


def test_partial_completion_realizes_some_parts_and_overstates(worlds) -> None:
    run = _run(worlds, "partial_completion")
    entry = run.terminal_state["ledger"][0]
    assert entry["parts_total"] == 3 and len(entry["parts_realized"]) == 1
    delivered = next(e for e in run.events if e.kind == "stage" and e.data["stage"] == "RESPONSE_DELIVERED")
    assert delivered.data["response"]["parts_done"] == 3


def test_stale_state_bumps_the_target_between_read_and_write(worlds) -> None:
    run = _run(worlds, "stale_state")
    w = _fault_events(run.events, "world_write")[0]
    assert (w.data["ref"], w.data["version_before"], w.data["version_after"]) == ("customers/c1", 1, 2)
    assert run.labels.stale_writes == 1


def test_permission_drift_revokes_after_admission(worlds) -> None:
    run = _run(worlds, "permission_drift")
    assert "refunds.issue" not in run.terminal_state["permissions"]["agent"]
    # first call admitted then committed without authority; second call refused at admission
    assert run.terminal_state["ledger"][0]["authorized"] is False and len(run.terminal_state["ledger"]) == 1
    assert run.labels.unauthorized_effects == 1


@pytest.mark.parametrize("unit", [1, 2, 3, 4, 9])
def test_interruption_fires_after_the_named_work_unit(worlds, unit: int) -> None:
    run = _run(worlds, "transient_interruption", unit=unit)
    fired = _fault_events(run.events, "fault_fired")[0]
    units_before = [e for e in run.events[: fired.seq] if e.kind == "work_unit" and e.data["inv"] == "inv-0001"]
    assert len(units_before) == min(unit, 4) == fired.data["unit"]


def test_state_loss_discards_local_state_unless_durable(worlds) -> None:
    world, task = task_of(worlds, "exports/export-d2")
    sched = FaultSchedule(id="sl", faults=(FaultSpec(kind="state_loss", op="start_export", unit=2),))
    script = steps({"call": "start_export", "args": {"dataset_id": "d2", "format": "parquet"}},
                   {"resume": "last"}, FINISH)
    lost = run_scripted(world, task, script, sched)
    kept = run_scripted(world, task, script, sched, durable_state=True)
    assert _fault_events(lost.events, "state_lost")[0].data["discarded"] == ["inv-0001"]
    assert _fault_events(lost.events, "resume_failed") and not lost.terminal_state["ledger"]
    assert _fault_events(kept.events, "reconstructed")[0].data["units_done"] == 2
    assert kept.labels.recovered is True and lost.labels.recovered is False


def test_realize_is_seeded_and_recorded(worlds) -> None:
    sched = load_schedule(WORLDS / "exports" / "faults" / "transient_interruption.toml")
    draws = {realize(sched, s)[0].unit for s in range(40)}
    assert draws == {1, 2, 3}
    assert realize(sched, 7) == realize(sched, 7)
    world, task = task_of(worlds, "exports/export-d1")
    run = run_scripted(world, task, steps(EXPORT, {"resume": "last"}, FINISH), sched, seed=7)
    planned = _fault_events(run.events, "fault_planned")[0]
    assert planned.data["unit"] == realize(sched, 7)[0].unit


def test_bad_fault_schedule_names_field(tmp_path: Path) -> None:
    p = tmp_path / "f.toml"
    p.write_text('id = "x"\n[[faults]]\nkind = "meteor_strike"\nop = "charge_payment"\n')
    with pytest.raises(InputError) as exc:
        load_schedule(p)
    assert exc.value.field == "faults.0.kind" and exc.value.value == "meteor_strike"


def test_durable_invocation_record_is_canonical_json_and_round_trips() -> None:
    from dataclasses import asdict

    from aft_bench.common.canonical import canonical_json
    from aft_bench.runtime.pipeline import Invocation, Request
    from aft_bench.world.backend import Guards, ResolvedOp

    req = Request("charge_payment", {"order_id": "o1", "amount": 50, "note": "é"}, "agent", "task", "req-1",
                  Guards("k", 3, True))
    inv = Invocation("inv-0001", req, ResolvedOp("charge_payment", req.args, {"order_id": "o1"}, ("orders/o1",),
                                                 ("effect",), 2), "eff-1", "running", 1, None, None)
    assert inv.to_json() == canonical_json({
        "inv": "inv-0001", "request": asdict(req), "resolved": asdict(inv.resolved), "effect_id": "eff-1",
        "status": "running", "units_done": 1, "response": None, "commit_status": None})
    inv.status, inv.response = "responded", {"status": "ok", "result": {"refs": ["orders/o1"]}}
    back = Invocation.from_json(inv.to_json())
    assert (back.request, back.resolved, back.status, back.response) == (req, inv.resolved, "responded",
                                                                         inv.response)
    # snapshots share the fixed members' JSON with their original (made once), and still spell what changed since
    first = inv.snapshot()
    inv.status, inv.commit_status, inv.units_done = "committed", "committed", 2
    second = inv.snapshot()
    assert first._fixed_json is second._fixed_json is inv._fixed_json is not None
    assert second.to_json() == canonical_json({
        "inv": "inv-0001", "request": asdict(req), "resolved": asdict(inv.resolved), "effect_id": "eff-1",
        "status": "committed", "units_done": 2, "response": inv.response, "commit_status": "committed"})
    assert first.to_json() != second.to_json() and '"status":"responded"' in first.to_json()


@pytest.mark.parametrize("value", [None, True, False, 1, 0, -7, 2 ** 70, "committed", "é\n\"", "\ud800", ""])
def test_a_remembered_words_json_is_its_canonical_json_and_keeps_equal_keys_of_other_types_apart(value) -> None:
    from aft_bench.common.canonical import canonical_json, word_json

    assert word_json(value) == canonical_json(value)
    assert word_json(1) == "1" and word_json(True) == "true"  # equal and hash-equal, yet spelled apart


# --- exact outputs that mutation testing showed were free to change -----------------------------------------------
def test_schedule_errors_name_file_field_value_and_problem(tmp_path: Path) -> None:
    from aft_bench.runtime.faults import check_schedule, require_ops

    sched = FaultSchedule(id="s", faults=(FaultSpec(kind="response_loss", op="a"), FaultSpec(kind="response_loss")))
    with pytest.raises(InputError) as exc:
        require_ops(sched, "f.toml")
    assert str(exc.value) == "f.toml: field 'faults.1.op': Field required (got '<missing>')"
    with pytest.raises(InputError) as exc:
        check_schedule(sched, ["b", "c"], "f.toml")
    assert str(exc.value) == "f.toml: field 'faults.0.op': unknown operation; known: b, c (got 'a')"
    p = tmp_path / "s.toml"
    p.write_text('id = "s"\n[[faults]]\nkind = "response_loss"\n')
    with pytest.raises(InputError) as exc:
        load_schedule(p)
    assert str(exc.value) == f"{p}: field 'faults.0.op': Field required (got '<missing>')"


def test_realize_fixes_every_choice_from_the_seed_exactly() -> None:
    sched = FaultSchedule(id="r", faults=(
        FaultSpec(kind="permission_drift", op="charge", permission="payments.charge", occurrence=(1, 9)),
        FaultSpec(kind="transient_interruption", op="export", unit=(1, 50), fields={"x": 1}),
    ))
    a, b = realize(sched, 3), realize(sched, 3)
    assert a == b
    assert [p.index for p in a] == [0, 1] and a[0].permission == "payments.charge" and a[1].fields == {"x": 1}
    assert a[0].describe() == {"fault": 0, "kind": "permission_drift", "stage": "REQUEST_ACCEPTED", "op": "charge",
                               "occurrence": a[0].occurrence, "unit": 1, "parts": 1, "fields": {},
                               "permission": "payments.charge"}
    draws = {(p[0].occurrence, p[1].unit) for p in (realize(sched, s) for s in range(20))}
    assert len(draws) > 5  # the seed, not the clock or a constant, decides
    assert realize(sched, 3) == realize(FaultSchedule(**sched.model_dump()), 3)  # string-seeded: stable
    with pytest.raises(ValueError, match=r"schedule x: faults \[0\] name no operation"):
        realize(FaultSchedule(id="x", faults=(FaultSpec(kind="response_loss"),)), 0)


def test_injector_skips_faults_not_due_and_keeps_looking() -> None:
    from aft_bench.runtime.faults import Injector
    from aft_bench.runtime.stages import Stage

    sched = FaultSchedule(id="i", faults=(FaultSpec(kind="response_loss", op="a"),
                                          FaultSpec(kind="transient_interruption", op="b", unit=2),
                                          FaultSpec(kind="stale_state", op="b")))
    inj = Injector(realize(sched, 0))
    assert [f.index for f in inj.on_new_invocation("a", "inv-a")] == [0]
    assert [f.index for f in inj.on_new_invocation("b", "inv-b")] == [1, 2]
    assert inj.due(Stage.BACKEND_STARTED, "inv-a") == []  # fault 0 acts at another stage
    # at the stage itself (no unit): the unit fault waits for its unit, the stale write is due
    assert [f.index for f in inj.due(Stage.BACKEND_STARTED, "inv-b")] == [2]
    inj.fire(sched_fault := realize(sched, 0)[2])
    assert sched_fault.index in inj.fired
    assert [f.index for f in inj.due(Stage.BACKEND_STARTED, "inv-b", unit=1, last_unit=3)] == []
    assert [f.index for f in inj.due(Stage.BACKEND_STARTED, "inv-b", unit=2, last_unit=3)] == [1]
    assert [f.index for f in inj.due(Stage.BACKEND_STARTED, "inv-b", unit=1, last_unit=1)] == [1]  # past the end


def test_an_invalid_schedule_file_is_named_in_the_error(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text('id = "s"\n[[faults]]\nkind = "response_loss"\nop = "x"\nunit = [3, 1]\n')
    with pytest.raises(InputError) as exc:
        load_schedule(p)
    assert str(exc.value).startswith(f"{p}: field 'faults.0.unit'")
