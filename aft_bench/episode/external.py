"""One episode on an external world: a fresh resource and server behind the gateway, the one loop, the terminal
state read by the probe, the trace sealed and judged from the real state. The same `EpisodeResult` as a built-in
world's episode, so rows, analysis and the audit need nothing else."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from aft_bench.agents.protocol import Agent
from aft_bench.common import crashpoints
from aft_bench.common.canonical import digest
from aft_bench.episode.episode import EpisodeResult
from aft_bench.episode.loop import play
from aft_bench.interface.gateway_surface import GatewayInterface
from aft_bench.interface.mechanisms import Mechanisms
from aft_bench.judge.external import external_labels
from aft_bench.runtime.gateway import NO_GATEWAY_FAULTS, Gateway, GatewaySchedule
from aft_bench.runtime.trace import Trace
from aft_bench.tasks.task import Task
from aft_bench.world.external import ExternalWorld


@dataclass(frozen=True)
class ExternalSetup:
    """Everything one attempt on an external world needs."""

    world: ExternalWorld
    task: Task
    mechanisms: Mechanisms
    schedule: GatewaySchedule = NO_GATEWAY_FAULTS
    seed: int = 0
    trace_path: Path | None = None
    header: Mapping[str, Any] | None = None
    rep: int = 0
    resource_parent: Path | None = None  # where the episode's folder is made (default: the system's temp)
    clock: Mapping[str, float] | None = None  # no network profile on external worlds (their time is real)


async def run_external_episode(setup: ExternalSetup, agent: Agent) -> EpisodeResult:
    """Play one episode on a real server and judge it from the probed state. Raises `WorldFailed` when the
    server, fixture or probe fails (the caller leaves the tuple pending); the server and folder never outlive it."""
    trace = Trace(setup.trace_path)
    task = setup.task
    schedule = setup.schedule.bound(task.target_ops[0])
    srv = setup.world.server
    trace.append("run_start", world=setup.world.id, world_hash=setup.world.hash, task=task.id, task_hash=task.hash,
                 schedule=schedule.id, schedule_hash=schedule.hash, seed=setup.seed, package=srv.package,
                 version=srv.version)
    gateway = Gateway(setup.world, trace, schedule, keys=setup.mechanisms.keys,
                      resource_parent=setup.resource_parent)
    try:
        gateway.open()
        if setup.header is not None:
            trace.append("cell", **setup.header)
        surface = GatewayInterface(gateway, setup.mechanisms)
        played = await play(agent, surface, task.brief, task.budget)
        trace.append("terminal", action=played.terminal.action, claim=played.terminal.claim)
        state = gateway.final_state()
    finally:
        gateway.close()
    trace.append("terminal_state", hash=digest(state), state=state)
    crashpoints.hit("before_seal")
    head = trace.seal().hash
    events = trace.events()
    return EpisodeResult(external_labels(events, task.criteria), played, events, state, head)
