"""`fake-llm` speaks the streaming protocol as providers do (issue 38): server-sent chunks with tool-call deltas
and a final usage chunk when asked, read by the OpenAI SDK and by litellm into the same answer as the plain reply;
an option it cannot honour is an HTTP error naming it, never a body a client reads as empty; and an MCP client
whose model calls stream gets the same labels as one whose calls do not (served through serve-matrix)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import openai
import pandas as pd
import pytest

from aft_bench.agents.fake_llm import FakeModel, index_tasks, serve
from aft_bench.cli.main import main
from aft_bench.serving.server import Target, task_text

from conftest import WORLDS

TOOLS = [{"type": "function", "function": {"name": "search_tools", "description": "Find tools by what they do.",
                                           "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                                                          "required": ["query"]}}},
         {"type": "function", "function": {"name": "report_outcome", "description": "Report the outcome.",
                                           "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture(scope="module")
def base() -> str:
    server = serve(FakeModel(index_tasks([WORLDS])))
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


def _conversations() -> dict[str, list[dict]]:
    """One conversation answered with a tool call, one (its report answered) with text."""
    task = [{"role": "user", "content": task_text(Target("response_loss", "rl-01-o1", "I5", "response_loss"), WORLDS)}]
    reported = task + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "report_outcome", "arguments": json.dumps({"action": "abort", "claim": "failure"})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "OK: outcome reported. The episode is over: stop here."}]
    return {"tool call": task, "text": reported}


def _assembled(chunks) -> dict:
    """A stream read back the way an SDK user does: the text joined, each tool call's pieces joined by index."""
    text, calls, finish, usage = "", {}, None, None
    for chunk in chunks:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            delta = choice.delta
            text += delta.content or ""
            for tc in delta.tool_calls or []:
                call = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                call["id"] = tc.id or call["id"]
                call["name"] += (tc.function.name or "") if tc.function else ""
                call["arguments"] += (tc.function.arguments or "") if tc.function else ""
            finish = choice.finish_reason or finish
    return {"text": text or None, "calls": [calls[i] for i in sorted(calls)], "finish": finish,
            "usage": usage.model_dump(exclude_none=True) if usage else None}


def _plain(reply) -> dict:
    message = reply.choices[0].message
    return {"text": message.content, "calls": [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                                               for c in message.tool_calls or []],
            "finish": reply.choices[0].finish_reason, "usage": reply.usage.model_dump(exclude_none=True)}


@pytest.mark.parametrize("kind", ["tool call", "text"])
def test_the_openai_sdk_reads_the_stream_as_the_same_answer(base: str, kind: str) -> None:
    client = openai.OpenAI(base_url=base, api_key="not-a-key", max_retries=0)
    messages = _conversations()[kind]
    plain = _plain(client.chat.completions.create(model="fake-capability", messages=messages, tools=TOOLS))
    chunks = list(client.chat.completions.create(model="fake-capability", messages=messages, tools=TOOLS,
                                                 stream=True, stream_options={"include_usage": True}))
    assert len(chunks) > 3  # really in pieces: the role, the text or the call's name and arguments, the finish
    assert _assembled(chunks) == plain
    assert (plain["calls"] != []) == (kind == "tool call") and plain["usage"]["total_tokens"] > 0
    without_usage = list(client.chat.completions.create(model="fake-capability", messages=messages, tools=TOOLS,
                                                        stream=True))
    assert _assembled(without_usage) == {**plain, "usage": None}  # the usage chunk only when asked


def test_litellm_streams_the_same_tool_call(base: str) -> None:
    import litellm

    messages = _conversations()["tool call"]
    plain = litellm.completion(model="openai/fake-capability", api_base=base, api_key="not-a-key", messages=messages,
                               tools=TOOLS)
    stream = litellm.completion(model="openai/fake-capability", api_base=base, api_key="not-a-key",
                                messages=messages, tools=TOOLS, stream=True)
    built = litellm.stream_chunk_builder(list(stream), messages=messages)
    want, got = plain.choices[0].message.tool_calls[0], built.choices[0].message.tool_calls[0]
    assert (got.function.name, json.loads(got.function.arguments)) == (want.function.name,
                                                                      json.loads(want.function.arguments))
    assert built.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize(("options", "named"), [
    ({"n": 2}, "'n'"), ({"response_format": {"type": "json_object"}}, "'response_format'"),
    ({"logprobs": True}, "'logprobs'"), ({"stream_options": {"include_usage": True}}, "'stream_options'"),
    ({"stream": "yes"}, "'stream'"),
])
def test_an_option_it_cannot_honour_is_refused_by_name(base: str, options: dict, named: str) -> None:
    client = openai.OpenAI(base_url=base, api_key="not-a-key", max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="fake-capability", messages=_conversations()["tool call"],
                                       tools=TOOLS, extra_body=options)
    assert named in str(caught.value)


def test_a_path_it_does_not_serve_is_refused_by_name(base: str) -> None:
    client = openai.OpenAI(base_url=base, api_key="not-a-key", max_retries=0)
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="fake-capability", input="hello")
    assert "/v1/responses" in str(caught.value) and "chat/completions" in str(caught.value)


# An MCP agent whose model calls go through the OpenAI SDK, streamed or not (sys.argv[1]): it lists its tools
# before every model turn (as openai-agents does), so selective discovery's new tools reach it.
STREAMING_CLIENT = """
import asyncio, json, os, sys
import openai
from mcp import Client

STREAM = sys.argv[1] == "stream"

async def turn(llm, messages, tools):
    if not STREAM:
        reply = await llm.chat.completions.create(model="fake-capability", messages=messages, tools=tools)
        m = reply.choices[0].message
        return m.content, [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                           for c in m.tool_calls or []]
    text, calls = "", {}
    stream = await llm.chat.completions.create(model="fake-capability", messages=messages, tools=tools,
                                               stream=True, stream_options={"include_usage": True})
    async for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for tc in choice.delta.tool_calls or []:
                c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                c["id"] = tc.id or c["id"]
                c["name"] += tc.function.name or ""
                c["arguments"] += tc.function.arguments or ""
    return text or None, [calls[i] for i in sorted(calls)]

async def main():
    llm = openai.AsyncOpenAI(base_url=os.environ["MODEL_BASE"], api_key="not-a-key", max_retries=0)
    async with Client(os.environ["AFT_BENCH_MCP_URL"], mode="legacy") as mcp:
        prompt = await mcp.get_prompt("task")
        messages = [{"role": m.role, "content": m.content.text} for m in prompt.messages]
        for _ in range(30):
            listed = (await mcp.list_tools()).tools
            tools = [{"type": "function", "function": {"name": t.name, "description": t.description or "",
                                                       "parameters": t.input_schema}} for t in listed]
            text, calls = await turn(llm, messages, tools)
            if not calls:
                return 0
            messages.append({"role": "assistant", "content": text, "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls]})
            for c in calls:
                result = await mcp.call_tool(c["name"], json.loads(c["arguments"] or "{}"))
                body = "\\n".join(x.text for x in result.content if x.type == "text")
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": body})
    return 0

sys.exit(asyncio.run(main()))
"""

LABELS = ["workload", "task_id", "condition", "outcome", "y_goal", "y_correct", "recovered", "duplicate_effects",
          "terminal_action", "terminal_claim"]


def test_a_streaming_client_gets_the_same_labels_as_a_non_streaming_one(base: str, tmp_path: Path,
                                                                        monkeypatch, capsys) -> None:
    client = tmp_path / "client.py"
    client.write_text(STREAMING_CLIENT)
    cfg = tmp_path / "m.toml"
    cfg.write_text('[experiment]\nid = "m"\nworkloads = ["response_loss", "interruption"]\nconditions = ["I5", "I4"]\n'
                   'tasks_per_workload = 1\n')
    monkeypatch.setenv("MODEL_BASE", base)
    frames = {}
    for mode in ("plain", "stream"):
        out = tmp_path / mode
        assert main(["serve-matrix", str(cfg), "--out", str(out), "--worlds", str(WORLDS), "--agent", mode,
                     "--model", "fake-capability", "--client-cmd", f"{sys.executable} {client} {mode}"]) == 0, \
            capsys.readouterr().out
        frames[mode] = pd.read_parquet(out / "results.parquet")[LABELS].sort_values(["workload", "condition"])
    assert len(frames["plain"]) == 4
    assert set(frames["plain"]["outcome"]) != {"unresolved"}  # the episodes were played, not empty
    pd.testing.assert_frame_equal(frames["stream"].reset_index(drop=True), frames["plain"].reset_index(drop=True))
