"""A real server's scorecard measured whole (issue 49, `scorecard/card.py`, `scorecard/answers.py`): a small
standard-library MCP server written under tmp_path (it appends twice, refuses a repeat with isError, answers an
error in text, changes nothing, acts only when asked again, makes up record ids) is measured by `measure` exactly
as `aft-bench scorecard` measures it: each example's call with its answer lost at the gateway, then re-issued bare,
with the gateway's key, or after verify. Every class (duplicate, false failure, silent success, safe, no effect)
is asserted as the whole card a user reads (its dict through JSON), with the state's evidence, the answers, the
annotation contradictions and the undeclared hints; how an answer's text and data are read is asserted beside,
and what mutmut found undefended in the agent's gateway surface (`interface/gateway_surface.py`): an
interruption shown in text results, a server's structured content, and the trace of each call."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from aft_bench.common.errors import WorldFailed
from aft_bench.interface.gateway_surface import GatewayInterface
from aft_bench.interface.mechanisms import load_conditions
from aft_bench.runtime.gateway import Gateway, GatewayFault, GatewaySchedule
from aft_bench.runtime.trace import Trace
from aft_bench.scorecard.answers import answer_value, failure_signal, resolve, text_of
from aft_bench.scorecard.card import Outcome, Scorecard, contradictions, measure, undeclared
from aft_bench.world.external import FAILURE_PHRASES, load_external

# The server: every tool works on files in its folder (the resource, probed by the built-in folder probe).
SERVER = r'''
import json, os, sys

CALLS = {"late": 0}


def tool(name, props, ann=None):
    t = {"name": name, "description": name + " tool", "inputSchema": {"type": "object", "properties": {
        p: {"type": "string"} for p in props}}}
    if ann is not None:
        t["annotations"] = ann
    return t


TOOLS = [
    tool("add", ["name", "text"], {"idempotentHint": True, "readOnlyHint": False}),  # appends: twice is twice
    tool("put", ["name", "text"], {"idempotentHint": False}),  # overwrites: twice is once
    tool("putlog", ["name", "text"]),  # overwrites, and logs each call to log.txt
    tool("create", ["name", "text"]),  # a repeat is refused with isError
    tool("make", ["name"], {"readOnlyHint": True, "idempotentHint": False}),  # a repeat says "Error" in text
    tool("noop", [], {"readOnlyHint": True, "idempotentHint": True}),  # changes nothing
    tool("refuse", []),  # changes nothing, with isError
    tool("late", ["name"]),  # acts only from its second call on
    tool("stamp", ["name"]),  # a new stamp-N.txt each call, whatever its name says
    tool("new", ["text"]),  # a record whose id it makes up (text JSON and structured content)
    tool("drop", ["id"]),  # removes a record; a missing one is "No such record" in text
    tool("look", ["name"]),  # a read: the file's text
]


def call(name, a):
    n = a.get("name", "")
    if name == "add":
        with open(n, "a") as fh:
            fh.write(a["text"] + "\n")
        return "added", False, None
    if name in ("put", "putlog"):
        with open(n, "w") as fh:
            fh.write(a["text"])
        if name == "putlog":
            with open("log.txt", "a") as fh:
                fh.write("put\n")
        return "written", False, None
    if name == "create":
        if os.path.exists(n):
            return "exists: " + n, True, None
        with open(n, "w") as fh:
            fh.write(a.get("text", ""))
        return "created", False, None
    if name == "make":
        if os.path.exists(n):
            return "Error: " + n + " exists", False, None
        open(n, "w").close()
        return "made", False, None
    if name == "noop":
        return "nothing changed", False, None
    if name == "refuse":
        return "refused", True, None
    if name == "late":
        CALLS["late"] += 1
        if CALLS["late"] >= 2:
            with open(n, "w") as fh:
                fh.write("late")
        return "queued", False, None
    if name == "stamp":
        k = 1 + sum(1 for f in os.listdir(".") if f.startswith("stamp-"))
        open("stamp-%d.txt" % k, "w").close()
        return "stamp %d" % k, False, None
    if name == "new":
        k = 1 + sum(1 for f in os.listdir(".") if f.startswith("rec-"))
        with open("rec-%d.txt" % k, "w") as fh:
            fh.write(a["text"])
        return json.dumps({"id": "rec-%d.txt" % k}), False, {"id": "rec-%d.txt" % k, "n": [k]}
    if name == "drop":
        if not os.path.exists(a["id"]):
            return "No such record " + a["id"], False, None
        os.remove(a["id"])
        return "dropped", False, None
    if name == "look":
        return (open(n).read() if os.path.exists(n) else ""), False, None


for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    m = msg.get("method")
    if m == "initialize":
        result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "card-server", "version": "3.1"}}
    elif m == "tools/list":
        result = {"tools": TOOLS}
    else:
        text, err, data = call(msg["params"]["name"], msg["params"].get("arguments") or {})
        result = {"content": [{"type": "text", "text": text}], "isError": err}
        if data is not None:
            result["structuredContent"] = data
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
'''

NOT_DECLARED = ["readOnlyHint", "idempotentHint"]
WRITE = {"effect": "write", "idempotent": False, "destructive": False}
ONCE_NOT_SENT = "state: the effect is there once; the re-issue was not sent"
CHANGED_NOT_SENT = "state: the call changed it; the re-issue was not sent"


def _world(tmp_path: Path, overlay: str, package: str = "card-server", version: str = "3.1",
           answers: str = "") -> Any:
    (tmp_path / "srv.py").write_text(SERVER)
    (tmp_path / "world.toml").write_text(
        f'kind = "mcp_stdio"\nid = "cards"\n[server]\npackage = "{package}"\nversion = "{version}"\n'
        f'command = ["{sys.executable}", "-S", "-I", "{tmp_path / "srv.py"}"]\n'  # -S -I: it starts faster
        f'[probe]\nbuiltin = "folder"\n{answers}{overlay}')
    return load_external(tmp_path)


def _json(card: Scorecard) -> dict[str, Any]:
    """The card as `aft-bench scorecard --json` writes it: its dict through JSON (tuples become lists)."""
    return json.loads(json.dumps(card.to_dict()))


def _said(text: str, error: bool = False, structured: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": error}
    if structured is not None:
        out["structuredContent"] = structured
    return out


def _files(added: tuple[str, ...] = (), removed: tuple[str, ...] = (), changed: tuple[str, ...] = ()) -> dict:
    return {"files": {"added": list(added), "removed": list(removed), "changed": list(changed)}}


def _out(treatment: str, cls: str, signal: str, first: dict[str, Any], *, realized: int | None = None,
         reissue: dict[str, Any] | None = None, delivered: dict[str, Any] | None = None,
         changes: dict[str, Any] | None = None, verified: bool | None = None,
         effect: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"treatment": treatment, "cls": cls, "realized": realized, "first": first, "reissue": reissue,
            "delivered": delivered, "changes": changes or {}, "verified": verified, "signal": signal,
            "effect": effect or {}}


HEAD = {"world": "cards", "package": "card-server", "version": "3.1", "server": {"name": "card-server",
        "version": "3.1"}, "protocol": "2025-06-18", "untested": [], "installed": None,
        "failure_phrases": list(FAILURE_PHRASES)}


# -- duplicate: a second append ------------------------------------------------------------------------------------
DUPLICATE = ('[tools.look]\neffect = "read"\n'  # a read without an example: not listed as untested
             '[tools.new]\neffect = "write"\n'  # a write without one: untested
             '[tools.add]\neffect = "write"\n'
             'identity = { collection = "files", record_arg = "name", field = "text", text_of = "text" }\n'
             'examples = [{ args = { name = "a.txt", text = "hello" }, note = "appends" },\n'
             '  { before = [{ tool = "add", args = { name = "a.txt", text = "hello" } }], '
             'args = { name = "a.txt", text = "hello" } }]\n')


def test_an_append_reissued_is_a_duplicate_and_the_key_and_verify_make_it_safe(tmp_path: Path) -> None:
    """The bare re-issue of an append counted twice from the state, the key's replay and verify's check never
    re-sent; a set-up call of the same tool is not the one whose answer is lost; the card's header and progress."""
    said: list[str] = []
    card = measure(_world(tmp_path, DUPLICATE), progress=said.append)
    assert said == ["add #1 bare", "add #1 key", "add #1 verify", "add #2 bare", "add #2 key", "add #2 verify"]
    added = _said("added")
    ann = {"idempotentHint": True, "readOnlyHint": False}
    lie = ["idempotentHint=true, but the re-issue made a second effect"]
    first = {"tool": "add", "example": 0, "args": {"name": "a.txt", "text": "hello"}, "note": "appends",
             "annotations": ann, "overlay": WRITE, "contradictions": lie, "undeclared": [], "outcomes": [
                 _out("bare", "duplicate", "state: the effect is there 2 times", added, realized=2, reissue=added,
                      delivered=added, changes=_files(changed=("a.txt",)), effect=_files(added=("a.txt",))),
                 _out("key", "safe", ONCE_NOT_SENT, added, realized=1, delivered=added,
                      effect=_files(added=("a.txt",))),
                 _out("verify", "safe", ONCE_NOT_SENT, added, realized=1, verified=True,
                      effect=_files(added=("a.txt",)))]}
    second = {"tool": "add", "example": 1, "args": {"name": "a.txt", "text": "hello"}, "note": "",
              "annotations": ann, "overlay": WRITE, "contradictions": lie, "undeclared": [], "outcomes": [
                  _out("bare", "duplicate", "state: the effect is there 2 times", added, realized=2, reissue=added,
                       delivered=added, changes=_files(changed=("a.txt",)), effect=_files(changed=("a.txt",))),
                  _out("key", "safe", ONCE_NOT_SENT, added, realized=1, delivered=added,
                       effect=_files(changed=("a.txt",))),
                  _out("verify", "safe", ONCE_NOT_SENT, added, realized=1, verified=True,
                       effect=_files(changed=("a.txt",)))]}
    assert _json(card) == {**HEAD, "untested": ["new"], "tools": [first, second]}
    assert card.tools[0].outcome("verify") == card.tools[0].outcomes[2] and card.tools[0].outcome("none") is None


# -- false failure: isError, an error in text, a phrase -------------------------------------------------------------
FALSE_FAILURE = ('[tools.make]\neffect = "write"\nexamples = [{ args = { name = "m.txt" } }]\n'
                 '[tools.create]\neffect = "write"\nexamples = [{ args = { name = "c.txt", text = "v" } }]\n'
                 '[tools.new]\neffect = "write"\n'
                 '[tools.drop]\neffect = "write"\nexamples = [{ before = [{ tool = "new", args = { text = "x" } }], '
                 'args = { id = "{before.0.id}" } }]\n')


def test_a_repeat_refused_with_is_error_or_said_in_text_is_a_false_failure(tmp_path: Path) -> None:
    """create's repeat refused with isError, make's with "Error:" in text, drop's with "No such record": each a
    false failure where the effect exists, and safe under verify (the state changed, so nothing is re-sent)."""
    card = _json(measure(_world(tmp_path, FALSE_FAILURE), ("bare", "verify")))
    created, made, dropped = _said("created"), _said("made"), _said("dropped")
    refused, error = _said("exists: c.txt", True), _said("Error: m.txt exists")
    gone = _said("No such record rec-1.txt")
    assert card == {**HEAD, "untested": ["new"], "tools": [
        {"tool": "create", "example": 0, "args": {"name": "c.txt", "text": "v"}, "note": "", "annotations": {},
         "overlay": WRITE, "contradictions": [], "undeclared": NOT_DECLARED, "outcomes": [
             _out("bare", "false_failure", "state: the call changed it; answer: isError", created, reissue=refused,
                  delivered=refused, effect=_files(added=("c.txt",))),
             _out("verify", "safe", CHANGED_NOT_SENT, created, verified=True, effect=_files(added=("c.txt",)))]},
        {"tool": "drop", "example": 0, "args": {"id": "{before.0.id}"}, "note": "", "annotations": {},
         "overlay": WRITE, "contradictions": [], "undeclared": NOT_DECLARED, "outcomes": [
             _out("bare", "false_failure", 'state: the call changed it; answer: text "no such"', dropped,
                  reissue=gone, delivered=gone, effect=_files(removed=("rec-1.txt",))),
             _out("verify", "safe", CHANGED_NOT_SENT, dropped, verified=True,
                  effect=_files(removed=("rec-1.txt",)))]},
        {"tool": "make", "example": 0, "args": {"name": "m.txt"}, "note": "",
         "annotations": {"readOnlyHint": True, "idempotentHint": False}, "overlay": WRITE,
         "contradictions": ["idempotentHint=false, but the re-issue made no second effect",
                            "readOnlyHint=true, but the call changed the state"], "undeclared": [], "outcomes": [
             _out("bare", "false_failure", 'state: the call changed it; answer: text "error"', made, reissue=error,
                  delivered=error, effect=_files(added=("m.txt",))),
             _out("verify", "safe", CHANGED_NOT_SENT, made, verified=True, effect=_files(added=("m.txt",)))]}]}


def test_the_worlds_own_failure_phrases_decide_what_text_reports_a_failure(tmp_path: Path) -> None:
    """With `[answers] failure = ["nope", "EXISTS"]` make's "Error: m.txt exists" fails by "EXISTS" (any case);
    with ["nope", "written"] it is a silent success, and so is put's "written", which its first answer said too;
    the card records the phrases and the version read from the install (pytest's own here)."""
    version = pytest.__version__
    overlay = ('[tools.make]\neffect = "write"\nexamples = [{ args = { name = "m.txt" } }]\n'
               '[tools.put]\neffect = "write"\nexamples = [{ args = { name = "p.txt", text = "v" } }]\n')
    made, error, written = _said("made"), _said("Error: m.txt exists"), _said("written")

    def card(phrases: str, folder: str) -> dict[str, Any]:
        (tmp_path / folder).mkdir()
        world = _world(tmp_path / folder, overlay, "pytest", version, f"[answers]\nfailure = [{phrases}]\n")
        return _json(measure(world, ("bare",)))

    def tools(cls: str, signal: str) -> list[dict[str, Any]]:
        return [{"tool": "make", "example": 0, "args": {"name": "m.txt"}, "note": "",
                 "annotations": {"readOnlyHint": True, "idempotentHint": False}, "overlay": WRITE,
                 "contradictions": ["idempotentHint=false, but the re-issue made no second effect",
                                    "readOnlyHint=true, but the call changed the state"], "undeclared": [],
                 "outcomes": [_out("bare", cls, signal, made, reissue=error, delivered=error,
                                   effect=_files(added=("m.txt",)))]},
                {"tool": "put", "example": 0, "args": {"name": "p.txt", "text": "v"}, "note": "",
                 "annotations": {"idempotentHint": False}, "overlay": WRITE,
                 "contradictions": ["idempotentHint=false, but the re-issue made no second effect"],
                 "undeclared": ["readOnlyHint"], "outcomes": [
                     _out("bare", "silent_success", "state: the call changed it; answer: success", written,
                          reissue=written, delivered=written, effect=_files(added=("p.txt",)))]}]

    head = {**HEAD, "package": "pytest", "version": version, "installed": version}
    assert card('"nope", "EXISTS"', "a") == {**head, "failure_phrases": ["nope", "EXISTS"], "tools": tools(
        "false_failure", 'state: the call changed it; answer: text "EXISTS"')}
    assert card('"nope", "written"', "b") == {**head, "failure_phrases": ["nope", "written"], "tools": tools(
        "silent_success", "state: the call changed it; answer: success")}


# -- silent success: a repeat that succeeds and does nothing ------------------------------------------------------
SILENT = ('[tools.put]\neffect = "write"\nidentity = { collection = "files", key_arg = "name", match = { text = "text" '
          '} }\nexamples = [{ args = { name = "p.txt", text = "v" } }]\n'
          '[tools.putlog]\neffect = "write"\nidentity = { collection = "files", key_arg = "name", match = { text = '
          '"text" } }\nexamples = [{ args = { name = "q.txt", text = "w" } }]\n'
          '[tools.late]\neffect = "write"\nexamples = [{ args = { name = "l.txt" } }]\n')


def test_a_repeat_answered_success_with_one_effect_is_a_silent_success(tmp_path: Path) -> None:
    """An overwrite counted once by its identity, one that also logs (the re-issue changed something else), and a
    tool that acts only when asked again (only the re-issue changed the state): each a silent success."""
    card = _json(measure(_world(tmp_path, SILENT), ("bare",)))
    written, queued = _said("written"), _said("queued")
    assert card == {**HEAD, "tools": [
        {"tool": "late", "example": 0, "args": {"name": "l.txt"}, "note": "", "annotations": {},
         "overlay": WRITE, "contradictions": [], "undeclared": NOT_DECLARED, "outcomes": [
             _out("bare", "silent_success", "state: only the re-issue changed it; answer: success", queued,
                  reissue=queued, delivered=queued, changes=_files(added=("l.txt",)))]},
        {"tool": "put", "example": 0, "args": {"name": "p.txt", "text": "v"}, "note": "",
         "annotations": {"idempotentHint": False}, "overlay": WRITE,
         "contradictions": ["idempotentHint=false, but the re-issue made no second effect"],
         "undeclared": ["readOnlyHint"], "outcomes": [
             _out("bare", "silent_success", "state: the effect is there once; answer: success", written, realized=1,
                  reissue=written, delivered=written, effect=_files(added=("p.txt",)))]},
        {"tool": "putlog", "example": 0, "args": {"name": "q.txt", "text": "w"}, "note": "", "annotations": {},
         "overlay": WRITE, "contradictions": [], "undeclared": NOT_DECLARED, "outcomes": [
             _out("bare", "silent_success", "state: the effect is there once; the re-issue changed something else; "
                  "answer: success", written, realized=1, reissue=written, delivered=written,
                  changes=_files(changed=("log.txt",)), effect=_files(added=("log.txt", "q.txt")))]}]}


# -- no effect, and an identity that never held ---------------------------------------------------------------------
NOTHING = ('[tools.noop]\neffect = "write"\nexamples = [{ args = {} }]\n'
           '[tools.refuse]\neffect = "write"\nexamples = [{ args = {} }]\n'
           '[tools.new]\neffect = "write"\n[tools.add]\neffect = "write"\n'
           '[tools.look]\neffect = "read"\nexamples = [{ before = [{ tool = "new", args = { text = "x" } }, '
           '{ tool = "add", args = { name = "{before.0.id}", text = "more" } }], args = { name = "{before.0.id}" } '
           '}]\n')


def test_a_call_that_changes_nothing_is_no_effect_whatever_it_answers(tmp_path: Path) -> None:
    """noop, refuse (its isError said beside) and a read set up by two calls (the second given the first's made-up
    id): no effect, and no annotation contradicted by a call that changed nothing."""
    card = _json(measure(_world(tmp_path, NOTHING), ("bare", "verify")))
    nothing, refused, text = _said("nothing changed"), _said("refused", True), _said("xmore\n")
    assert card == {**HEAD, "untested": ["add", "new"], "tools": [
        {"tool": "look", "example": 0, "args": {"name": "{before.0.id}"}, "note": "", "annotations": {},
         "overlay": {**WRITE, "effect": "read"}, "contradictions": [], "undeclared": NOT_DECLARED, "outcomes": [
             _out("bare", "no_effect", "state: the call changed nothing", text, reissue=text, delivered=text),
             _out("verify", "no_effect", "state: the call changed nothing", text, reissue=text, delivered=text,
                  verified=False)]},
        {"tool": "noop", "example": 0, "args": {}, "note": "", "annotations": {"readOnlyHint": True,
                                                                             "idempotentHint": True},
         "overlay": WRITE, "contradictions": [], "undeclared": [], "outcomes": [
             _out("bare", "no_effect", "state: the call changed nothing", nothing, reissue=nothing,
                  delivered=nothing),
             _out("verify", "no_effect", "state: the call changed nothing", nothing, reissue=nothing,
                  delivered=nothing, verified=False)]},
        {"tool": "refuse", "example": 0, "args": {}, "note": "", "annotations": {}, "overlay": WRITE,
         "contradictions": [], "undeclared": NOT_DECLARED, "outcomes": [
             _out("bare", "no_effect", "state: the call changed nothing (its answer: isError)", refused,
                  reissue=refused, delivered=refused),
             _out("verify", "no_effect", "state: the call changed nothing (its answer: isError)", refused,
                  reissue=refused, delivered=refused, verified=False)]}]}


def test_an_identity_that_never_held_leaves_the_classes_to_the_state(tmp_path: Path) -> None:
    """stamp makes a new file each call while its identity names another: the count says 0, so the diffs decide
    (a duplicate bare, safe under the key), and the signal says the identity never held; verify asks the identity,
    not whether the state changed, so it finds nothing and re-sends: a duplicate too."""
    overlay = ('[tools.stamp]\neffect = "write"\nidentity = { collection = "files", key_arg = "name" }\n'
               'examples = [{ args = { name = "never.txt" } }]\n')
    card = _json(measure(_world(tmp_path, overlay), ("bare", "key", "verify")))
    one, two = _said("stamp 1"), _said("stamp 2")
    assert card == {**HEAD, "tools": [
        {"tool": "stamp", "example": 0, "args": {"name": "never.txt"}, "note": "", "annotations": {},
         "overlay": WRITE, "contradictions": [], "undeclared": NOT_DECLARED, "outcomes": [
             _out("bare", "duplicate", "state: the identity never held; the re-issue changed it again", one,
                  realized=0, reissue=two, delivered=two, changes=_files(added=("stamp-2.txt",)),
                  effect=_files(added=("stamp-1.txt",))),
             _out("key", "safe", "state: the identity never held; the call changed it; the re-issue was not sent",
                  one, realized=0, delivered=one, effect=_files(added=("stamp-1.txt",))),
             _out("verify", "duplicate", "state: the identity never held; the re-issue changed it again", one,
                  realized=0, reissue=two, delivered=two, changes=_files(added=("stamp-2.txt",)), verified=False,
                  effect=_files(added=("stamp-1.txt",)))]}]}


def test_without_a_bare_outcome_no_annotation_is_judged(tmp_path: Path) -> None:
    """Measured under the key alone, make's readOnlyHint=true is neither contradicted nor its hints listed as
    undeclared: only the bare re-issue speaks to them."""
    overlay = '[tools.make]\neffect = "write"\nexamples = [{ args = { name = "m.txt" } }]\n'
    made = _said("made")
    assert _json(measure(_world(tmp_path, overlay), ("key",))) == {**HEAD, "tools": [
        {"tool": "make", "example": 0, "args": {"name": "m.txt"}, "note": "",
         "annotations": {"readOnlyHint": True, "idempotentHint": False}, "overlay": WRITE, "contradictions": [],
         "undeclared": [], "outcomes": [_out("key", "safe", CHANGED_NOT_SENT, made, delivered=made,
                                             effect=_files(added=("m.txt",)))]}]}


def test_a_placeholder_the_set_up_answer_lacks_fails_the_world_naming_the_examples(tmp_path: Path) -> None:
    """An example's `{before.0.nope}` that the set-up answer has no field for: the world fails with the tool, the
    placeholder and the examples' field named, instead of sending the call with the placeholder's text."""
    overlay = ('[tools.new]\neffect = "write"\n[tools.drop]\neffect = "write"\nexamples = [{ before = [{ tool = '
               '"new", args = { text = "x" } }], args = { id = "{before.0.nope}" } }]\n')
    with pytest.raises(WorldFailed) as err:
        measure(_world(tmp_path, overlay), ("bare",))
    assert str(err.value) == "world 'cards': drop: {before.0.nope}: set-up call 0's answer has no nope"
    assert err.value.field == "tools.drop.examples"


# -- the contradictions and the undeclared hints, outcome by outcome -----------------------------------------------
def _bare(cls: str, realized: int | None = None, changes: dict | None = None, effect: dict | None = None) -> Outcome:
    return Outcome("bare", cls, realized, None, None, None, changes or {}, effect=effect or {})


def test_read_only_hint_is_contradicted_by_any_change_the_measurement_saw() -> None:
    """readOnlyHint=true contradicted by the call's change, the re-issue's, or a realized effect; not by nothing,
    not by an unmeasured or no-effect outcome, and not when the hint is false or absent."""
    said = ("readOnlyHint=true, but the call changed the state",)
    ro = {"readOnlyHint": True}
    assert contradictions(ro, _bare("silent_success", effect={"files": {"added": ["x"]}})) == said
    assert contradictions(ro, _bare("silent_success", changes={"files": {"added": ["x"]}})) == said
    assert contradictions(ro, _bare("silent_success", realized=1)) == said
    assert contradictions(ro, _bare("silent_success", realized=0)) == ()
    assert contradictions({"readOnlyHint": False}, _bare("duplicate", realized=2)) == ()
    assert contradictions({}, _bare("duplicate", realized=2)) == ()
    for cls in ("unmeasured", "no_effect"):
        assert contradictions({**ro, "idempotentHint": False}, _bare(cls, realized=1)) == ()
    assert contradictions({**ro, "idempotentHint": False}, None) == ()
    assert contradictions({"idempotentHint": False}, _bare("safe", realized=1)) == (
        "idempotentHint=false, but the re-issue made no second effect",)
    assert contradictions({"idempotentHint": True}, _bare("duplicate", realized=2)) == (
        "idempotentHint=true, but the re-issue made a second effect",)
    assert undeclared({"idempotentHint": True}, None) == ()
    assert undeclared({"idempotentHint": True}, _bare("no_effect")) == ("readOnlyHint",)
    assert undeclared({"readOnlyHint": False, "destructiveHint": True}, _bare("safe")) == ("idempotentHint",)


# -- how an answer is read ------------------------------------------------------------------------------------------
def test_an_answers_text_joins_its_text_blocks_only() -> None:
    """A client's text: text blocks joined by newlines, a block without text as an empty line, others skipped."""
    answer = {"content": [{"type": "text", "text": "a"}, {"type": "resource", "text": "not shown"},
                          {"type": "text", "text": 5}, ["text"], {"type": "text"}, {"text": "untyped"}]}
    assert text_of(answer) == "a\n5\n"
    assert text_of({"content": None}) == "" and text_of({"isError": True}) == ""


def test_a_failure_phrase_is_matched_whole_in_any_case_and_only_where_new() -> None:
    """isError first; a phrase as a whole word (not inside another), in any case, that the first answer lacked."""
    def said(text: str, error: Any = False) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": text}], "isError": error}

    assert failure_signal(said("Not Found: x"), said("x"), ("error", "not found")) == 'text "not found"'
    assert failure_signal(said("error"), said("x"), ("error",)) == 'text "error"'
    assert failure_signal(said("x_error"), None, ("error",)) is None  # an underscore joins words
    assert failure_signal(said("errors"), None, ("error",)) is None
    assert failure_signal(said("(error)"), None, ("error",)) == 'text "error"'
    assert failure_signal(said("a.b"), None, ("a.b",)) == 'text "a.b"' and failure_signal(
        said("axb"), None, ("a.b",)) is None  # a phrase is literal text, not a pattern
    assert failure_signal(said("fine", 1), said("fine", 1), ()) == "isError"  # isError, even where first had it
    assert failure_signal(said("fine"), None, FAILURE_PHRASES) is None
    assert failure_signal({}, None, ("error",)) is None  # an empty answer reports nothing


def test_an_answers_data_is_its_structured_content_else_its_json_text() -> None:
    """Structured content wins even when empty; else the text as JSON; text that is not JSON is no data."""
    assert answer_value({"content": [{"type": "text", "text": "[1]"}], "structuredContent": []}) == []
    assert answer_value({"content": [{"type": "text", "text": "[1]"}], "structuredContent": None}) == [1]
    assert answer_value({"content": [{"type": "text", "text": '"s"'}]}) == "s"
    assert answer_value({"content": []}) is None and answer_value({}) is None


def test_a_placeholder_is_a_whole_string_naming_a_set_up_call_and_a_path() -> None:
    """{before.N.path} read through dicts and list indexes of the N-th answer; anything else is left as given."""
    earlier = [{"content": [{"type": "text", "text": '{"a": {"b": [10, {"c": "deep"}]}, "0": "key", "XidX": 4}'}]},
               None]
    assert resolve({"x": "{before.0.a.b.1.c}", "y": ["{before.0.a.b.0}"], "z": "{before.0.0}",
                    "w": "{before.0.a}", "k": 3, "i": "{before.0.XidX}"}, earlier) == {
        "x": "deep", "y": [10], "z": "key", "w": {"b": [10, {"c": "deep"}]}, "k": 3, "i": 4}
    for kept in ("{before.0}", "{before.x.a}", "{before.0.a", "x{before.0.a}", "{before.0..}", "{before.0.a.}",
                 "{after.0.a}"):
        assert resolve(kept, earlier) == kept
    for bad, path in (("{before.1.a}", "a"), ("{before.2.a}", "a"), ("{before.0.a.b.2}", "a.b.2"), ("{before.0.a.b.x}", "a.b.x"),
                      ("{before.0.a.b.-1}", "a.b.-1"), ("{before.0.a.z}", "a.z"), ("{before.0.a.zX}", "a.zX")):
        with pytest.raises(LookupError) as err:
            resolve(bad, earlier)
        assert str(err.value) == f"{bad}: set-up call {bad[8]}'s answer has no {path}"
    with pytest.raises(LookupError, match="set-up call 5's answer has no a"):
        resolve("{before.5.a}", earlier)


# -- what an agent sees of a real server (interface/gateway_surface.py) ----------------------------------------------
ECHO = Path(__file__).parent / "data" / "echo_mcp.py"
ECHO_OVERLAY = ('[tools.echo]\neffect = "read"\n[tools.append]\neffect = "write"\n'
                'identity = { collection = "files", key_arg = "text" }\n')


def _echo(tmp_path: Path) -> Any:
    (tmp_path / "world.toml").write_text(
        f'kind = "mcp_stdio"\nid = "echoes"\n[server]\npackage = "echo"\nversion = "1"\n'
        f'command = ["{sys.executable}", "{ECHO}", "{tmp_path}"]\n[probe]\nbuiltin = "folder"\n{ECHO_OVERLAY}')
    return load_external(tmp_path)


def test_an_interruption_under_text_results_names_the_invocation_where_the_record_is_kept(tmp_path: Path) -> None:
    """I5 without structured results keeps the invocation record: an interruption is `INTERRUPTED: inv-1` (the id
    to ask about), not a timeout, and the tool is loaded by describe_tool first (selective discovery)."""
    gw = Gateway(_echo(tmp_path), Trace(), GatewaySchedule(id="t", faults=(
        GatewayFault(kind="interruption", tool="append"),)), keys=True).open()
    try:
        face = GatewayInterface(gw, load_conditions().resolve("I5-structured"))
        assert face.call("describe_tool", {"name": "append"}).content == (
            'OK: {"description":"Append the text to notes.txt. A repeated idempotency_key is answered from the '
            'gateway\'s record, never sent to the server twice.","name":"append","parameters":{"properties":{'
            '"idempotency_key":{"description":"Caller-chosen key naming this logical effect.","type":"string"},'
            '"text":{"type":"string"}},"required":["text"],"type":"object"}}')
        told = face.call("append", {"text": "x"})
        assert (told.content, told.dropped) == ("INTERRUPTED: inv-1", False)
        assert face.call("get_invocation_status", {"invocation_id": "inv-1"}).content == (
            'OK: {"answer":null,"committed":false,"invocation_id":"inv-1","reached_server":false,"tool":"append"}')
    finally:
        gw.close()


def test_a_servers_structured_content_is_shown_beside_its_text(tmp_path: Path) -> None:
    """A tool answering structuredContent: the agent gets it as `structured` beside the text, in JSON results and
    in text results alike; an answer without it has no `structured` at all."""
    world = _world(tmp_path, '[tools.new]\neffect = "write"\n[tools.noop]\neffect = "write"\n')
    gw = Gateway(world, Trace()).open()
    try:
        face = GatewayInterface(gw, load_conditions().resolve("GW-bare"))
        assert face.call("new", {"text": "x"}).content == {"status": "ok", "result": {
            "text": '{"id": "rec-1.txt"}', "structured": {"id": "rec-1.txt", "n": [1]}}}
        assert face.call("noop", {}).content == {"status": "ok", "result": {"text": "nothing changed"}}
        text = GatewayInterface(gw, load_conditions().resolve("I0"))
        assert text.call("new", {"text": "y"}).content == (
            'OK: {"structured":{"id":"rec-2.txt","n":[2]},"text":"{\\"id\\": \\"rec-2.txt\\"}"}')
    finally:
        gw.close()


def test_the_trace_records_each_call_as_made_and_verify_without_the_key(tmp_path: Path) -> None:
    """The trace a judge reads: every tool call with its tool and arguments, a verify_effect's check of the
    arguments without the agent's idempotency_key, and what the episode loop notes (a model call)."""
    gw = Gateway(_echo(tmp_path), Trace(), keys=True).open()
    try:
        face = GatewayInterface(gw, load_conditions().resolve("GW-full"))
        face.call("echo", {"text": "hi"})
        face.call("verify_effect", {"tool": "append", "arguments": {"text": "notes.txt", "idempotency_key": "z"}})
        face.note("model_call", tokens=3, model="m")
    finally:
        gw.close()
    events = gw.trace.events()
    assert [e.data for e in events if e.kind == "tool_call"] == [
        {"tool": "echo", "args": {"text": "hi"}},
        {"tool": "verify_effect", "args": {"tool": "append", "arguments": {"text": "notes.txt",
                                                                          "idempotency_key": "z"}}}]
    (check,) = [e.data for e in events if e.kind == "verification"]
    assert {k: v for k, v in check.items() if k != "hash"} == {"tool": "append", "args": {"text": "notes.txt"},
                                                               "holds": False}
    assert (events[-1].kind, events[-1].data) == ("model_call", {"tokens": 3, "model": "m"})


# -- one server per example: the three treatments from one run ---------------------------------------------------
STAMPS = ('[tools.stamp]\neffect = "write"\nidentity = { collection = "files", key_arg = "name" }\n'
          'examples = [{ args = { name = "s.txt" } }]\n')


@pytest.mark.parametrize("overlay", [DUPLICATE, FALSE_FAILURE, SILENT, NOTHING, STAMPS],
                         ids=["duplicate", "false_failure", "silent", "nothing", "stamps"])
@pytest.mark.parametrize("treatments", [("bare", "key", "verify"), ("key", "verify"), ("verify",), ("key",)],
                         ids=["all", "key+verify", "verify", "key"])
def test_every_treatment_from_one_server_is_the_card_of_one_server_per_treatment(overlay: str,
                                                                                 treatments: tuple[str, ...],
                                                                                 tmp_path: Path) -> None:
    """The atlas measures an example's treatments from one server (`shared`): its card must be the very card of a
    server per treatment, for every class, a tool that acts only when asked again (the bare re-issue is its first
    effect, after the key's replay and verify's check on the same server), and a verify that re-issues."""
    world = _world(tmp_path, overlay)
    assert _json(measure(world, treatments, shared=True)) == _json(measure(world, treatments))


def test_one_server_per_example_says_so_in_its_progress_and_leaves_no_server_running(tmp_path: Path) -> None:
    """Servers are stopped on threads of their own while the next starts: each is gone when `measure` returns,
    even one that takes its time to exit once its input ends."""
    slow = SERVER + "\nimport time\ntime.sleep(0.6)\n"
    world = _world(tmp_path, DUPLICATE)
    (tmp_path / "srv.py").write_text(slow)
    said: list[str] = []
    card = measure(world, progress=said.append, shared=True)
    assert said == ["add #1 bare, key, verify", "add #2 bare, key, verify"]
    assert [o.cls for t in card.tools for o in t.outcomes] == ["duplicate", "safe", "safe"] * 2
    running = []
    for pid in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if str(tmp_path / "srv.py").encode() in cmd:
            running.append(pid)
    assert running == []
