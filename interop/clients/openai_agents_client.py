"""One served episode played by an OpenAI Agents SDK (`openai-agents`) agent.

Model: an OpenAI-compatible chat-completions model at $AFT_INTEROP_MODEL_BASE (the offline `aft-bench fake-llm`),
through `OpenAIChatCompletionsModel` over an `AsyncOpenAI` client; tracing is disabled, so nothing leaves the
machine. MCP: `MCPServerStreamableHttp` at $AFT_BENCH_MCP_URL with the SDK's default tool-list settings (no
`cache_tools_list`: the tool list is fetched again for every model turn). The task is the server's MCP prompt
`task` (prompts/get), given to the agent as the user input, its content as the prompt's content parts.

The only stop setting: `tool_use_behavior=StopAtTools(stop_at_tool_names=["report_outcome"])`, which makes the
run end with the report's tool result as its final output, without another model turn.

Retries (issue 52): `--max-retry-attempts N` (the SDK's `max_retry_attempts`, default 0: the SDK re-sends a
tools/call that raised, a timeout included, up to N times, with no model turn between), `--timeout S` (its
`client_session_timeout_seconds`, default 5: how long a call waits for its answer) and `--backoff S` (its
`retry_backoff_seconds_base`, default 1.0). Left out, the SDK's defaults apply.

Exit status: 0 when the run ended (whatever the episode's outcome), 1 when the framework raised instead (the
error is printed on stderr, one line: the episode is recorded by the server either way).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, Runner, StopAtTools, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp
from openai import AsyncOpenAI

MODEL = os.environ.get("AFT_INTEROP_MODEL", "fake-capability")
MAX_TURNS = int(os.environ.get("AFT_INTEROP_MAX_TURNS", "30"))


def prompt_items(prompt: Any) -> list[dict[str, Any]]:
    """An MCP prompt's messages as Agents SDK input items (text content as `input_text` parts)."""
    items = []
    for m in prompt.messages:
        text = getattr(m.content, "text", None)
        if text is not None:
            items.append({"role": m.role, "content": [{"type": "input_text", "text": text}]})
    return items


def mcp_settings(argv: list[str]) -> dict[str, Any]:
    """The MCP server's retry and timeout settings given on the command line (none given: the SDK's defaults)."""
    ap = argparse.ArgumentParser(description="one served episode played by openai-agents")
    ap.add_argument("--max-retry-attempts", type=int)
    ap.add_argument("--timeout", type=float)
    ap.add_argument("--backoff", type=float)
    a = ap.parse_args(argv)
    given = {"max_retry_attempts": a.max_retry_attempts, "client_session_timeout_seconds": a.timeout,
             "retry_backoff_seconds_base": a.backoff}
    return {k: v for k, v in given.items() if v is not None}


async def main(argv: list[str]) -> int:
    settings = mcp_settings(argv)
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=os.environ["AFT_INTEROP_MODEL_BASE"], api_key="no-key", max_retries=2)
    model = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
    async with MCPServerStreamableHttp(params={"url": os.environ["AFT_BENCH_MCP_URL"]}, name="aft-bench",
                                       **settings) as server:
        prompt = await server.get_prompt("task")
        agent = Agent(name="aft-interop", instructions="You operate tools against a live system for a user.",
                      model=model, mcp_servers=[server],
                      tool_use_behavior=StopAtTools(stop_at_tool_names=["report_outcome"]))
        try:
            result = await Runner.run(agent, prompt_items(prompt), max_turns=MAX_TURNS)
        except Exception as exc:  # noqa: BLE001 - the framework's own verdict on the run, reported as is
            print(f"openai-agents: run raised {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    print(f"openai-agents: run ended: {str(result.final_output)[:200]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
