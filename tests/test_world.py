"""World manifests, the in-memory backend, reset exactness and logical effect identity."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aft_bench.common.errors import InputError
from aft_bench.world.backend import BackendError, Guards, MemoryBackend, effect_identity
from aft_bench.world.manifest import World, load_world

from conftest import WORLDS


def test_worlds_load_with_expected_shape(payments: World, exports: World) -> None:
    assert payments.id == "payments" and exports.id == "exports"
    classes = {op.effect for op in payments.operations.values()}
    assert classes == {"read", "reversible", "compensatable", "irreversible"}
    assert exports.operations["start_export"].kind == "job"
    s0 = payments.initial_state()
    assert s0["records"]["customers"]["c1"]["_version"] == 1
    assert "payments.charge" in s0["permissions"]["agent"]


def test_job_work_units_come_from_the_record(exports: World) -> None:
    be = MemoryBackend(exports)
    assert be.resolve("start_export", {"dataset_id": "d3", "format": "csv"}).work_units == 8


CHARGE = {"order_id": "o1", "amount": 50, "note": "x"}


def test_effect_identity_uses_business_args_and_intent_only(payments: World) -> None:
    be = MemoryBackend(payments)
    a = be.resolve("charge_payment", CHARGE).business_args
    b = be.resolve("charge_payment", {**CHARGE, "note": "different note"}).business_args
    assert a == b == {"amount": 50, "order_id": "o1"}
    assert effect_identity("charge_payment", a, "task") == effect_identity("charge_payment", b, "task")
    assert effect_identity("charge_payment", a, "task") != effect_identity("charge_payment", a, "second-charge")
    assert effect_identity("charge_payment", a, "task") != effect_identity("charge_payment", {**a, "amount": 51}, "task")


@pytest.mark.parametrize(
    "args, code",
    [
        ({"order_id": "o99", "amount": 5, "note": ""}, "not_found"),
        ({"order_id": "o1", "amount": "5", "note": ""}, "invalid_arguments"),
        ({"order_id": "o1", "amount": True, "note": ""}, "invalid_arguments"),
        ({"order_id": "o1", "note": ""}, "invalid_arguments"),
        ({**CHARGE, "extra": 1}, "invalid_arguments"),
    ],
)
def test_bad_arguments_are_business_errors(payments: World, args: dict, code: str) -> None:
    op = "get_order" if code == "not_found" else "charge_payment"
    args = {"order_id": args["order_id"]} if op == "get_order" else args
    with pytest.raises(BackendError) as exc:
        MemoryBackend(payments).resolve(op, args)
    assert exc.value.code == code


def test_guards_idempotency_version_and_authority(payments: World) -> None:
    be = MemoryBackend(payments)
    plan = be.resolve("charge_payment", CHARGE)
    first = be.commit(plan, effect_id="e", invocation="i1", principal="agent", guards=Guards(idempotency_key="k"))
    again = be.commit(plan, effect_id="e", invocation="i2", principal="agent", guards=Guards(idempotency_key="k"))
    assert (first.status, again.status) == ("committed", "replayed")
    assert len(be.state["ledger"]) == 1 and again.result == first.result

    upd = be.resolve("update_customer_email", {"customer_id": "c1", "email": "n@x"})
    be.concurrent_write("customers/c1", {"email": "other@x"})
    rej = be.commit(upd, effect_id="u", invocation="i3", principal="agent", guards=Guards(expected_version=1))
    assert rej.status == "precondition_failed" and be.record("customers/c1")["email"] == "other@x"

    be.revoke("agent", "customers.update")
    refused = be.commit(upd, effect_id="u", invocation="i4", principal="agent",
                        guards=Guards(authority_at_commit=True))
    assert refused.status == "unauthorized"
    legacy = be.commit(upd, effect_id="u", invocation="i5", principal="agent")
    assert legacy.status == "committed" and legacy.entry["authorized"] is False


def test_update_that_changes_nothing_realizes_nothing(payments: World) -> None:
    be = MemoryBackend(payments)
    plan = be.resolve("set_customer_tier", {"customer_id": "c2", "tier": "gold"})
    out = be.commit(plan, effect_id="t", invocation="i", principal="agent")
    assert out.entry["parts_realized"] == [] and be.record("customers/c2")["_version"] == 1


def test_refund_compensates_the_charge(payments: World) -> None:
    be = MemoryBackend(payments)
    be.commit(be.resolve("charge_payment", CHARGE), effect_id="c", invocation="i1", principal="agent")
    ref = be.state["ledger"][0]["result"]["ref"]
    pid = ref.split("/")[1]
    be.commit(be.resolve("refund_payment", {"payment_id": pid, "amount": 50}), effect_id="r", invocation="i2",
              principal="agent")
    assert be.state["ledger"][0]["compensated"] is True
    assert be.state["ledger"][1]["compensated"] is False


def _random_op(world: World, draw: st.DrawFn) -> tuple[str, dict]:
    name = draw(st.sampled_from(sorted(world.operations)))
    op = world.operations[name]
    args = {}
    for a, spec in op.args.items():
        if spec.type == "int":
            args[a] = draw(st.integers(0, 200))
        elif a == op.key or a.endswith("_id") or a == "source":
            coll = op.collection
            keys = sorted(world.initial_state()["records"][coll]) or ["none"]
            args[a] = draw(st.sampled_from(keys + ["missing"]))
        else:
            args[a] = draw(st.sampled_from(["a", "b", "gold", "csv"]))
    return name, args


@st.composite
def op_sequences(draw: st.DrawFn, world: World) -> list[tuple[str, dict, dict]]:
    out = []
    for _ in range(draw(st.integers(0, 12))):
        name, args = _random_op(world, draw)
        guards = {"idempotency_key": draw(st.sampled_from([None, "k1", "k2"])),
                  "authority_at_commit": draw(st.booleans())}
        out.append((name, args, guards))
    return out


def _apply_all(be: MemoryBackend, seq: list) -> None:
    for i, (name, args, guards) in enumerate(seq):
        try:
            plan = be.resolve(name, args)
        except BackendError:
            continue
        if be.world.operations[name].is_write:
            be.commit(plan, effect_id=f"e{i}", invocation=f"i{i}", principal="agent", guards=Guards(**guards))
        else:
            be.read(plan)
        if i % 3 == 0 and plan.targets:
            be.concurrent_write(plan.targets[0], {"touched": i})
        if i % 5 == 4:
            be.revoke("agent", be.world.operations[name].permission)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_reset_restores_s0_exactly(payments: World, exports: World, data: st.DataObject) -> None:
    world = data.draw(st.sampled_from([payments, exports]))
    fresh = MemoryBackend(world)
    s0_hash, s0 = fresh.state_hash(), fresh.snapshot()
    be = MemoryBackend(world)
    _apply_all(be, data.draw(op_sequences(world)))
    be.reset()
    assert be.state_hash() == s0_hash
    assert be.state == s0


def test_reset_keeps_task_overrides(payments: World) -> None:
    overrides = {"permissions": {"agent": ["orders.read"]}, "records": {"orders": {"o1": {"status": "held"}}}}
    be = MemoryBackend(payments, overrides)
    h = be.state_hash()
    be.revoke("agent", "orders.read")
    be.reset()
    assert be.state_hash() == h and be.state["records"]["orders"]["o1"]["status"] == "held"


def _mutate(src: Path, dst_dir: Path, old: str, new: str) -> Path:
    dst_dir.mkdir(parents=True, exist_ok=True)
    text = src.read_text()
    assert old in text
    (dst_dir / "world.toml").write_text(text.replace(old, new, 1))
    return dst_dir


@pytest.mark.parametrize(
    "old, new, field, value",
    [
        ('effect = "irreversible"', 'effect = "permanent"', "operations.charge_payment.effect", "permanent"),
        ('kind = "create"', 'kind = "insert"', "operations.charge_payment.kind", "insert"),
        ('id = "payments"', 'id = "Payments!"', "world.id", "Payments!"),
        ('collection = "orders"', 'collection = "ordres"', "operations.get_order.collection", "ordres"),
        ('args.order_id = { type = "str", description = "Order id, e.g. o1." }',
         'args.order_id = { type = "string" }', "operations.get_order.args.order_id.type", "string"),
    ],
)
def test_malformed_manifest_names_file_field_value(tmp_path: Path, old: str, new: str, field: str, value) -> None:
    d = _mutate(WORLDS / "payments" / "world.toml", tmp_path / "w", old, new)
    with pytest.raises(InputError) as exc:
        load_world(d)
    err = exc.value
    assert err.path.endswith("world.toml")
    assert err.field.startswith(field)
    if value is not None:
        assert err.value == value
    else:
        assert "ordres" in str(err)


def test_initial_state_is_a_fresh_copy(payments: World) -> None:
    a = payments.initial_state()
    a["records"]["customers"]["c1"]["email"] = "mutated"
    assert payments.initial_state()["records"]["customers"]["c1"]["email"] == "ada@example.org"
    assert copy.deepcopy(payments.initial_state()) == payments.initial_state()


def test_record_keys_with_a_slash_and_non_string_key_arguments_are_refused(tmp_path) -> None:
    import pytest as _pytest

    from aft_bench.common.errors import InputError as _InputError
    from aft_bench.world.manifest import load_world as _load

    base = (WORLDS / "payments" / "world.toml").read_text()
    for bad, field in ((base.replace("[state.customers.c1]", '[state.customers."c/1"]', 1), "state.customers.c/1"),
                       (base.replace('args.customer_id = { type = "str"', 'args.customer_id = { type = "int"', 1),
                        "args.customer_id.type")):
        d = tmp_path / field.replace("/", "_")
        d.mkdir()
        (d / "world.toml").write_text(bad)
        with _pytest.raises(_InputError) as exc:
            _load(d)
        assert "field 'operations." in str(exc.value) or f"field '{field}'" in str(exc.value), str(exc.value)
