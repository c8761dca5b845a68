"""The agent-facing surface of an external world: the real server's tools as it lists them, with what a consuming
team can add in its own gateway under the condition's mechanisms — an idempotency key on writes (`effects`
idempotent or guarded), the gateway's invocation record (`observability`), verification from the real state
(`verification`), structured results (`structured`) and annotations (none under legacy effects, truthful from the
world's overlay, or misleading). Resumable invocation and durable server state need the server's cooperation and
are not offered. Results are shaped exactly as the built-in worlds' interface shapes them, so every agent runs
unchanged."""

from __future__ import annotations

import copy
from typing import Any

from aft_bench.common.canonical import canonical_json
from aft_bench.interface.interface import KEY_PARAM, SEARCH_K, error_observation, ok_observation
from aft_bench.interface.ranking import rank
from aft_bench.interface.mechanisms import Mechanisms
from aft_bench.interface.tokens import count_tokens
from aft_bench.interface.tools import Observation, ToolSpec
from aft_bench.runtime.gateway import Delivery, Gateway

NO_THIRD_PARTY_FORM = ("resume", "durable")  # rungs of the ladder a gateway cannot add to a server it does not own


class GatewayInterface:
    """One interface condition over one episode's gateway."""

    def __init__(self, gateway: Gateway, mechanisms: Mechanisms) -> None:
        self.gateway = gateway
        self.mechanisms = mechanisms
        self.shown_bytes = 0
        self.programs_run = 0
        world = gateway.world
        self.writes = {str(t["name"]) for t in gateway.listed
                       if world.tools.get(str(t["name"])) is None or world.tools[str(t["name"])].is_write}
        self.business = {str(t["name"]): self._business_tool(t) for t in gateway.listed}
        self.lifecycle = {t.name: t for t in self._lifecycle_tools()}
        self.selective = mechanisms.discovery == "selective"  # the server's tools found by search, loaded by name
        self.materialized: set[str] = set() if self.selective else set(self.business)

    # -- the surface ---------------------------------------------------------------------------------------
    def _business_tool(self, listed: dict[str, Any]) -> ToolSpec:
        name = str(listed["name"])
        params = copy.deepcopy(listed.get("inputSchema") or {"type": "object", "properties": {}})
        desc = str(listed.get("description") or "")
        if name in self.writes and self.mechanisms.keys:
            params.setdefault("properties", {})[KEY_PARAM] = {
                "type": "string", "description": "Caller-chosen key naming this logical effect."}
            desc += f" A repeated {KEY_PARAM} is answered from the gateway's record, never sent to the server twice."
        return ToolSpec(name, desc, params, "business")

    def _lifecycle_tools(self) -> list[ToolSpec]:
        m = self.mechanisms
        tools = []
        if m.observability:
            tools.append(ToolSpec("get_invocation_status", "Whether an invocation reached the server, and its answer.",
                                  {"type": "object", "properties": {"invocation_id": {
                                      "type": "string", "description": "Invocation id from an earlier result."}},
                                   "required": ["invocation_id"]}, "lifecycle"))
        if m.discovery == "selective":
            tools.append(ToolSpec("search_tools", f"Search the server's tools; returns the top {SEARCH_K} capability "
                                  "cards.", {"type": "object", "properties": {"query": {
                                      "type": "string", "description": "What you want to do."}},
                                      "required": ["query"]}, "discovery"))
            tools.append(ToolSpec("describe_tool", "Load the full schema of a tool so it can be called.",
                                  {"type": "object", "properties": {"name": {"type": "string",
                                                                             "description": "Tool name."}},
                                   "required": ["name"]}, "discovery"))
        if m.verification:
            tools.append(ToolSpec("verify_effect", "Evidence from the real state whether a call's intended effect "
                                  "holds now.", {"type": "object", "properties": {
                                      "tool": {"type": "string", "description": "Tool whose effect to check."},
                                      "arguments": {"type": "object", "description": "The arguments of that call."}},
                                      "required": ["tool", "arguments"]}, "lifecycle"))
        return tools

    def surface(self) -> list[ToolSpec]:
        shown = ([] if self.selective else list(self.business.values())) + list(self.lifecycle.values())
        if self.selective:
            self.materialized = set()
        text = canonical_json([t.schema() for t in shown])
        self.shown_bytes = len(text.encode("utf-8"))
        self.gateway.trace.append("surface", tools=[t.name for t in shown], full=True,
                                  business=list(self.business), tokens=count_tokens(text))
        return shown

    def note(self, kind: str, **data: Any) -> None:
        self.gateway.trace.append(kind, **data)

    # -- calls ---------------------------------------------------------------------------------------------
    def call(self, name: str, args: dict[str, Any]) -> Observation:
        self.gateway.trace.append("tool_call", tool=name, args=args)
        if name == "get_invocation_status" and name in self.lifecycle:
            info = self.gateway.status(str(args.get("invocation_id")))
            if info is None:
                return self._error("unknown_invocation", f"no invocation {args.get('invocation_id')}")
            return self._ok(info)
        if name == "verify_effect" and name in self.lifecycle:
            call_args = dict(args.get("arguments") or {}) if isinstance(args.get("arguments"), dict) else {}
            call_args.pop(KEY_PARAM, None)
            holds = self.gateway.verify(str(args.get("tool")), call_args)
            if holds is None:
                return self._error("no_postcondition", f"no known effect to check for {args.get('tool')}")
            return self._ok({"holds": holds})
        if name == "search_tools" and name in self.lifecycle:
            names = tuple(self.business)
            top = rank(str(args.get("query", "")), names, tuple(self.business[n].card() for n in names), SEARCH_K)
            shown = [{"name": n, "card": self.business[n].card()} for n in top]
            self.gateway.trace.append("discovered", query=args.get("query"), tools=top,
                                      tokens=count_tokens(canonical_json(shown)))
            return self._ok({"tools": shown})
        if name == "describe_tool" and name in self.lifecycle:
            wanted = str(args.get("name"))
            if wanted not in self.business:
                return self._error("unknown_tool", f"no tool named {wanted}")
            schema = self.business[wanted].schema()
            self.materialized.add(wanted)
            self.gateway.trace.append("materialize", tools=[wanted], tokens=count_tokens(canonical_json(schema)))
            return self._ok(schema)
        if name not in self.business or name not in self.materialized:
            hint = " (load it with describe_tool first)" if name in self.business else ""
            self.gateway.trace.append("tool_error", tool=name, reason="unknown_tool")
            return self._error("unknown_tool", f"no tool named {name}{hint}")
        args = dict(args)
        key = args.pop(KEY_PARAM, None) if self.mechanisms.keys and name in self.writes else None
        return self._render(self.gateway.invoke(name, args, str(key) if key is not None else None), key)

    # -- rendering -------------------------------------------------------------------------------------------
    def _ok(self, result: dict[str, Any]) -> Observation:
        return ok_observation(self.mechanisms.structured, result)

    def _error(self, code: str, detail: str) -> Observation:
        return error_observation(self.mechanisms.structured, code, detail)

    def _render(self, d: Delivery, key: Any = None) -> Observation:
        m = self.mechanisms
        if d.transport == "dropped" or (d.transport == "interrupted" and not m.observability):
            return Observation({"status": "timeout"} if m.structured else "TIMEOUT: no response",
                               dropped=d.transport == "dropped")
        if d.transport == "interrupted":
            if not m.structured:
                return Observation(f"INTERRUPTED: {d.inv}")
            return Observation({"status": "interrupted", "invocation_id": d.inv, "resumable": False})
        if d.error is not None:
            return self._error(d.error, "this idempotency key was used with another tool or other arguments")
        answer = d.answer
        assert answer is not None
        result: dict[str, Any] = {"text": answer.text}
        if answer.structured is not None:
            result["structured"] = answer.structured
        if not m.structured:
            return self._error("tool_error", answer.text) if answer.is_error else self._ok(result)
        out: dict[str, Any] = ({"status": "error", "error": "tool_error", "detail": answer.text} if answer.is_error
                               else {"status": "ok", "result": result})
        if m.observability:
            out["invocation_id"] = d.inv
        if m.keys and key is not None:
            out["effect"] = {"idempotency_key": key, "replayed": d.replayed}
        return Observation(out)
