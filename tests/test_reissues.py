"""Who re-issued a call in a served episode (issue 52, `analysis/reissues.py`): a wire call no model turn asked for is
the framework's, one a model call not yet sent asked for is the model's, a model's call that repeats an earlier one
is the model's re-issue. Each on logs shaped as the served episode's wire log and the offline model's log write
them (the real clients' logs are read by `interop/retries.py`, which `make interop-retries` runs against
openai-agents, pydantic-ai and the MCP SDK client on mcp-server-git)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aft_bench.analysis.reissues import ModelCall, attribute, changes_by_wire, model_calls, shares, summary, told
from aft_bench.runtime.trace import Trace

COMMIT = {"repo_path": "/workspace", "message": "Update notes"}


def _reply(t: float, call_id: str, tool: str, args: Any) -> dict[str, Any]:
    """One fake-llm exchange whose reply asks for one tool call."""
    call = {"id": call_id, "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}
    return {"t": t, "request": {"messages": []},
            "reply": {"choices": [{"message": {"role": "assistant", "tool_calls": [call]}}]}}


def _shown(t: float, call_id: str, content: Any) -> dict[str, Any]:
    """A later request carrying the tool result the model is shown for `call_id`."""
    return {"t": t, "request": {"messages": [{"role": "tool", "tool_call_id": call_id, "content": content}]},
            "reply": {"choices": [{"message": {"role": "assistant", "content": "done"}}]}}


def _wire(*calls: tuple[float, str, Any]) -> list[dict[str, Any]]:
    return [{"n": i, "t": t, "tool": tool, "args": args} for i, (t, tool, args) in enumerate(calls)]


def test_a_call_sent_again_with_no_model_turn_between_is_the_frameworks_and_a_later_turns_is_the_models() -> None:
    """openai-agents retrying twice, every answer lost, then the model asking again: two framework re-issues of
    call_1 (2.0 and 2.1 s after the call each repeats), then the model's re-issue of the commit."""
    log = [_reply(10.0, "call_0", "git_add", {"files": ["a"]}), _reply(11.0, "call_1", "git_commit", COMMIT),
           _shown(17.5, "call_1", [{"type": "text", "text": "An error occurred while running the tool."}]),
           _reply(17.6, "call_2", "git_commit", COMMIT)]
    wire = _wire((10.1, "git_add", {"files": ["a"]}), (11.1, "git_commit", COMMIT), (13.1, "git_commit", COMMIT),
                 (15.2, "git_commit", COMMIT), (17.7, "git_commit", COMMIT))
    calls = attribute(wire, model_calls(log), {1: True, 2: True, 3: True, 4: True})
    assert [(c.by, c.call_id, c.repeats, c.after_s, c.identical, c.changed) for c in calls] == [
        ("model", "call_0", None, None, None, None), ("model", "call_1", None, None, None, True),
        ("framework", "call_1", 1, 2.0, True, True), ("framework", "call_1", 2, 2.1, True, True),
        ("model", "call_2", 3, 2.5, True, True)]
    s = summary(calls, log)
    assert {k: v for k, v in s.items() if k != "calls"} == {
        "wire_calls": 5, "framework_reissues": 2, "model_reissues": 1, "framework_after_s": [2.0, 2.1],
        "framework_identical": True, "framework_changes": 2,
        "model_told": {"call_1": "An error occurred while running the tool."}}


def test_with_retries_off_every_repeat_is_the_models_and_none_the_frameworks() -> None:
    """The known negative: the model asked again after each timeout (a turn between each send)."""
    log = [_reply(1.0, "call_1", "git_commit", COMMIT), _shown(3.5, "call_1", "Error: timed out"),
           _reply(3.6, "call_2", "git_commit", COMMIT), _reply(6.0, "call_3", "git_commit", COMMIT)]
    wire = _wire((1.1, "git_commit", COMMIT), (3.7, "git_commit", COMMIT), (6.1, "git_commit", COMMIT))
    calls = attribute(wire, model_calls(log))
    assert [(c.by, c.call_id, c.repeats) for c in calls] == [("model", "call_1", None), ("model", "call_2", 0),
                                                             ("model", "call_3", 1)]
    s = summary(calls, log)
    assert (s["framework_reissues"], s["model_reissues"], s["framework_identical"]) == (0, 2, None)
    assert s["model_told"] == {"call_1": "Error: timed out", "call_2": None}  # call_2's result was never shown
    assert told(log, "call_1") == "Error: timed out" and told(log, "call_9") is None


def test_a_framework_resend_with_other_arguments_is_still_the_frameworks_and_says_they_differ() -> None:
    """A client that adds a field when it re-sends (say, a retry counter) re-issued it all the same."""
    log = [_reply(1.0, "call_1", "write", {"text": "x"})]
    wire = _wire((1.1, "write", {"text": "x"}), (3.1, "write", {"text": "x", "attempt": 2}))
    calls = attribute(wire, model_calls(log))
    assert [(c.by, c.identical, c.repeats) for c in calls] == [("model", None, None), ("framework", False, 0)]
    assert summary(calls, log)["framework_identical"] is False


def test_a_model_call_made_after_a_wire_call_never_explains_it() -> None:
    """Clock order decides: a re-send that arrived before the model's next reply is the framework's, even when that
    reply asks for the same call; a wire call of another tool than the model's is the framework's too."""
    log = [_reply(1.0, "call_1", "a", {}), _reply(5.0, "call_2", "a", {})]
    wire = _wire((1.1, "a", {}), (3.0, "a", {}), (5.1, "a", {}), (5.2, "b", {}))
    assert [(c.by, c.call_id) for c in attribute(wire, model_calls(log))] == [
        ("model", "call_1"), ("framework", "call_1"), ("model", "call_2"), ("framework", None)]


def test_model_calls_read_every_tool_call_of_every_reply_oldest_first_and_skip_text_replies() -> None:
    log = [_reply(2.0, "c2", "b", {"k": 1}), _shown(1.5, "x", "y"), _reply(1.0, "c1", "a", {}),
           {"t": 3.0, "request": "not json", "reply": {"error": {"message": "bad"}}}]
    assert model_calls(log) == [ModelCall(1.0, "c1", "a", {}), ModelCall(2.0, "c2", "b", {"k": 1})]


def test_what_each_wire_call_changed_is_read_from_the_gateways_trace_in_order_per_tool(tmp_path: Path) -> None:
    """The k-th wire call of a tool is its k-th traced invocation: a refused call that never reached the gateway
    (report_outcome here, which the gateway never sees) is simply not found."""
    trace = Trace(tmp_path / "t.jsonl")
    trace.append("invocation", inv="inv-1", tool="git_commit", args=COMMIT)
    trace.append("effect", inv="inv-1", changes={"commits": {"added": ["c1"], "removed": [], "changed": []}})
    trace.append("invocation", inv="inv-2", tool="git_commit", args=COMMIT)
    trace.append("effect", inv="inv-2", changes={"commits": {"added": [], "removed": [], "changed": []}})
    trace.append("invocation", inv="inv-3", tool="git_status", args={})
    trace.seal()  # written through to the file, as a finished episode's trace is
    wire = _wire((1.0, "git_commit", COMMIT), (2.0, "git_commit", COMMIT), (3.0, "git_status", {}),
                 (4.0, "report_outcome", {}))
    assert changes_by_wire(wire, tmp_path / "t.jsonl") == {0: True, 1: False}


def test_each_tuple_reads_only_its_own_share_of_a_model_log_tuples_wrote_together() -> None:
    """Two tuples played one after the other (listed out of order), each with its own call_1: the second's commit
    re-sent by the framework must not be taken for the first tuple's call_2 (ids start again per tuple)."""
    first = [_reply(1.0, "call_1", "git_commit", COMMIT), _reply(4.0, "call_2", "git_commit", COMMIT)]
    second = [_reply(10.0, "call_1", "git_commit", COMMIT)]
    wires = [_wire((10.1, "git_commit", COMMIT), (12.1, "git_commit", COMMIT)),
             _wire((1.1, "git_commit", COMMIT), (4.1, "git_commit", COMMIT)), []]
    got = shares(wires, first + second)
    # the second tuple's first model turn comes before its first wire call: the first tuple's share holds it too,
    # after every wire call of its own, where no call of it can be taken for one (and it carries no tool result)
    assert got == [second, first + second, []]
    assert [c.by for c in attribute(wires[1], model_calls(got[1]))] == ["model", "model"]
    assert [c.by for c in attribute(wires[0], model_calls(got[0]))] == ["model", "framework"]
    assert [c.by for c in attribute(wires[0], model_calls(first + second))] == ["model", "model"]  # unshared: wrong


def test_what_the_model_was_shown_is_read_after_the_call_was_sent_never_from_a_neighbour_tuple() -> None:
    """A client that ends on a text turn sends one more request holding every tool result of its tuple; in the
    next tuple's share it would be taken for that tuple's call of the same id, which came later."""
    before = _shown(5.0, "call_2", "the previous tuple's answer")
    log = [before, _reply(6.0, "call_1", "w", {}), _reply(9.0, "call_2", "w", {}),
           _shown(11.5, "call_2", "TIMEOUT"), _reply(11.6, "call_3", "w", {})]
    wire = _wire((6.1, "w", {}), (9.1, "w", {}), (11.7, "w", {}))
    s = summary(attribute(wire, model_calls(log)), log)
    assert s["model_told"] == {"call_1": None, "call_2": "TIMEOUT"}
    assert told(log, "call_2") == "the previous tuple's answer" and told(log, "call_2", 9.1) == "TIMEOUT"
