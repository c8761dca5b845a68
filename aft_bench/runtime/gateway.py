"""The fault-injecting gateway between an agent's surface and a real MCP server (an external world).

Every call passes it: it is traced, counted, and either forwarded to the server or not, as the schedule says.
Faults act at the gateway, the only place a third party can put them: the response lost after the server
answered, an interruption before the request reaches the server, a server restarted between calls, another
writer's change to the resource before a call, a success reported for a request never forwarded (false
success), a failure reported for one the server answered (false failure). The trace keeps the server's real
answer beside what was delivered, and the resource's real state read by the probe (never the server's word)
after every forwarded write. What a consuming team can add here without the server's cooperation also lives
here: an idempotency key honoured on the server's side of the fault point, the gateway's own record of an
invocation, and verification answered from the probe.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field

from aft_bench.common import crashpoints
from aft_bench.common.canonical import canonical_json, digest
from aft_bench.common.datafile import read_toml, validate
from aft_bench.common.errors import InputError, WorldFailed
from aft_bench.runtime.trace import Trace
from aft_bench.world import pool, snapshot
from aft_bench.world.external import WORKSPACE, ExternalWorld, check_tools
from aft_bench.world.mcp_http import HttpServer
from aft_bench.world.mcp_stdio import ServerFailed, StdioServer, ToolAnswer
from aft_bench.world.resource import Resource, ResourceFailed

GatewayFaultKind = Literal["response_loss", "interruption", "server_restart", "stale_state", "false_success",
                           "false_failure"]


class GatewayFault(BaseModel):
    """One fault at the gateway: `kind` acts on the `occurrence`-th call of `tool` (None in a workload variant:
    the task's first target tool)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: GatewayFaultKind
    tool: str | None = None
    occurrence: int = Field(default=1, ge=1)


class GatewaySchedule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str
    description: str = ""
    faults: tuple[GatewayFault, ...] = ()

    @cached_property
    def hash(self) -> str:
        return digest(self.model_dump(mode="json"))

    def bound(self, first_target: str) -> GatewaySchedule:
        """Faults without a tool aimed at the task's first target tool."""
        faults = tuple(f if f.tool is not None else f.model_copy(update={"tool": first_target}) for f in self.faults)
        return self.model_copy(update={"faults": faults})


NO_GATEWAY_FAULTS = GatewaySchedule(id="none")


def load_gateway_schedule(path: str | Path, world: ExternalWorld) -> GatewaySchedule:
    p = Path(path)
    sched = validate(GatewaySchedule, read_toml(p), p)
    for i, f in enumerate(sched.faults):
        if f.tool is not None and f.tool not in world.tools:
            raise InputError(p, f"faults.{i}.tool", f.tool, f"world '{world.id}' has no such tool")
    return sched


@dataclass(frozen=True)
class Delivery:
    """What one call came to: `transport` delivered / dropped (sent, answered, lost) / interrupted (never sent);
    `answer` as delivered; `reached` whether the server received it; `replayed` answered from the key record."""

    inv: str
    transport: str
    answer: ToolAnswer | None
    reached: bool
    replayed: bool = False
    error: str | None = None  # a gateway refusal (e.g. `key_conflict`), never a server answer


FAILURE_TEXT = "The operation failed."
SUCCESS_TEXT = "The operation completed successfully."


_TOOLS_MATCHED: set[tuple[str, str, tuple[str, ...]]] = set()  # (world, file, overlay's tools) matched once here


def _check_tools_again(world: ExternalWorld, listed: list[dict[str, Any]]) -> None:
    """The overlay against this start's tools/list. A mismatch at the world's first start in this process is the
    world file's (bad input); once a start matched, a later mismatch is the server changing its tools under a run."""
    key = (world.id, str(world.source), tuple(sorted(world.tools)))
    try:
        check_tools(world, listed, world.source)
    except InputError as exc:
        if key not in _TOOLS_MATCHED:
            raise
        problem = exc.problem.removeprefix(f"world '{world.id}': ")
        raise WorldFailed(f"world '{world.id}': the server's tools changed after an earlier start matched the world: "
                          f"{exc.field}: {problem}", exc.field) from None
    _TOOLS_MATCHED.add(key)


class Gateway:
    """One episode's gateway over a fresh server on a fresh resource. `open()` before the first call, `close()`
    always (it stops the server and removes the resource)."""

    def __init__(self, world: ExternalWorld, trace: Trace, schedule: GatewaySchedule = NO_GATEWAY_FAULTS,
                 *, keys: bool = False, resource_parent: Path | None = None) -> None:
        self.world = world
        self.trace = trace
        self.schedule = schedule
        self.keys = keys
        self.resource_parent = resource_parent
        self.resource: Resource | None = None  # made (or taken from the pool prepared ahead) by open()
        self.server: StdioServer | HttpServer | None = None
        self.listed: list[dict[str, Any]] = []
        self.s0: dict[str, Any] = {}
        self.state: dict[str, Any] = {}  # the last probed state
        self._counts: dict[str, int] = {}
        self._n = 0
        self._invocations: dict[str, dict[str, Any]] = {}
        self._keyed: dict[str, tuple[str, str, ToolAnswer]] = {}  # key -> (arguments' canonical JSON, inv, answer)
        self.start_s = 0.0  # seconds spent starting servers (for the speed benchmark)

    # -- lifecycle -----------------------------------------------------------------------------------------
    def open(self) -> Gateway:
        """A fresh resource with its s0 snapshot and a started server (prepared ahead by the process's pool while
        an earlier episode played, where it could be), its tools checked against the world's overlay."""
        try:
            prepared = pool.take(self.world, self.resource_parent)
            self.resource, self.server, self.listed = prepared.resource, prepared.server, prepared.listed
            self.s0 = self.state = prepared.s0
            self.start_s += prepared.start_s
            _check_tools_again(self.world, self.listed)
        except ResourceFailed as exc:  # its message names the world already
            self.close()
            raise WorldFailed(str(exc), exc.field) from None
        except ServerFailed as exc:
            self.close()
            raise WorldFailed(f"world '{self.world.id}': {exc}") from None
        except BaseException:
            self.close()
            raise
        srv = self.server
        assert srv is not None
        self.trace.append("gateway_open", server=srv.server_info, protocol=srv.protocol,
                          package=self.world.server.package, version=self.world.server.version,
                          tools=sorted(str(t.get("name")) for t in self.listed),
                          overlay={n: t.model_dump(mode="json", include={"effect", "identity"})
                                   for n, t in sorted(self.world.tools.items())})
        self.trace.append("snapshot", at="s0", hash=digest(self.s0), state=self.s0)
        for i, f in enumerate(self.schedule.faults):
            self.trace.append("fault_planned", fault=i, kind=f.kind, op=f.tool, occurrence=f.occurrence)
        return self

    def _start_server(self) -> None:
        assert self.resource is not None
        self.server, self.listed, seconds = pool.start_server(self.world, self.resource)
        self.start_s += seconds

    def close(self) -> None:
        server, self.server = self.server, None
        if self.resource is not None:  # open() sets the server and its resource together
            pool.release(server, self.resource)

    @property
    def _resource(self) -> Resource:
        if self.resource is None:
            raise WorldFailed(f"world '{self.world.id}': the gateway is not open")
        return self.resource

    @property
    def pids(self) -> list[int]:
        return [p for p in (self.server.pid if self.server else None,) if p is not None]

    # -- the call path -------------------------------------------------------------------------------------
    def invoke(self, tool: str, args: Mapping[str, Any], key: str | None = None) -> Delivery:
        self._n += 1
        inv = f"inv-{self._n}"
        n = self._counts[tool] = self._counts.get(tool, 0) + 1
        rec = dict(args)
        self.trace.append("invocation", inv=inv, tool=tool, args=rec, key=key, occurrence=n)
        self._invocations[inv] = {"tool": tool, "args": rec, "reached": False, "answer": None}
        called = canonical_json({"tool": tool, "args": rec})  # what a key is bound to: the tool and its arguments
        if key is not None and self.keys:
            known = self._keyed.get(key)
            if known is not None:
                if known[0] != called:
                    self.trace.append("key_conflict", inv=inv, key=key, first=known[1])
                    return self._deliver(inv, Delivery(inv, "delivered", None, False, error="key_conflict"))
                self.trace.append("key_replayed", inv=inv, key=key, first=known[1])
                return self._deliver(inv, Delivery(inv, "delivered", known[2], False, replayed=True))
        fault = self._fault(tool, n)
        if fault is not None and fault.kind == "interruption":
            self._fire(fault)
            return self._deliver(inv, Delivery(inv, "interrupted", None, False))
        if fault is not None and fault.kind == "false_success":
            self._fire(fault)
            told = ToolAnswer(({"type": "text", "text": SUCCESS_TEXT},), False)
            return self._deliver(inv, Delivery(inv, "delivered", told, False))
        if fault is not None and fault.kind == "server_restart":
            self._restart()
            self._fire(fault)
        if fault is not None and fault.kind == "stale_state":
            self._foreign_write()
            self._fire(fault)
        answer = self._outbound(self._forward(inv, tool, self._inbound(dict(args))))
        if key is not None and self.keys:
            self._keyed[key] = (called, inv, answer)  # on the server's side of the fault point
        if fault is not None and fault.kind == "response_loss":
            self._fire(fault)
            return self._deliver(inv, Delivery(inv, "dropped", None, True))
        if fault is not None and fault.kind == "false_failure":
            self._fire(fault)
            told = ToolAnswer(({"type": "text", "text": FAILURE_TEXT},), True)
            return self._deliver(inv, Delivery(inv, "delivered", told, True))
        return self._deliver(inv, Delivery(inv, "delivered", answer, True))

    def _forward(self, inv: str, tool: str, args: dict[str, Any]) -> ToolAnswer:
        assert self.server is not None
        self.trace.append("forwarded", inv=inv)
        self._invocations[inv]["reached"] = True
        try:
            answer = self.server.call(tool, args)
        except ServerFailed as exc:
            raise WorldFailed(f"world '{self.world.id}': {tool}: {exc}") from None
        crashpoints.hit("after_server_answer")  # a runner killed while a real server is running (the crash tests)
        shown = self._normal(answer.to_dict())
        self._invocations[inv]["answer"] = shown
        self.trace.append("server_answer", inv=inv, answer=shown)
        overlay = self.world.tools.get(tool)
        if overlay is None or overlay.is_write:  # a tool the overlay does not know may write: read the state
            self._observe("effect", inv=inv)
        return answer

    def _observe(self, kind: str, **data: Any) -> None:
        try:
            now = self._resource.probe()
        except ResourceFailed as exc:
            raise WorldFailed(str(exc), exc.field) from None
        changes = snapshot.diff(self.state, now)
        self.state = now
        self.trace.append(kind, **data, changes=changes, hash=digest(now))

    def _deliver(self, inv: str, d: Delivery) -> Delivery:
        self.trace.append("delivered", inv=inv, transport=d.transport, replayed=d.replayed, error=d.error,
                          answer=self._normal(d.answer.to_dict()) if d.answer is not None else None)
        return d

    def _fault(self, tool: str, n: int) -> GatewayFault | None:
        for i, f in enumerate(self.schedule.faults):
            if f.tool == tool and f.occurrence == n:
                self.trace.append("fault_armed", fault=i, kind=f.kind, op=f.tool, occurrence=n)
                return f
        return None

    def _fire(self, f: GatewayFault) -> None:
        i = self.schedule.faults.index(f)
        self.trace.append("fault_fired", fault=i, kind=f.kind, op=f.tool, occurrence=f.occurrence)

    def _restart(self) -> None:
        if self.server is not None:
            self.server.stop()
        try:
            self._start_server()
        except ServerFailed as exc:
            raise WorldFailed(f"world '{self.world.id}': restart: {exc}") from None
        _check_tools_again(self.world, self.listed)  # the agent's surface was built from the first start's tools
        self.trace.append("server_restart")

    def _foreign_write(self) -> None:
        try:
            self._resource.foreign_write()
        except ResourceFailed as exc:
            raise WorldFailed(str(exc), exc.field) from None
        self._observe("world_write")

    # -- what a gateway can add ------------------------------------------------------------------------------
    def status(self, inv: str) -> dict[str, Any] | None:
        """The gateway's own record of an invocation: did it reach the server, and what did the server answer."""
        rec = self._invocations.get(inv)
        self.trace.append("reconciliation", inv=inv, known=rec is not None)
        if rec is None:
            return None
        answer = rec["answer"]
        failed = bool(answer and answer.get("isError"))
        return {"invocation_id": inv, "tool": rec["tool"], "reached_server": rec["reached"],
                "committed": bool(rec["reached"] and answer is not None and not failed), "answer": answer}

    def verify(self, tool: str, args: Mapping[str, Any]) -> bool | None:
        """Whether the call's effect holds in the real state now (the probe), or None where the world's overlay
        gives the tool no identity to look for."""
        overlay = self.world.tools.get(tool)
        if overlay is None or overlay.identity is None:
            self.trace.append("verification", tool=tool, args=dict(args), holds=None)
            return None
        try:
            now = self._resource.probe()
        except ResourceFailed as exc:
            raise WorldFailed(str(exc), exc.field) from None
        result = snapshot.holds(overlay.identity, now, args, self.s0)
        self.trace.append("verification", tool=tool, args=dict(args), holds=result, hash=digest(now))
        return result

    def final_state(self) -> dict[str, Any]:
        try:
            self.state = self._resource.probe()
        except ResourceFailed as exc:
            raise WorldFailed(str(exc), exc.field) from None
        return self.state

    def _outbound(self, answer: ToolAnswer) -> ToolAnswer:
        return ToolAnswer(tuple(self._normal(list(answer.content))), answer.is_error, self._normal(answer.structured))

    def _inbound(self, value: Any) -> Any:
        """The agent's view of paths (`/workspace`) mapped to the episode's real folder, for the server."""
        return _map(value, WORKSPACE, str(self._resource.root))

    def _normal(self, value: Any) -> Any:
        """The episode's real folder written as `/workspace` again: what the agent sees and the trace records, the
        same wherever the folder was made."""
        return _map(value, str(self._resource.root), WORKSPACE)


def _map(value: Any, old: str, new: str) -> Any:
    """Every string in a JSON-shaped value, an object's keys too (a server may answer `{path: result}`), with the
    path `old` replaced by `new` where it is a whole path or a path's first part (`/workspace`, `/workspace/a`;
    never `/workspaces/a` or `/workspace2`)."""
    if isinstance(value, str):
        return _path_of(old).sub(lambda _: new, value) if old in value else value
    if isinstance(value, (list, tuple)):
        return [_map(v, old, new) for v in value]
    if isinstance(value, dict):
        return {_map(k, old, new): _map(v, old, new) for k, v in value.items()}
    return value


@functools.lru_cache(maxsize=16)
def _path_of(path: str) -> re.Pattern[str]:
    return re.compile(re.escape(path) + r"(?![\w-])")
