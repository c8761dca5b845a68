"""The backend's agent-visible and oracle-visible outputs, exactly: every result, error code and detail, ledger
entry and evidence record of a script that reaches every branch (reads, lists, creates, jobs, updates,
update_many with a parts limit, compensation, replay by key, stale and unauthorized commits, not-found and
bad-argument errors), on both stores, compared with a committed golden file. Mutation testing showed the
field names and values here were otherwise free to change. Regenerate deliberately:

    .venv/bin/python tests/test_backend_golden.py
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from aft_bench.world.backend import Backend, BackendError, Guards, effect_identity
from aft_bench.world.manifest import load_world

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "expected" / "backend_script.json"
WORLDS = HERE.parent / "worlds"

# (world, step): step is ("resolve"|"read"|"evidence"|"commit", op, args, extra) or a harness action
SCRIPT: list[tuple[str, tuple]] = [
    ("payments", ("read", "get_order", {"order_id": "o1"}, {})),
    ("payments", ("read", "list_payments", {"order_id": "o0"}, {})),
    ("payments", ("read", "list_payments", {"order_id": "nothing"}, {})),
    ("payments", ("resolve", "no_such_op", {}, {})),
    ("payments", ("resolve", "get_order", {}, {})),
    ("payments", ("resolve", "charge_payment", {"order_id": "o1", "amount": "50", "note": ""}, {})),
    ("payments", ("resolve", "charge_payment", {"order_id": "o1", "amount": True, "note": ""}, {})),
    ("payments", ("resolve", "charge_payment", {"order_id": "o1", "amount": 50, "note": "", "tip": 1}, {})),
    ("payments", ("resolve", "get_order", {"order_id": "o404"}, {})),
    ("payments", ("resolve", "get_order", {"order_id": 7}, {})),
    ("payments", ("resolve", "fulfil_order", {"order_id": "o404"}, {})),
    ("payments", ("evidence", "get_order", {"order_id": "o1"}, {})),
    ("payments", ("evidence", "charge_payment", {"order_id": "o1", "amount": 50, "note": ""}, {})),
    ("payments", ("commit", "charge_payment", {"order_id": "o1", "amount": 50, "note": "a"}, {"key": "k1"})),
    ("payments", ("evidence", "charge_payment", {"order_id": "o1", "amount": 50, "note": ""}, {})),
    ("payments", ("commit", "charge_payment", {"order_id": "o1", "amount": 50, "note": "a"}, {"key": "k1"})),
    ("payments", ("read", "list_payments", {"order_id": "o1"}, {})),
    ("payments", ("key_committed", "k1")),
    ("payments", ("key_committed", "k2")),
    ("payments", ("commit", "refund_payment", {"payment_id": "p0", "amount": 30}, {"key": "k3"})),
    ("payments", ("evidence", "update_customer_email", {"customer_id": "c1", "email": "n@x.org"}, {})),
    ("payments", ("commit", "update_customer_email", {"customer_id": "c1", "email": "n@x.org"},
                  {"expected_version": 1})),
    ("payments", ("commit", "update_customer_email", {"customer_id": "c1", "email": "m@x.org"},
                  {"expected_version": 1})),
    ("payments", ("commit", "update_customer_email", {"customer_id": "c1", "email": "n@x.org"}, {})),
    ("payments", ("evidence", "update_customer_email", {"customer_id": "c1", "email": "n@x.org"}, {})),
    ("payments", ("concurrent_write", "customers/c2", {"tier": "platinum"})),
    ("payments", ("commit", "set_customer_tier", {"customer_id": "c2", "tier": "gold"}, {})),
    ("payments", ("concurrent_write", "customers/c3", {"tier": "standard"})),  # changes nothing: still a write
    ("payments", ("commit", "fulfil_order", {"order_id": "o3"}, {"expected_version": 5})),  # no key: ignored
    ("payments", ("evidence", "fulfil_order", {"order_id": "o2"}, {})),
    ("payments", ("commit", "fulfil_order", {"order_id": "o2"}, {"parts_limit": 2})),
    ("payments", ("evidence", "fulfil_order", {"order_id": "o2"}, {})),
    ("payments", ("commit", "fulfil_order", {"order_id": "o2"}, {})),
    ("payments", ("revoke", "agent", "payments.charge")),
    ("payments", ("commit", "charge_payment", {"order_id": "o2", "amount": 120, "note": ""},
                  {"authority_at_commit": True})),
    ("payments", ("commit", "charge_payment", {"order_id": "o2", "amount": 120, "note": ""}, {})),
    ("payments", ("record", "customers/c1")),
    ("payments", ("record", "customers/nobody")),
    ("exports", ("resolve", "start_export", {"dataset_id": "d2", "format": "csv"}, {})),
    ("exports", ("evidence", "start_export", {"dataset_id": "d2", "format": "csv"}, {})),
    ("exports", ("commit", "start_export", {"dataset_id": "d2", "format": "csv"}, {"key": "e1"})),
    ("exports", ("evidence", "start_export", {"dataset_id": "d2", "format": "csv"}, {})),
    ("exports", ("read", "list_exports", {"source": "datasets/d2"}, {})),
    ("exports", ("evidence", "start_export", {"dataset_id": "d3", "format": "csv"}, {})),  # d2's export is not d3's
]


def _plain(x: Any) -> Any:
    return json.loads(json.dumps(x, default=lambda o: asdict(o) if hasattr(o, "__dataclass_fields__") else str(o)))


def _step(b: Backend, step: tuple) -> Any:
    kind = step[0]
    if kind == "key_committed":
        return b.key_committed(step[1])
    if kind == "concurrent_write":
        return b.concurrent_write(step[1], step[2])
    if kind == "revoke":
        b.revoke(step[1], step[2])
        return b.authorized(step[1], step[2])
    if kind == "record":
        return b.record(step[1])
    _, op, args, extra = step
    try:
        resolved = b.resolve(op, args)
        if kind == "resolve":
            return resolved
        if kind == "read":
            return b.read(resolved)
        if kind == "evidence":
            return b.evidence(resolved)
        guards = Guards(idempotency_key=extra.get("key"), expected_version=extra.get("expected_version"),
                        authority_at_commit=extra.get("authority_at_commit", False))
        eid = effect_identity(op, resolved.business_args, "task")
        return b.commit(resolved, effect_id=eid, invocation="inv-1", principal="agent", guards=guards,
                        parts_limit=extra.get("parts_limit"))
    except BackendError as exc:
        return {"error": exc.code, "detail": exc.detail, "message": str(exc)}


def transcript(store_kind: str, tmp: Path) -> list[Any]:
    out: list[Any] = []
    backends: dict[str, Backend] = {}
    for wid, step in SCRIPT:
        if wid not in backends:
            world = load_world(WORLDS / wid)
            store = None
            if store_kind == "sqlite":
                from aft_bench.world.sqlite_store import SqliteStore

                store = SqliteStore(tmp / f"{wid}.sqlite", world)
            backends[wid] = Backend(world, None, store)
            out.append({"world": wid, "s0_hash": backends[wid].s0_hash, "state_hash": backends[wid].state_hash()})
        out.append({"step": _plain(step), "result": _plain(_step(backends[wid], step))})
    for wid, b in backends.items():
        state, text, h = b.snapshot_and_hash()
        out.append({"world": wid, "final_state": state, "final_hash": h, "hash_again": b.state_hash()})
    out.append({"effect_identity": effect_identity("charge_payment", {"order_id": "o1", "amount": 50}, "task")})
    return out


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
def test_backend_outputs_equal_the_golden_transcript(store_kind: str, tmp_path: Path) -> None:
    got = transcript(store_kind, tmp_path)
    expected = json.loads(GOLDEN.read_text())
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g == e, (i, SCRIPT[i - 1] if i else None)


def test_error_messages_name_code_and_detail() -> None:
    err = BackendError("not_found", "orders/o404")
    assert (err.code, err.detail, str(err)) == ("not_found", "orders/o404", "not_found: orders/o404")



def test_the_backend_uses_the_store_it_is_given_and_copies_what_it_is_given(tmp_path: Path) -> None:
    from aft_bench.world.sqlite_store import SqliteStore

    world = load_world(WORLDS / "payments")
    store = SqliteStore(tmp_path / "p.sqlite", world)
    assert Backend(world, None, store).store is store
    overrides = {"records": {"customers": {"c9": {"name": "N", "email": "n@x", "tier": "gold"}}}}
    b = Backend(world, overrides)
    overrides["records"]["customers"]["c9"]["tier"] = "changed after construction"
    b.reset()
    assert b.record("customers/c9")["tier"] == "gold"


def test_a_bool_argument_accepts_bools_and_other_arguments_refuse_them(tmp_path: Path) -> None:
    text = (WORLDS / "payments" / "world.toml").read_text() + '''
[operations.flag_customer]
description = "Flag a customer."
kind = "update"
effect = "reversible"
collection = "customers"
permission = "customers.update"
key = "customer_id"
set = { flagged = "$flag" }
args.customer_id = { type = "str", description = "Customer id." }
args.flag = { type = "bool", description = "Flag." }
'''
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "world.toml").write_text(text)
    b = Backend(load_world(tmp_path / "w"))
    assert b.resolve("flag_customer", {"customer_id": "c1", "flag": True}).args["flag"] is True
    with pytest.raises(BackendError, match="argument 'flag' must be bool"):
        b.resolve("flag_customer", {"customer_id": "c1", "flag": 1})


def test_work_units_default_when_the_record_lacks_the_field() -> None:
    world = load_world(WORLDS / "exports")
    b = Backend(world, {"records": {"datasets": {"d99": {"name": "no-size"}}}})
    assert b.resolve("start_export", {"dataset_id": "d99", "format": "csv"}).work_units == \
        world.operations["start_export"].work_units
    assert b.resolve("start_export", {"dataset_id": "d2", "format": "csv"}).work_units == 6


def test_list_results_never_alias_nested_record_values() -> None:
    b = Backend(load_world(WORLDS / "payments"),
                {"records": {"payments": {"p9": {"order_id": "o9", "amount": 1, "status": "captured",
                                                 "meta": {"tags": ["a"]}}}}})
    found = b.read(b.resolve("list_payments", {"order_id": "o9"}))["records"]
    found[0]["meta"]["tags"].append("scribbled")
    assert b.record("payments/p9")["meta"] == {"tags": ["a"]}


def test_commit_outcomes_never_alias_the_ledger() -> None:
    b = Backend(load_world(WORLDS / "payments"))
    resolved = b.resolve("fulfil_order", {"order_id": "o2"})
    guards = Guards(idempotency_key="k")
    out = b.commit(resolved, effect_id="e", invocation="i", principal="agent", guards=guards)
    out.entry["targets"][0]["ref"] = "scribbled"
    out.entry["business_args"]["order_id"] = "scribbled"
    out.result["refs"][0] = "scribbled"
    again = b.commit(resolved, effect_id="e", invocation="i", principal="agent", guards=guards)
    assert again.status == "replayed" and "scribbled" not in json.dumps(b.snapshot())
    again.entry["targets"][0]["ref"] = "scribbled"
    assert "scribbled" not in json.dumps(b.snapshot())


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        GOLDEN.write_text(json.dumps(transcript("memory", Path(d)), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}", file=sys.stderr)
