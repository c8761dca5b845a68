"""The `mcp` agent: an external MCP client whose actions arrive over the protocol instead of being computed.

The server puts each tool call into the agent's inbox with a future; the episode loop takes it as the next
action and the observation it produced resolves that future on the following `act`. A valid `report_outcome`
fixes the decision; the episode ends with it when the session ends (the client disconnects or the server
stops), so a call made after the report is refused and still traced. A disconnect without a report ends the
episode without a decision (`none`). Calls refused at the protocol boundary (oversized arguments, calls after
the report) become records the loop writes to the trace.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from aft_bench.agents.protocol import ACTIONS, CLAIMS, Action, Call, End, Usage
from aft_bench.interface.tools import Observation, ToolSpec
from aft_bench.tasks.task import Brief

MAX_ARGS_CHARS = 64 * 1024  # a tool call's arguments, as JSON
AFTER_REPORT = "the outcome of this episode was already reported; no further call is executed"


class Params(BaseModel):
    """The client as it introduced itself in the MCP handshake (name/version)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    client: str = Field(default="unknown", description="the MCP client's name/version from the handshake")


class McpAgent:
    """Actions from an MCP client's tool calls."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self.inbox: asyncio.Queue[tuple[str, dict[str, Any], asyncio.Future[Any]] | None] = asyncio.Queue()
        self._waiting: asyncio.Future[Any] | None = None
        self._records: list[dict[str, Any]] = []
        self.surface: list[ToolSpec] = []
        self.restarts = 0

    async def start(self, brief: Brief, surface: Sequence[ToolSpec]) -> None:
        self.surface = list(surface)

    async def restart(self, surface: Sequence[ToolSpec]) -> None:
        self.surface = list(surface)
        self.restarts += 1

    def usage(self) -> Usage:
        return Usage()

    def take_records(self) -> list[dict[str, Any]]:
        out, self._records = self._records, []
        return out

    def reject(self, record: dict[str, Any]) -> None:
        """A call refused at the protocol boundary: traced with the next action."""
        self._records.append(record)

    async def act(self, observation: Observation | None) -> Action:
        if self._waiting is not None:
            if not self._waiting.done():
                self._waiting.set_result(observation)
            self._waiting = None
        decision: End | None = None
        while True:
            item = await self.inbox.get()
            if item is None:  # the session ended: with the reported decision, or without one
                return decision or End("none", None)
            name, args, reply = item
            if decision is not None:
                self.reject({"kind": "mcp_rejected", "tool": name, "reason": "after report_outcome",
                             "chars": len(json.dumps(args, default=str))})
                reply.set_exception(RuntimeError(AFTER_REPORT))
                continue
            if name == "report_outcome" and args.get("action") in ACTIONS and args.get("claim") in CLAIMS:
                reply.set_result(None)
                decision = End(args["action"], args["claim"])
                continue
            self._waiting = reply
            return Call(name, args)  # anything else, malformed report_outcome included, goes to the interface

    def abandon(self, reason: str) -> None:
        """The episode is over: fail whatever is still waiting."""
        if self._waiting is not None and not self._waiting.done():
            self._waiting.set_exception(RuntimeError(reason))
        while not self.inbox.empty():
            item = self.inbox.get_nowait()
            if item is not None and not item[2].done():
                item[2].set_exception(RuntimeError(reason))
