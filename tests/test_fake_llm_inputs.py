"""The offline model takes what agent frameworks send when they drive a served episode: content-part arrays,
the served `task` prompt verbatim (with or without instructions of their own), tool results inside their
wrappers; and it ends in text once its report has been answered. Each known positive has a known negative."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from aft_bench.agents.fake_llm import FakeModel, _content, index_tasks, observed, serve
from aft_bench.agents.llm import SYSTEM
from aft_bench.serving.server import Target, task_text

from conftest import WORLDS

TASK = "rl-01-o1"
SPEC = "Charge order o1 its amount of 50."
CHARGE = {"amount": 50, "idempotency_key": f"{TASK}:0", "note": "", "order_id": "o1"}
SERVED_PROMPT = task_text(Target("response_loss", TASK, "I4"), WORLDS)
FRAMEWORK_SYSTEM = "You operate tools against a live system for a user."


def _fn(name: str, props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": name.replace("_", " "),
                                             "parameters": {"type": "object", "properties": props,
                                                            "required": list(required)}}}


STR = {"type": "string"}
CHARGE_TOOL = _fn("charge_payment", {"order_id": STR, "amount": {"type": "integer"}, "note": STR,
                                     "idempotency_key": STR}, ("order_id", "amount"))
STATUS_TOOL = _fn("get_invocation_status", {"invocation_id": STR}, ("invocation_id",))
REPORT_TOOL = _fn("report_outcome", {"action": STR, "claim": STR, "evidence": STR}, ("action", "claim"))
EAGER = [CHARGE_TOOL, STATUS_TOOL, REPORT_TOOL]
DESCRIBE_TOOL = _fn("describe_tool", {"name": STR}, ("name",))
VERIFY_TOOL = _fn("verify_effect", {"tool": STR, "arguments": {"type": "object"}}, ("tool", "arguments"))
SELECTIVE = [DESCRIBE_TOOL, VERIFY_TOOL, STATUS_TOOL, REPORT_TOOL]


@pytest.fixture(scope="module")
def model() -> FakeModel:
    return FakeModel(index_tasks([WORLDS]), policy="capability")


def _harness_brief() -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM.format(task_id=TASK)},
            {"role": "user", "content": f"Task: {SPEC}\nInputs: {{}}"}]


def _call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": f"call_{i}", "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args, sort_keys=True)}}]}


def _result(i: int, content: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"call_{i}", "content": content}


def _reply(model: FakeModel, messages: list[dict[str, Any]], tools: list[dict[str, Any]] = EAGER) -> dict[str, Any]:
    return model.respond({"model": "fake-capability", "messages": messages, "tools": tools})["choices"][0]


def _action(model: FakeModel, messages: list[dict[str, Any]], tools: list[dict[str, Any]] = EAGER) -> tuple:
    msg = _reply(model, messages, tools)["message"]
    assert msg.get("tool_calls"), f"expected a tool call, got text: {msg.get('content')!r}"
    fn = msg["tool_calls"][0]["function"]
    return fn["name"], json.loads(fn["arguments"])


def _parts(messages: list[dict[str, Any]], kind: str = "text") -> list[dict[str, Any]]:
    """The same conversation with every string content as a one-part content array."""
    return [{**m, "content": [{"type": kind, "text": m["content"]}]} if isinstance(m.get("content"), str) else m
            for m in messages]


# -- the task: found in the served prompt, wherever the framework puts it ----------------------------------
@pytest.mark.parametrize("brief", [
    pytest.param(lambda: [{"role": "user", "content": SERVED_PROMPT}], id="served prompt alone"),
    pytest.param(lambda: [{"role": "system", "content": FRAMEWORK_SYSTEM}, {"role": "user", "content": SERVED_PROMPT}],
                 id="after a framework's system message"),
    pytest.param(lambda: [{"role": "developer", "content": FRAMEWORK_SYSTEM},
                          {"role": "user", "content": [{"type": "text", "text": SERVED_PROMPT}]}],
                 id="developer instructions, prompt as content parts"),
    pytest.param(lambda: [{"role": "system", "content": SERVED_PROMPT}], id="served prompt as the system message"),
    pytest.param(_harness_brief, id="the harness's own system prompt and brief"),
])
def test_the_served_prompt_gives_the_tasks_first_action(model: FakeModel, brief: Any) -> None:
    assert SERVED_PROMPT.startswith(f"Task id: {TASK}\nTask: {SPEC}\nInputs: ")
    assert _action(model, brief()) == ("charge_payment", CHARGE)


def test_without_a_task_it_reports_none_and_an_unknown_task_escalates(model: FakeModel) -> None:
    """Known negatives: no task in the conversation is `none`; a task it does not know is escalated."""
    assert _action(model, [{"role": "user", "content": "Charge order o1."}]) == (
        "report_outcome", {"action": "none", "claim": "unknown", "evidence": "from the tool results above"})
    unknown = SERVED_PROMPT.replace(f"Task id: {TASK}", "Task id: rl-99-nope")
    assert _action(model, [{"role": "system", "content": FRAMEWORK_SYSTEM}, {"role": "user", "content": unknown}])[1][
        "action"] == "escalate"
    changed = SERVED_PROMPT.replace(SPEC, "Charge order o1 its amount of 51.")  # the spec must match too
    assert _action(model, [{"role": "user", "content": changed}])[1]["action"] == "escalate"
    tool_said_it = [{"role": "user", "content": "Do the task."},  # a task id only inside a tool result is not a brief
                    _call(0, "get_invocation_status", {"invocation_id": "x"}), _result(0, SERVED_PROMPT)]
    assert _action(model, tool_said_it)[0] == "report_outcome"


# -- content-part arrays ----------------------------------------------------------------------------------
def _lost_then_ok() -> list[list[dict[str, Any]]]:
    """Prefixes of one conversation: the charge's response lost, the retry answered."""
    brief = _harness_brief()
    lost = brief + [_call(0, "charge_payment", CHARGE), _result(0, '{"status": "timeout"}')]
    ok = lost + [_call(1, "charge_payment", CHARGE), _result(1, json.dumps(
        {"status": "ok", "result": {"ref": "payments/p1", "record": {"_version": 1}}, "invocation_id": "inv-0002"},
        sort_keys=True))]
    return [brief, lost, ok]


@pytest.mark.parametrize("kind", ["text", "input_text"])
def test_content_part_arrays_give_the_same_actions_as_strings(model: FakeModel, kind: str) -> None:
    for messages in _lost_then_ok():
        assert _action(model, _parts(messages, kind)) == _action(model, messages)
    assert [_action(model, m)[0] for m in _lost_then_ok()] == ["charge_payment", "charge_payment", "report_outcome"]


def test_content_parts_over_http_are_answered_not_refused(model: FakeModel) -> None:
    """Before: a 400 (AttributeError: 'list' object has no attribute 'startswith'); now the same reply."""
    srv = serve(model)
    try:
        body = json.dumps({"model": "fake-capability", "messages": _parts(_lost_then_ok()[1]), "tools": EAGER})
        req = urllib.request.Request(f"http://127.0.0.1:{srv.server_port}/v1/chat/completions", body.encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:  # loopback only
            reply = json.loads(r.read())
    finally:
        srv.shutdown()
    assert reply["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "charge_payment"


# -- framework wrappers around tool results ---------------------------------------------------------------
TIMEOUT_ENVELOPE = '{"status": "timeout"}'
WRAPPED = [  # (what a framework sent back, the interface's observation inside it)
    ('{"error":"{\\"status\\":\\"timeout\\"}"}', {"status": "timeout"}),  # pydantic-ai 2.x: isError, structured
    ('{"error":"TIMEOUT: no response"}', "TIMEOUT: no response"),  # pydantic-ai 2.x: isError, text form
    ('{"error":"INTERRUPTED: inv-0001"}', "INTERRUPTED: inv-0001"),
    ("ERROR precondition_failed: version changed\n\nFix the errors and try again.",  # pydantic-ai's retry prompt
     "ERROR precondition_failed: version changed"),
    ([{"type": "text", "text": TIMEOUT_ENVELOPE}], {"status": "timeout"}),  # openai-agents: content parts
    ('[{"type": "text", "text": "OK: {\\"ref\\": \\"payments/p1\\"}"}]', 'OK: {"ref": "payments/p1"}'),
    ('Error executing tool charge_payment: {"status": "timeout"}', {"status": "timeout"}),  # text around an envelope
    ("Tool call failed: ERROR unauthorized: refunds.issue missing", "ERROR unauthorized: refunds.issue missing"),
    # LlamaIndex prints the MCP result as a Python repr: quotes in the server's text come escaped (issue 48: a
    # replayed answer holding a quote was taken for a lost one)
    ("meta=None content=[TextContent(type='text', text='{\"status\": \"ok\", \"result\": {\"text\": "
     "\"it\\'s \\\\\"done\\\\\"\"}}')] structuredContent=None isError=False",
     {"status": "ok", "result": {"text": 'it\'s "done"'}}),
]


@pytest.mark.parametrize(("sent", "inside"), WRAPPED)
def test_the_observation_is_recovered_from_a_frameworks_wrapper(sent: Any, inside: Any) -> None:
    assert observed(sent) == inside


HARNESS_FORMS = [  # what the harness's own llm agent sends: read exactly as before
    '{"error": "precondition_failed", "detail": "version changed", "status": "error"}',  # an envelope, not a wrapper
    '{"status": "ok", "result": {"name": "charge_payment", "parameters": {}}}',
    "OK: {\"ref\": \"payments/p1\"}", "ERROR invalid_arguments: the arguments are not a JSON object",
    "INTERRUPTED: inv-0001 resumable", "TIMEOUT: no response", "null",
]


@pytest.mark.parametrize("sent", HARNESS_FORMS)
def test_what_the_harness_sends_is_read_unchanged(sent: str) -> None:
    """Known negatives of the unwrapping: the harness's envelope (which has an `error` key) and its text forms."""
    assert observed(sent) == _content(sent)


def test_a_wrapped_error_gives_the_same_next_action_as_the_bare_one(model: FakeModel) -> None:
    bare = _harness_brief() + [_call(0, "charge_payment", CHARGE)]
    for inner, wrapped in ((TIMEOUT_ENVELOPE, '{"error":"{\\"status\\":\\"timeout\\"}"}'),
                           ("TIMEOUT: no response", '{"error":"TIMEOUT: no response"}')):
        assert _action(model, bare + [_result(0, wrapped)]) == _action(model, bare + [_result(0, inner)])
    refused = '{"error": "precondition_failed", "detail": "stale", "status": "error"}'
    assert _action(model, bare + [_result(0, refused)])[1]["action"] == "abort"  # read as the envelope it is


def test_a_described_schema_inside_content_parts_counts_as_described(model: FakeModel) -> None:
    """Selective discovery as a framework shows it: the described tool joins the tools of later requests (a
    dynamic tools/list), its schema came back as content parts; the next action is the one the harness's own
    conversation (plain strings, the tool added by the agent) gives."""
    schema = {"name": "charge_payment", **CHARGE_TOOL["function"]}
    described = json.dumps({"status": "ok", "result": schema}, sort_keys=True)
    plain = _harness_brief() + [_call(0, "describe_tool", {"name": "charge_payment"}), _result(0, described)]
    assert _action(model, _harness_brief(), SELECTIVE)[0] == "describe_tool"
    want = _action(model, plain, SELECTIVE + [CHARGE_TOOL])
    assert want[0] == "verify_effect"
    assert _action(model, _parts(plain), SELECTIVE + [CHARGE_TOOL]) == want
    pydantic = plain[:-1] + [_result(0, json.dumps({"status": "ok", "result": schema}, separators=(",", ":")))]
    assert _action(model, pydantic, SELECTIVE + [CHARGE_TOOL]) == want


# -- the end: text once the report has been answered ------------------------------------------------------
def _reported(answer: Any) -> list[dict[str, Any]]:
    report = {"action": "finish", "claim": "success", "evidence": "from the tool results above"}
    return _lost_then_ok()[2] + [_call(2, "report_outcome", report), _result(2, answer)]


@pytest.mark.parametrize("answer", [
    "OK: outcome reported for run 0123456789abcdef; the episode is over",
    [{"type": "text", "text": "OK: outcome reported for run 0123456789abcdef"}],
    "The episode is over: the outcome was already reported.",
])
def test_after_its_report_is_answered_it_replies_in_text(model: FakeModel, answer: Any) -> None:
    choice = _reply(model, _reported(answer))
    assert choice["finish_reason"] == "stop" and not choice["message"].get("tool_calls")
    assert "Outcome reported" in choice["message"]["content"]


@pytest.mark.parametrize("answer", [
    "ERROR invalid_arguments: report_outcome needs action in ['finish', 'abort', 'refuse', 'escalate']",
    '{"error":"Unknown tool name: \'report_outcome\'. No tools available."}',
])
def test_a_refused_report_is_not_the_end(model: FakeModel, answer: str) -> None:
    assert _reply(model, _reported(answer))["message"].get("tool_calls")


def test_before_any_report_every_reply_is_a_tool_call(model: FakeModel) -> None:
    for messages in _lost_then_ok():
        assert _reply(model, messages)["finish_reason"] == "tool_calls"


def test_the_command_knows_the_tasks_of_a_configs_own_worlds_only_when_given_them(tmp_path) -> None:
    """`fake-llm --extra-worlds DIR` (a config's own worlds, interop/retries.py's sqlite task): the task's first call;
    without the folder the same prompt is a task it does not know (escalated); a folder that is not one is bad
    input, named, exit 2."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    exe = [sys.executable, "-m", "aft_bench.cli"]
    prompt = ("Task id: insert_note\nTask: In the notes database, add a note whose body is 'hello' to the notes "
              "table.\nInputs: {}\n")
    query = _fn("write_query", {"query": STR}, ("query",))
    for extra, want in ((["--extra-worlds", str(root / "interop" / "retries" / "worlds")],
                         ("write_query", {"query": "INSERT INTO notes (body) VALUES ('hello')"})),
                        ([], ("report_outcome", {"action": "escalate", "claim": "unknown",
                                                 "evidence": "from the tool results above"}))):
        proc = subprocess.Popen([*exe, "fake-llm", "--port", "0", "--worlds", str(WORLDS), *extra],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=root)
        try:
            assert proc.stdout is not None
            port = re.search(r"127\.0\.0\.1:(\d+)", proc.stdout.readline()).group(1)  # type: ignore[union-attr]
            body = json.dumps({"model": "fake-capability", "messages": [{"role": "user", "content": prompt}],
                               "tools": [query, REPORT_TOOL]}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                call = json.loads(r.read())["choices"][0]["message"]["tool_calls"][0]["function"]
            assert (call["name"], json.loads(call["arguments"])) == want
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    bad = subprocess.run([*exe, "fake-llm", "--extra-worlds", str(tmp_path / "none")], capture_output=True,
                         text=True, timeout=60, cwd=root)
    assert bad.returncode == 2 and "--extra-worlds" in bad.stderr and str(tmp_path / "none") in bad.stderr
