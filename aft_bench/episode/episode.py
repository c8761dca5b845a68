"""Run one cell with a scripted call sequence: reset the world, drive the pipeline, seal the trace, label it.

Scripted runs need no controller; they are how detectors are calibrated and how the do-nothing and oracle
baselines are produced. Controllers (a later layer) drive the same pipeline through an interface.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from aft_bench import crashpoints
from aft_bench.backend import Backend, Guards
from aft_bench.errors import HarnessError
from aft_bench.faults import NO_FAULTS, FaultSchedule, Injector, realize
from aft_bench.labels import Labels, compute_labels
from aft_bench.pipeline import Delivery, Pipeline, Request
from aft_bench.tasks import Step, Task
from aft_bench.trace import Event, Trace
from aft_bench.world import World


@dataclass(frozen=True)
class RunResult:
    labels: Labels
    events: tuple[Event, ...]
    terminal_state: dict[str, Any]
    trace_head: str


def start_run(world: World, task: Task, schedule: FaultSchedule, seed: int, trace: Trace,
              *, durable_state: bool = False, store: Any = None) -> Pipeline:
    """Reset the world to the task's s0 (in `store`, default in memory) and open the trace with provenance."""
    backend = Backend(world, task.state, store)
    trace.append("run_start", world=world.id, world_hash=world.hash, task=task.id, task_hash=task.hash,
                 schedule=schedule.id, schedule_hash=schedule.hash, seed=seed, s0_hash=backend.s0_hash)
    return Pipeline(backend, trace, Injector(realize(schedule, seed)), durable_state=durable_state)


def finish_run(pipeline: Pipeline, task: Task, action: str, claim: str | None) -> RunResult:
    """Record the terminal decision and state, seal the trace, compute labels."""
    trace = pipeline.trace
    trace.append("terminal", action=action, claim=claim)
    state, state_hash = pipeline.backend.snapshot_and_hash()
    trace.append("terminal_state", hash=state_hash)
    crashpoints.hit("before_seal")
    head = trace.seal().hash
    events = trace.events()
    labels = compute_labels(events, state, task)
    _cross_check(pipeline.backend, labels)
    return RunResult(labels, events, state, head)


def _cross_check(backend: Backend, labels: Labels) -> None:
    """Where the store can count effects itself (SQL), its counts must equal the trace-derived labels."""
    counts = getattr(backend.store, "sql_counts", None)
    if counts is None:
        return
    db = counts()
    trace = {"commits": labels.commits, "duplicate_effects": labels.duplicate_effects,
             "unauthorized_effects": labels.unauthorized_effects}
    if db != trace:
        raise HarnessError(f"database {backend.store.path} and trace disagree: database {db}, trace {trace}")


def drive(pipeline: Pipeline, steps: Sequence[Step], budget: int) -> tuple[str, str | None]:
    """Execute scripted steps; returns the terminal (action, claim). Each non-end step costs one tool call."""
    last_req: Request | None = None
    last_inv: str | None = None
    used = 0
    for n, step in enumerate(steps, start=1):
        if step.end is not None:
            return step.end, step.claim
        if used >= budget:
            return "budget_exhausted", None
        used += 1
        pipeline.trace.append("tool_call", tool=_step_tool(step), args=dict(step.args))
        delivery: Delivery | None = None
        if step.call is not None:
            guards = Guards(step.key, step.expect_version, step.authority)
            last_req = Request(step.call, dict(step.args), step.principal, step.intent, f"req-s{n:03d}", guards)
            delivery = pipeline.invoke(last_req)
        elif step.retransmit:
            if last_req is None:
                raise ValueError("retransmit before any call")
            delivery = pipeline.invoke(last_req)
        elif step.resume is not None:
            delivery = pipeline.resume(_inv(step.resume, last_inv))
        elif step.status is not None:
            delivery = pipeline.status(_inv(step.status, last_inv))
        elif step.verify is not None:
            delivery = pipeline.verify(step.verify, dict(step.args))
        if delivery is not None and delivery.invocation is not None and (step.call is not None or step.retransmit):
            last_inv = delivery.invocation
    return "none", None


def _step_tool(step: Step) -> str:
    if step.call is not None:
        return step.call
    if step.retransmit:
        return "<retransmit>"
    return "resume" if step.resume else "status" if step.status else "verify"


def _inv(ref: str, last: str | None) -> str:
    """Resolve "last" to the most recent invocation id; with none yet, an id the runtime cannot know."""
    return (last or "inv-none") if ref == "last" else ref


def run_scripted(world: World, task: Task, steps: Sequence[Step], schedule: FaultSchedule = NO_FAULTS,
                 seed: int = 0, trace_path: str | Path | None = None, *, durable_state: bool = False) -> RunResult:
    """One complete scripted run; the capability surface is the world's full operation list (eager)."""
    trace = Trace(trace_path)
    pipeline = start_run(world, task, schedule, seed, trace, durable_state=durable_state)
    trace.append("surface", tools=sorted(world.operations), full=True)
    action, claim = drive(pipeline, steps, task.budget)
    return finish_run(pipeline, task, action, claim)
