"""One served episode played by the official MCP SDK's client (`from mcp import Client`, mcp 2.x) that lists its
tools ONCE, at connect, and never again: a stand-in for clients that freeze their tool list (a desktop
assistant's tool picker, a framework's cached list). The offline model drives it over plain HTTP
(chat completions at $AFT_INTEROP_MODEL_BASE, with httpx), offered exactly the tools of that one listing.

A tool call whose name is not in that listing is not sent to the server: the model gets the client's own
refusal (as a frozen-list client answers). So under selective discovery served as a changing tools/list
(`--discovery-form dynamic`) the business tools a describe_tool call reveals stay out of reach; served as a
stable `call_tool(name, arguments)` meta-tool (`--discovery-form facade`), the one listing is all it needs.

`--read-timeout S` (issue 52): each tools/call waits S seconds for its answer (`call_tool(read_timeout_seconds=S)`;
the SDK's own default waits as long as the transport does) and a call that fails, a timeout included, is shown to
the model as `Error: <what the SDK raised>`. The SDK never re-sends a call itself.

The loop ends when the model answers in text (the offline model does once its report_outcome call has been
answered) or after $AFT_INTEROP_MAX_TURNS model turns. Exit status: 0 when the loop ended, 1 on an error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

import httpx
from mcp import Client

MODEL = os.environ.get("AFT_INTEROP_MODEL", "fake-capability")
MAX_TURNS = int(os.environ.get("AFT_INTEROP_MAX_TURNS", "30"))


def result_text(result: Any) -> str:
    """A tool result as the model is shown it: its text content (the structured content as JSON if none)."""
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    if texts:
        return "\n".join(texts)
    return json.dumps(result.structured_content, sort_keys=True) if result.structured_content is not None else ""


async def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description="one served episode played by the MCP SDK's client")
    ap.add_argument("--read-timeout", type=float)
    opts = ap.parse_args(argv)
    base = os.environ["AFT_INTEROP_MODEL_BASE"].rstrip("/")
    async with Client(os.environ["AFT_BENCH_MCP_URL"]) as client, httpx.AsyncClient(timeout=60.0) as http:
        listed = (await client.list_tools()).tools  # the one listing
        names = {t.name for t in listed}
        tools = [{"type": "function", "function": {"name": t.name, "description": t.description or "",
                                                   "parameters": t.input_schema}} for t in listed]
        prompt = await client.get_prompt("task")
        messages: list[dict[str, Any]] = [{"role": m.role, "content": m.content.text} for m in prompt.messages
                                          if getattr(m.content, "type", None) == "text"]
        for _ in range(MAX_TURNS):
            reply = await http.post(f"{base}/chat/completions", json={"model": MODEL, "messages": messages,
                                                                      "tools": tools})
            reply.raise_for_status()
            message = reply.json()["choices"][0]["message"]
            calls = message.get("tool_calls") or []
            if not calls:
                print(f"sdk-list-once: the model ended in text: {str(message.get('content'))[:200]}", file=sys.stderr)
                return 0
            messages.append({"role": "assistant", "content": message.get("content"), "tool_calls": calls})
            for call in calls:
                fn = call["function"]
                if fn["name"] not in names:
                    text = f"Unknown tool: {fn['name']!r} is not one of this client's tools ({', '.join(sorted(names))})"
                else:
                    try:
                        args = json.loads(fn.get("arguments") or "{}")
                    except ValueError:
                        args = None
                    if isinstance(args, dict) and opts.read_timeout is not None:
                        try:
                            text = result_text(await client.call_tool(fn["name"], args,
                                                                      read_timeout_seconds=opts.read_timeout))
                        except Exception as exc:  # noqa: BLE001 - a failed call is shown to the model, as a host does
                            text = f"Error: {type(exc).__name__}: {exc}"
                    elif isinstance(args, dict):
                        text = result_text(await client.call_tool(fn["name"], args))
                    else:
                        text = "Invalid arguments: not a JSON object"
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
        print(f"sdk-list-once: no end after {MAX_TURNS} model turns", file=sys.stderr)
        return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
