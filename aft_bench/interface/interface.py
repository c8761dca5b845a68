"""The agent-facing interface: a set of mechanism settings layered over the stage pipeline.

It decides what the agent sees (tool surface, result shape) and which semantics it can use (lifecycle,
resume, recovery handles, effect guards, verification, selective discovery). It knows nothing of
controllers, adds no business capability, and never does the task for the agent: a mechanism that is off
is simply absent, with no hidden path around it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aft_bench.common.cache import BoundedCache
from aft_bench.common.canonical import canonical_json
from aft_bench.interface.mechanisms import Mechanisms
from aft_bench.interface.ranking import Candidate, rank
from aft_bench.interface.router import SESSION_MAX, Router, load_profiles, meta_tools
from aft_bench.interface.tokens import count_tokens
from aft_bench.interface.tools import Observation, ToolSpec
from aft_bench.runtime.pipeline import Delivery, Pipeline, Request
from aft_bench.world.backend import Guards

SEARCH_K = 5
KEY_PARAM = "idempotency_key"
VERSION_PARAM = "expected_version"


# Caches, bounded, keyed on exactly what each value is a pure function of (a matrix builds thousands of interfaces
# over the same few worlds): the business tools and search cards on the world and the two mechanisms that change a
# business schema (`keys`, `guards`); the surface's token count on those plus the lifecycle tools shown.
BusinessKey = tuple[str, bool, bool]
_BUSINESS: BoundedCache[BusinessKey, dict[str, ToolSpec]] = BoundedCache(512)
_SURFACE_TOKENS: BoundedCache[tuple[Any, ...], tuple[int, int]] = BoundedCache(512)  # (tokens, bytes)


def _measure(schemas: list[dict[str, Any]]) -> tuple[int, int]:
    """Tokens and UTF-8 bytes of the schemas an agent is shown (one serialization for both)."""
    text = canonical_json(schemas)
    return count_tokens(text), len(text.encode("utf-8"))
_CARDS: BoundedCache[BusinessKey, tuple[tuple[str, ...], tuple[str, ...]]] = BoundedCache(512)


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required}


_JSON = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}


def ok_observation(structured: bool, result: dict[str, Any]) -> Observation:
    """A successful result as an agent sees it: a structured object, or the text `OK: <json>`."""
    if structured:
        return Observation({"status": "ok", "result": result})
    return Observation(f"OK: {canonical_json(result)}")


def error_observation(structured: bool, code: str, detail: str) -> Observation:
    """An error as an agent sees it: a structured object, or the text `ERROR <code>: <detail>`."""
    if structured:
        return Observation({"status": "error", "error": code, "detail": detail})
    return Observation(f"ERROR {code}: {detail}")


@dataclass
class Interface:
    """One interface condition over one run's pipeline."""

    pipeline: Pipeline
    mechanisms: Mechanisms
    search_k: int = SEARCH_K
    business: dict[str, ToolSpec] = field(init=False)
    lifecycle: dict[str, ToolSpec] = field(init=False)
    materialized: set[str] = field(init=False, default_factory=set)
    _programs: Any = field(init=False, default=None)  # the episode's ProgramRunner, made on first submission
    _routing: Router | None = field(init=False, default=None)  # the episode's router (routed discovery)
    shown_bytes: int = field(init=False, default=0)  # bytes of the schemas the last surface() showed

    def __post_init__(self) -> None:
        world = self.pipeline.backend.world
        key = (world.hash, self.mechanisms.keys, self.mechanisms.guards)
        self.business = _BUSINESS.get(key, lambda: {n: self._business_tool(n) for n in sorted(world.operations)})
        self.lifecycle = {t.name: t for t in self._lifecycle_tools()}
        self._key = key
        self._reset_loaded()

    def _reset_loaded(self) -> None:
        """Eager interfaces load every business schema up front; selective ones load none until described."""
        self.materialized = set(self.business) if self.mechanisms.discovery == "eager" else set()

    # -- the surface ----------------------------------------------------------------------
    def _business_tool(self, name: str) -> ToolSpec:
        op = self.pipeline.backend.world.operations[name]
        props = {a: {"type": _JSON[s.type], "description": s.description} for a, s in op.args.items()}
        required = list(op.args)
        desc = op.description
        m = self.mechanisms
        if op.is_write and m.keys:
            desc += f" Effect: {op.effect}; a repeated {KEY_PARAM} never commits twice."
            props[KEY_PARAM] = {"type": "string", "description": "Caller-chosen key naming this logical effect."}
        if op.is_write and m.guards:
            desc += " Authority is checked at the commit point."
            if op.kind == "update":
                desc += f" With {VERSION_PARAM}, commits only if the {op.collection} record is still at that version."
                props[VERSION_PARAM] = {"type": "integer", "description": "Record version you last read."}
        return ToolSpec(name, desc, _obj(props, required), "business")

    def _lifecycle_tools(self) -> list[ToolSpec]:
        m = self.mechanisms
        inv = {"invocation_id": {"type": "string", "description": "Invocation id from an earlier result."}}
        tools = []
        if m.observability:
            tools.append(ToolSpec("get_invocation_status", "Lifecycle status of an invocation.",
                                  _obj(inv, ["invocation_id"]), "lifecycle"))
        if m.resume:
            tools.append(ToolSpec("resume_invocation", "Continue an interrupted invocation without re-executing it.",
                                  _obj(inv, ["invocation_id"]), "lifecycle"))
        if m.durable:
            tools.append(ToolSpec("list_invocations", "Recovery handles of invocations that survived a restart.",
                                  _obj({}, []), "lifecycle"))
        if m.verification:
            props = {"tool": {"type": "string", "description": "Business tool whose effect to check."},
                     "arguments": {"type": "object", "description": "The arguments of that call."}}
            tools.append(ToolSpec("verify_effect", "Authoritative evidence whether a call's intended effect holds now.",
                                  _obj(props, ["tool", "arguments"]), "lifecycle"))
        if m.programs != "off":
            tools.append(ToolSpec("run_program", "Run one Python program whose only contact with the world is "
                                  "CALL(tool, arguments, effect) with effect \"READ\" or \"WRITE\" as the tool "
                                  "declares; returns its last expression's value, or diagnostics.",
                                  _obj({"source": {"type": "string", "description": "The program."}}, ["source"]),
                                  "lifecycle"))
        if m.discovery == "routed":
            tools += meta_tools(self.search_k)
        if m.discovery == "selective":
            tools.append(ToolSpec("search_tools", f"Search the tool catalog; returns the top {self.search_k} "
                                  "capability cards.", _obj({"query": {"type": "string", "description": "What you "
                                  "want to do."}}, ["query"]), "discovery"))
            tools.append(ToolSpec("describe_tool", "Load the full schema of a tool so it can be called.",
                                  _obj({"name": {"type": "string", "description": "Tool name."}}, ["name"]),
                                  "discovery"))
        return tools

    def surface(self) -> list[ToolSpec]:
        """The tools whose full schemas the agent sees at the start; recorded with their token count."""
        shown = list(self.lifecycle.values())
        eager = self.mechanisms.discovery == "eager"
        if eager:
            shown = list(self.business.values()) + shown
        surface_key = (*self._key, eager, tuple(self.lifecycle), self.search_k)  # lifecycle schemas: names, k
        tokens, self.shown_bytes = _SURFACE_TOKENS.get(surface_key, lambda: _measure([t.schema() for t in shown]))
        self.pipeline.trace.append("surface", tools=[t.name for t in shown], full=True,
                                   business=[t.name for t in shown if t.role == "business"], tokens=tokens)
        self._reset_loaded()
        return shown

    @property
    def programs_run(self) -> int:
        return self._programs.attempts if self._programs is not None else 0

    def note(self, kind: str, **data: Any) -> None:
        self.pipeline.trace.append(kind, **data)

    # -- calls ------------------------------------------------------------------------------
    def call(self, name: str, args: dict[str, Any]) -> Observation:
        """One tool call by the agent, recorded as such before it reaches any mechanism."""
        self.pipeline.trace.append("tool_call", tool=name, args=args)
        if name in self.lifecycle:
            return getattr(self, f"_t_{name}")(dict(args))
        if name in self.business and name in self.materialized and self.mechanisms.discovery != "routed":
            return self._business_call(name, dict(args))  # routed: business tools only through call_tool
        hint = " (load it with describe_tool first)" if name in self.business else ""
        if name in self.business and self.mechanisms.discovery == "routed":
            hint = " (resolve a session with resolve_tools, then use call_tool)"
        self.pipeline.trace.append("tool_error", tool=name, reason="unknown_tool")
        return self._error("unknown_tool", f"no tool named {name}{hint}")

    def _business_call(self, name: str, args: dict[str, Any]) -> Observation:
        m = self.mechanisms
        key = args.pop(KEY_PARAM, None) if m.keys else None
        version = args.pop(VERSION_PARAM, None) if m.guards else None  # accepted wherever declared ...
        checked = m.checks_guards  # ... and checked at the commit only where enforced
        guards = Guards(idempotency_key=key, expected_version=version if checked else None,
                        authority_at_commit=checked)
        delivery = self.pipeline.invoke(Request(name, args, guards=guards))
        return self._render(delivery, key)

    def _t_get_invocation_status(self, args: dict[str, Any]) -> Observation:
        return self._render(self.pipeline.status(str(args.get("invocation_id"))))

    def _t_resume_invocation(self, args: dict[str, Any]) -> Observation:
        return self._render(self.pipeline.resume(str(args.get("invocation_id"))))

    def _t_run_program(self, args: dict[str, Any]) -> Observation:
        from aft_bench.interface.programs import ProgramRunner

        if self._programs is None:
            self._programs = ProgramRunner(self.mechanisms.programs)
        world = self.pipeline.backend.world
        effects = {n: ("WRITE" if world.operations[n].is_write else "READ")
                   for n in self.business if n in self.materialized}  # the surface the program may call
        out = self._programs.run(str(args.get("source", "")), effects, self.call, self.note)
        if self.mechanisms.structured:
            return Observation(out)
        if out["status"] == "ok":
            return self._ok({"result": out["result"], "calls": len(out["calls_made"])})
        return self._error(out["error"], out["detail"])

    def _t_list_invocations(self, args: dict[str, Any]) -> Observation:
        return self._render(self.pipeline.handles())

    def _t_verify_effect(self, args: dict[str, Any]) -> Observation:
        call_args = dict(args.get("arguments") or {})
        key = call_args.pop(KEY_PARAM, None) if self.mechanisms.keys else None
        call_args.pop(VERSION_PARAM, None)
        return self._render(self.pipeline.verify(str(args.get("tool")), call_args, key))

    # -- the router (discovery = "routed") ------------------------------------------------------------------
    def _router(self) -> Router:
        if self._routing is None:
            world = self.pipeline.backend.world
            cands = [Candidate.of(n, t.card(), not world.operations[n].is_write) for n, t in self.business.items()]
            self._routing = Router(cands, {n: world.operations[n].effect for n in self.business})
        return self._routing

    def _cards(self, names: list[str], query: str) -> Observation:
        shown = [{"name": n, "card": self.business[n].card()} for n in names]
        self.pipeline.trace.append("discovered", query=query, tools=names, tokens=count_tokens(canonical_json(shown)))
        return self._ok({"tools": shown})

    def _refuse(self, tool: str, via: str, why: str) -> Observation:
        """A describe or call the router does not allow: traced, never reaches the pipeline."""
        self.pipeline.trace.append("router_rejected", tool=tool, via=via, reason=why)
        return self._error("outside_session", f"{tool} is {why}")

    def _t_resolve_tools(self, args: dict[str, Any]) -> Observation:
        k = args.get("k", SESSION_MAX)
        session = self._router().resolve(str(args.get("task", "")), k if isinstance(k, int) else SESSION_MAX)
        self.pipeline.trace.append("session", tools=session)
        return self._cards(session, str(args.get("task", "")))

    def _t_call_tool(self, args: dict[str, Any]) -> Observation:
        name, arguments = str(args.get("name")), args.get("arguments")
        why = self._router().gate(name)
        if why is not None:
            return self._refuse(name, "call_tool", why)
        if not isinstance(arguments, dict):
            return self._error("invalid_arguments", "arguments must be an object")
        self.pipeline.trace.append("tool_call", tool=name, args=arguments, via="call_tool")
        return self._business_call(name, dict(arguments))

    def _t_list_profiles(self, args: dict[str, Any]) -> Observation:
        router = self._router()
        return self._ok({"in_force": router.profile_name,
                         "profiles": {n: p.description for n, p in load_profiles().items()}})

    def _t_search_tools(self, args: dict[str, Any]) -> Observation:
        if self.mechanisms.discovery == "routed":
            query = str(args.get("query", ""))
            return self._cards([c.name for c in self._router().search(query, self.search_k)], query)
        names, cards = _CARDS.get(self._key, lambda: (tuple(self.business),
                                                      tuple(t.card() for t in self.business.values())))
        top = rank(str(args.get("query", "")), names, cards, self.search_k)
        shown = [{"name": n, "card": self.business[n].card()} for n in top]
        self.pipeline.trace.append("discovered", query=args.get("query"), tools=top,
                                   tokens=count_tokens(canonical_json(shown)))
        return self._ok({"tools": shown})

    def _t_describe_tool(self, args: dict[str, Any]) -> Observation:
        name = str(args.get("name"))
        if name in self.business and self.mechanisms.discovery == "routed":
            why = self._router().gate(name)
            if why is not None:
                return self._refuse(name, "describe_tool", why)
        if name not in self.business:
            self.pipeline.trace.append("tool_error", tool="describe_tool", reason="unknown_tool", name=name)
            return self._error("unknown_tool", f"no tool named {name}")
        schema = self.business[name].schema()
        self.materialized.add(name)
        self.pipeline.trace.append("materialize", tools=[name], tokens=count_tokens(canonical_json(schema)))
        return self._ok(schema)

    # -- rendering ------------------------------------------------------------------------------
    def _ok(self, result: dict[str, Any]) -> Observation:
        return ok_observation(self.mechanisms.structured, result)

    def _error(self, code: str, detail: str) -> Observation:
        return error_observation(self.mechanisms.structured, code, detail)

    def _render(self, d: Delivery, key: str | None = None) -> Observation:
        """Shape a delivery as the agent sees it; lifecycle identity only where a lifecycle mechanism is on."""
        m = self.mechanisms
        lifecycle = m.observability or m.resume
        if d.transport == "lost":
            self._reset_loaded()  # the agent's context went with its process
            return Observation(None, lost=True)
        if d.transport == "dropped" or (d.transport == "interrupted" and not lifecycle):
            return Observation({"status": "timeout"} if m.structured else "TIMEOUT: no response",
                               dropped=d.transport == "dropped")
        if d.transport == "interrupted":
            if not m.structured:
                return Observation(f"INTERRUPTED: {d.invocation}{' resumable' if m.resume else ''}")
            return Observation({"status": "interrupted", "invocation_id": d.invocation, "resumable": m.resume})
        r = d.response or {}
        if not m.structured:
            if r.get("status") == "ok":
                return self._ok(r.get("result"))
            return self._error(str(r.get("code")), str(r.get("detail", "")))
        out: dict[str, Any] = {"status": r.get("status")}
        if r.get("status") == "ok":
            out["result"] = r.get("result")
            if "parts_total" in r:
                out["parts"] = {"done": r.get("parts_done"), "total": r.get("parts_total")}
        else:
            out.update(error=r.get("code"), detail=r.get("detail", ""))
        if lifecycle and r.get("inv"):
            out["invocation_id"] = r["inv"]
        if m.keys and key is not None:
            out["effect"] = {"idempotency_key": key, "replayed": bool(r.get("replayed"))}
        return Observation(out)
