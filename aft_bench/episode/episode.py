"""One episode from fully resolved inputs: reset the world, open the trace, play the agent over the surface,
record the terminal decision and state, seal the trace, label it. Nothing here is looked up by name; the
experiment's builder resolves names, and calibration builds its setups directly."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Coroutine, Mapping, Sequence

from aft_bench.agents.protocol import Agent
from aft_bench.agents.scripted import ScriptedAgent
from aft_bench.common import crashpoints
from aft_bench.common.canonical import canonical_pair
from aft_bench.common.errors import HarnessError
from aft_bench.episode.clock import VirtualClock
from aft_bench.episode.loop import Played, play
from aft_bench.interface.interface import Interface
from aft_bench.interface.mechanisms import Mechanisms
from aft_bench.interface.raw import RawSurface
from aft_bench.interface.tools import Surface
from aft_bench.judge.labels import Labels, compute_labels
from aft_bench.runtime.faults import NO_FAULTS, FaultSchedule, Injector, realize
from aft_bench.runtime.pipeline import Pipeline
from aft_bench.runtime.trace import Event, Trace
from aft_bench.tasks.task import Criteria, Step, Task
from aft_bench.world.backend import Backend
from aft_bench.world.manifest import World
from aft_bench.world.store import Store


@dataclass(frozen=True)
class Setup:
    """Everything one attempt needs. `mechanisms=None` puts the agent on the raw pipeline surface (calibration)."""

    world: World
    task: Task
    schedule: FaultSchedule = NO_FAULTS
    seed: int = 0
    mechanisms: Mechanisms | None = None
    durable_state: bool = False  # raw surface only; an interface takes it from its mechanisms
    store: Store | None = None  # default: a fresh in-memory store
    trace_path: Path | None = None
    header: Mapping[str, Any] | None = None  # recorded as the trace's `cell` event
    clock: Mapping[str, float] | None = None  # a network profile: observations carry ToolPro's virtual clock
    rep: int = 0  # the repetition: with the seed and the task, what seeds the clock's jitter


@dataclass(frozen=True)
class EpisodeResult:
    labels: Labels
    played: Played
    events: tuple[Event, ...]
    terminal_state: dict[str, Any]
    trace_head: str


def open_pipeline(world: World, task: Task, schedule: FaultSchedule, seed: int, trace: Trace, *,
                  durable_state: bool = False, store: Store | None = None) -> Pipeline:
    """Reset the world to the task's s0 (in `store`, default in memory) and open the trace with provenance."""
    backend = Backend(world, task.state, store)
    trace.append("run_start", world=world.id, world_hash=world.hash, task=task.id, task_hash=task.hash,
                 schedule=schedule.id, schedule_hash=schedule.hash, seed=seed, s0_hash=backend.s0_hash)
    return Pipeline(backend, trace, Injector(realize(schedule, seed)), durable_state=durable_state)


async def run_episode(setup: Setup, agent: Agent) -> EpisodeResult:
    """Play one episode and judge it."""
    trace = Trace(setup.trace_path)
    mech = setup.mechanisms
    durable = mech.durable if mech is not None else setup.durable_state
    pipeline = open_pipeline(setup.world, setup.task, setup.schedule, setup.seed, trace, durable_state=durable,
                             store=setup.store)
    if setup.header is not None:
        trace.append("cell", **setup.header)
    surface: Surface = Interface(pipeline, mech) if mech is not None else RawSurface(pipeline)
    # each repetition its own draws (the first keeps the seed-and-task draws it always had)
    seed = f"{setup.seed}:{setup.task.id}" + (f":{setup.rep}" if setup.rep else "")
    clock = VirtualClock(setup.clock, seed) if setup.clock is not None else None
    played = await play(agent, surface, setup.task.brief, setup.task.budget, clock)
    return _finish(pipeline, setup.task.criteria, played)


def _finish(pipeline: Pipeline, criteria: Criteria, played: Played) -> EpisodeResult:
    """Record the terminal decision and state, seal the trace, compute labels, cross-check the store."""
    trace = pipeline.trace
    trace.append("terminal", action=played.terminal.action, claim=played.terminal.claim)
    state, state_text, state_hash = pipeline.backend.snapshot_and_hash()
    # recorded so the audit can re-judge the run; the canonical text is reused, not serialized again
    trace.append_canonical("terminal_state", f'{{"hash":"{state_hash}","state":{state_text}}}',
                           {"hash": state_hash, "state": canonical_pair(state)[1]})
    crashpoints.hit("before_seal")
    head = trace.seal().hash
    events = trace.events()
    labels = compute_labels(events, state, criteria)
    _cross_check(pipeline.backend, labels)
    return EpisodeResult(labels, played, events, state, head)


def _cross_check(backend: Backend, labels: Labels) -> None:
    """Where the store counts effects itself (SQL), its counts must equal the trace-derived labels."""
    counts = backend.store.self_counts()
    if counts is None:
        return
    trace = {"commits": labels.commits, "duplicate_effects": labels.duplicate_effects,
             "unauthorized_effects": labels.unauthorized_effects}
    if counts != trace:
        raise HarnessError(f"store {backend.store!r} and trace disagree: store {counts}, trace {trace}")


_LOOPS = threading.local()


def run_sync(setup: Setup, agent: Agent) -> EpisodeResult:
    """`run_episode` from synchronous code, on this thread's one event loop (made once, reused; no signal
    handlers are installed per episode, which `asyncio.run` would do at a cost of ~0.5 ms each)."""
    return on_thread_loop(run_episode(setup, agent))


def on_thread_loop(coro: Coroutine[Any, Any, EpisodeResult]) -> EpisodeResult:
    """Run an episode coroutine to its end on this thread's one event loop."""
    loop = getattr(_LOOPS, "loop", None)
    if loop is None or loop.is_closed():
        loop = _LOOPS.loop = asyncio.new_event_loop()
    return loop.run_until_complete(coro)


def run_scripted(world: World, task: Task, steps: Sequence[Step], schedule: FaultSchedule = NO_FAULTS,
                 seed: int = 0, trace_path: str | Path | None = None, *, durable_state: bool = False,
                 store: Store | None = None) -> EpisodeResult:
    """One scripted episode over the raw pipeline surface (calibration cases, baselines, tests)."""
    setup = Setup(world, task, schedule, seed, None, durable_state, store,
                  Path(trace_path) if trace_path is not None else None)
    return run_sync(setup, ScriptedAgent(steps))
