"""The `mcp` agent: an external MCP client whose actions arrive over the protocol instead of being computed.

The server puts each tool call into the agent's inbox with a future; the episode loop takes it as the next
action and the observation it produced resolves that future on the following `act`. A valid `report_outcome`
fixes the decision; the episode ends with it when the session ends (the client disconnects, ends its HTTP
session, or the server stops), so a call made after the report is answered "the episode is over" and traced as
refused. A disconnect without a report ends the episode without a decision (`none`). Calls refused at the
protocol boundary (oversized arguments, a malformed report, calls after the report) become records the loop
writes to the trace.

What the client has been shown is tracked here from what it saw, as any agent's knowledge is: the surface at
the start (and again after a restart) and every schema `describe_tool` returned since, which selective
discovery makes callable for the rest of the process's life. The server lists exactly these tools.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from aft_bench.agents.protocol import ACTIONS, CLAIMS, Action, Call, End, Usage
from aft_bench.interface.tools import Observation, ToolSpec, described_schema
from aft_bench.tasks.task import Brief

AFTER_REPORT = ("The episode is over: its outcome was already reported, and no further call is executed. "
                "Stop here.")
INVALID_CODES = ("unknown_tool", "invalid_arguments")  # interface answers that mean the call itself was malformed


class Params(BaseModel):
    """The agent under test as the person serving it named it, and the form in which its tools are served."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)  # no NaN or infinite setting
    agent: str = Field(default="unknown", min_length=1, max_length=200,
                       description="the agent under test (`serve --agent`; else the MCP client's handshake name)")
    model: str = Field(default="unknown", min_length=1, max_length=200,
                       description="the model behind the agent (`serve --model`), the row's `model`")
    discovery_form: Literal["dynamic", "facade"] = Field(
        default="dynamic", description="selective discovery served as a changing tools/list (dynamic) or as a "
        "stable call_tool meta-tool (facade)")
    response_loss: Literal["envelope", "transport"] = Field(
        default="envelope", description="a lost response reaches the client as a timeout result (envelope) or "
        "is never sent (transport)")

    @model_serializer(mode="wrap")
    def _spec(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The spec in run keys: the default response-loss delivery is left out."""
        data = handler(self)
        if data.get("response_loss") == "envelope":
            data.pop("response_loss", None)
        return data


def error_code(obs: Observation) -> str | None:
    """The interface's error code in an observation (`ERROR code: ...` or a structured error), if any."""
    c = obs.content
    if isinstance(c, dict):
        return str(c.get("error")) if c.get("status") == "error" else None
    if isinstance(c, str) and c.startswith("ERROR "):
        return c[6:].split(":", 1)[0]
    return None


def report_problem(args: dict[str, Any]) -> str | None:
    """Why a `report_outcome` call is malformed (the field and the value at fault), or None."""
    for name, allowed in (("action", ACTIONS), ("claim", CLAIMS)):
        if args.get(name) not in allowed:
            return f"report_outcome.{name} = {json.dumps(args.get(name))} is not one of {list(allowed)}"
    if "evidence" in args and not isinstance(args["evidence"], str):
        return f"report_outcome.evidence must be a string, not {type(args['evidence']).__name__}"
    if extra := sorted(set(args) - {"action", "claim", "evidence"}):
        return f"report_outcome has unknown field(s) {extra}"
    return None


class McpAgent:
    """Actions from an MCP client's tool calls."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self.inbox: asyncio.Queue[tuple[str, dict[str, Any], asyncio.Future[Any]] | None] = asyncio.Queue()
        self._waiting: asyncio.Future[Any] | None = None
        self._records: list[dict[str, Any]] = []
        self.surface: list[ToolSpec] = []
        self.described: dict[str, ToolSpec] = {}  # schemas describe_tool returned since the (re)start
        self.restarts = 0
        self.reported = False
        self._invalid = 0

    async def start(self, brief: Brief, surface: Sequence[ToolSpec]) -> None:
        self.surface = list(surface)

    async def restart(self, surface: Sequence[ToolSpec]) -> None:
        self.surface = list(surface)
        self.described = {}  # what it had loaded went with its process
        self.restarts += 1

    def callable_tools(self) -> list[ToolSpec]:
        """The interface's tools this client may call now: the surface, then what it described, in that order."""
        return self.surface + [t for n, t in self.described.items() if all(s.name != n for s in self.surface)]

    def usage(self) -> Usage:
        return Usage(invalid_tool_calls=self._invalid)

    def take_records(self) -> list[dict[str, Any]]:
        out, self._records = self._records, []
        return out

    def reject(self, record: dict[str, Any], invalid: bool = False) -> None:
        """A call refused at the protocol boundary: traced with the next action (and counted if malformed)."""
        self._records.append(record)
        self._invalid += int(invalid)

    async def act(self, observation: Observation | None) -> Action:
        if observation is not None:
            self._learn(observation)
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
                reply.set_result(AFTER_REPORT)
                continue
            if name == "report_outcome":
                problem = report_problem(args)
                if problem is None:
                    reply.set_result(None)
                    decision = End(args["action"], args["claim"])
                    self.reported = True
                    continue
                self.reject({"kind": "mcp_rejected", "tool": name, "reason": "invalid report_outcome",
                             "detail": problem}, invalid=True)
                reply.set_result(f"ERROR invalid_arguments: {problem}")
                continue
            self._waiting = reply
            return Call(name, args)  # anything else goes to the interface, which answers it

    def _learn(self, obs: Observation) -> None:
        """What one answer taught the client: a schema it may now call, or that its call was malformed."""
        schema = described_schema(obs)
        if schema is not None:
            self.described[schema["name"]] = ToolSpec(schema["name"], schema.get("description", ""),
                                                      schema.get("parameters", {}), "business")
        if error_code(obs) in INVALID_CODES:
            self._invalid += 1

    def abandon(self, reason: str) -> None:
        """The episode is over: fail whatever is still waiting."""
        if self._waiting is not None and not self._waiting.done():
            self._waiting.set_exception(RuntimeError(reason))
        while not self.inbox.empty():
            item = self.inbox.get_nowait()
            if item is not None and not item[2].done():
                item[2].set_exception(RuntimeError(reason))
