"""The fault-injecting gateway in front of a real MCP server (runtime/gateway.py, issue 49), over the
standard-library echo server (`tests/data/echo_mcp.py`, a real process started per gateway): what `open` records,
each gateway fault's exact trace events and Delivery, occurrence counting, the idempotency key's replays and
conflicts, the invocation record `status`, `verify` and `final_state` read from the real folder, the path mapping
between `/workspace` and the episode's folder, the tool-list check between starts, and the one line (naming the
world) that a broken server, fixture, foreign write or probe gives. Nothing of aft_bench is mocked."""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from aft_bench.common.canonical import digest
from aft_bench.common.errors import InputError, WorldFailed
from aft_bench.runtime.gateway import (FAILURE_TEXT, NO_GATEWAY_FAULTS, SUCCESS_TEXT, Delivery, Gateway,
                                       GatewayFault, GatewaySchedule, load_gateway_schedule)
from aft_bench.runtime.trace import Trace
from aft_bench.world.external import ExternalWorld, load_external
from aft_bench.world.mcp_stdio import ToolAnswer

ECHO = Path(__file__).parent / "data" / "echo_mcp.py"
HOSTILE = Path(__file__).resolve().parents[1] / "benchmarks" / "hostile" / "server.py"  # MARK = the world's folder
# echo: a read without identity; append: a write whose effect is the record its text names (notes.txt when the
# text is "notes.txt"); refuse (isError): omitted from the overlay, so treated as a write and probed
OVERLAY = ('[tools.echo]\neffect = "read"\n[tools.append]\neffect = "write"\n'
           'identity = { collection = "files", key_arg = "text" }\n')
FOREIGN = 'foreign = [["sh", "-c", "echo other > other.txt"]]\n'
SEED = '[fixture]\nfiles = { "seed.txt" = "seed" }\n'
IDENTITY = {"collection": "files", "key_arg": "text", "field": None, "match": {}, "record_arg": None,
            "replace_new": None, "replace_old": None, "text_of": None}


def _world(folder: Path, *, top: str = FOREIGN + SEED, server: str = "", script: Path = ECHO,
           probe: str = '[probe]\nbuiltin = "folder"\n', overlay: str = OVERLAY, wid: str = "echoes") -> ExternalWorld:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "world.toml").write_text(
        f'kind = "mcp_stdio"\nid = "{wid}"\n{top}[server]\npackage = "echo"\nversion = "1"\n'
        f'command = ["{sys.executable}", "{script}", "{folder}"]\n{server}{probe}{overlay}')
    return load_external(folder)


def _rec(text: str) -> dict[str, Any]:
    """A small text file as the folder probe reads it."""
    data = text.encode()
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "text": text}


def _state(**files: str) -> dict[str, Any]:
    return {"records": {"dirs": {}, "files": {k.replace("_", "."): _rec(v) for k, v in files.items()}}}


S0 = _state(seed_txt="seed")


class _Run:
    """An opened gateway over a fresh echo world, its resources made under the test's own folder."""

    def __init__(self, tmp_path: Path, faults: tuple[GatewayFault, ...] = (), keys: bool = False,
                 **world: Any) -> None:
        self.scratch = tmp_path / "scratch"
        self.scratch.mkdir(parents=True)
        self.world = _world(tmp_path / "w", **world)
        extra = {"keys": True} if keys else {}  # without keys=: the gateway's default (no key record)
        self.gw = Gateway(self.world, Trace(), GatewaySchedule(id="t", faults=faults), resource_parent=self.scratch,
                          **extra)
        self.gw.open()
        self.mark = len(self.gw.trace.events())

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        """The events written since open (or since the last call of this)."""
        evs = self.gw.trace.events()[self.mark:]
        self.mark += len(evs)
        return [(e.kind, dict(e.data)) for e in evs]

    def notes(self) -> str | None:
        p = self.gw.resource.root / "notes.txt"
        return p.read_text() if p.exists() else None


@pytest.fixture
def run(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    made: list[_Run] = []

    def make(*faults: GatewayFault, keys: bool = False, **world: Any) -> _Run:
        r = _Run(tmp_path / f"r{len(made)}", faults, keys, **world)
        made.append(r)
        return r

    yield make
    for r in made:
        r.gw.close()
        assert list(r.scratch.iterdir()) == []  # the resource and the server's log are gone


def _text(text: str, error: bool = False) -> ToolAnswer:
    return ToolAnswer(({"type": "text", "text": text},), error)


def _answer(text: str, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": error}


def _delivered(inv: str, answer: dict[str, Any] | None, transport: str = "delivered", replayed: bool = False,
               error: str | None = None) -> tuple[str, dict[str, Any]]:
    return ("delivered", {"inv": inv, "transport": transport, "replayed": replayed, "error": error, "answer": answer})


def _inv(inv: str, tool: str, args: dict[str, Any], occurrence: int = 1, key: str | None = None) -> tuple[str, dict]:
    return ("invocation", {"inv": inv, "tool": tool, "args": args, "key": key, "occurrence": occurrence})


def _fault(kind: str, what: str, i: int = 0, op: str = "append", occurrence: int = 1) -> tuple[str, dict]:
    return (f"fault_{what}", {"fault": i, "kind": kind, "op": op, "occurrence": occurrence})


def _sent(inv: str, answer: dict[str, Any], effect: dict[str, Any] | None = None) -> list[tuple[str, dict]]:
    """forwarded, the server's answer and (a write) the probed effect, as the gateway writes them."""
    out: list[tuple[str, dict]] = [("forwarded", {"inv": inv}), ("server_answer", {"inv": inv, "answer": answer})]
    if effect is not None:
        changes, state = effect["changes"], effect["state"]
        out.append(("effect", {"inv": inv, "changes": changes, "hash": digest(state)}))
    return out


ADDED_NOTES = {"files": {"added": ["notes.txt"], "removed": [], "changed": []}}


# -- open, and a call without faults ------------------------------------------------------------------------------
def test_open_records_the_server_its_tools_the_overlay_s0_and_every_planned_fault(run: Any) -> None:
    """The trace's head says which server, which tools, which overlay, the s0 state and the planned faults."""
    r = run(GatewayFault(kind="interruption", tool="append", occurrence=2),
            GatewayFault(kind="server_restart", tool="echo"))
    gw = r.gw
    assert [(e.kind, dict(e.data)) for e in gw.trace.events()] == [
        ("gateway_open", {"server": {"name": "echo", "version": "0.0.1"}, "protocol": "2025-06-18",
                          "package": "echo", "version": "1", "tools": ["append", "echo", "refuse"],
                          "overlay": {"append": {"effect": "write", "identity": IDENTITY},
                                      "echo": {"effect": "read", "identity": None}}}),
        ("snapshot", {"at": "s0", "hash": digest(S0), "state": S0}),
        ("fault_planned", {"fault": 0, "kind": "interruption", "op": "append", "occurrence": 2}),
        ("fault_planned", {"fault": 1, "kind": "server_restart", "op": "echo", "occurrence": 1})]
    assert gw.s0 == S0 and gw.state == S0
    assert [t["name"] for t in gw.listed] == ["echo", "append", "refuse"]  # as the server lists them
    assert gw.resource is not None and gw.resource.root.parent == r.scratch
    assert gw.pids == [gw.server.pid] and gw.server.proc.poll() is None and gw.start_s > 0


def test_a_write_is_forwarded_probed_and_delivered_as_the_server_answered(run: Any) -> None:
    """A plain write: sent once, its effect read from the folder, the server's own answer delivered."""
    r = run()
    d = r.gw.invoke("append", {"text": "hi"})
    assert d == Delivery("inv-1", "delivered", _text("appended"), True)
    assert r.events() == [_inv("inv-1", "append", {"text": "hi"}),
                          *_sent("inv-1", _answer("appended"), {"changes": ADDED_NOTES,
                                                                "state": _state(seed_txt="seed", notes_txt="hi\n")}),
                          _delivered("inv-1", _answer("appended"))]
    assert r.notes() == "hi\n" and r.gw.state == _state(seed_txt="seed", notes_txt="hi\n")
    assert r.gw.status("inv-1") == {"invocation_id": "inv-1", "tool": "append", "reached_server": True,
                                    "committed": True, "answer": _answer("appended")}


def test_a_read_is_not_probed_and_a_tool_the_overlay_omits_is(run: Any) -> None:
    """echo (a read) leaves no effect event; refuse, unknown to the overlay, is probed (it may write)."""
    r = run()
    assert r.gw.invoke("echo", {"text": "x"}) == Delivery("inv-1", "delivered", _text("x"), True)
    assert r.gw.invoke("refuse", {}) == Delivery("inv-2", "delivered", _text("refused", True), True)
    assert r.events() == [_inv("inv-1", "echo", {"text": "x"}), *_sent("inv-1", _answer("x")),
                          _delivered("inv-1", _answer("x")),
                          _inv("inv-2", "refuse", {}), *_sent("inv-2", _answer("refused", True),
                                                              {"changes": {}, "state": S0}),
                          _delivered("inv-2", _answer("refused", True))]
    assert r.gw.status("inv-2") == {"invocation_id": "inv-2", "tool": "refuse", "reached_server": True,
                                    "committed": False, "answer": _answer("refused", True)}


# -- each gateway fault -----------------------------------------------------------------------------------------
def test_an_interruption_never_reaches_the_server(run: Any) -> None:
    """The call is cut before the server: nothing sent, nothing written, no answer, the record says so."""
    r = run(GatewayFault(kind="interruption", tool="append"))
    assert r.gw.invoke("append", {"text": "x"}) == Delivery("inv-1", "interrupted", None, False)
    assert r.events() == [_inv("inv-1", "append", {"text": "x"}), _fault("interruption", "armed"),
                          _fault("interruption", "fired"), _delivered("inv-1", None, "interrupted")]
    assert r.notes() is None and r.gw.final_state() == S0
    assert r.gw.status("inv-1") == {"invocation_id": "inv-1", "tool": "append", "reached_server": False,
                                    "committed": False, "answer": None}


def test_a_false_success_is_told_for_a_request_never_sent(run: Any) -> None:
    """The gateway's own success text, isError false, never the server's: the folder is untouched."""
    r = run(GatewayFault(kind="false_success", tool="append"))
    told = _text(SUCCESS_TEXT)
    assert SUCCESS_TEXT == "The operation completed successfully."
    assert r.gw.invoke("append", {"text": "x"}) == Delivery("inv-1", "delivered", told, False)
    assert r.events() == [_inv("inv-1", "append", {"text": "x"}), _fault("false_success", "armed"),
                          _fault("false_success", "fired"), _delivered("inv-1", _answer(SUCCESS_TEXT))]
    assert r.notes() is None
    assert r.gw.status("inv-1") == {"invocation_id": "inv-1", "tool": "append", "reached_server": False,
                                    "committed": False, "answer": None}


def test_a_lost_response_is_dropped_after_the_server_answered_and_wrote(run: Any) -> None:
    """response_loss: the write happened and the record knows its answer; the agent is delivered nothing."""
    r = run(GatewayFault(kind="response_loss", tool="append"))
    assert r.gw.invoke("append", {"text": "x"}) == Delivery("inv-1", "dropped", None, True)
    assert r.events() == [_inv("inv-1", "append", {"text": "x"}), _fault("response_loss", "armed"),
                          *_sent("inv-1", _answer("appended"), {"changes": ADDED_NOTES,
                                                                "state": _state(seed_txt="seed", notes_txt="x\n")}),
                          _fault("response_loss", "fired"), _delivered("inv-1", None, "dropped")]
    assert r.notes() == "x\n"
    assert r.gw.status("inv-1") == {"invocation_id": "inv-1", "tool": "append", "reached_server": True,
                                    "committed": True, "answer": _answer("appended")}


def test_a_false_failure_is_told_for_a_write_the_server_made(run: Any) -> None:
    """false_failure: the gateway's failure text with isError is delivered; the record keeps the real answer."""
    r = run(GatewayFault(kind="false_failure", tool="append"))
    assert FAILURE_TEXT == "The operation failed."
    assert r.gw.invoke("append", {"text": "x"}) == Delivery("inv-1", "delivered", _text(FAILURE_TEXT, True), True)
    assert r.events() == [_inv("inv-1", "append", {"text": "x"}), _fault("false_failure", "armed"),
                          *_sent("inv-1", _answer("appended"), {"changes": ADDED_NOTES,
                                                                "state": _state(seed_txt="seed", notes_txt="x\n")}),
                          _fault("false_failure", "fired"), _delivered("inv-1", _answer(FAILURE_TEXT, True))]
    assert r.notes() == "x\n"
    assert r.gw.status("inv-1")["committed"] is True and r.gw.status("inv-1")["answer"] == _answer("appended")


def test_a_server_restart_stops_the_server_and_starts_a_new_one_before_the_call(run: Any) -> None:
    """server_restart: the old process is stopped, a new one answers the call on the same folder."""
    r = run(GatewayFault(kind="server_restart", tool="append", occurrence=2))
    r.gw.invoke("append", {"text": "a"})
    old, started = r.gw.server, r.gw.start_s
    old_proc, old_pid = old.proc, old.pid
    r.events()
    assert r.gw.invoke("append", {"text": "b"}) == Delivery("inv-2", "delivered", _text("appended"), True)
    assert r.events() == [_inv("inv-2", "append", {"text": "b"}, 2),
                          _fault("server_restart", "armed", occurrence=2), ("server_restart", {}),
                          _fault("server_restart", "fired", occurrence=2),
                          *_sent("inv-2", _answer("appended"),
                                 {"changes": {"files": {"added": [], "removed": [], "changed": ["notes.txt"]}},
                                  "state": _state(seed_txt="seed", notes_txt="a\nb\n")}),
                          _delivered("inv-2", _answer("appended"))]
    assert r.gw.server is not old and old.proc is None and old_proc.poll() is not None  # the old one was stopped
    assert r.gw.pids == [r.gw.server.pid] and r.gw.server.pid != old_pid and r.gw.start_s > started
    assert [t["name"] for t in r.gw.listed] == ["echo", "append", "refuse"]
    assert r.notes() == "a\nb\n"


def test_stale_state_is_another_writer_before_the_call_recorded_apart_from_the_calls_effect(run: Any) -> None:
    """stale_state: the world's foreign command runs first (world_write), then the call's effect is only its own."""
    r = run(GatewayFault(kind="stale_state", tool="append"))
    assert r.gw.invoke("append", {"text": "x"}) == Delivery("inv-1", "delivered", _text("appended"), True)
    other = _state(seed_txt="seed", other_txt="other\n")
    both = _state(seed_txt="seed", other_txt="other\n", notes_txt="x\n")
    assert r.events() == [_inv("inv-1", "append", {"text": "x"}), _fault("stale_state", "armed"),
                          ("world_write", {"changes": {"files": {"added": ["other.txt"], "removed": [],
                                                                 "changed": []}}, "hash": digest(other)}),
                          _fault("stale_state", "fired"),
                          *_sent("inv-1", _answer("appended"), {"changes": ADDED_NOTES, "state": both}),
                          _delivered("inv-1", _answer("appended"))]
    assert r.gw.state == both


def test_faults_count_occurrences_per_tool_and_name_their_index_in_the_schedule(run: Any) -> None:
    """A fault acts on the n-th call of its tool only: other tools' calls do not count, earlier calls pass."""
    r = run(GatewayFault(kind="interruption", tool="append", occurrence=2),
            GatewayFault(kind="false_failure", tool="echo", occurrence=3))
    got = [r.gw.invoke(t, {"text": x}) for t, x in
           [("append", "a"), ("echo", "e1"), ("append", "b"), ("echo", "e2"), ("echo", "e3"), ("append", "c")]]
    assert [(d.inv, d.transport, d.answer, d.reached) for d in got] == [
        ("inv-1", "delivered", _text("appended"), True), ("inv-2", "delivered", _text("e1"), True),
        ("inv-3", "interrupted", None, False), ("inv-4", "delivered", _text("e2"), True),
        ("inv-5", "delivered", _text(FAILURE_TEXT, True), True), ("inv-6", "delivered", _text("appended"), True)]
    evs = r.events()
    assert [d["occurrence"] for k, d in evs if k == "invocation"] == [1, 1, 2, 2, 3, 3]
    assert [(k, d) for k, d in evs if k.startswith("fault_")] == [
        _fault("interruption", "armed", 0, "append", 2), _fault("interruption", "fired", 0, "append", 2),
        _fault("false_failure", "armed", 1, "echo", 3), _fault("false_failure", "fired", 1, "echo", 3)]
    assert r.notes() == "a\nc\n"


def test_a_fault_for_a_tool_never_called_or_an_occurrence_never_reached_does_nothing(run: Any) -> None:
    """Planned but never armed: every call is delivered as answered."""
    r = run(GatewayFault(kind="interruption", tool="refuse"), GatewayFault(kind="response_loss", tool="append",
                                                                            occurrence=3))
    ds = [r.gw.invoke("append", {"text": t}) for t in "ab"]
    assert [d.transport for d in ds] == ["delivered", "delivered"] and r.notes() == "a\nb\n"
    assert not [k for k, _ in r.events() if k.startswith("fault_")]


# -- the idempotency key ----------------------------------------------------------------------------------------
def test_a_repeated_key_is_answered_from_the_record_and_other_arguments_are_a_conflict(run: Any) -> None:
    """The same key with the same arguments is never sent twice; with other arguments it is refused."""
    r = run(keys=True)
    first = r.gw.invoke("append", {"text": "a"}, key="k1")
    assert first == Delivery("inv-1", "delivered", _text("appended"), True)
    r.events()
    assert r.gw.invoke("append", {"text": "a"}, key="k1") == Delivery("inv-2", "delivered", _text("appended"), False,
                                                                       replayed=True)
    assert r.gw.invoke("append", {"text": "b"}, key="k1") == Delivery("inv-3", "delivered", None, False,
                                                                       error="key_conflict")
    assert r.events() == [
        _inv("inv-2", "append", {"text": "a"}, 2, "k1"), ("key_replayed", {"inv": "inv-2", "key": "k1",
                                                                            "first": "inv-1"}),
        _delivered("inv-2", _answer("appended"), replayed=True),
        _inv("inv-3", "append", {"text": "b"}, 3, "k1"), ("key_conflict", {"inv": "inv-3", "key": "k1",
                                                                            "first": "inv-1"}),
        _delivered("inv-3", None, error="key_conflict")]
    # the same key and arguments on another tool: refused, never answered with the first tool's record
    assert r.gw.invoke("refuse", {"text": "a"}, key="k1") == Delivery("inv-4", "delivered", None, False,
                                                                       error="key_conflict")
    assert r.events()[1] == ("key_conflict", {"inv": "inv-4", "key": "k1", "first": "inv-1"})
    assert r.notes() == "a\n"
    assert r.gw.status("inv-2") == {"invocation_id": "inv-2", "tool": "append", "reached_server": False,
                                    "committed": False, "answer": None}  # the replay itself was never sent
    # another key, and no key at all, are sent as usual
    assert r.gw.invoke("append", {"text": "a"}, key="k2").replayed is False
    assert [r.gw.invoke("append", {"text": "z"}).reached for _ in range(2)] == [True, True]
    assert r.notes() == "a\na\nz\nz\n"


def test_the_key_compares_arguments_as_canonical_json(run: Any) -> None:
    """The same arguments in another key order are the same call: replayed, not a conflict."""
    r = run(keys=True)
    r.gw.invoke("echo", {"text": "a", "n": 1}, key="k")
    again = r.gw.invoke("echo", {"n": 1, "text": "a"}, key="k")
    assert again == Delivery("inv-2", "delivered", _text("a"), False, replayed=True)


def test_without_the_key_condition_a_key_is_recorded_but_ignored(run: Any) -> None:
    """keys=False: a repeated key is sent again (the server appends twice); the invocation still names the key."""
    r = run()
    ds = [r.gw.invoke("append", {"text": "a"}, key="k1") for _ in range(2)]
    assert ds == [Delivery("inv-1", "delivered", _text("appended"), True),
                  Delivery("inv-2", "delivered", _text("appended"), True)]
    assert r.notes() == "a\na\n"
    evs = r.events()
    assert [d["key"] for k, d in evs if k == "invocation"] == ["k1", "k1"]
    assert not [k for k, _ in evs if k.startswith("key_")]


def test_the_key_is_recorded_on_the_servers_side_of_a_lost_response_but_not_of_an_interruption(run: Any) -> None:
    """After a lost answer the keyed re-issue gets the real answer from the record (one write); after an
    interruption (never sent) and a false success nothing was recorded, so the re-issue is sent."""
    lost = run(GatewayFault(kind="response_loss", tool="append"), keys=True)
    assert lost.gw.invoke("append", {"text": "a"}, key="k").transport == "dropped"
    assert lost.gw.invoke("append", {"text": "a"}, key="k") == Delivery("inv-2", "delivered", _text("appended"),
                                                                         False, replayed=True)
    assert lost.notes() == "a\n"
    for kind in ("interruption", "false_success"):
        cut = run(GatewayFault(kind=kind, tool="append"), keys=True)
        cut.gw.invoke("append", {"text": "a"}, key="k")
        assert cut.gw.invoke("append", {"text": "a"}, key="k") == Delivery("inv-2", "delivered", _text("appended"),
                                                                            True)
        assert cut.notes() == "a\n"


def test_a_replayed_call_still_counts_as_an_occurrence_and_is_never_faulted(run: Any) -> None:
    """The record answers before any fault is armed: a fault on the replayed occurrence never fires."""
    r = run(GatewayFault(kind="interruption", tool="append", occurrence=2), keys=True)
    r.gw.invoke("append", {"text": "a"}, key="k")
    assert r.gw.invoke("append", {"text": "a"}, key="k").replayed is True
    assert r.gw.invoke("append", {"text": "b"}).transport == "delivered"  # the third call: past the fault
    evs = r.events()
    assert not [k for k, _ in evs if k.startswith("fault_")]
    assert [d["occurrence"] for k, d in evs if k == "invocation"] == [1, 2, 3]


# -- the record, verification and the final state -----------------------------------------------------------------
def test_status_of_an_unknown_invocation_is_none_and_every_question_is_traced(run: Any) -> None:
    """get_invocation_status of an id never given: None, and the question is in the trace either way."""
    r = run()
    r.gw.invoke("echo", {"text": "x"})
    r.events()
    assert r.gw.status("inv-7") is None
    assert r.gw.status("inv-1") == {"invocation_id": "inv-1", "tool": "echo", "reached_server": True,
                                    "committed": True, "answer": _answer("x")}
    assert r.events() == [("reconciliation", {"inv": "inv-7", "known": False}),
                          ("reconciliation", {"inv": "inv-1", "known": True})]


def test_verify_reads_the_real_state_and_says_none_where_the_overlay_gives_no_identity(run: Any) -> None:
    """verify_effect: False before the write, True after (from the folder); None for a read and an unknown tool."""
    r = run()
    assert r.gw.verify("append", {"text": "notes.txt"}) is False
    r.gw.invoke("append", {"text": "notes.txt"})
    r.events()
    assert r.gw.verify("append", {"text": "/workspace/notes.txt"}) is True
    assert r.gw.verify("echo", {"text": "notes.txt"}) is None
    assert r.gw.verify("refuse", {"text": "notes.txt"}) is None
    done = _state(seed_txt="seed", notes_txt="notes.txt\n")
    assert r.events() == [
        ("verification", {"tool": "append", "args": {"text": "/workspace/notes.txt"}, "holds": True,
                          "hash": digest(done)}),
        ("verification", {"tool": "echo", "args": {"text": "notes.txt"}, "holds": None}),
        ("verification", {"tool": "refuse", "args": {"text": "notes.txt"}, "holds": None})]


def test_final_state_reads_the_folder_and_later_effects_are_changes_from_it(run: Any) -> None:
    """final_state is the probe now (a change made outside the gateway included), and becomes the gateway's view."""
    r = run()
    (r.gw.resource.root / "byhand.txt").write_text("h")
    assert r.gw.final_state() == _state(seed_txt="seed", byhand_txt="h") == r.gw.state
    r.gw.invoke("append", {"text": "x"})
    (effect,) = [d for k, d in r.events() if k == "effect"]
    assert effect["changes"] == ADDED_NOTES  # byhand.txt is not the call's


EDIT = ('[tools.echo]\neffect = "read"\n[tools.append]\neffect = "write"\n'
        'identity = { collection = "files", record_arg = "path", field = "text", replace_old = "old", '
        'replace_new = "new" }\n')


def test_verify_judges_an_edit_against_s0(run: Any) -> None:
    """An edit-form identity is read against the s0 state: notes.txt as s0's text with the edit made holds."""
    r = run(overlay=EDIT, top='[fixture]\nfiles = { "notes.txt" = "hello\\n" }\n')
    edit = {"path": "/workspace/notes.txt", "text": "world", "old": "hello\n", "new": "hello\nworld\n"}
    assert r.gw.verify("append", edit) is False
    r.gw.invoke("append", edit)
    assert r.notes() == "hello\nworld\n" and r.gw.verify("append", edit) is True


def test_a_servers_structured_content_is_delivered_and_traced_as_given(run: Any) -> None:
    """structuredContent passes the gateway: in the Delivery, the server_answer and the delivered events."""
    r = run(script=HOSTILE, server='env = { HOSTILE = "deep-struct=2" }\n')
    assert r.gw.invoke("echo", {"text": "x"}) == Delivery("inv-1", "delivered", ToolAnswer(
        ({"type": "text", "text": "ok"},), False, {"a": {"a": {}}}), True)
    shown = {"content": [{"type": "text", "text": "ok"}], "isError": False, "structuredContent": {"a": {"a": {}}}}
    assert [d["answer"] for k, d in r.events() if k in ("server_answer", "delivered")] == [shown, shown]


def test_paths_are_the_episodes_folder_for_the_server_and_workspace_for_the_agent(run: Any) -> None:
    """/workspace in arguments (at any depth) reaches the server as the real folder; the real folder in an answer
    is shown and traced as /workspace; other values pass unchanged."""
    r = run()
    root = str(r.gw.resource.root)
    r.gw.invoke("append", {"text": "/workspace/a"})
    r.gw.invoke("append", {"text": ["/workspace/b", 5]})
    r.gw.invoke("append", {"text": {"p": "/workspace/c"}})
    r.gw.invoke("append", {"text": 7})
    r.gw.invoke("append", {"text": ("/workspace/t",)})  # a Python caller's tuple is a JSON array too
    r.gw.invoke("append", {"text": "/other/a"})
    r.gw.invoke("append", {"text": "/workspaces/x /workspace2 /workspace-b /workspace. /workspace"})
    assert r.notes() == (f"{root}/a\n['{root}/b', 5]\n{{'p': '{root}/c'}}\n7\n['{root}/t']\n/other/a\n"
                         f"/workspaces/x /workspace2 /workspace-b {root}. {root}\n")  # only whole paths
    r.events()
    assert r.gw.invoke("echo", {"text": f"{root}/d"}) == Delivery("inv-8", "delivered", _text("/workspace/d"), True)
    evs = r.events()
    assert evs[0] == _inv("inv-8", "echo", {"text": f"{root}/d"})  # the agent's call as made
    assert [d["answer"] for k, d in evs if k in ("server_answer", "delivered")] == [_answer("/workspace/d")] * 2
    assert r.gw.status("inv-8")["answer"] == _answer("/workspace/d")
    assert r.gw.invoke("echo", {"text": f"{root}x/e {root}-old"}).answer == _text(f"{root}x/e {root}-old")
    r.gw.invoke("append", {"text": {"/workspace/k": "/workspace/v", "/workspaces": 1}})  # an object's keys too
    assert r.notes().splitlines()[-1] == f"{{'{root}/k': '{root}/v', '/workspaces': 1}}"


def test_a_path_that_is_an_objects_key_in_an_answer_is_shown_as_workspace() -> None:
    """jupyter-editor-mcp answers `{"results": {"<real path>": true}}`: the card and the atlas's evidence held the
    scratch folder's name, different at each run, until keys were mapped too."""
    from aft_bench.runtime.gateway import _map
    real = "/tmp/aft-x/w1"
    answer = {"results": {f"{real}/a.ipynb": True, f"{real}x/b": [f"{real}"]}, real: {"n": 1}}
    assert _map(answer, real, "/workspace") == {"results": {"/workspace/a.ipynb": True, f"{real}x/b": ["/workspace"]},
                                               "/workspace": {"n": 1}}


# -- what a broken world says -------------------------------------------------------------------------------------
def _nothing_left(scratch: Path) -> bool:
    return list(scratch.iterdir()) == []


def test_a_fixture_that_fails_is_one_line_naming_the_world_and_its_field(tmp_path: Path) -> None:
    """A fixture command that exits 1: WorldFailed naming the world and `fixture.commands`; nothing left."""
    world = _world(tmp_path / "w", top='[fixture]\ncommands = [["false"]]\n')
    (tmp_path / "s").mkdir()
    gw = Gateway(world, Trace(), resource_parent=tmp_path / "s")
    with pytest.raises(WorldFailed) as exc:
        gw.open()
    assert (str(exc.value), exc.value.field) == (
        "world 'echoes': fixture command 'false' exited 1: nothing on stderr", "fixture.commands")
    assert _nothing_left(tmp_path / "s") and gw.trace.events() == ()


def test_a_server_that_cannot_start_is_one_line_naming_the_world(tmp_path: Path) -> None:
    """A missing program and a server that exits at once: WorldFailed `world 'echoes': ...`, field `server`."""
    world = _world(tmp_path / "w")
    world = world.model_copy(update={"server": world.server.model_copy(update={"command": ("/nonexistent/x",)})})
    (tmp_path / "s").mkdir()
    with pytest.raises(WorldFailed) as exc:
        Gateway(world, Trace(), resource_parent=tmp_path / "s").open()
    assert (str(exc.value), exc.value.field) == (
        "world 'echoes': cannot start '/nonexistent/x': No such file or directory", "server")
    with pytest.raises(WorldFailed, match=r"^world 'echoes': the server exited \(status 2\) before it answered "
                                          r"initialize; its last words: .*can't open file '/nonexistent/echo.py'"):
        Gateway(_world(tmp_path / "w2", script=Path("/nonexistent/echo.py")), Trace(),
                resource_parent=tmp_path / "s").open()
    assert _nothing_left(tmp_path / "s")


def test_a_gateway_not_open_says_so_naming_the_world(tmp_path: Path) -> None:
    """invoke, verify and final_state before open: one line, never an AttributeError."""
    gw = Gateway(_world(tmp_path / "w"), Trace())
    assert (gw.resource, gw.server, gw.listed, gw.s0, gw.state, gw.start_s) == (None, None, [], {}, {}, 0.0)
    for call in (lambda: gw.invoke("append", {"text": "x"}), lambda: gw.verify("append", {"text": "x"}),
                 gw.final_state):
        with pytest.raises(WorldFailed, match=r"^world 'echoes': the gateway is not open$"):
            call()
    assert gw.pids == []
    gw.close()  # closing a gateway never opened is harmless


def test_a_server_that_dies_or_answers_malformed_fails_the_call_naming_world_and_tool(run: Any) -> None:
    """A server that crashes at the call and one that answers an error without an integer code: `world 'echoes':
    append: ...`; the record says the call reached the server with no answer (not committed)."""
    r = run(script=HOSTILE, server='env = { HOSTILE = "crash=3" }\n')
    with pytest.raises(WorldFailed) as exc:
        r.gw.invoke("append", {"text": "x"})
    assert (str(exc.value), exc.value.field) == (
        "world 'echoes': append: the server exited (status 3) before it answered tools/call; its last words: "
        "Traceback: connect failed; OPENAI_API_KEY=[redacted]", "server")
    assert r.gw.status("inv-1") == {"invocation_id": "inv-1", "tool": "append", "reached_server": True,
                                    "committed": False, "answer": None}
    bad = run(server='env = { ECHO_BAD = "error-code-string" }\n')
    with pytest.raises(WorldFailed, match=r"^world 'echoes': echo: the server sent a malformed answer: an error "
                                          r"whose code is 'oops', not an integer$"):
        bad.gw.invoke("echo", {"text": "x"})


def test_a_restart_whose_server_cannot_start_again_names_the_restart(run: Any, tmp_path: Path) -> None:
    """server_restart on a server whose program is gone: `world 'echoes': restart: ...`."""
    script = tmp_path / "echo_copy.py"
    shutil.copy(ECHO, script)
    r = run(GatewayFault(kind="server_restart", tool="append"), script=script)
    script.unlink()
    with pytest.raises(WorldFailed, match=r"^world 'echoes': restart: the server exited \(status 2\) before it "
                                          r"answered initialize; its last words: .*can't open file"):
        r.gw.invoke("append", {"text": "x"})
    assert [k for k, _ in r.events()] == ["invocation", "fault_armed"]  # no restart recorded, nothing fired


def test_a_foreign_write_that_fails_is_one_line_naming_the_world(run: Any) -> None:
    """stale_state with a foreign command that exits 1: WorldFailed naming the world and the command."""
    r = run(GatewayFault(kind="stale_state", tool="append"), top='foreign = [["false"]]\n')
    with pytest.raises(WorldFailed, match=r"^world 'echoes': foreign write command 'false' exited 1: nothing on "
                                          r"stderr$") as exc:
        r.gw.invoke("append", {"text": "x"})
    assert r.notes() is None and exc.value.field == "foreign"


PROBE = '''import json, os, sys
if os.path.exists("notes.txt"):
    sys.stderr.write("cannot read the notes\\n")
    sys.exit(3)
print(json.dumps({"records": {"files": {}}}))
'''


def test_a_probe_that_fails_after_a_write_or_at_verify_or_at_the_end_names_the_world(run: Any,
                                                                                     tmp_path: Path) -> None:
    """The probe command exits 3 once notes.txt exists: the call's effect read fails with field `probe.command`,
    and verify and final_state fail with the same line."""
    (tmp_path / "probe.py").write_text(PROBE)
    probe = f'[probe]\ncommand = ["{sys.executable}", "{tmp_path / "probe.py"}"]\n'
    r = run(probe=probe, top="")
    assert r.gw.s0 == {"records": {"files": {}}}
    said = "world 'echoes': probe failed: '" + sys.executable + "' exited 3: cannot read the notes"
    with pytest.raises(WorldFailed) as exc:
        r.gw.invoke("append", {"text": "x"})
    assert (str(exc.value), exc.value.field) == (said, "probe.command")
    for call in (lambda: r.gw.verify("append", {"text": "notes.txt"}), r.gw.final_state):
        with pytest.raises(WorldFailed) as exc:
            call()
        assert (str(exc.value), exc.value.field) == (said, "probe.command")  # the field validate --live names


# -- the tool list, checked at every start ---------------------------------------------------------------------------
NO_APPEND = ('[{"name": "echo", "inputSchema": {"type": "object"}}, '
             '{"name": "refuse", "inputSchema": {"type": "object"}}]')


def test_a_tool_the_server_never_listed_is_the_world_files_error_at_its_first_start(tmp_path: Path) -> None:
    """The first start lacks `append`: bad input naming the file, the field and what the server lists."""
    world = _world(tmp_path / "w", server=f"env = {{ ECHO_TOOLS = '{NO_APPEND}' }}\n")
    (tmp_path / "s").mkdir()
    with pytest.raises(InputError) as exc:
        Gateway(world, Trace(), resource_parent=tmp_path / "s").open()
    assert str(exc.value) == (f"{tmp_path / 'w' / 'world.toml'}: field 'tools.append': world 'echoes': the server "
                              "lists no such tool (it lists: echo, refuse) (got 'append')")
    assert _nothing_left(tmp_path / "s")  # the started server stopped, its folder removed


def test_tools_that_change_after_a_start_matched_are_the_servers_failure(tmp_path: Path) -> None:
    """A later start lacking `append` is WorldFailed (field tools.append), not the world file's error."""
    world = _world(tmp_path / "w", server='env = { ECHO_BAD = "tools-change" }\n')
    (tmp_path / "s").mkdir()
    Gateway(world, Trace(), resource_parent=tmp_path / "s").open().close()
    with pytest.raises(WorldFailed) as exc:
        Gateway(world, Trace(), resource_parent=tmp_path / "s").open()
    assert (str(exc.value), exc.value.field) == (
        "world 'echoes': the server's tools changed after an earlier start matched the world: tools.append: the "
        "server lists no such tool (it lists: echo, refuse)", "tools.append")
    assert _nothing_left(tmp_path / "s")


def test_a_restarted_server_whose_tools_changed_fails_the_episode_instead_of_serving_another_surface(
        tmp_path: Path) -> None:
    """A server_restart fault whose new process lacks `append`: WorldFailed naming tools.append, at the restart,
    before the call is forwarded to a server that no longer has the tool the agent was shown."""
    world = _world(tmp_path / "w", server='env = { ECHO_BAD = "tools-change" }\n')
    (tmp_path / "s").mkdir()
    gw = Gateway(world, Trace(), GatewaySchedule(id="r", faults=(GatewayFault(kind="server_restart", tool="append"),)),
                 resource_parent=tmp_path / "s").open()
    try:
        with pytest.raises(WorldFailed) as exc:
            gw.invoke("append", {"text": "x"})
        assert (str(exc.value), exc.value.field) == (
            "world 'echoes': the server's tools changed after an earlier start matched the world: tools.append: the "
            "server lists no such tool (it lists: echo, refuse)", "tools.append")
        assert [e.kind for e in gw.trace.events()][-2:] == ["invocation", "fault_armed"]  # not restarted, not sent
    finally:
        gw.close()
    assert _nothing_left(tmp_path / "s")


def test_a_world_file_edited_to_name_another_tool_is_judged_as_a_new_world(tmp_path: Path) -> None:
    """The same file matched once, then edited to name a tool the server lacks: the file's error, not the server's."""
    folder = tmp_path / "w"
    Gateway(_world(folder), Trace()).open().close()
    edited = _world(folder, overlay=OVERLAY + '[tools.push]\neffect = "write"\n')
    with pytest.raises(InputError, match=r"field 'tools.push': world 'echoes': the server lists no such tool"):
        Gateway(edited, Trace()).open()


def test_a_world_file_edited_to_another_id_is_judged_as_a_new_world(tmp_path: Path) -> None:
    """A server whose later starts lack `append`, matched under one id: the file re-read under another id is a
    new world, so its first start lacking the tool is the file's error."""
    folder = tmp_path / "w"
    changing = 'env = { ECHO_BAD = "tools-change" }\n'
    Gateway(_world(folder, server=changing), Trace()).open().close()
    with pytest.raises(InputError, match=r"field 'tools.append': world 'other': the server lists no such tool"):
        Gateway(_world(folder, server=changing, wid="other"), Trace()).open()


def test_a_world_matched_in_another_folder_does_not_make_a_missing_tool_the_servers_failure(tmp_path: Path) -> None:
    """Two world files with the same id and tools: the second file's first start is judged on its own."""
    Gateway(_world(tmp_path / "a"), Trace()).open().close()
    other = _world(tmp_path / "b", server=f"env = {{ ECHO_TOOLS = '{NO_APPEND}' }}\n")
    with pytest.raises(InputError, match=r"field 'tools.append'"):
        Gateway(other, Trace()).open()


def test_close_stops_the_server_and_removes_the_folder_and_may_be_called_again(run: Any) -> None:
    """After close: no server, no folder, no pid; a second close is harmless."""
    r = run()
    proc, root = r.gw.server.proc, r.gw.resource.root
    r.gw.close()
    assert r.gw.server is None and r.gw.pids == [] and proc.poll() is not None and not root.exists()
    r.gw.close()


# -- the schedule ---------------------------------------------------------------------------------------------------
def test_a_schedule_binds_faults_without_a_tool_to_the_tasks_first_target_and_hashes_its_content() -> None:
    """bound() aims tool-less faults at the first target, keeps named ones; the hash is the content's digest."""
    s = GatewaySchedule(id="wl/v", faults=(GatewayFault(kind="response_loss"),
                                           GatewayFault(kind="interruption", tool="echo", occurrence=2)))
    b = s.bound("append")
    assert b.faults == (GatewayFault(kind="response_loss", tool="append"),
                        GatewayFault(kind="interruption", tool="echo", occurrence=2))
    assert b.id == "wl/v" and s.faults[0].tool is None
    assert s.hash == digest({"id": "wl/v", "description": "", "faults": [
        {"kind": "response_loss", "tool": None, "occurrence": 1},
        {"kind": "interruption", "tool": "echo", "occurrence": 2}]})
    assert b.hash != s.hash and NO_GATEWAY_FAULTS == GatewaySchedule(id="none") and NO_GATEWAY_FAULTS.faults == ()


def test_a_schedule_file_naming_a_tool_the_world_lacks_is_bad_input(tmp_path: Path) -> None:
    """load_gateway_schedule reads the TOML and names the fault whose tool the world does not have."""
    world = _world(tmp_path / "w")
    good = tmp_path / "good.toml"
    good.write_text('id = "g"\nfaults = [{ kind = "response_loss" }, { kind = "stale_state", tool = "append", '
                    'occurrence = 2 }]\n')
    assert load_gateway_schedule(good, world) == GatewaySchedule(id="g", faults=(
        GatewayFault(kind="response_loss"), GatewayFault(kind="stale_state", tool="append", occurrence=2)))
    bad = tmp_path / "bad.toml"
    bad.write_text('id = "b"\nfaults = [{ kind = "response_loss", tool = "echo" }, { kind = "interruption", '
                   'tool = "push" }]\n')
    with pytest.raises(InputError) as exc:
        load_gateway_schedule(str(bad), world)
    assert str(exc.value) == f"{bad}: field 'faults.1.tool': world 'echoes' has no such tool (got 'push')"
    bad.write_text('id = "b"\nfaults = [{ kind = "response_loss", tol = "echo" }]\n')
    with pytest.raises(InputError) as exc:
        load_gateway_schedule(bad, world)
    assert str(exc.value) == f"{bad}: field 'faults.0.tol': Extra inputs are not permitted (got 'echo')"
