"""The router (`interface/router.py`): which tools a profile refuses and why (lifecycle, list, family, effect
class), the refusals of describe/call outside the profile or the session, session size limits, profile-file
validation, and the meta-tool surface a routed agent sees (its text is counted in `context_tokens`). Written
for `make mutants`; no episode is run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aft_bench.common.errors import InputError
from aft_bench.interface import router as rt
from aft_bench.interface.ranking import Candidate
from aft_bench.interface.router import SESSION_MAX, Profile, Router, load_profiles, meta_tools

CANDS = [Candidate.of("get_order", "Read one order by id.", True),
         Candidate.of("charge_payment", "Charge a payment for an order.", False),
         Candidate.of("refund_payment", "Refund a payment.", False),
         Candidate.of("ship_order", "Ship an order.", False),
         Candidate.of("list_orders", "List the orders.", True)]
EFFECTS = {"get_order": "read", "charge_payment": "irreversible", "refund_payment": "compensatable",
           "ship_order": "reversible"}  # list_orders: no declared effect, read by default

META = json.loads("""[
 {
  "name": "search_tools",
  "description": "Search the permitted catalog; returns the top 5 compact cards.",
  "parameters": {
   "type": "object",
   "properties": {
    "query": {
     "type": "string",
     "description": "What you want to do."
    }
   },
   "required": [
    "query"
   ]
  },
  "role": "discovery"
 },
 {
  "name": "resolve_tools",
  "description": "Resolve a session for a task: at most k (<= 3) tools, as cards. Only tools in the session can be described and called.",
  "parameters": {
   "type": "object",
   "properties": {
    "task": {
     "type": "string",
     "description": "The task in your words."
    },
    "k": {
     "type": "integer",
     "description": "Most tools wanted (1-3)."
    }
   },
   "required": [
    "task"
   ]
  },
  "role": "discovery"
 },
 {
  "name": "describe_tool",
  "description": "Full schema of a tool in the session.",
  "parameters": {
   "type": "object",
   "properties": {
    "name": {
     "type": "string",
     "description": "Tool name."
    }
   },
   "required": [
    "name"
   ]
  },
  "role": "discovery"
 },
 {
  "name": "call_tool",
  "description": "Call a tool of the session with its arguments.",
  "parameters": {
   "type": "object",
   "properties": {
    "name": {
     "type": "string",
     "description": "Tool name."
    },
    "arguments": {
     "type": "object",
     "description": "The tool's arguments."
    }
   },
   "required": [
    "name",
    "arguments"
   ]
  },
  "role": "discovery"
 },
 {
  "name": "list_profiles",
  "description": "The profiles this router knows and the one in force.",
  "parameters": {
   "type": "object",
   "properties": {},
   "required": []
  },
  "role": "discovery"
 }
]""")


def test_the_meta_tool_surface() -> None:
    assert [t.schema() | {"role": t.role} for t in meta_tools(5)] == META
    assert meta_tools(2)[0].description == "Search the permitted catalog; returns the top 2 compact cards."


def test_profile_refusals_and_their_reasons() -> None:
    c = CANDS[1]
    assert Profile().refuses(c, "irreversible", "approved") is None
    assert Profile().refuses(c, "read", "pinned") is None
    assert Profile().refuses(c, "read", "pending") == "its lifecycle state is pending"
    assert Profile().refuses(c, "read", "blocked") == "its lifecycle state is blocked"
    assert Profile().refuses(c, "unknown", "approved") == "its effect class unknown is not allowed"
    assert Profile(tools=("get_order",)).refuses(c, "read", "approved") == "it is not on the profile's list"
    assert Profile(tools=("charge_payment",)).refuses(c, "read", "approved") is None
    assert Profile(families=("order",)).refuses(c, "read", "approved") == "its family payment is not in the profile"
    assert Profile(families=("payment",)).refuses(c, "read", "approved") is None
    assert Profile(effects=("read",)).refuses(c, "irreversible", "approved") == (
        "its effect class irreversible is not allowed")
    assert Profile(lifecycle=("pending",)).refuses(c, "read", "pending") is None
    # the first reason in order: lifecycle, list, family, effect
    strict = Profile(tools=("x",), families=("y",), effects=("read",), lifecycle=("approved",))
    assert strict.refuses(c, "irreversible", "pending") == "its lifecycle state is pending"
    assert strict.refuses(c, "irreversible", "approved") == "it is not on the profile's list"
    assert Profile(families=("y",), effects=("read",)).refuses(c, "irreversible", "approved") == (
        "its family payment is not in the profile")


def test_the_default_and_read_only_profiles() -> None:
    r = Router(CANDS, EFFECTS)
    assert [c.name for c in r.permitted] == [c.name for c in CANDS] and r.profile_name == "default"
    ro = Router(CANDS, EFFECTS, profile_name="read_only")
    assert [c.name for c in ro.permitted] == ["get_order", "list_orders"]
    assert ro.refusal("charge_payment") == "its effect class irreversible is not allowed"
    assert ro.refusal("list_orders") is None  # no declared effect reads as read
    assert ro.refusal("nope") == "no such tool"
    gov = Router(CANDS, EFFECTS, states={"ship_order": "pending", "get_order": "pinned", "refund_payment": "blocked"})
    assert [c.name for c in gov.permitted] == ["get_order", "charge_payment", "list_orders"]
    assert gov.refusal("ship_order") == "its lifecycle state is pending"


def test_unknown_ranker_or_profile() -> None:
    with pytest.raises(ValueError) as err:
        Router(CANDS, EFFECTS, ranker="magic")
    assert str(err.value) == f"unknown ranker 'magic'; known: {', '.join(rt.RANKERS)}"
    with pytest.raises(KeyError) as kerr:
        Router(CANDS, EFFECTS, profile_name="nobody")
    assert kerr.value.args[0] == "unknown profile 'nobody'; known: default, read_only"
    for ranker in rt.RANKERS:
        assert Router(CANDS, EFFECTS, ranker=ranker).ranker == ranker


def test_sessions_hold_at_most_k_permitted_tools() -> None:
    r = Router(CANDS, EFFECTS)
    assert r.session == []
    four = "get the order; charge the payment; ship the order; refund the payment"
    assert r.resolve(four, 10) == ["get_order", "charge_payment", "ship_order"] == r.session
    assert len(r.session) == SESSION_MAX
    assert r.resolve(four, 2) == ["get_order", "charge_payment"]
    assert r.resolve(four, 1) == ["get_order"] == r.session
    assert r.resolve(four, 0) == ["get_order"] and r.resolve(four, -3) == ["get_order"]
    returned = r.resolve(four, 3)
    returned.append("x")
    assert r.session == ["get_order", "charge_payment", "ship_order"]
    ro = Router(CANDS, EFFECTS, profile_name="read_only")
    assert set(ro.resolve("charge a payment for an order", 3)) <= {"get_order", "list_orders"}
    empty = Router(CANDS, EFFECTS, states={c.name: "pending" for c in CANDS})
    assert empty.permitted == [] and empty.resolve("charge", 3) == [] and empty.session == []
    assert [c.name for c in r.search("refund a payment", 1)] == ["refund_payment"]
    assert {c.name for c in ro.search("refund a payment", 5)} <= {"get_order", "list_orders"}
    assert len(r.search("order", 2)) == 2


def test_describe_and_call_are_refused_outside_the_profile_or_the_session() -> None:
    r = Router(CANDS, EFFECTS, profile_name="read_only")
    r.resolve("read one order by id", 1)
    assert r.session == ["get_order"]
    assert r.gate("get_order") is None
    assert r.gate("list_orders") == "outside the session: resolve_tools for a task that needs it first"
    assert r.gate("charge_payment") == "outside the profile read_only: its effect class irreversible is not allowed"
    assert r.gate("nope") == "outside the profile read_only: no such tool"
    r.session.append("charge_payment")  # even in the session, the profile still refuses it
    assert r.gate("charge_payment").startswith("outside the profile read_only")


def test_profile_files_are_validated(tmp_path: Path) -> None:
    good = tmp_path / "p.toml"
    good.write_text('[profiles.a]\neffects = ["read"]\n[profiles.b]\nlifecycle = ["pending"]\n')
    profiles = load_profiles(good)
    assert set(profiles) == {"a", "b"} and profiles["a"].effects == ("read",)
    assert profiles["b"].lifecycle == ("pending",) and profiles["b"].effects == rt.EFFECTS
    for body, field, value, allowed in (
            ('[profiles.x]\neffects = ["read", "unknown"]\n', "profiles.x.effects", "unknown", rt.EFFECTS),
            ('[profiles.y]\nlifecycle = ["retired"]\n', "profiles.y.lifecycle", "retired", rt.LIFECYCLE)):
        bad = tmp_path / f"{field}.toml"
        bad.write_text(body)
        with pytest.raises(InputError) as err:
            load_profiles(bad)
        assert (err.value.field, err.value.value) == (field, value)
        assert err.value.problem == f"not one of {', '.join(allowed)}" and err.value.path == str(bad)


def test_a_profile_with_a_tool_list_or_families_refuses_by_name_and_family(monkeypatch) -> None:
    monkeypatch.setattr(rt, "load_profiles", lambda: {"default": Profile(tools=("get_order", "charge_payment")),
                                                      "payments": Profile(families=("payment",))})
    r = Router(CANDS, EFFECTS)
    assert [c.name for c in r.permitted] == ["get_order", "charge_payment"]
    assert r.refusal("ship_order") == "it is not on the profile's list"
    fam = Router(CANDS, EFFECTS, profile_name="payments")
    assert [c.name for c in fam.permitted] == ["charge_payment", "refund_payment"]
    assert fam.gate("get_order") == "outside the profile payments: its family order is not in the profile"
