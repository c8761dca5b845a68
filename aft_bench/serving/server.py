"""`aft-bench serve`: one faulted episode served over MCP (the official SDK's low-level server).

The served tools are the interface's tools for the condition, with their schemas, plus `report_outcome`;
every call goes through the same stage pipeline, fault schedule and trace as a harness run, because the
client is the `mcp` agent on the one episode loop. The task is also an MCP prompt (`task`). Effect semantics
become tool annotations where the condition is effect-aware (absent under legacy effects); structured results
become structured content.

Selective discovery is served in one of two forms (part of the agent spec): `dynamic`, where a tool that
`describe_tool` returned joins `tools/list` and the server announces the change (`notifications/tools/list_changed`
on handshake-era sessions, a `subscriptions/listen` stream under 2026-07-28), or `facade`, a stable list with a
`call_tool(name, arguments)` meta-tool for clients that freeze their list at connect. Either way a business tool
is callable only once described, exactly as the condition defines.

One server plays one episode: the first session to ask owns it, any other is refused. The episode ends when
that session does (the stdio client exits, the HTTP session is deleted, the server stops); `report_outcome`
fixes its decision, and calls after it are answered "the episode is over" and traced as refused. It is then
labelled and recorded like any run.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pydantic import ValidationError

from aft_bench.agents.llm import REPORT
from aft_bench.agents.mcp_client import AFTER_REPORT, McpAgent, Params
from aft_bench.agents.registry import AgentSpec
from aft_bench.common.canonical import canonical_json
from aft_bench.common.errors import InputError, OutputError
from aft_bench.common.secrets import redact
from aft_bench.episode.row import episode_row
from aft_bench.experiment.build import play_setup, resolve_cell
from aft_bench.world.external import ExternalWorld
from aft_bench.world.manifest import World
from aft_bench.experiment.config import Cell
from aft_bench.interface.mechanisms import Mechanisms, load_conditions
from aft_bench.interface.tools import MAX_ARGS_CHARS, Observation, ToolSpec
from aft_bench.serving.record import ServedDirectory
from aft_bench.tasks.task import Task
from aft_bench.tasks.workloads import load_workloads, world_for

MAX_WIRE_CALLS = 10_000  # tools/call requests kept in a served episode's wire log

# Structured results (the `structured` mechanism) as MCP output schema: the interface's result envelope.
RESULT_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["status"],
    "properties": {"status": {"type": "string", "enum": ["ok", "error", "interrupted", "timeout"]},
                   "result": {"type": "object"}, "error": {"type": "string"}, "detail": {"type": "string"},
                   "invocation_id": {"type": "string"}, "resumable": {"type": "boolean"},
                   "parts": {"type": "object", "properties": {"done": {"type": "integer"},
                                                              "total": {"type": "integer"}}},
                   "effect": {"type": "object", "properties": {"idempotency_key": {"type": "string"},
                                                               "replayed": {"type": "boolean"}}},
                   "task": {"type": "object", "properties": {"taskId": {"type": "string"},
                                                             "status": {"type": "string"}}}}}
# Resumable invocations in the 2026-07-28 Tasks extension's terms (offered as tools: the SDK carries only the
# types): an interrupted call's invocation is a task handle; get = lifecycle status, result = continuation,
# cancel = abandon it (no later continuation is accepted).
TASK_TOOLS = {
    "tasks_get": "Status of a task (an interrupted invocation): working, completed, failed or cancelled.",
    "tasks_result": "Continue a task to its result without re-executing it (resumable invocations only).",
    "tasks_cancel": "Cancel a task: it will not be continued.",
}
TASK_ARGS = {"type": "object", "required": ["task_id"], "additionalProperties": False,
             "properties": {"task_id": {"type": "string", "description": "taskId from an interrupted result"}}}
READ_ONLY_LIFECYCLE = {"get_invocation_status", "list_invocations", "verify_effect", "search_tools", "describe_tool"}
# The facade form's one stable entry point to business tools (selective discovery for clients that freeze their
# tool list); the tool still has to be described first.
FACADE = ToolSpec("call_tool", "Call a business tool by name with its arguments. Find it with search_tools and "
                  "load it with describe_tool first; its schema says what the arguments are.",
                  {"type": "object", "required": ["name", "arguments"], "additionalProperties": False,
                   "properties": {"name": {"type": "string", "description": "The tool's name."},
                                  "arguments": {"type": "object", "description": "Its arguments."}}}, "discovery")
# Handshake names that say nothing about the agent (SDK defaults): without --agent they earn a warning.
GENERIC_CLIENTS = frozenset({"mcp", "unknown", "fastmcp", "mcp-client", "client", "python-sdk", "typescript-sdk"})
WITHHELD = object()  # `_submit`'s answer when the response is lost on the transport: nothing is sent


class Refused(Exception):
    """A request this server will not serve (another session's); the handler turns it into an MCP error."""


@dataclass(frozen=True)
class Target:
    """The tuple a server plays (everything but the agent, which is whoever connects)."""

    workload: str
    task_id: str
    condition: str
    fault: str | None = None  # None: the task's first fault variant
    seed: int = 0
    backend: str = "memory"
    catalog_size: int | None = None


@dataclass(frozen=True)
class Owner:
    """Who may play the episode: one stream (stdio, in memory), one HTTP session, or the sessionless 2026-07-28
    HTTP wire (which cannot tell two clients apart); `ends` says when its episode is recorded."""

    key: str
    ends: str


def mcp_params(options: dict[str, Any], field: str = "--agent") -> Params:
    """The served agent's parameters from what the person serving gave; a bad value names its flag."""
    try:
        return Params.model_validate(options)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else field
        raise InputError(f"--{name.replace('_', '-')}", f"--{name.replace('_', '-')}", err.get("input"),
                         err["msg"]) from None


class Served:
    """One served episode: started by the owner's first request, recorded when its session ends."""

    def __init__(self, target: Target, worlds_dir: Path, directory: ServedDirectory | None = None,
                 agent: dict[str, Any] | None = None, extra_worlds: tuple[Path, ...] = ()) -> None:
        """`extra_worlds`: folders whose workloads are served beside `worlds_dir`'s (a config's own worlds)."""
        self.target = target
        self.directory = directory
        self.options = {k: v for k, v in (agent or {}).items() if v is not None}
        self.form = mcp_params(self.options).discovery_form  # validated now: a bad flag fails before serving
        self.ctx = SimpleNamespace(workloads=load_workloads(worlds_dir, extra_worlds), conditions=load_conditions())
        wl = self.ctx.workloads.get(target.workload, "--workload", "--workload")
        task = next((t for t in wl.tasks if t.id == target.task_id), None)
        if task is None:
            raise InputError("--task", "--task", target.task_id, f"unknown task of {wl.id}; known: "
                             + ", ".join(t.id for t in wl.tasks))
        self.task: Task = task
        variants = [v.id for v in wl.variants_for(task)]
        if target.fault is None:
            target = self.target = replace(target, fault=variants[0])
        if target.fault not in variants:
            raise InputError("--fault", "--fault", target.fault, f"not a fault variant of this task; known: "
                             f"{', '.join(variants)}")
        self.mechanisms: Mechanisms = self.ctx.conditions.resolve(target.condition, "--condition", "--condition")
        if wl.info.catalog_sizes and target.catalog_size not in wl.info.catalog_sizes:
            raise InputError("--catalog-size", "--catalog-size", target.catalog_size,
                             f"this workload needs one of {list(wl.info.catalog_sizes)}")
        self.world: World | ExternalWorld = (wl.external if wl.external is not None
                                             else world_for(wl, task, target.catalog_size, target.seed))
        self.facade = self.form == "facade" and self.mechanisms.discovery == "selective"
        self.agent: McpAgent | None = None
        self.episode: asyncio.Task[dict[str, Any]] | None = None
        self.ready = asyncio.Event()
        self.row: dict[str, Any] | None = None
        self.run_id: str | None = None
        self.owner: Owner | None = None
        self.client: str | None = None
        self.cancelled: set[str] = set()
        self.announced: tuple[str, ...] = ()  # the tool names the client was last told of
        self.abandoned = False
        self.why_abandoned: str | None = None
        # record_at "stop": the row is written only when the server is stopped (serve-matrix stops it after the
        # client exited 0, or abandons it after a failure), never at the session's end
        self.record_at = "session-end"
        self.built: dict[str, Any] | None = None  # the ended episode's row, before it is recorded
        # what the owner did, to tell a client's failure (and a frozen tool list) from an outcome
        self.calls = 0  # the owner's tool calls, any tool
        self.business_calls = 0
        self.lists = 0  # the owner's tools/list requests
        self.lists_at_notice: int | None = None  # how many it had made when it was first told the list changed
        self.outsiders = 0  # requests of other sessions, refused
        self.owner_ended = False
        self.output_error: OutputError | None = None  # a write that failed where no one could be told at once
        # every tools/call as it arrived, with the machine's monotonic clock: who re-issued a call is read from it
        # beside the model's turns (analysis/reissues.py); kept beside the row as wire/<run_id>.jsonl
        self.wire: list[dict[str, Any]] = []

    # -- the episode --------------------------------------------------------------------------------------
    def prepare_world(self) -> None:
        """A real server's world prepared now (its folder, its started server, its tool list), in the background,
        so that the client's first request does not wait for a server's start-up (openai-agents gives up after
        5 s by default, and a start-up took 13-16 s on a busy machine)."""
        if isinstance(self.world, ExternalWorld) and self.directory is not None:
            from aft_bench.world import pool

            scratch = self.directory.out / ".scratch"
            scratch.mkdir(exist_ok=True)
            pool.prefetch(self.world, scratch)

    def key(self, client: str) -> dict[str, Any]:
        """The run key of this tuple for the agent as named (or, unnamed, as its handshake says)."""
        t = self.target
        params = mcp_params({"agent": client, **self.options})
        spec = AgentSpec("mcp", canonical_json(params.model_dump(mode="json")))
        return {"world": self.world.id, "backend": t.backend, "workload": t.workload, "task_id": t.task_id,
                "condition": t.condition, "fault": t.fault, "fault_seed": t.seed, "catalog_size": t.catalog_size,
                "agent": "mcp", "agent_spec": spec.json, "model": spec.model}

    async def start(self, client: str, owner: Owner) -> None:
        """Start the episode for its owner (once); returns when the agent has been shown the surface. Any other
        session is refused."""
        if self.owner is None:
            self.owner = owner
        elif owner.key != self.owner.key or self._another_client(owner, client):
            self.outsiders += 1
            why = self.client_failure()
            if why and self.owner_ended:
                await self.abandon(why)
            raise Refused("this server plays one episode, and another session owns it; start another server "
                          "for another episode (serve-matrix starts one per tuple)" + (
                              f". The episode was abandoned: {why}" if why else ""))
        if self.episode is None:
            if self.abandoned:
                raise Refused("this episode was abandoned and will not be recorded")
            assert self.directory is not None, "a served episode needs a directory to be recorded in"
            self.client = client
            if "agent" not in self.options and client.split("/", 1)[0].lower() in GENERIC_CLIENTS:
                print(f"aft-bench: the client introduced itself as {client!r}, which does not name the agent under "
                      f"test; give --agent NAME (and --model ID) so that different agents are not taken for "
                      f"repetitions of one another", file=sys.stderr, flush=True)
            key = self.key(client)
            cell = Cell(**key, rep=self.directory.repetitions_of(key))
            self.run_id = cell.run_id
            self.episode = asyncio.create_task(self._play(cell))
        await self.ready.wait()

    def _another_client(self, owner: Owner, client: str) -> bool:
        """On the sessionless 2026-07-28 wire every request may carry its client's identity: one that names another
        client than the owner's is another client (a request that names none cannot be told apart)."""
        known = (None, "unknown")
        return owner.key == "http" and client not in known and self.client not in known and client != self.client

    async def _play(self, cell: Cell) -> dict[str, Any]:
        t0 = time.perf_counter()
        self.directory.quarantine(cell.run_id)  # type: ignore[union-attr]  # a dead earlier attempt's leftovers
        with ExitStack() as stack:
            setup, agent, hashes = resolve_cell(self.ctx, cell, self.directory.out, stack)  # type: ignore[arg-type]
            assert isinstance(agent, McpAgent)
            self.agent = agent
            starting = asyncio.ensure_future(play_setup(setup, agent))
            while not agent.surface and not starting.done():
                await asyncio.sleep(0)
            self.announced = tuple(t.name for t in self._specs())
            self.ready.set()
            try:
                result = await starting
            finally:
                agent.abandon("the episode has ended")
        row = {**episode_row(cell.key(), cell.run_id, self.mechanisms.to_dict(), result, time.perf_counter() - t0,
                             hashes), "client": self.client}
        self.built = row
        return row

    def client_failure(self) -> str | None:
        """Why this episode is the client's failure rather than an outcome, if it is: the session that owned it
        made no tool call while the client went on in other sessions (a client that opens one MCP session per
        operation: its first session, the one that listed the tools, owns the episode and ends it)."""
        if self.calls == 0 and self.outsiders:
            return ("the session that owned the episode made no tool call and the client went on in another "
                    "session (a client that opens one MCP session per operation; use its one-session form)")
        return None

    def froze_its_list(self) -> bool:
        """Whether the client listed its tools, was told the list changed, never listed them again, and made no
        business call: a client that fixes its tool list when it starts, meeting the dynamic discovery form."""
        return (not self.facade and self.lists_at_notice is not None and self.lists == self.lists_at_notice
                and self.business_calls == 0)

    async def finish(self, stopping: bool = True) -> None:
        """The owner's session ended (`stopping` False) or the server stops: end the episode without a decision
        (if it is still running) and record it, unless it is the client's failure (then abandon it). At a session's
        end the row waits for the server's stop under `record_at = "stop"`, and when the session made no tool call
        (the client may yet go on in another session: then it was a client's failure)."""
        if self.episode is None or self.abandoned or self.row is not None:
            return
        self.owner_ended = True
        if self.agent is not None and not self.episode.done():
            self.agent.inbox.put_nowait(None)
        await self.episode
        why = self.client_failure()
        if why:
            await self.abandon(why)
            return
        if not stopping and (self.record_at == "stop" or self.calls == 0):
            return
        assert self.built is not None and self.directory is not None
        try:
            self.directory.record(self.built)
        finally:  # journaled, it stands, even when results.parquet then could not be written: never record it twice
            if self.directory.holds(self.built["run_id"]):
                self.row = self.built
        try:  # beside the row, after it: the wire log failing never costs the row
            self.directory.record_wire(self.built["run_id"], self.wire)
        except OutputError as exc:
            self.output_error = self.output_error or exc

    async def abandon(self, why: str = "the client failed") -> None:
        """Record nothing: the client failed (serve-matrix says so, or `client_failure`); the partial trace, or the
        whole one of an episode that ended but was not recorded, goes to quarantine. Said once, in one line."""
        if self.row is not None or self.why_abandoned is not None:  # recorded, or already abandoned
            return
        self.abandoned = True  # (a signal handler may have set it already: the rest is still to do)
        self.why_abandoned = why
        if self.episode is not None:
            if not self.episode.done():
                self.episode.cancel()
                try:
                    await self.episode
                except asyncio.CancelledError:
                    pass
            if self.directory is not None and self.run_id is not None:
                self.directory.quarantine(self.run_id)
                try:  # who re-issued what is most wanted where a client gave up after a lost answer
                    self.directory.record_wire(self.run_id, self.wire)
                except OutputError:
                    pass
        try:  # said after the trace is safe: the reader of stderr may be gone (serve-matrix killed)
            print(f"aft-bench: episode abandoned: {why}; nothing recorded, its partial trace is in quarantine/",
                  file=sys.stderr, flush=True)
        except OSError:
            pass

    # -- what the client sees ---------------------------------------------------------------------------
    def tools(self) -> list[Any]:
        """tools/list: what the client may call now (the surface, then what it described, in dynamic form)."""
        import mcp.types as mt

        out = [mt.Tool(name=s.name, description=s.description, input_schema=self._input_schema(s),
                       output_schema=RESULT_SCHEMA if self.mechanisms.structured else None,
                       annotations=self._annotations(s)) for s in self._specs()]
        if self.mechanisms.resume:
            out += [mt.Tool(name=name, description=desc, input_schema=TASK_ARGS,
                            annotations=mt.ToolAnnotations(read_only_hint=name == "tasks_get"))
                    for name, desc in TASK_TOOLS.items()]
        out.append(mt.Tool(name=REPORT["name"], description=REPORT["description"], input_schema=REPORT["parameters"]))
        return out

    def _specs(self) -> list[ToolSpec]:
        """The interface's tools listed now: the facade's stable list, else the surface and what was described."""
        assert self.agent is not None
        return self.agent.surface + [FACADE] if self.facade else self.agent.callable_tools()

    @staticmethod
    def _input_schema(spec: ToolSpec) -> dict[str, Any]:
        """A tool's schema as validation enforces it: the backend refuses extra arguments to business tools."""
        if spec.role == "business":
            return {**spec.parameters, "additionalProperties": False}
        return spec.parameters

    def list_changed(self) -> bool:
        """Whether tools/list differs from what the client was last told (and, if so, note it as told)."""
        if self.agent is None or self.facade:
            return False
        names = tuple(t.name for t in self._specs())  # the tasks tools and report_outcome never change
        if names == self.announced:
            return False
        self.announced = names
        return True

    def _annotations(self, spec: ToolSpec) -> Any:
        """Effect semantics as MCP hints: truthful where the condition is effect-aware, absent under legacy, and
        false for every write under `annotations = "misleading"` (declared idempotent and non-destructive)."""
        import mcp.types as mt

        effect = self._effect_of(spec.name) if spec.role == "business" else "lifecycle"
        if self.mechanisms.annotations == "misleading" and effect not in ("read", "lifecycle"):
            return mt.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)  # lies
        if self.mechanisms.effects == "legacy":
            return None
        if spec.role != "business":
            return mt.ToolAnnotations(read_only_hint=spec.name in READ_ONLY_LIFECYCLE)
        if effect == "read":
            return mt.ToolAnnotations(read_only_hint=True)
        return mt.ToolAnnotations(read_only_hint=False, destructive_hint=effect == "irreversible",
                                  idempotent_hint="idempotency_key" in spec.parameters.get("properties", {}))

    def _effect_of(self, tool: str) -> str:
        if isinstance(self.world, ExternalWorld):  # a real server: the person's overlay, as an effect class
            t = self.world.tools.get(tool)
            if t is None:  # not known to be a read: MCP's default for a tool that says nothing (the gateway keys it)
                return "irreversible"
            return "read" if not t.is_write else ("irreversible" if t.destructive else "reversible")
        op = self.world.operations.get(tool)
        return op.effect if op is not None else "read"

    def prompt_text(self) -> str:
        b = self.task.brief
        return (f"Task id: {b.task_id}\nTask: {b.spec}\nInputs: {json.dumps(dict(b.inputs), sort_keys=True)}\n"
                f"Use the tools to do it. When you are done, call report_outcome with your action (finish, abort, "
                f"refuse or escalate), your claim (success, failure or unknown) and your evidence.")

    async def call(self, name: str, args: dict[str, Any]) -> tuple[str, dict[str, Any] | None, bool] | object:
        """One client tool call: (text, structured content, is_error), or WITHHELD (send no response)."""
        size = len(json.dumps(args, default=str))
        inner = args.get("name") if name == FACADE.name and self.facade and isinstance(args.get("name"), str) else None
        if len(self.wire) < MAX_WIRE_CALLS:  # a client that floods the server does not flood its memory
            self.wire.append({"n": len(self.wire), "t": time.monotonic(), "tool": inner or name,
                              "args": ({"chars": size} if size > MAX_ARGS_CHARS else  # not the huge ones
                                       args.get("arguments") if inner else args)})
        if self.episode is None or self.episode.done() or self.agent is None:  # the session is over
            return "ERROR episode_ended: this episode has ended; start the server again for another", None, True
        if size > MAX_ARGS_CHARS:
            self.agent.reject({"kind": "mcp_rejected", "tool": name, "reason": "arguments too large", "chars": size},
                              invalid=True)
            return f"ERROR invalid_arguments: arguments of {size} characters; the limit is {MAX_ARGS_CHARS}", None, True
        self.calls += 1
        inner_name = args.get("name") if name == FACADE.name and self.facade else name
        if any(t.name == inner_name and t.role == "business" for t in self.agent.callable_tools()):
            self.business_calls += 1
        if name == FACADE.name and self.facade:
            inner, arguments = args.get("name"), args.get("arguments", {})
            if not isinstance(inner, str) or not isinstance(arguments, dict) or set(args) - {"name", "arguments"}:
                self.agent.reject({"kind": "mcp_rejected", "tool": name, "reason": "invalid call_tool",
                                   "detail": "call_tool needs name (a string) and arguments (an object)"}, invalid=True)
                return "ERROR invalid_arguments: call_tool needs name (a string) and arguments (an object)", None, True
            return await self._submit(inner, dict(arguments))
        if name in TASK_TOOLS and self.mechanisms.resume:
            return await self._task_call(name, args)
        return await self._submit(name, args)

    async def _task_call(self, name: str, args: dict[str, Any]) -> tuple[str, dict[str, Any] | None, bool] | object:
        """A Tasks-extension operation on an invocation, through the interface's lifecycle tools."""
        assert self.agent is not None
        task_id = str(args.get("task_id", ""))
        if name == "tasks_cancel":
            self.cancelled.add(task_id)
            self.agent.reject({"kind": "task_cancelled", "inv": task_id})
            return json.dumps({"taskId": task_id, "status": "cancelled"}), {"taskId": task_id, "status": "cancelled"}, False
        if task_id in self.cancelled:
            self.agent.reject({"kind": "mcp_rejected", "tool": name, "reason": "task cancelled", "inv": task_id})
            return f"ERROR task_cancelled: task {task_id} was cancelled", None, True
        if name == "tasks_result":
            return await self._submit("resume_invocation", {"invocation_id": task_id})
        if not self.mechanisms.observability:
            return "ERROR unsupported: task status needs the observability mechanism", None, True
        answer = await self._submit("get_invocation_status", {"invocation_id": task_id})
        if answer is WITHHELD:
            return answer
        text, structured, is_error = answer  # type: ignore[misc]
        info = (structured or {}).get("result") or {}
        if structured is not None and not is_error:
            lifecycle = str(info.get("lifecycle"))
            status = {"committed": "completed", "failed": "failed"}.get(lifecycle, "working")
            structured = {**structured, "task": {"taskId": task_id, "status": status}}
            text = json.dumps(structured, sort_keys=True)
        return text, structured, is_error

    async def _submit(self, name: str, args: dict[str, Any]) -> tuple[str, dict[str, Any] | None, bool] | object:
        """Hand one call to the episode loop and wait for what it showed."""
        assert self.agent is not None and self.episode is not None and self.owner is not None
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.agent.inbox.put_nowait((name, args, reply))
        try:
            obs = await reply
        except RuntimeError as exc:
            return f"ERROR episode_ended: {exc}", None, True
        if obs is None:  # report_outcome accepted
            text = (f"OK: outcome reported for run {self.run_id}. The episode is over: stop here. Its row is "
                    f"written {self.owner.ends}.")
            return text, None, False
        if obs == AFTER_REPORT:  # not an error: the agent did nothing wrong, it should just stop
            over = {"status": "ok", "result": {"episode_over": True, "detail": AFTER_REPORT}}
            return AFTER_REPORT, over if self.mechanisms.structured else None, False
        if isinstance(obs, str):  # answered at the boundary: a malformed report
            return obs, None, True
        if obs.dropped and self.agent.params.response_loss == "transport":
            return WITHHELD
        text, structured, is_error = render(obs)
        if self.mechanisms.resume and structured is not None and structured.get("status") == "interrupted":
            structured = {**structured, "task": {"taskId": structured.get("invocation_id"), "status": "working"}}
            text = json.dumps(structured, sort_keys=True)
        return text, structured, is_error


def render(obs: Observation) -> tuple[str, dict[str, Any] | None, bool]:
    """An observation as an MCP tool result: `isError` only for a failed execution (the interface's error, a
    lost or timed-out response, a non-resumable interruption); a resumable interruption is a result to act on."""
    if obs.lost:
        return "TIMEOUT: no response (the connection to the tool server was reset)", None, True
    c = obs.content
    if isinstance(c, dict):
        status = c.get("status")
        return json.dumps(c, sort_keys=True), c, status in ("error", "timeout") or (
            status == "interrupted" and not c.get("resumable"))
    text = str(c)
    return text, None, not (text.startswith("OK") or (text.startswith("INTERRUPTED") and text.endswith("resumable")))


def owner_of(ctx: Any) -> Owner:
    """The session a request belongs to, and when an episode it owns is recorded."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    if headers is None:
        return Owner("stream", "when this client disconnects (or the server stops)")
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return Owner("http", "when the server stops (the 2026-07-28 HTTP wire has no session end)")
    session = headers.get("mcp-session-id")
    return Owner(f"session:{session}", "when this session ends (HTTP DELETE) or the server stops")


def build_server(served: Served) -> Any:
    """The MCP low-level server over `served` (tools, the `task` prompt, call handling, list-change notices)."""
    import anyio
    import mcp.types as mt
    from mcp.server.lowlevel import NotificationOptions, Server
    from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
    from mcp.shared.exceptions import MCPError

    dynamic = not served.facade
    bus = InMemorySubscriptionBus()

    def client_of(ctx: Any) -> str:
        params = getattr(ctx.session, "client_params", None)
        info = getattr(params, "client_info", None) if params is not None else None
        # redacted at the door: the name becomes the agent's name, a key column, which no later redaction may touch
        return redact(f"{info.name}/{info.version}") if info is not None else "unknown"

    async def begin(ctx: Any) -> None:
        try:
            await served.start(client_of(ctx), owner_of(ctx))
        except Refused as exc:
            raise MCPError(mt.INVALID_REQUEST, str(exc)) from None

    async def list_tools(ctx: Any, params: Any) -> Any:
        await begin(ctx)
        served.lists += 1
        return mt.ListToolsResult(tools=served.tools())

    async def call_tool(ctx: Any, params: Any) -> Any:
        await begin(ctx)
        answer = await served.call(params.name, dict(params.arguments or {}))
        if served.list_changed():
            if served.lists_at_notice is None:
                served.lists_at_notice = served.lists
            # on this request's own stream, before its result, on both eras: 2026-07-28 reserves change notices for
            # subscriptions/listen streams, but FastMCP (pydantic-ai's client) negotiates it and never listens; a
            # client that does listen gets it there too
            await ctx.session.send_notification(mt.ToolListChangedNotification(), related_request_id=ctx.request_id)
            await bus.publish(ToolsListChanged())
        if answer is WITHHELD:  # the response is lost on the transport: the client's own timeout decides
            await anyio.sleep_forever()
        text, structured, is_error = answer  # type: ignore[misc]
        return mt.CallToolResult(content=[mt.TextContent(type="text", text=text)], structured_content=structured,
                                 is_error=is_error)

    async def list_prompts(ctx: Any, params: Any) -> Any:
        return mt.ListPromptsResult(prompts=[mt.Prompt(name="task", description="The task, as the agent sees it")])

    async def get_prompt(ctx: Any, params: Any) -> Any:
        if params.name != "task":
            raise MCPError(mt.INVALID_PARAMS, f"unknown prompt {params.name!r}; the one prompt is 'task'")
        await begin(ctx)
        return mt.GetPromptResult(description="The task", messages=[
            mt.PromptMessage(role="user", content=mt.TextContent(type="text", text=served.prompt_text()))])

    @asynccontextmanager
    async def lifespan(_server: Any) -> AsyncIterator[dict[str, Any]]:
        try:
            yield {}
        finally:
            if not served.abandoned:
                with anyio.CancelScope(shield=True):  # a signal cancelled the serving: record the episode anyway
                    await served.finish(stopping=True)

    class EpisodeServer(Server):  # type: ignore[type-arg]
        """Handshake-era sessions are told that the tool list changes (dynamic form); 2026-07-28 derives it from
        the `subscriptions/listen` handler."""

        def create_initialization_options(self, notification_options: Any = None, *args: Any, **kwargs: Any) -> Any:
            options = notification_options or NotificationOptions(tools_changed=dynamic)
            return super().create_initialization_options(options, *args, **kwargs)

    return EpisodeServer("aft-bench", version="served-episode", lifespan=lifespan, on_list_tools=list_tools,
                         on_call_tool=call_tool, on_list_prompts=list_prompts, on_get_prompt=get_prompt,
                         on_subscriptions_listen=ListenHandler(bus) if dynamic else None)


def http_app(served: Served, server: Any, host: str) -> Any:
    """The streamable-HTTP app, with the owner's `DELETE` ending (and recording) the episode."""
    inner = server.streamable_http_app(host=host)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await inner(scope, receive, send)
        if scope["type"] == "http" and scope["method"] == "DELETE" and served.owner is not None:
            session = dict(scope.get("headers") or []).get(b"mcp-session-id", b"").decode("latin-1")
            if served.owner.key == f"session:{session}" and not served.abandoned and served.row is None:
                try:
                    await served.finish(stopping=False)
                except OutputError as exc:  # the row is journaled (or not): said once, as the command ends
                    served.output_error = exc
                if served.row is not None:
                    print(f"aft-bench: episode recorded as run {served.row['run_id']} (session ended)",
                          file=sys.stderr, flush=True)
                elif not served.abandoned and served.record_at == "session-end":  # (an abandon says so itself)  # a session without a tool call: wait for what comes
                    print("aft-bench: the session that owned the episode ended without a tool call; the episode is "
                          "recorded when the server stops, unless the client goes on in another session",
                          file=sys.stderr, flush=True)

    return app


def task_text(target: Target, worlds_dir: Path, extra_worlds: tuple[Path, ...] = ()) -> str:
    """The task as the served agent sees it (the `task` prompt), without starting anything."""
    return Served(target, worlds_dir, extra_worlds=extra_worlds).prompt_text()
