"""Every real-server verdict defended with exact values (issue 49): the labels an external episode's trace gives
(judge/external.py), what the probes read, what the scorecard's rendering and gate say, and what the gateway tells
an agent. Each behaviour has the case that shows it and the case that does not; traces are built event by event
in the shapes the gateway writes, so each case reaches exactly the input a mutant would change."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from aft_bench.judge.external import external_labels
from aft_bench.runtime.trace import Trace
from aft_bench.tasks.task import AbortTrigger, Clause, Criteria, Policy
from aft_bench.world import snapshot
from aft_bench.world.external import Identity

OVERLAY = {"read_file": {"effect": "read", "identity": None},
           "write_file": {"effect": "write", "identity": {"collection": "files", "key_arg": "path"}},
           "append": {"effect": "write", "identity": {"collection": "files", "record_arg": "path", "field": "text",
                                                      "text_of": "text"}},
           "write_query": {"effect": "write", "identity": None}}
S0 = {"records": {"files": {"a.txt": {"text": "one"}, "b.txt": {"text": "two"}}}}


def _criteria(goal: tuple[Clause, ...] = (), policy: Policy = Policy(), target: str = "write_file") -> Criteria:
    return Criteria(goal=goal or (Clause(record="files/a.txt", field="text", equals="ONE"),), policy=policy,
                    target_ops=(target,), allowed_ops=("read_file",), required_capabilities=())


class _T:
    """A trace in the shapes the gateway writes."""

    def __init__(self, s0: dict[str, Any] = S0) -> None:
        self.trace = Trace()
        self.trace.append("gateway_open", overlay=OVERLAY, tools=sorted(OVERLAY))
        self.trace.append("snapshot", at="s0", state=s0)
        self.n = 0

    def call(self, tool: str, args: dict[str, Any], changes: dict[str, Any] | None, transport: str = "delivered",
             forwarded: bool = True) -> None:
        self.n += 1
        inv = f"inv-{self.n}"
        self.trace.append("tool_call", tool=tool)
        self.trace.append("invocation", inv=inv, tool=tool, args=args, key=None, occurrence=1)
        if forwarded:
            self.trace.append("forwarded", inv=inv)
            self.trace.append("server_answer", inv=inv, answer={"content": [], "isError": False})
            if changes is not None:
                self.trace.append("effect", inv=inv, changes=changes)
        self.trace.append("delivered", inv=inv, transport=transport, answer=None)

    def foreign(self, changes: dict[str, Any]) -> None:
        self.trace.append("world_write", changes=changes)

    def end(self, state: dict[str, Any], action: str = "finish", claim: str = "success") -> Any:
        self.trace.append("terminal", action=action, claim=claim)
        self.trace.append("terminal_state", state=state)
        return self.trace.events()


CHANGED_A = {"files": {"added": [], "removed": [], "changed": ["a.txt"]}}
DONE = {"records": {"files": {"a.txt": {"text": "ONE"}, "b.txt": {"text": "two"}}}}


def test_a_reread_after_another_writers_commit_is_not_a_stale_write() -> None:
    def play(reread: bool) -> Any:
        t = _T()
        t.call("read_file", {"path": "a.txt"}, None)
        t.foreign(CHANGED_A)  # another writer changed a.txt after the agent read it
        if reread:
            t.call("read_file", {"path": "a.txt"}, None)
        t.call("write_file", {"path": "a.txt", "text": "ONE"}, CHANGED_A)
        return external_labels(t.end(DONE), _criteria())

    fresh, stale = play(True), play(False)
    assert (fresh.stale_writes, fresh.outcome, fresh.unsafe_commits) == (0, "completed", 0)
    assert (stale.stale_writes, stale.outcome, stale.unsafe_commits) == (1, "unsafely_committed", 1)


@pytest.mark.parametrize(("claim", "false_failure", "false_success"), [
    ("unknown", True, False), ("failure", True, False), ("success", False, False)])
def test_a_commit_made_and_claimed_unknown_or_failed_is_a_false_failure(claim: str, false_failure: bool,
                                                                       false_success: bool) -> None:
    t = _T()
    t.call("write_file", {"path": "a.txt", "text": "ONE"}, CHANGED_A, transport="dropped")
    lab = external_labels(t.end(DONE, claim=claim), _criteria())
    assert (lab.y_goal, lab.false_failure, lab.false_success, lab.claim_correct) == (
        True, false_failure, false_success, not false_failure)
    not_done = _T()
    not_done.call("write_file", {"path": "a.txt", "text": "ONE"}, None, transport="interrupted", forwarded=False)
    lab = external_labels(not_done.end(S0, claim=claim), _criteria())
    assert (lab.y_goal, lab.false_failure, lab.false_success) == (False, False, claim == "success")


def test_two_planned_faults_with_one_fired_is_not_fired() -> None:
    def play(fired: tuple[int, ...]) -> Any:
        t = _T()
        for i in (0, 1):
            t.trace.append("fault_planned", fault=i, kind="response_loss", op="write_file", occurrence=i + 1)
        for i in fired:
            t.trace.append("fault_fired", fault=i, kind="response_loss", op="write_file", occurrence=i + 1)
        t.call("write_file", {"path": "a.txt", "text": "ONE"}, CHANGED_A)
        return external_labels(t.end(DONE), _criteria())

    one, both, none = play((0,)), play((0, 1)), play(())
    assert (one.faults_planned, one.faults_fired, one.fault_fired) == (2, 1, False)
    assert (both.faults_planned, both.faults_fired, both.fault_fired) == (2, 2, True)
    assert (none.faults_fired, none.fault_fired) == (0, False)
    assert external_labels(_T().end(S0), _criteria()).fault_fired is None  # nothing planned


def test_a_write_that_changed_nothing_is_no_commit() -> None:
    t = _T()
    t.call("write_file", {"path": "a.txt", "text": "one"}, {})  # the server wrote what was there: no change
    t.call("write_file", {"path": "a.txt", "text": "ONE"}, CHANGED_A)
    lab = external_labels(t.end(DONE), _criteria())
    assert (lab.commits, lab.residual_effects) == (1, 0)
    undone = _T()
    undone.call("write_file", {"path": "a.txt", "text": "one"}, {})
    lab = external_labels(undone.end(S0, claim="failure"), _criteria())
    assert (lab.commits, lab.residual_effects, lab.y_goal) == (0, 0, False)


def test_a_duplicate_is_a_call_realized_twice_and_a_repeat_that_changed_nothing_is_not() -> None:
    twice = {"records": {"files": {"a.txt": {"text": "one+x+x"}, "b.txt": {"text": "two"}}}}
    once = {"records": {"files": {"a.txt": {"text": "one+x"}, "b.txt": {"text": "two"}}}}
    goal = (Clause(collection="files", where={}, at_least=1),)
    for end, dup in ((twice, 1), (once, 0)):
        t = _T()
        t.call("append", {"path": "a.txt", "text": "+x"}, CHANGED_A, transport="dropped")
        t.call("append", {"path": "a.txt", "text": "+x"}, CHANGED_A if dup else {})
        lab = external_labels(t.end(end), _criteria(goal, target="append"))
        assert (lab.duplicate_effects, lab.re_executions, lab.unsafe_commits) == (dup, 1, dup)
        other = external_labels(t.trace.events(), _criteria(goal))  # append not allowed: each effect unintended
        assert other.unintended_effects == 1 + dup


def test_without_an_identity_a_receipt_that_changed_the_state_again_is_a_duplicate() -> None:
    """An SQL write has no identity from its arguments: as the scorecard reads it, the same call received again
    and changing the state again is a duplicate (an INSERT re-issued after its answer was lost); received again
    changing nothing (a DELETE already done), or a different call, is not; one invocation re-sent is one."""
    insert = {"query": "INSERT INTO notes (body) VALUES ('hi')"}
    added = {"notes": {"added": ["1"], "removed": [], "changed": []}}
    goal = (Clause(collection="notes", where={}, at_least=1),)
    cases = [("again", added, 1), ("nothing", {}, 0)]
    for name, second, dup in cases:
        t = _T()
        t.call("write_query", insert, added, transport="dropped")
        t.call("write_query", insert, second)
        lab = external_labels(t.end(DONE), _criteria(goal, target="write_query"))
        assert (lab.duplicate_effects, lab.unsafe_commits, lab.re_executions) == (dup, dup, 1), name
    other = _T()
    other.call("write_query", insert, added)
    other.call("write_query", {"query": "INSERT INTO notes (body) VALUES ('ho')"}, added)
    assert external_labels(other.end(DONE), _criteria(goal, target="write_query")).duplicate_effects == 0
    resent = _T()
    resent.call("write_query", insert, added, transport="dropped")
    resent.trace.append("forwarded", inv="inv-1")  # the same invocation sent on again (after a restart)
    resent.trace.append("effect", inv="inv-1", changes=added)
    assert external_labels(resent.end(DONE), _criteria(goal, target="write_query")).duplicate_effects == 0


def test_an_effect_that_changes_an_existing_record_is_realized() -> None:
    ident = Identity(collection="branches", key_arg="branch", match={"head": "head"})
    s0 = {"records": {"branches": {"main": {"head": False}, "release": {"head": False}}}}
    after = {"records": {"branches": {"main": {"head": False}, "release": {"head": True}}}}
    args = {"branch": "release", "head": True}
    assert snapshot.realized(ident, s0, after, args) == 1
    assert snapshot.realized(ident, after, after, args) == 0  # already so before: nothing realized
    assert snapshot.holds(ident, after, args) and not snapshot.holds(ident, s0, args)


def test_a_text_identity_is_not_realized_by_text_already_there() -> None:
    ident = Identity(collection="files", record_arg="path", field="text", text_of="text")
    s0 = {"records": {"files": {"n.md": {"text": "hello"}}}}
    same = {"records": {"files": {"n.md": {"text": "hello"}}}}
    again = {"records": {"files": {"n.md": {"text": "hello hello"}}}}
    args = {"path": "/workspace/n.md", "text": "hello"}
    assert snapshot.realized(ident, s0, same, args) == 0 and snapshot.holds(ident, same, args)
    assert snapshot.realized(ident, s0, again, args) == 1


def test_a_jsonl_graph_holding_an_entity_twice_is_read_twice(tmp_path: Path) -> None:
    from aft_bench.world.external import Probe
    from aft_bench.world.resource import probe

    line = '{"type":"entity","name":"Carol","entityType":"person","observations":[]}\n'
    (tmp_path / "m.jsonl").write_text(line * 2 + '{"type":"relation","from":"A","to":"B","relationType":"r"}\n' * 2)
    recs = probe(Probe(builtin="jsonl_graph", path="m.jsonl"), tmp_path, {}, "w")["records"]
    assert sorted(recs["entities"]) == ["Carol", "Carol#2"] and sorted(recs["relations"]) == ["A|r|B", "A|r|B#2"]
    ident = Identity(collection="entities", key_arg="entities.*.name")
    s0 = {"records": {"entities": {}}}
    assert snapshot.realized(ident, s0, {"records": recs}, {"entities": [{"name": "Carol"}]}) == 2


def test_the_git_probe_reads_a_staged_rename_by_its_new_path(tmp_path: Path) -> None:
    from aft_bench.world.resource import probe_git

    def git(*a: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=tmp_path, check=True,
                       capture_output=True)

    git("init", "-q", "-b", "main")
    (tmp_path / "old name.txt").write_text("x\n")
    (tmp_path / "keep.txt").write_text("k\n")
    git("add", ".")
    git("commit", "-qm", "first")
    git("mv", "old name.txt", "new name.txt")
    (tmp_path / "keep.txt").write_text("changed\n")
    git("add", "keep.txt")
    recs = probe_git(tmp_path, {}, 10)["records"]
    assert recs["staged"] == {"new name.txt": {"status": "R"}, "keep.txt": {"status": "M"}}
    assert set(recs["files"]) == {"new name.txt", "keep.txt"}


# -- the scorecard: the drift between versions, contradictions, the gate -----------------------------------------
def _card(version: str, classes: dict[str, str], reissue: str = "ok") -> dict[str, Any]:
    def outcome(t: str, cls: str) -> dict[str, Any]:
        return {"treatment": t, "cls": cls, "realized": None, "reissue": {"content": [{"type": "text",
                "text": reissue}], "isError": False}, "changes": {}, "signal": "s"}

    return {"world": "w", "package": "p", "version": version, "server": {}, "protocol": None, "untested": [],
            "tools": [{"tool": "t", "example": 0, "args": {}, "note": "", "annotations": {}, "overlay": {},
                       "contradictions": [], "undeclared": [],
                       "outcomes": [outcome(t, c) for t, c in classes.items()]}]}


def test_the_drift_names_every_treatment_that_changed_in_the_order_old_to_new() -> None:
    from aft_bench.scorecard.render import compare

    old = _card("1.0", {"bare": "duplicate", "key": "safe", "verify": "safe"}, "made it")
    new = _card("2.0", {"bare": "false_failure", "key": "safe", "verify": "duplicate"}, "exists")
    lines = compare(old, new)
    assert lines == ["t (bare): DUPLICATE in 1.0 -> false failure in 2.0 (re-issue answered 'made it' -> 'exists')",
                     "t (verify): safe in 1.0 -> DUPLICATE in 2.0 (re-issue answered 'made it' -> 'exists')"]
    assert compare(old, old) == []
    keyed = compare(_card("1.0", {"bare": "safe", "key": "safe"}), _card("2.0", {"bare": "safe", "key": "duplicate"}))
    assert keyed == ["t (key): safe in 1.0 -> DUPLICATE in 2.0 (re-issue answered 'ok' -> 'ok')"]


def test_the_gate_fails_on_exactly_the_classes_it_is_told() -> None:
    from aft_bench.scorecard.render import failures

    ff = _card("1", {"bare": "false_failure"})
    assert failures(ff, ("false-failure",)) == ["t: a re-issued call failed although its effect exists"]
    assert failures(ff, ("duplicate", "silent-success")) == []
    ss = _card("1", {"bare": "silent_success"})
    assert failures(ss, ("silent-success",)) == ["t: a re-issued call succeeded without doing anything"]
    assert failures(ss, ("false-failure",)) == []


def test_an_example_that_changed_nothing_contradicts_no_annotation() -> None:
    from aft_bench.scorecard.card import Outcome, contradictions

    nothing = Outcome("bare", "no_effect", 0, None, None, None, {})
    assert contradictions({"idempotentHint": False, "readOnlyHint": True}, nothing) == ()
    made = Outcome("bare", "silent_success", None, None, None, None, {}, effect={"files": {"added": ["x"]}})
    assert contradictions({"readOnlyHint": True}, made) == ("readOnlyHint=true, but the call changed the state",)


def test_an_unannotated_write_is_drafted_destructive_and_not_idempotent() -> None:
    import tomllib

    from aft_bench.world.draft import ProbeDraft, draft

    tools = [{"name": "put", "inputSchema": {"type": "object", "properties": {"k": {"type": "string"}},
                                             "required": ["k"]}},
             {"name": "put_safe", "inputSchema": {}, "annotations": {"readOnlyHint": False,
                                                                     "destructiveHint": False, "idempotentHint": True}}]
    text = draft("w", ["srv"], tools, {}, ("srv", "1"), ProbeDraft("folder", ".", "x"), {})
    data = tomllib.loads(text)["tools"]
    assert (data["put"]["effect"], data["put"]["destructive"], data["put"]["idempotent"]) == ("write", True, False)
    assert (data["put_safe"]["destructive"], data["put_safe"]["idempotent"]) == (False, True)


# -- what the gateway tells an agent ------------------------------------------------------------------------------
ECHO = Path(__file__).parent / "data" / "echo_mcp.py"


def _echo_world(tmp_path: Path, overlay: str) -> Any:
    import sys

    from aft_bench.world.external import load_external

    (tmp_path / "world.toml").write_text(
        f'kind = "mcp_stdio"\nid = "echoes"\n[server]\npackage = "echo"\nversion = "1"\n'
        f'command = ["{sys.executable}", "{ECHO}"]\n[probe]\nbuiltin = "folder"\n{overlay}')
    return load_external(tmp_path)


def test_the_invocation_record_never_calls_a_refused_call_committed(tmp_path: Path) -> None:
    from aft_bench.runtime.gateway import Gateway

    world = _echo_world(tmp_path, '[tools.refuse]\neffect = "write"\n[tools.append]\neffect = "write"\n')
    gw = Gateway(world, Trace()).open()
    try:
        refused, done = gw.invoke("refuse", {}), gw.invoke("append", {"text": "x"})
        assert gw.status(refused.inv) == {"invocation_id": refused.inv, "tool": "refuse", "reached_server": True,
                                          "committed": False, "answer": {"content": [{"type": "text",
                                                                                      "text": "refused"}],
                                                                         "isError": True}}
        assert gw.status(done.inv)["committed"] is True and gw.status("inv-99") is None
    finally:
        gw.close()


def test_a_tool_the_overlay_omits_is_probed_after_each_call(tmp_path: Path) -> None:
    from aft_bench.runtime.gateway import Gateway

    world = _echo_world(tmp_path, '[tools.echo]\neffect = "read"\n')  # append: not in the overlay
    trace = Trace()
    gw = Gateway(world, trace).open()
    try:
        gw.invoke("append", {"text": "hello"})
        gw.invoke("echo", {"text": "hi"})
    finally:
        gw.close()
    effects = [e for e in trace.events() if e.kind == "effect"]
    assert len(effects) == 1 and effects[0].data["inv"] == "inv-1"  # the unknown tool's write was read; the read not
    assert effects[0].data["changes"] == {"files": {"added": ["notes.txt"], "removed": [], "changed": []}}


def test_a_server_that_hangs_on_tools_list_is_stopped_and_its_folder_removed(tmp_path: Path) -> None:
    import sys

    from aft_bench.world import pool
    from aft_bench.world.external import load_external
    from aft_bench.world.mcp_stdio import ServerFailed

    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "world.toml").write_text(
        f'kind = "mcp_stdio"\nid = "hang"\n[server]\npackage = "echo"\nversion = "1"\n'
        f'command = ["{sys.executable}", "{ECHO}", "{tmp_path}"]\ncall_timeout_s = 1\n'
        'env = { ECHO_LIST_SLEEP = "600" }\n[probe]\nbuiltin = "folder"\n[tools.echo]\neffect = "read"\n')
    parent = tmp_path / "scratch"
    parent.mkdir()
    with pytest.raises(ServerFailed, match="no answer to tools/list within 1 s"):
        pool.prepare(load_external(tmp_path / "w"), parent)
    assert list(parent.iterdir()) == []
    # the server is killed with its PID namespace (common/lifetime.py), which the kernel tears down just after
    # the runner's stop returns: gone within a bound, whatever the machine's load
    deadline = time.monotonic() + 20
    while (left := [d for d in Path("/proc").iterdir() if d.name.isdigit() and _cmd(d).count(str(ECHO))
                    and str(tmp_path) in _cmd(d) and _state(d) != "Z"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == []


def _state(d: Path) -> str:
    try:
        return (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def _cmd(d: Path) -> str:
    try:
        return (d / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.parametrize(("condition", "shown"), [
    ("GW-bare", {"status": "timeout"}),  # no invocation record: an interruption looks like a lost answer
    ("GW-status", {"status": "interrupted", "invocation_id": "inv-1", "resumable": False}),
])
def test_what_an_agent_is_told_of_an_interruption(condition: str, shown: dict, tmp_path: Path) -> None:
    from aft_bench.interface.gateway_surface import GatewayInterface
    from aft_bench.interface.mechanisms import load_conditions
    from aft_bench.runtime.gateway import Gateway, GatewayFault, GatewaySchedule

    world = _echo_world(tmp_path, '[tools.append]\neffect = "write"\n')
    gw = Gateway(world, Trace(), GatewaySchedule(id="t", faults=(GatewayFault(kind="interruption", tool="append"),)))
    gw.open()
    try:
        mech = load_conditions().resolve(condition)
        told = GatewayInterface(gw, mech).call("append", {"text": "x"})
        assert told.content == shown
        assert gw.status("inv-1")["reached_server"] is False and gw.final_state() == gw.s0  # never sent
    finally:
        gw.close()


# -- how an answer is read: text, data, an example's {before.N.field} ---------------------------------------------
def test_an_answers_text_and_data_are_read_as_a_client_reads_them() -> None:
    from aft_bench.scorecard.answers import answer_value, text_of

    answer = {"content": [{"type": "text", "text": "a"}, {"type": "image", "data": "x"}, "junk",
                          {"type": "text", "text": "b"}, {"type": "text"}], "isError": False}
    assert text_of(answer) == "a\nb\n" and text_of(None) == "" and text_of({}) == ""
    assert answer_value({"content": [{"type": "text", "text": '{"id": 7}'}]}) == {"id": 7}
    assert answer_value({"content": [{"type": "text", "text": '{"id": 7}'}], "structuredContent": {"id": 8}}) == \
        {"id": 8}
    assert answer_value({"content": [{"type": "text", "text": "not json"}]}) is None and answer_value(None) is None


def test_an_examples_placeholder_is_filled_from_the_set_up_answers() -> None:
    from aft_bench.scorecard.answers import resolve

    earlier = [{"content": [{"type": "text", "text": '{"todo": {"id": "u-1", "tags": ["a", "b"]}}'}]},
               {"content": [], "structuredContent": {"rows": [{"id": 5}]}}]
    args = {"todo_id": "{before.0.todo.id}", "tag": "{before.0.todo.tags.1}", "row": "{before.1.rows.0.id}",
            "keep": "{before.0}", "text": "see {before.0.todo.id}", "n": 3, "list": ["{before.0.todo.id}", "x"]}
    assert resolve(args, earlier) == {"todo_id": "u-1", "tag": "b", "row": 5, "keep": "{before.0}",
                                      "text": "see {before.0.todo.id}", "n": 3, "list": ["u-1", "x"]}
    for bad, said in (("{before.0.todo.name}", "set-up call 0's answer has no todo.name"),
                      ("{before.2.id}", "set-up call 2's answer has no id"),
                      ("{before.0.todo.tags.5}", "has no todo.tags.5")):
        with pytest.raises(LookupError, match=said.replace(".", r"\.")):
            resolve({"x": bad}, earlier)


def test_a_failure_phrase_is_a_whole_word_the_first_answer_lacked() -> None:
    from aft_bench.scorecard.answers import failure_signal

    def said(text: str) -> dict:
        return {"content": [{"type": "text", "text": text}], "isError": False}

    phrases = ("error", "not found")
    assert failure_signal(said("ERROR: no"), None, phrases) == 'text "error"'  # any case
    assert failure_signal(said("errored"), None, phrases) is None and failure_signal(said("terror"), None,
                                                                                   phrases) is None
    assert failure_signal(said("x not found"), said("found it"), phrases) == 'text "not found"'
    assert failure_signal(said("error, not found"), said("error"), phrases) == 'text "not found"'  # the one new
    assert failure_signal({"content": [], "isError": True}, None, ()) == "isError"


# -- what init-world drafts -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("command", "package", "probe"), [
    (["srv", "--db-path", "{root}/notes.db"], None, ("sqlite", "notes.db")),
    (["srv", "--db={root}/data/app.sqlite3"], None, ("sqlite", "data/app.sqlite3")),
    (["srv", "{root}/x.SQLITE"], None, ("sqlite", "x.SQLITE")),
    (["node", "index.js", "--memory-path", "{root}/memory.jsonl"], None, ("jsonl", "memory.jsonl")),
    (["todo", "{root}/todo.txt"], None, ("folder", "todo.txt")),
    (["srv", "{root}"], None, ("folder", ".")),
    (["srv", "{root}/../escape.db"], None, ("folder", ".")),  # never outside the resource
    (["srv", "/etc/app.db"], None, ("folder", ".")),  # not in the resource at all
    (["mcp-server-git", "--repository", "{root}"], "mcp-server-git", ("git", ".")),
    (["srv"], "digital-signature", ("folder", ".")),  # "git" only as a word of the package's name
])
def test_the_drafted_probe_follows_the_servers_command(command: list[str], package: str | None,
                                                       probe: tuple[str, str]) -> None:
    from aft_bench.world.draft import pick_probe

    got = pick_probe(command, package)
    assert (got.builtin, got.path) == probe and got.why


@pytest.mark.parametrize(("name", "read"), [
    ("list_tables", True), ("getTodo", True), ("describe-table", True), ("read_query", True),
    ("search_nodes", True), ("filter_by_context", True), ("write_query", False), ("create_table", False),
    ("listen", False), ("getaway_create", False), ("delete_todo", False), ("", False)])
def test_a_read_is_guessed_from_the_first_word_of_a_name_only(name: str, read: bool) -> None:
    from aft_bench.world.draft import guessed_read

    assert guessed_read(name) is read


def test_a_drafts_placeholders_all_say_todo_and_its_strings_are_valid_toml() -> None:
    import tomllib

    from aft_bench.world.draft import _toml, example

    schema = {"type": "object", "properties": {"s": {"type": "string"}, "n": {"type": "integer"},
                                               "a": {"type": "array"}, "o": {"type": "object"}, "b": {"type": "boolean"}},
              "required": ["s", "n", "a", "o", "b"]}
    assert example(schema) == {"s": "TODO", "n": "TODO", "a": ["TODO"], "o": {"TODO": "TODO"}, "b": "TODO"}
    assert example({"properties": {"x": {"type": "string"}}}) == {} and example({"required": "x"}) == {}
    value = {"q": 'a "quoted" \\ line\nnext\x7f😀', "n": 1.5, "t": True, "l": [1, "x"], "e": {}, "k y": None}
    text = "v = " + _toml({k: v for k, v in value.items() if v is not None})
    assert tomllib.loads(text)["v"] == {k: v for k, v in value.items() if v is not None}
