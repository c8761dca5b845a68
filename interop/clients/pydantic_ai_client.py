"""One served episode played by a pydantic-ai (2.x) agent.

Model: `OpenAIChatModel` (chat completions) through an `OpenAIProvider` at $AFT_INTEROP_MODEL_BASE (the offline
`aft-bench fake-llm`). MCP: `MCPToolset` at $AFT_BENCH_MCP_URL (pydantic-ai's FastMCP-based client) with its
default tool-list settings (`cache_tools=True`: the list is fetched once and fetched again only after the
server sends notifications/tools/list_changed). The task is the server's MCP prompt `task` (prompts/get), given
as the user prompt (its content blocks).

How the run ends at report_outcome (`--end`):
* `output` (the default): pydantic-ai has no stop-at-tool setting for function tools (its `end_strategy` only
  decides what happens to function calls made beside an output tool call); a tool call that ends the run is an
  *output tool*. So the agent's `output_type` is `ToolOutput(report_outcome, name="report_outcome")`: an output
  function that forwards its arguments to the server's own report_outcome (`MCPToolset.direct_call_tool`) and
  returns its answer as the run's output; the server's report_outcome is filtered out of the MCP toolset
  (`.filtered(...)`) so that the one name the model sees is the output tool. No model turn follows the report.
* `text`: no setting at all (`output_type=str`, the default): the run ends when the model answers in plain
  text, which the offline model does once its report_outcome call has been answered.

Exit status: 0 when the run ended (whatever the episode's outcome), 1 when the framework raised instead (the
error is printed on stderr, one line: the episode is recorded by the server either way).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any, Literal

from pydantic_ai import Agent, RunContext, ToolOutput
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

MODEL = os.environ.get("AFT_INTEROP_MODEL", "fake-capability")
INSTRUCTIONS = "You operate tools against a live system for a user."


def prompt_content(prompt: Any) -> list[Any]:
    """The `task` prompt's user messages as a user prompt: their content blocks as pydantic-ai maps them."""
    return [m.content for m in prompt.messages if m.role == "user"]


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--end", choices=["output", "text"], default="output")
    ap.add_argument("--no-cache-tools", action="store_true",
                    help="diagnostic only (not what interop/run.py plays): MCPToolset(cache_tools=False), the tool "
                    "list fetched for every model turn")
    ap.add_argument("--max-retries", type=int, help="MCPToolset(max_retries=N): how often a tool whose call failed "
                    "(a timeout included) is offered back to the model (pydantic-ai re-sends nothing itself)")
    ap.add_argument("--read-timeout", type=float, help="MCPToolset(read_timeout=S): how long a call waits for its "
                    "answer (default 300 s)")
    opts = ap.parse_args()
    end = opts.end
    provider = OpenAIProvider(base_url=os.environ["AFT_INTEROP_MODEL_BASE"], api_key="no-key")
    model = OpenAIChatModel(MODEL, provider=provider)
    settings: dict[str, Any] = {"cache_tools": False} if opts.no_cache_tools else {}
    if opts.max_retries is not None:
        settings["max_retries"] = opts.max_retries
    if opts.read_timeout is not None:
        settings["read_timeout"] = opts.read_timeout
    mcp = MCPToolset(os.environ["AFT_BENCH_MCP_URL"], **settings)

    async def report_outcome(ctx: RunContext[None], action: Literal["finish", "abort", "refuse", "escalate"],
                             claim: Literal["success", "failure", "unknown"], evidence: str = "") -> str:
        """End the episode: your terminal action, your claim about the task's outcome, and evidence."""
        answer = await mcp.direct_call_tool("report_outcome", {"action": action, "claim": claim, "evidence": evidence})
        return str(answer)

    async with mcp:
        prompt = await mcp.get_prompt("task")
        if end == "output":
            agent: Agent[None, Any] = Agent(model, instructions=INSTRUCTIONS,
                                            toolsets=[mcp.filtered(lambda ctx, td: td.name != "report_outcome")],
                                            output_type=ToolOutput(report_outcome, name="report_outcome"))
        else:
            agent = Agent(model, instructions=INSTRUCTIONS, toolsets=[mcp])
        try:
            result = await agent.run(prompt_content(prompt))
        except Exception as exc:  # noqa: BLE001 - the framework's own verdict on the run, reported as is
            print(f"pydantic-ai: run raised {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    print(f"pydantic-ai ({end}): run ended: {str(result.output)[:200]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
