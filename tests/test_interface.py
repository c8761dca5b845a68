"""Interfaces: mechanisms switch semantics on and off, never add business capability, never leak a removed path."""

from __future__ import annotations

import pytest

from aft_bench.common.errors import InputError
from aft_bench.episode.episode import open_pipeline
from aft_bench.interface.interface import Interface
from aft_bench.interface.mechanisms import load_conditions
from aft_bench.runtime.faults import FaultSchedule, FaultSpec
from aft_bench.runtime.trace import Trace

from conftest import task_of

CONDS = load_conditions()


def _iface(worlds, ref: str, condition: str, faults=()):
    world, task = task_of(worlds, ref)
    mech = CONDS.resolve(condition)
    pipe = open_pipeline(world, task, FaultSchedule(id="t", faults=tuple(faults)), 0, Trace(), durable_state=mech.durable)
    return Interface(pipe, mech), task


def test_ladder_and_removals_resolve() -> None:
    names = CONDS.names()
    assert names[:6] == ["I0", "I1", "I2", "I3", "I4", "I5"]
    for mech in ("discovery", "resume", "durable", "effects", "guards", "verification", "observability", "structured"):
        assert f"I5-{mech}" in names
    assert CONDS.resolve("I5-effects").effects == "legacy"
    assert CONDS.resolve("I5-guards").effects == "idempotent"
    i5 = CONDS.resolve("I5").to_dict()
    for name in (n for n in names[6:] if n.startswith("I5-")):
        diff = {k for k, v in CONDS.resolve(name).to_dict().items() if v != i5[k]}
        assert len(diff) == 1, (name, diff)  # a removal changes exactly one mechanism
    i3 = CONDS.resolve("I3").to_dict()
    misleading = CONDS.resolve("I3-misleading").to_dict()
    assert {k for k in i3 if i3[k] != misleading[k]} == {"annotations"}  # a variant changes what it names
    declared = CONDS.resolve("I5-declared-guards").to_dict()
    assert {k for k in i5 if i5[k] != declared[k]} == {"enforcement"}


def test_declared_guards_show_the_agent_exactly_i5_s_surface(worlds) -> None:
    """I5-declared-guards differs from I5 only at the commit point: the surface and every business schema (its
    description of version preconditions and authority, the expected_version field) are I5's, byte for byte."""
    from aft_bench.common.canonical import canonical_json

    for ref in ("payments/charge-o1", "exports/export-d1"):
        shown = {}
        for condition in ("I5", "I5-declared-guards"):
            iface, _ = _iface(worlds, ref, condition)
            shown[condition] = canonical_json([t.schema() for t in iface.surface()]
                                              + [t.schema() for t in iface.business.values()])
        assert shown["I5"] == shown["I5-declared-guards"], ref
        assert "Authority is checked at the commit point" in shown["I5"]
        assert ("expected_version" in shown["I5"]) == ref.startswith("payments")  # its updates take a version


def test_unknown_condition_lists_the_valid_ones() -> None:
    with pytest.raises(InputError) as exc:
        CONDS.resolve("I6", "cfg.toml", "experiment.conditions.0")
    assert exc.value.field == "experiment.conditions.0" and exc.value.value == "I6"
    assert "I5-verification" in exc.value.problem


@pytest.mark.parametrize("condition", CONDS.names())
def test_no_condition_adds_business_capability(worlds, condition: str) -> None:
    iface, _ = _iface(worlds, "payments/charge-o1", condition)
    assert set(iface.business) == set(iface.pipeline.backend.world.operations)
    names = {t.name for t in iface.surface()}
    lifecycle = {"get_invocation_status", "resume_invocation", "list_invocations", "verify_effect",
                 "search_tools", "describe_tool", "run_program",  # a program calls only the business tools
                 "resolve_tools", "call_tool", "list_profiles"}  # the router calls only them, inside a session
    assert names - lifecycle <= set(iface.business)


def test_lifecycle_tools_exist_exactly_where_their_mechanism_is_on(worlds) -> None:
    expect = {"observability": "get_invocation_status", "resume": "resume_invocation",
              "durable": "list_invocations", "verification": "verify_effect"}
    for name in CONDS.names():
        mech = CONDS.resolve(name)
        iface, _ = _iface(worlds, "payments/charge-o1", name)
        for m, tool in expect.items():
            assert (tool in iface.lifecycle) == getattr(mech, m), (name, tool)
        assert ("search_tools" in iface.lifecycle) == (mech.discovery in ("selective", "routed"))
        assert ("resolve_tools" in iface.lifecycle) == (mech.discovery == "routed")


def test_removed_mechanism_has_no_hidden_path(worlds) -> None:
    iface, _ = _iface(worlds, "payments/charge-o1", "I5-verification")
    obs = iface.call("verify_effect", {"tool": "charge_payment", "arguments": {}})
    assert obs.content["error"] == "unknown_tool"
    assert not iface.pipeline.trace.of_kind("verification")
    legacy, _ = _iface(worlds, "payments/charge-o1", "I5-effects")
    legacy.materialized.add("charge_payment")
    obs = legacy.call("charge_payment", {"order_id": "o1", "amount": 50, "note": "", "idempotency_key": "k"})
    assert obs.content["status"] == "error" and obs.content["error"] == "invalid_arguments"


def test_selective_discovery_requires_loading_before_calling(worlds) -> None:
    iface, _ = _iface(worlds, "payments/charge-o1", "I5")
    iface.surface()
    args = {"order_id": "o1", "amount": 50, "note": ""}
    assert iface.call("charge_payment", args).content["error"] == "unknown_tool"
    found = iface.call("search_tools", {"query": "charge a payment for an order"}).content["result"]["tools"]
    assert found and found[0]["name"] == "charge_payment"
    iface.call("describe_tool", {"name": "charge_payment"})
    assert iface.call("charge_payment", args).content["status"] == "ok"


def test_text_results_without_structured_outputs(worlds) -> None:
    iface, _ = _iface(worlds, "payments/charge-o1", "I0")
    iface.surface()
    out = iface.call("get_order", {"order_id": "o1"}).content
    assert isinstance(out, str) and out.startswith("OK: ")


def test_interruption_shows_a_handle_only_with_lifecycle_semantics(worlds) -> None:
    fault = FaultSpec(kind="transient_interruption", op="start_export", unit=1)
    args = {"dataset_id": "d1", "format": "csv"}
    for cond, expect in (("I5", "interrupted"), ("I1", "timeout")):
        iface, _ = _iface(worlds, "exports/export-d1", cond, [fault])
        iface.materialized.add("start_export")
        assert iface.call("start_export", args).content["status"] == expect


def test_guarded_effects_turn_drift_into_refusal(worlds) -> None:
    drift = FaultSpec(kind="permission_drift", op="refund_payment")
    args = {"payment_id": "p0", "amount": 30}
    guarded, _ = _iface(worlds, "payments/refund-p0", "I4", [drift])
    weak, _ = _iface(worlds, "payments/refund-p0", "I5-guards", [drift])
    weak.materialized.add("refund_payment")
    assert guarded.call("refund_payment", args).content["error"] == "unauthorized"
    assert weak.call("refund_payment", args).content["status"] == "ok"
    assert weak.pipeline.backend.state["ledger"][0]["authorized"] is False


# Removing a mechanism removes exactly its affordances, on the world of every workload.
AFFORDANCES = {  # tools it adds, business parameters it adds
    "observability": ({"get_invocation_status"}, set()),
    "resume": ({"resume_invocation"}, set()),
    "durable": ({"list_invocations"}, set()),
    "verification": ({"verify_effect"}, set()),
    "effects": (set(), {"idempotency_key", "expected_version"}),
    "guards": (set(), {"expected_version"}),
    "structured": (set(), set()),
}


def _workload_worlds():
    from aft_bench.tasks.workloads import load_workloads, world_for

    from conftest import WORLDS

    for wl in load_workloads(WORLDS).items.values():
        if wl.external is not None:  # a real server's surface: the GW-* conditions, tests/test_external_git.py
            continue
        task = wl.tasks[0]
        yield wl.id, world_for(wl, task, 10 if wl.info.catalog_sizes else None, 0), task


def _tools(world, task, condition: str) -> dict[str, set[str]]:
    mech = CONDS.resolve(condition)
    iface = Interface(open_pipeline(world, task, FaultSchedule(id="t"), 0, Trace(), durable_state=mech.durable), mech)
    tools = {t.name: set(t.parameters["properties"]) for t in iface.lifecycle.values()}
    tools.update({name: set(t.parameters["properties"]) for name, t in iface.business.items()})
    return tools


@pytest.mark.parametrize("mechanism", sorted(AFFORDANCES))
def test_a_removal_takes_away_exactly_its_affordances_on_every_workload(mechanism: str) -> None:
    extra_tools, extra_params = AFFORDANCES[mechanism]
    for wid, world, task in _workload_worlds():
        full, removed = _tools(world, task, "I5"), _tools(world, task, f"I5-{mechanism}")
        assert set(full) - set(removed) == extra_tools and set(removed) <= set(full), (wid, mechanism)
        for name, params in removed.items():
            assert full[name] - params <= extra_params and params <= full[name], (wid, mechanism, name)
        writes = [n for n, op in world.operations.items()  # version preconditions exist for updates only
                  if op.is_write and (mechanism != "guards" or op.kind == "update")]
        if extra_params and writes:
            assert any(full[n] - removed[n] for n in writes), (wid, mechanism)


class Recorder:
    """The deterministic agent, recording every observation it is given."""

    def __init__(self, task) -> None:
        from aft_bench.agents.deterministic import DeterministicAgent, Params

        self.inner = DeterministicAgent(Params(), task.script)
        self.seen: list = []

    async def start(self, brief, surface) -> None:
        await self.inner.start(brief, surface)

    async def restart(self, surface) -> None:
        await self.inner.restart(surface)

    async def act(self, observation):
        if observation is not None:
            self.seen.append(observation)
        return await self.inner.act(observation)

    def usage(self):
        return self.inner.usage()

    def take_records(self):
        return self.inner.take_records()


def test_no_structured_value_reaches_a_text_condition() -> None:
    from aft_bench.episode.episode import Setup, run_sync
    from aft_bench.tasks.workloads import load_workloads, world_for

    from conftest import WORLDS

    seen = 0
    for wl in load_workloads(WORLDS).items.values():
        if wl.external is not None:  # a real server's surface: the GW-* conditions, tests/test_external_git.py
            continue
        for task in wl.tasks:
            for variant in wl.variants_for(task):
                world = world_for(wl, task, 10 if wl.info.catalog_sizes else None, 0)
                agent = Recorder(task)
                run_sync(Setup(world, task, wl.schedule(variant, task), 0, CONDS.resolve("I5-structured")), agent)
                for obs in agent.seen:
                    assert isinstance(obs.content, str) or (obs.lost and obs.content is None), (wl.id, obs)
                seen += len(agent.seen)
    assert seen > 100


# Result fields: each delivery the pipeline can produce, rendered under I5 and under each removal. Turning a
# mechanism off removes exactly its result fields (and changes exactly its values), nothing else.
DELIVERIES = {
    "committed": ("delivered", {"status": "ok", "result": {"ref": "payments/p1"}, "parts_done": 1, "parts_total": 1,
                                "inv": "inv-1"}),
    "replayed": ("delivered", {"status": "ok", "result": {"ref": "payments/p1"}, "replayed": True, "inv": "inv-1"}),
    "rejected": ("delivered", {"status": "error", "code": "precondition_failed", "detail": "v2, expected 1",
                               "inv": "inv-1"}),
    "interrupted": ("interrupted", None),
    "dropped": ("dropped", None),
}
RESULT_FIELDS = {  # removal -> (result fields it removes, fields whose value it changes)
    "effects": ({"effect"}, set()),
    "resume": (set(), {"resumable"}),
    "observability": (set(), set()),  # invocation ids stay: resumable invocations still carry them
    "durable": (set(), set()),
    "guards": (set(), set()),
    "verification": (set(), set()),
    "discovery": (set(), set()),
}


def _rendered(worlds, condition: str) -> dict[str, object]:
    from aft_bench.runtime.pipeline import Delivery

    iface, _ = _iface(worlds, "payments/charge-o1", condition)
    return {name: iface._render(Delivery("inv-1", transport, response), "k-1").content
            for name, (transport, response) in DELIVERIES.items()}


@pytest.mark.parametrize("mechanism", sorted(RESULT_FIELDS))
def test_a_removal_takes_away_exactly_its_result_fields(worlds, mechanism: str) -> None:
    full, removed = _rendered(worlds, "I5"), _rendered(worlds, f"I5-{mechanism}")
    gone, changed = RESULT_FIELDS[mechanism]
    for name in DELIVERIES:
        a, b = full[name], removed[name]
        assert isinstance(a, dict) and isinstance(b, dict), name
        assert set(a) - set(b) <= gone and set(b) <= set(a), (mechanism, name, set(a) ^ set(b))
        differ = {k for k in set(a) & set(b) if a[k] != b[k]}
        assert differ <= changed, (mechanism, name, differ)
    if gone:
        assert any(set(full[n]) - set(removed[n]) == gone for n in DELIVERIES), mechanism
    if changed:
        assert any(full[n].get(k) != removed[n].get(k) for n in DELIVERIES for k in changed), mechanism


def test_without_structured_results_every_delivery_is_one_of_the_text_forms(worlds) -> None:
    full, text = _rendered(worlds, "I5"), _rendered(worlds, "I5-structured")
    assert all(isinstance(v, str) for v in text.values())
    assert text["committed"].startswith("OK: ") and text["rejected"].startswith("ERROR precondition_failed: ")
    assert text["interrupted"] == "INTERRUPTED: inv-1 resumable" and text["dropped"].startswith("TIMEOUT")
    assert "parts" in full["committed"] and "parts" not in text["committed"]  # what text cannot carry
