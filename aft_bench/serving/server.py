"""`aft-bench serve`: one faulted episode served over MCP (the official SDK's low-level server).

The served tools are the interface's tools for the condition, with their schemas, plus `report_outcome`;
every call goes through the same stage pipeline, fault schedule and trace as a harness run, because the
client is the `mcp` agent on the one episode loop. The task is also an MCP prompt (`task`). Effect semantics
become tool annotations where the condition is effect-aware (absent under legacy effects); structured results
become structured content. The episode starts with the client's first request and ends when the
session does (the client disconnects or the server stops); `report_outcome` fixes its decision, and calls after
it are refused and traced. It is then labelled and recorded like any run.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from aft_bench.agents.llm import REPORT
from aft_bench.agents.mcp_client import MAX_ARGS_CHARS, McpAgent
from aft_bench.common.canonical import canonical_json
from aft_bench.common.errors import InputError
from aft_bench.episode.episode import run_episode
from aft_bench.episode.row import episode_row
from aft_bench.experiment.build import resolve_cell
from aft_bench.experiment.config import Cell
from aft_bench.interface.mechanisms import Mechanisms, load_conditions
from aft_bench.interface.tools import Observation, ToolSpec
from aft_bench.serving.record import ServedDirectory
from aft_bench.tasks.task import Task
from aft_bench.tasks.workloads import load_workloads, world_for

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


class Served:
    """One served episode: started by the client's first request, recorded when it ends."""

    def __init__(self, target: Target, worlds_dir: Path, directory: ServedDirectory | None = None) -> None:
        self.target = target
        self.directory = directory
        self.ctx = SimpleNamespace(workloads=load_workloads(worlds_dir), conditions=load_conditions())
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
        self.world = world_for(wl, task, target.catalog_size, target.seed)
        self.agent: McpAgent | None = None
        self.episode: asyncio.Task[dict[str, Any]] | None = None
        self.ready = asyncio.Event()
        self.row: dict[str, Any] | None = None
        self.run_id: str | None = None
        self.cancelled: set[str] = set()

    # -- the episode --------------------------------------------------------------------------------------
    async def start(self, client: str) -> None:
        """Start the episode for `client` (once); returns when the agent has been shown the surface."""
        if self.episode is None:
            t = self.target
            assert self.directory is not None, "a served episode needs a directory to be recorded in"
            spec = canonical_json({"name": "mcp", "client": client})
            key = {"world": self.world.id, "backend": t.backend, "workload": t.workload, "task_id": t.task_id,
                   "condition": t.condition, "fault": t.fault, "fault_seed": t.seed, "catalog_size": t.catalog_size,
                   "agent": "mcp", "agent_spec": spec, "model": client}
            cell = Cell(**key, rep=self.directory.repetitions_of(key))
            self.run_id = cell.run_id
            self.episode = asyncio.create_task(self._play(cell))
        await self.ready.wait()

    async def _play(self, cell: Cell) -> dict[str, Any]:
        t0 = time.perf_counter()
        with ExitStack() as stack:
            setup, agent, hashes = resolve_cell(self.ctx, cell, self.directory.out, stack)  # type: ignore[arg-type]
            assert isinstance(agent, McpAgent)
            self.agent = agent
            starting = asyncio.ensure_future(run_episode(setup, agent))
            while not agent.surface and not starting.done():
                await asyncio.sleep(0)
            self.ready.set()
            try:
                result = await starting
            finally:
                agent.abandon("the episode has ended")
        row = episode_row(cell.key(), cell.run_id, self.mechanisms.to_dict(), result, time.perf_counter() - t0, hashes)
        self.directory.record(row)
        self.row = row
        return row

    async def finish(self) -> None:
        """The client went away: end the episode without a decision (if it is still running) and record it."""
        if self.episode is None:
            return
        if self.agent is not None and not self.episode.done():
            self.agent.inbox.put_nowait(None)
        await self.episode

    # -- what the client sees ---------------------------------------------------------------------------
    def tools(self) -> list[Any]:
        import mcp.types as mt

        assert self.agent is not None
        out = [mt.Tool(name=s.name, description=s.description, input_schema=s.parameters,
                       output_schema=RESULT_SCHEMA if self.mechanisms.structured else None,
                       annotations=self._annotations(s)) for s in self.agent.surface]
        if self.mechanisms.resume:
            out += [mt.Tool(name=name, description=desc, input_schema=TASK_ARGS,
                            annotations=mt.ToolAnnotations(read_only_hint=name == "tasks_get"))
                    for name, desc in TASK_TOOLS.items()]
        out.append(mt.Tool(name=REPORT["name"], description=REPORT["description"], input_schema=REPORT["parameters"]))
        return out

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
        op = self.world.operations.get(tool)
        return op.effect if op is not None else "read"

    def prompt_text(self) -> str:
        b = self.task.brief
        return (f"Task id: {b.task_id}\nTask: {b.spec}\nInputs: {json.dumps(dict(b.inputs), sort_keys=True)}\n"
                f"Use the tools to do it. When you are done, call report_outcome with your action (finish, abort, "
                f"refuse or escalate), your claim (success, failure or unknown) and your evidence.")

    async def call(self, name: str, args: dict[str, Any]) -> tuple[str, dict[str, Any] | None, bool]:
        """One client tool call: (text, structured content, is_error)."""
        if self.episode is None or self.episode.done() or self.agent is None:  # the session is over
            return "ERROR episode_ended: this episode has ended; start the server again for another", None, True
        size = len(json.dumps(args))
        if size > MAX_ARGS_CHARS:
            self.agent.reject({"kind": "mcp_rejected", "tool": name, "reason": "arguments too large", "chars": size})
            return f"ERROR invalid_arguments: arguments of {size} characters; the limit is {MAX_ARGS_CHARS}", None, True
        if name in TASK_TOOLS and self.mechanisms.resume:
            return await self._task_call(name, args)
        return await self._submit(name, args)

    async def _task_call(self, name: str, args: dict[str, Any]) -> tuple[str, dict[str, Any] | None, bool]:
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
        text, structured, is_error = await self._submit("get_invocation_status", {"invocation_id": task_id})
        info = (structured or {}).get("result") or {}
        if structured is not None and not is_error:
            lifecycle = str(info.get("lifecycle"))
            status = {"committed": "completed", "failed": "failed"}.get(lifecycle, "working")
            structured = {**structured, "task": {"taskId": task_id, "status": status}}
            text = json.dumps(structured, sort_keys=True)
        return text, structured, is_error

    async def _submit(self, name: str, args: dict[str, Any]) -> tuple[str, dict[str, Any] | None, bool]:
        """Hand one call to the episode loop and wait for what it showed."""
        assert self.agent is not None and self.episode is not None
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.agent.inbox.put_nowait((name, args, reply))
        try:
            obs = await reply
        except RuntimeError as exc:
            return f"ERROR episode_ended: {exc}", None, True
        if obs is None:  # report_outcome accepted: recorded with the decision when the session ends
            return (f"OK: outcome reported for run {self.run_id}; the episode is labelled and recorded when this "
                    f"session ends", None, False)
        text, structured, is_error = _render(obs)
        if self.mechanisms.resume and structured is not None and structured.get("status") == "interrupted":
            structured = {**structured, "task": {"taskId": structured.get("invocation_id"), "status": "working"}}
            text = json.dumps(structured, sort_keys=True)
        return text, structured, is_error


def _render(obs: Observation) -> tuple[str, dict[str, Any] | None, bool]:
    if obs.lost:
        return "TIMEOUT: no response (the connection to the tool server was reset)", None, True
    c = obs.content
    if isinstance(c, dict):
        return json.dumps(c, sort_keys=True), c, c.get("status") != "ok"
    text = str(c)
    return text, None, not text.startswith("OK")


def build_server(served: Served) -> Any:
    """The MCP low-level server over `served` (tools, the `task` prompt, call handling)."""
    import mcp.types as mt
    from mcp.server.lowlevel import Server

    def client_of(ctx: Any) -> str:
        params = getattr(ctx.session, "client_params", None)
        info = getattr(params, "client_info", None) if params is not None else None
        return f"{info.name}/{info.version}" if info is not None else "unknown"

    async def list_tools(ctx: Any, params: Any) -> Any:
        await served.start(client_of(ctx))
        return mt.ListToolsResult(tools=served.tools())

    async def call_tool(ctx: Any, params: Any) -> Any:
        await served.start(client_of(ctx))
        text, structured, is_error = await served.call(params.name, dict(params.arguments or {}))
        return mt.CallToolResult(content=[mt.TextContent(type="text", text=text)], structured_content=structured,
                                 is_error=is_error)

    async def list_prompts(ctx: Any, params: Any) -> Any:
        return mt.ListPromptsResult(prompts=[mt.Prompt(name="task", description="The task, as the agent sees it")])

    async def get_prompt(ctx: Any, params: Any) -> Any:
        if params.name != "task":
            raise ValueError(f"unknown prompt {params.name!r}; the one prompt is 'task'")
        await served.start(client_of(ctx))
        return mt.GetPromptResult(description="The task", messages=[
            mt.PromptMessage(role="user", content=mt.TextContent(type="text", text=served.prompt_text()))])

    @asynccontextmanager
    async def lifespan(_server: Any) -> AsyncIterator[dict[str, Any]]:
        try:
            yield {}
        finally:
            await served.finish()

    return Server("aft-bench", version="served-episode", lifespan=lifespan, on_list_tools=list_tools,
                  on_call_tool=call_tool, on_list_prompts=list_prompts, on_get_prompt=get_prompt)


def task_text(target: Target, worlds_dir: Path) -> str:
    """The task as the served agent sees it (the `task` prompt), without starting anything."""
    return Served(target, worlds_dir).prompt_text()
