"""The `llm` agent's accounting and provider handling (`agents/llm.py`), fast: litellm's real HTTP path against a
scripted provider on 127.0.0.1 that answers each request with the next reply it was given (status, headers,
body, delay). Retries, waits (Retry-After in seconds, milliseconds or as an HTTP date, reset headers, backoff
and its cap), tokens summed over calls, cost (unknown stays unknown), the per-call records, the conversation
the model is sent, and the agent's parameters and refusals. Written for `make mutants`; no episode is run."""

from __future__ import annotations

import asyncio
import contextvars
import email.utils
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from aft_bench.agents import endpoints, llm
from aft_bench.agents.llm import (
    REMINDER,
    REPORT,
    RESTARTED,
    SYSTEM,
    LLMAgent,
    Params,
    ProviderError,
    api_key,
    asked_wait,
    observation_text,
    preflight,
    routed_base,
)
from aft_bench.agents.protocol import Call, End, Usage
from aft_bench.common.secrets import REDACTED
from aft_bench.interface.tokens import count_tokens, litellm_module
from aft_bench.interface.tools import Observation, ToolSpec
from aft_bench.tasks.task import Brief

litellm_module()  # imported once here (slow), not inside the first test that calls a model

NOW = 1_800_000_000.0
BRIEF = Brief("t-1", "Refund order o1.", {"order_id": "o1", "amount": 5})
GET = ToolSpec("get_order", "Read an order. More text.", {"type": "object", "required": ["order_id"],
                                                           "properties": {"order_id": {"type": "string"}}},
               "business")


# -- the scripted provider ------------------------------------------------------------------------------------
@dataclass
class Reply:
    status: int = 200
    body: Any = None  # a dict (sent as JSON) or None: a plain assistant message with tool call `tool`
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    trickle_s: float = 0.0  # seconds between the body's bytes (a slow, endless-looking body)


def message(content: str | None = None, calls: list[tuple[str, str]] = (), prompt: int | None = 11,
            completion: int | None = 7) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = [{"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                             for i, (n, a) in enumerate(calls)]
    body: dict[str, Any] = {"id": "r", "object": "chat.completion", "created": 0, "model": "m",
                            "choices": [{"index": 0, "message": msg,
                                         "finish_reason": "tool_calls" if calls else "stop"}]}
    if prompt is not None:
        body["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion,
                         "total_tokens": prompt + (completion or 0)}
    return body


def error(status: int, text: str = "injected failure", headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, {"error": {"message": text, "type": "server_error"}}, headers or {})


FINISH = message(calls=[("report_outcome", '{"action": "finish", "claim": "success"}')])


class Provider:
    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        self.times: list[float] = []
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                provider.times.append(time.monotonic())
                provider.requests.append(json.loads(body))
                provider.auth.append(self.headers.get("Authorization"))
                r = provider.replies.pop(0) if provider.replies else Reply(body=FINISH)
                time.sleep(r.delay_s)
                data = json.dumps(r.body if r.body is not None else FINISH).encode()
                try:
                    self.send_response(r.status)
                    self.send_header("Content-Type", "application/json")
                    for k, v in r.headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if r.trickle_s:
                        for i in range(len(data)):
                            self.wfile.write(data[i:i + 1])
                            self.wfile.flush()
                            time.sleep(r.trickle_s)
                    else:
                        self.wfile.write(data)
                except OSError:
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_port}/v1"


@pytest.fixture()
def provider():
    p = Provider()
    yield p
    p.server.shutdown()
    p.server.server_close()


def agent_for(provider: Provider, **kw: Any) -> LLMAgent:
    kw.setdefault("model", "openai/m")
    kw.setdefault("backoff_s", 0.001)
    a = LLMAgent(Params(api_base=provider.base, **kw))
    asyncio.run(a.start(BRIEF, [GET]))
    return a


def act(agent: LLMAgent, obs: Observation | None = None) -> Any:
    return asyncio.run(agent.act(obs))


# -- retries, waits and their accounting ----------------------------------------------------------------------
def test_one_call_without_failure_is_one_call_no_retry_and_its_record(provider) -> None:
    provider.replies = [Reply(body=message("thinking", [("get_order", '{"order_id": "o1"}')]))]
    a = agent_for(provider)
    request = a._request()
    text = json.dumps(request, sort_keys=True)
    assert act(a) == Call("get_order", {"order_id": "o1"})
    u = a.usage()
    assert (u.model_calls, u.prompt_tokens, u.completion_tokens, u.retries, u.retry_wait_s, u.cost_usd) == \
        (1, 11, 7, 0, 0.0, None)
    reply = {"content": "thinking", "tool_calls": [{"id": "call_0", "type": "function",
                                                    "function": {"name": "get_order",
                                                                 "arguments": '{"order_id": "o1"}'}}]}
    assert u.model_bytes == len(text.encode()) + len(json.dumps(reply).encode())
    assert 0 < u.latency_s < 1
    tools_text = json.dumps(request["tools"], sort_keys=True)
    [rec] = a.take_records()
    assert rec == {"model": "openai/m", "request_hash": hashlib.sha256(text.encode()).hexdigest(),
                   "prompt_tokens": 11, "completion_tokens": 7, "latency_s": round(u.latency_s, 6),
                   "cost_usd": None, "retries": 0, "tool_context_tokens": count_tokens(tools_text), "turn": 1}
    assert a.take_records() == []  # taken once
    assert provider.auth == ["Bearer no-key"]  # a local server without a key gets the placeholder
    sent = provider.requests[0]
    assert sent["model"] == "m" and sent["temperature"] == 0.0 and sent["max_tokens"] == 1024
    assert "tool_choice" not in sent
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_order", "report_outcome"]


def test_exactly_one_retry_counts_one_and_its_backoff_is_traced(provider, monkeypatch) -> None:
    bounds = []
    monkeypatch.setattr(llm.random, "uniform", lambda lo, hi: bounds.append((lo, hi)) or hi)
    provider.replies = [error(500), Reply(body=FINISH)]
    a = agent_for(provider, backoff_s=0.0123456789)
    assert act(a) == End("finish", "success")
    assert a.usage().retries == 1 and a.usage().model_calls == 1 and len(provider.requests) == 2
    [rec] = a.take_records()
    assert rec["retries"] == 1
    assert rec["waits"] == [{"reason": "backoff", "error": "InternalServerError", "status": 500, "seconds": 0.018519}]
    assert a.usage().retry_wait_s == 0.018519  # the traced (rounded) waits, summed
    assert bounds == [(0.5, 1.5)]  # the jitter spans half to one and a half of the backoff
    assert provider.times[1] - provider.times[0] >= 0.0185 - 0.002


def test_backoff_doubles_per_retry_and_is_capped_at_max_backoff(provider, monkeypatch) -> None:
    monkeypatch.setattr(llm.random, "uniform", lambda lo, hi: lo)
    provider.replies = [error(500), error(503), error(502), error(500), Reply(body=FINISH)]
    a = agent_for(provider, backoff_s=0.004, max_backoff_s=0.005, retries=4)
    assert act(a) == End("finish", "success")
    [rec] = a.take_records()
    assert [w["seconds"] for w in rec["waits"]] == [0.002, 0.004, 0.005, 0.005]  # 0.004 * 2**k / 2, capped
    assert [w["status"] for w in rec["waits"]] == [500, 503, 502, 500]
    assert {w["reason"] for w in rec["waits"]} == {"backoff"}
    assert rec["retries"] == 4 == a.usage().retries
    assert a.usage().retry_wait_s == pytest.approx(0.016)


def test_retry_after_in_seconds_is_waited_and_capped(provider) -> None:
    provider.replies = [error(429, headers={"Retry-After": "0.05"}), error(429, headers={"Retry-After": "30"}),
                        Reply(body=FINISH)]
    a = agent_for(provider, max_backoff_s=0.02, backoff_s=5)
    assert act(a) == End("finish", "success")
    [rec] = a.take_records()
    assert rec["waits"] == [{"reason": "retry_after", "error": "RateLimitError", "status": 429, "seconds": 0.02},
                            {"reason": "retry_after", "error": "RateLimitError", "status": 429, "seconds": 0.02}]
    assert provider.times[1] - provider.times[0] >= 0.02 - 0.002


def test_retry_after_is_waited_as_asked_not_backed_off(provider) -> None:
    provider.replies = [error(429, headers={"Retry-After": "0.06"}), Reply(body=FINISH)]
    a = agent_for(provider, backoff_s=0.0)
    assert act(a) == End("finish", "success")
    [rec] = a.take_records()
    assert rec["waits"][0]["seconds"] == 0.06 and rec["waits"][0]["reason"] == "retry_after"
    assert provider.times[1] - provider.times[0] >= 0.06 - 0.002
    assert a.usage().retry_wait_s == pytest.approx(0.06)
    # latency is the time spent waiting for the provider, not the time spent waiting before a retry
    assert a.usage().latency_s < 0.06 + 0.5


def test_latency_sums_every_attempt(provider) -> None:
    provider.replies = [Reply(500, error(500).body, delay_s=0.05), Reply(500, error(500).body, delay_s=0.05),
                        Reply(body=FINISH, delay_s=0.05)]
    a = agent_for(provider, backoff_s=0.0)
    act(a)
    assert 0.15 <= a.usage().latency_s < 0.15 + 0.4
    assert a.take_records()[0]["latency_s"] == round(a.usage().latency_s, 6)


def test_retries_exhausted_is_a_provider_error_naming_the_attempts(provider) -> None:
    provider.replies = [error(500), error(500), error(500)]
    a = agent_for(provider, retries=1)
    with pytest.raises(ProviderError) as exc:
        act(a)
    assert str(exc.value) == "InternalServerError (status 500) after 2 attempt(s) on openai/m"
    assert len(provider.requests) == 2
    provider.replies = [error(503)]
    b = agent_for(provider, retries=0)
    with pytest.raises(ProviderError, match=r"^ServiceUnavailableError \(status 503\) after 1 attempt\(s\) "
                                            r"on openai/m$"):
        act(b)
    assert b.usage().model_calls == 0 and b.take_records() == []


def test_a_non_transient_error_is_not_retried_and_names_what_the_provider_said(provider) -> None:
    provider.replies = [error(400, "bad   request\n  sk-abcdefghijklmnopqrstuvwxyz0123 " + "x" * 600)]
    a = agent_for(provider, retries=3)
    with pytest.raises(ProviderError) as exc:
        act(a)
    text = str(exc.value)
    assert text.startswith("BadRequestError (status 400) after 1 attempt(s) on openai/m: ")
    said = text.split("openai/m: ", 1)[1]
    assert "bad request " + REDACTED in said and "sk-abc" not in said and "  " not in said
    assert len(said) == 400
    assert len(provider.requests) == 1


def test_the_whole_call_is_bounded_by_timeout_and_retried(provider) -> None:
    provider.replies = [Reply(body=FINISH, trickle_s=0.01), Reply(body=FINISH)]  # ~3 s of body, 10 ms per byte
    a = agent_for(provider, timeout_s=0.3, backoff_s=0.0)
    t0 = time.monotonic()
    assert act(a) == End("finish", "success")
    assert time.monotonic() - t0 < 1.5
    [rec] = a.take_records()
    assert [(w["error"], w["status"]) for w in rec["waits"]] == [("CallDeadline", None)]
    assert rec["retries"] == 1


def test_a_call_past_its_deadline_with_no_retries_left_fails(provider) -> None:
    provider.replies = [Reply(body=FINISH, trickle_s=0.01)]
    a = agent_for(provider, timeout_s=0.2, retries=0)
    with pytest.raises(ProviderError, match=r"^CallDeadline \(status None\) after 1 attempt\(s\) on openai/m$"):
        act(a)


# -- tokens and cost ------------------------------------------------------------------------------------------
def test_usage_adds_over_calls_and_unknown_cost_stays_unknown(provider) -> None:
    provider.replies = [Reply(body=message("a", [("get_order", '{"order_id": "o1"}')], prompt=11, completion=7)),
                        Reply(body=message(None, [("get_order", '{"order_id": "o2"}')], prompt=13, completion=2))]
    a = agent_for(provider)
    act(a)
    act(a, Observation("OK: {}"))
    u = a.usage()
    assert (u.model_calls, u.prompt_tokens, u.completion_tokens, u.cost_usd) == (2, 24, 9, None)
    recs = a.take_records()
    assert [(r["prompt_tokens"], r["completion_tokens"], r["turn"]) for r in recs] == [(11, 7, 1), (13, 2, 2)]
    assert u.latency_s == pytest.approx(sum(r["latency_s"] for r in recs), abs=1e-5)


def test_a_reply_without_usage_counts_zero_tokens(provider) -> None:
    provider.replies = [Reply(body=message(None, [("report_outcome", '{"action": "abort", "claim": "failure"}')],
                                           prompt=None))]
    a = agent_for(provider)
    assert act(a) == End("abort", "failure")
    [rec] = a.take_records()
    assert (rec["prompt_tokens"], rec["completion_tokens"]) == (0, 0)
    assert (a.usage().prompt_tokens, a.usage().completion_tokens, a.usage().model_calls) == (0, 0, 1)


def test_a_declared_price_charges_the_reported_tokens(provider) -> None:
    provider.replies = [Reply(body=message(None, [("get_order", "{}")], prompt=1000, completion=250)),
                        Reply(body=message(None, [("get_order", "{}")], prompt=500, completion=100))]
    a = agent_for(provider, input_usd_per_mtok=2.0, output_usd_per_mtok=8.0)
    act(a)
    assert a.usage().cost_usd == pytest.approx((1000 * 2.0 + 250 * 8.0) / 1e6)
    act(a, Observation("OK: {}"))
    assert a.usage().cost_usd == pytest.approx((1500 * 2.0 + 350 * 8.0) / 1e6)
    assert [r["cost_usd"] for r in a.take_records()] == pytest.approx([0.004, 0.0018])


def test_a_model_litellm_prices_is_charged_litellm_s_price(provider) -> None:
    provider.replies = [Reply(body=message(None, [("get_order", "{}")], prompt=1000, completion=100))]
    a = agent_for(provider, model="openai/gpt-4o-mini")
    act(a)
    price = litellm_module().model_cost["gpt-4o-mini"]
    expected = 1000 * price["input_cost_per_token"] + 100 * price["output_cost_per_token"]
    assert a.usage().cost_usd == pytest.approx(expected) and expected > 0


# -- the conversation ------------------------------------------------------------------------------------------
def test_the_first_request_is_the_policy_and_the_brief(provider) -> None:
    a = agent_for(provider, temperature=0.5, max_tokens=77, tool_choice="required")
    act(a)
    sent = provider.requests[0]
    assert sent["messages"] == [{"role": "system", "content": SYSTEM.format(task_id="t-1")},
                                {"role": "user", "content": 'Task: Refund order o1.\nInputs: {"amount": 5, '
                                                            '"order_id": "o1"}'}]
    assert sent["temperature"] == 0.5 and sent["max_tokens"] == 77 and sent["tool_choice"] == "required"
    assert sent["tools"][-1] == {"type": "function", "function": REPORT}


def test_a_reply_without_a_tool_call_is_reminded_once_then_ends_with_none(provider) -> None:
    provider.replies = [Reply(body=message("hmm")), Reply(body=message(None)), Reply(body=message("x"))]
    a = agent_for(provider)
    assert act(a) == End("none", None)
    assert len(provider.requests) == 2
    assert provider.requests[1]["messages"][2:] == [{"role": "assistant", "content": "hmm"},
                                                    {"role": "user", "content": REMINDER}]
    provider.replies = [Reply(body=message("hmm")), Reply(body=FINISH)]
    b = agent_for(provider)
    assert act(b) == End("finish", "success")  # a reminded model that acts is not stopped
    assert b.usage().model_calls == 2
    provider.requests.clear()
    provider.replies = [Reply(body=message(None)), Reply(body=FINISH)]
    act(agent_for(provider))
    assert provider.requests[1]["messages"][2] == {"role": "assistant", "content": ""}  # no text: empty text


def test_only_the_first_tool_call_of_a_reply_is_taken_and_answered(provider) -> None:
    provider.replies = [Reply(body=message(None, [("get_order", '{"order_id": "o1"}'), ("get_order", "{}")]))]
    a = agent_for(provider)
    assert act(a) == Call("get_order", {"order_id": "o1"})
    act(a, Observation({"status": "ok", "result": {"id": "o1"}}))
    msgs = provider.requests[1]["messages"]
    assert msgs[2] == {"role": "assistant",  # no content: litellm leaves a null content out, not an empty one
                       "tool_calls": [{"id": "call_0", "type": "function",
                                       "function": {"name": "get_order", "arguments": '{"order_id": "o1"}'}}]}
    assert msgs[3] == {"role": "tool", "tool_call_id": "call_0",
                       "content": '{"result": {"id": "o1"}, "status": "ok"}'}
    assert a.usage().invalid_tool_calls == 0


def test_empty_arguments_are_an_empty_object(provider) -> None:
    provider.replies = [Reply(body=message(None, [("list_things", "")]))]
    a = agent_for(provider)
    assert act(a) == Call("list_things", {})
    assert a.usage().invalid_tool_calls == 1  # not a tool of the surface: counted, still sent


@pytest.mark.parametrize(("args", "invalid"), [('{"order_id": "o1"}', 0), ("{}", 1), ('{"order_id": "o1", "x": 1}', 1)])
def test_arguments_against_the_schema_are_counted_but_still_sent(provider, args: str, invalid: int) -> None:
    provider.replies = [Reply(body=message(None, [("get_order", args)]))]
    a = agent_for(provider)
    assert act(a) == Call("get_order", json.loads(args))
    assert a.usage().invalid_tool_calls == invalid


@pytest.mark.parametrize("raw", ["{not json", '{"order_id": NaN}', "[1, 2]", '"text"'])
def test_arguments_that_are_not_an_object_are_answered_as_invalid(provider, raw: str) -> None:
    provider.replies = [Reply(body=message(None, [("get_order", raw)])), Reply(body=FINISH)]
    a = agent_for(provider)
    assert act(a) == End("finish", "success")
    assert a.usage().invalid_tool_calls == 1 and a.usage().model_calls == 2
    assert provider.requests[1]["messages"][-1] == {
        "role": "tool", "tool_call_id": "call_0",
        "content": "ERROR invalid_arguments: the arguments are not a JSON object"}


@pytest.mark.parametrize("raw", ['{"action": "finish"}', '{"action": "win", "claim": "success"}',
                                 '{"action": "finish", "claim": "sure"}', "[]", "{bad"])
def test_an_invalid_report_is_answered_and_the_episode_goes_on(provider, raw: str) -> None:
    provider.replies = [Reply(body=message(None, [("report_outcome", raw)])), Reply(body=FINISH)]
    a = agent_for(provider)
    assert act(a) == End("finish", "success")
    assert a.usage().invalid_tool_calls == 1
    assert provider.requests[1]["messages"][-1] == {
        "role": "tool", "tool_call_id": "call_0",
        "content": "ERROR invalid_arguments: report_outcome needs action in ['finish', 'abort', 'refuse', "
                   "'escalate'] and claim in ['success', 'failure', 'unknown']"}


def test_max_turns_ends_the_episode_before_another_call(provider) -> None:
    provider.replies = [Reply(body=message(None, [("get_order", '{"order_id": "o1"}')])) for _ in range(3)]
    a = agent_for(provider, max_turns=2)
    assert isinstance(act(a), Call)
    assert isinstance(act(a, Observation("x")), Call)
    assert act(a, Observation("y")) == End("budget_exhausted", None)
    assert len(provider.requests) == 2


def test_the_token_ceiling_ends_the_episode_at_the_ceiling_not_before(provider) -> None:
    for cap, calls in ((18, 1), (19, 2)):
        provider.requests.clear()
        provider.replies = [Reply(body=message(None, [("get_order", '{"order_id": "o1"}')])) for _ in range(2)]
        a = agent_for(provider, max_episode_tokens=cap)
        act(a)
        second = act(a, Observation("x"))
        assert len(provider.requests) == calls
        assert (second == End("budget_exhausted", None)) == (calls == 1)


def test_a_restart_forgets_the_conversation_and_shows_the_last_result_as_user_text(provider) -> None:
    provider.replies = [Reply(body=message(None, [("get_order", '{"order_id": "o1"}')]))]
    a = agent_for(provider)
    act(a)
    asyncio.run(a.restart([GET]))
    act(a, Observation("OK: done"))
    assert provider.requests[1]["messages"][1:] == [
        {"role": "user", "content": 'Task: Refund order o1.\nInputs: {"amount": 5, "order_id": "o1"}\n' + RESTARTED},
        {"role": "user", "content": "The last tool call before the restart returned: OK: done"}]


def test_a_described_tool_is_shown_from_then_on(provider) -> None:
    provider.replies = [Reply(body=message(None, [("describe_tool", '{"name": "refund"}')]))]
    a = agent_for(provider)
    act(a)
    schema = {"name": "refund", "description": "Refund.", "parameters": {"type": "object", "properties": {}}}
    act(a, Observation("OK: " + json.dumps(schema)))
    assert [t["function"] for t in provider.requests[1]["tools"]] == [GET.schema(), schema, REPORT]
    act(a, Observation("ERROR: nope"))  # nothing described: the tools stay as they were
    assert len(provider.requests[2]["tools"]) == 3


def test_a_tool_described_again_under_its_name_is_shown_with_its_new_schema(provider) -> None:
    provider.replies = [Reply(body=message(None, [("describe_tool", '{"name": "get_order"}')]))]
    a = agent_for(provider)
    act(a)
    schema = {**GET.schema(), "description": "Read an order, now described in full."}
    act(a, Observation("OK: " + json.dumps(schema)))
    assert [t["function"] for t in provider.requests[1]["tools"]] == [schema, REPORT]


@pytest.mark.parametrize(("args", "invalid"), [("{}", 0), ('{"x": 1}', 1)])
def test_a_described_tool_s_arguments_are_checked_against_its_schema(provider, args: str, invalid: int) -> None:
    """A schema without `required` (none needed) and without `properties` (no argument known)."""
    provider.replies = [Reply(body=message(None, [("describe_tool", '{"name": "refund"}')])),
                        Reply(body=message(None, [("refund", args)]))]
    a = agent_for(provider)
    act(a)
    assert a.usage().invalid_tool_calls == 1  # describe_tool is not on this surface
    act(a, Observation({"status": "ok", "result": {"name": "refund", "parameters": {"type": "object"}}}))
    assert a.usage().invalid_tool_calls == 1 + invalid


def test_the_key_and_key_shaped_text_from_the_provider_are_redacted(provider, monkeypatch) -> None:
    for value, hidden in (("q7zk", True), ("q7z", False)):  # a key of four characters is redacted, of three not
        monkeypatch.setenv("AFT_MODEL_ACCESS", value)
        provider.requests.clear()
        provider.auth.clear()
        provider.replies = [Reply(body=message(f"mine {value} sk-abcdefghijklmnopqrstuvwxyz0123",
                                               [("get_order", json.dumps({"order_id": value}))]))]
        a = agent_for(provider, api_key_env="AFT_MODEL_ACCESS")
        call = act(a)
        assert provider.auth == [f"Bearer {value}"]
        assert call == Call("get_order", {"order_id": REDACTED if hidden else value})
        act(a, Observation("x"))
        content = provider.requests[1]["messages"][2]["content"]
        assert content == (f"mine {REDACTED} {REDACTED}" if hidden else f"mine {value} {REDACTED}")


def test_the_adaptive_limiter_halves_on_a_rate_limit_only(provider) -> None:
    endpoints.forget()
    try:
        endpoints.limiter("openai", provider.base, 8, slow_start=False)  # past its slow start: at the ceiling
        provider.replies = [error(500), Reply(body=FINISH)]
        a = agent_for(provider, adaptive=True, concurrency=8, backoff_s=0.0, model="openai/org/m")
        act(a)
        gate = endpoints.limiter("openai", provider.base, 8)  # one limiter per provider and endpoint
        assert (gate.limit, gate.inflight) == (8, 0)
        provider.replies = [error(429), Reply(body=FINISH)]
        act(agent_for(provider, adaptive=True, concurrency=8, backoff_s=0.0, model="openai/other"))
        assert (gate.limit, gate.inflight) == (4, 0)
        provider.replies = [Reply(body=FINISH, delay_s=1.0)]
        b = agent_for(provider, adaptive=True, concurrency=8)

        async def cancel() -> None:
            task = asyncio.ensure_future(b.act(None))
            await asyncio.sleep(0.2)
            assert gate.inflight == 1
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(cancel())
        assert (gate.limit, gate.inflight) == (4, 0)  # a cancelled call frees its slot, and is no rate limit
        assert list(endpoints.snapshot()) == [f"openai {provider.base}"]
    finally:
        endpoints.forget()
    provider.replies = [error(429), Reply(body=FINISH)]
    act(agent_for(provider, backoff_s=0.0))  # not adaptive: no limiter
    assert endpoints.snapshot() == {}


# -- the provider's wait, parsed ------------------------------------------------------------------------------
def _exc(headers: dict[str, str] | None, via_response: bool = False) -> Any:
    if via_response:
        return SimpleNamespace(response=SimpleNamespace(headers=headers))
    return SimpleNamespace(litellm_response_headers=headers)


@pytest.mark.parametrize(("headers", "expected"), [
    ({"Retry-After": "2"}, 2.0),
    ({"Retry-After": " 2 "}, 2.0),
    ({"Retry-After": "-3"}, 0.0),
    ({"Retry-After": email.utils.formatdate(NOW + 7, usegmt=True)}, 7.0),
    ({"Retry-After": email.utils.formatdate(NOW - 30, usegmt=True)}, 0.0),
    ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),
    ({"retry-after-ms": "soon", "Retry-After": "9"}, 9.0),
    ({"Retry-After": "soon", "x-ratelimit-reset-tokens": "4"}, 4.0),
    ({"x-ratelimit-reset-requests": "6m0s", "x-ratelimit-reset-tokens": "20ms"}, 360.0),
    ({"x-ratelimit-reset-requests": "1h2m3.5s"}, 3723.5),
    ({"x-ratelimit-reset-requests": "1m 30s"}, 90.0),
    ({"x-ratelimit-reset-requests": "20ms", "ratelimit-reset": "0.5"}, 0.5),
    ({"x-ratelimit-reset-tokens": "1.5s"}, 1.5),
    ({"x-ratelimit-reset-tokens": "2s later"}, None),
    ({"x-ratelimit-reset-tokens": "later 2s"}, None),
    ({"ratelimit-reset": "3"}, 3.0),
    ({"x-ratelimit-reset-requests": email.utils.formatdate(NOW + 8, usegmt=True)}, 8.0),  # any header may be a date
    ({"retry-after-ms": email.utils.formatdate(NOW + 9000, usegmt=True)}, 9.0),  # read as ms like any value of it
    ({"Retry-After": "soon"}, None),
    ({"x-ratelimit-reset-requests": "6 parsecs"}, None),
    ({"Retry-After": ""}, None),
    ({"content-type": "application/json"}, None),
    ({}, None),
    (None, None),
])
def test_the_wait_a_provider_asks_for(headers: dict[str, str] | None, expected: float | None) -> None:
    for via_response in (False, True):
        got = asked_wait(_exc(headers, via_response), now=NOW)
        assert got == (pytest.approx(expected, abs=1e-9) if expected is not None else None), (headers, got)


def test_an_http_date_is_counted_from_now() -> None:
    date = email.utils.formatdate(time.time() + 100, usegmt=True)
    assert 95 < asked_wait(_exc({"Retry-After": date})) <= 100
    assert asked_wait(_exc({"Retry-After": "Mon, 99 Foo 2026 00:00:00 GMT"}), now=NOW) is None


def test_headers_on_the_exception_come_before_the_response_s() -> None:
    exc = SimpleNamespace(litellm_response_headers={"Retry-After": "1"},
                          response=SimpleNamespace(headers={"Retry-After": "5"}))
    assert asked_wait(exc, now=NOW) == 1.0
    exc = SimpleNamespace(litellm_response_headers={}, response=SimpleNamespace(headers={"Retry-After": "5"}))
    assert asked_wait(exc, now=NOW) == 5.0


# -- parameters, routing, preflight ---------------------------------------------------------------------------
def test_the_spec_leaves_out_parameters_added_later_while_at_their_default() -> None:
    base = Params(model="openai/m").model_dump()
    assert "tool_choice" not in base and "max_backoff_s" not in base and "adaptive" not in base
    assert base["retries"] == 4 and base["backoff_s"] == 1.0 and base["timeout_s"] == 60.0
    set_ = Params(model="openai/m", tool_choice="auto", max_backoff_s=5.0, adaptive=True).model_dump()
    assert (set_["tool_choice"], set_["max_backoff_s"], set_["adaptive"]) == ("auto", 5.0, True)


def test_tool_choice_and_pricing_arguments() -> None:
    assert Params(model="m").tool_choice_arg() == {}
    assert Params(model="m", tool_choice="auto").tool_choice_arg() == {"tool_choice": "auto"}
    assert Params(model="m", tool_choice="required").tool_choice_arg() == {"tool_choice": "required"}
    assert Params(model="m", tool_choice="get_order").tool_choice_arg() == {
        "tool_choice": {"type": "function", "function": {"name": "get_order"}}}
    assert Params(model="m").pricing() == {}
    assert Params(model="m", input_usd_per_mtok=2.0, output_usd_per_mtok=8.0).pricing() == {
        "input_cost_per_token": 2e-6, "output_cost_per_token": 8e-6}


@pytest.mark.parametrize(("kw", "message"), [
    ({"model": "openai/sk-abcdefghijklmnopqrstuvwxyz0123"}, ("model carries a credential; put the key in an "
                                                              "environment variable and name it with api_key_env")),
    ({"api_base": "http://127.0.0.1/v1?key=sk-abcdefghijklmnopqrstuvwxyz0123"}, "api_base carries a credential"),
    ({"api_base": "ftp://host/v1"}, ("api_base is 'offline' or an http(s) URL with a host, e.g. "
                                     "http://127.0.0.1:8000/v1")),
    ({"api_base": "http:///v1"}, "api_base is 'offline' or an http(s) URL"),
    ({"api_base": "http://me:pw@host/v1"}, "api_base carries user:password; name the key with api_key_env instead"),
    ({"api_base": "http://me@host/v1"}, "api_base carries user:password"),
    ({"input_usd_per_mtok": 1.0}, "input_usd_per_mtok and output_usd_per_mtok are declared together or not at all"),
    ({"output_usd_per_mtok": 1.0}, "declared together"),
])
def test_parameters_that_are_refused(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")
                       .replace(".", r"\.")):
        Params(**{"model": "openai/m", **kw})


@pytest.mark.parametrize("base", [None, "offline", "http://127.0.0.1:8000/v1", "https://api.example.org/v1"])
def test_parameters_that_are_accepted(base: str | None) -> None:
    assert Params(model="openai/m", api_base=base).api_base == base


def test_routing_a_base_through_a_cassette(monkeypatch) -> None:
    monkeypatch.delenv(llm.ROUTE_ENV, raising=False)
    assert routed_base("http://h/v1") == "http://h/v1" and routed_base(None) is None
    monkeypatch.setenv(llm.ROUTE_ENV, json.dumps({"http://h/v1": "http://127.0.0.1:9", "": "http://127.0.0.1:8"}))
    token = llm.EPISODE.set("run-7")
    try:
        assert routed_base("http://h/v1") == "http://127.0.0.1:9/e/run-7"
        assert routed_base(None) == "http://127.0.0.1:8/e/run-7"
        assert routed_base("http://other/v1") == "http://other/v1"
    finally:
        llm.EPISODE.reset(token)
    # outside any episode (a fresh context: other code in this process may have set one)
    assert contextvars.Context().run(routed_base, "http://h/v1") == "http://127.0.0.1:9/e/-"
    monkeypatch.setenv(llm.ROUTE_ENV, "")
    assert routed_base("http://h/v1") == "http://h/v1"


def test_the_offline_base_is_the_embedded_model(monkeypatch) -> None:
    monkeypatch.delenv(llm.ROUTE_ENV, raising=False)
    from aft_bench.agents.fake_llm import offline_base

    assert routed_base("offline") == offline_base()


def test_preflight_and_the_key(monkeypatch) -> None:
    monkeypatch.delenv("AFT_UNSET_X", raising=False)
    monkeypatch.setenv("AFT_SET_X", "value-1")
    assert preflight(Params(model="openai/m", api_base="http://h/v1", api_key_env="AFT_UNSET_X")) == \
        "api_key_env names AFT_UNSET_X, which is not set in the environment"
    assert preflight(Params(model="openai/m", api_base="http://h/v1", api_key_env="AFT_SET_X")) is None
    assert preflight(Params(model="openai/m", api_base="http://h/v1")) is None
    assert preflight(Params(model="no-such-model-anywhere")) == (
        "litellm does not know the model 'no-such-model-anywhere'; give api_base for an OpenAI-compatible server")
    assert preflight(Params(model="no-such-model-anywhere", api_base="http://h/v1")) is None
    assert preflight(Params(model="openai/gpt-4o-mini")) is None
    assert api_key(Params(model="m", api_key_env="AFT_SET_X")) == "value-1"
    assert api_key(Params(model="m", api_key_env="AFT_SET_X", api_base="http://h/v1")) == "value-1"
    assert api_key(Params(model="m", api_base="http://h/v1")) == "no-key"
    assert api_key(Params(model="m")) is None
    assert api_key(Params(model="m", api_key_env="AFT_UNSET_X")) is None


def test_observation_text() -> None:
    assert observation_text(Observation("OK: x")) == "OK: x"
    assert observation_text(Observation({"b": 1, "a": [2]})) == '{"a": [2], "b": 1}'


def test_a_fresh_agent_has_used_nothing_and_its_cost_is_zero_until_a_call() -> None:
    a = LLMAgent(Params(model="openai/m", api_base="http://127.0.0.1:9/v1"))
    assert a.usage() == Usage(cost_usd=0.0) and a.take_records() == []


def test_what_a_provider_said_is_shown_only_when_it_said_something() -> None:
    """A non-transient error's own message (litellm's exceptions carry `message`), one line, redacted, at most 400
    characters; an exception without one (not litellm's) or with an empty one adds nothing."""
    assert llm._provider_message(SimpleNamespace(message="no\n  such   model")) == ": no such model"
    assert llm._provider_message(SimpleNamespace(message="x" * 500)) == ": " + "x" * 400
    assert llm._provider_message(ValueError("not a provider's message")) == ""
    assert llm._provider_message(SimpleNamespace(message="")) == ""
    assert llm._provider_message(SimpleNamespace(message=None)) == ""
