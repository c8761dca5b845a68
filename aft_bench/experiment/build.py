"""The builder: one cell of a matrix -> one fully resolved episode (world, task, fault schedule, store,
mechanisms, agent), every name looked up through its registry. One cell fully determines one attempt."""

from __future__ import annotations

import json
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from aft_bench.agents.llm import EPISODE
from aft_bench.agents.protocol import Agent
from aft_bench.agents.registry import AgentSpec, build_agent
from aft_bench.episode.episode import EpisodeResult, Setup, on_thread_loop, run_episode
from aft_bench.episode.external import ExternalSetup, run_external_episode
from aft_bench.episode.row import episode_row
from aft_bench.experiment.config import Cell, Matrix
from aft_bench.tasks.task import Task
from aft_bench.tasks.workloads import Workload, world_for
from aft_bench.world.external import ExternalWorld
from aft_bench.world.store import Store


def run_cell(matrix: Matrix, cell: Cell, out: Path | None) -> dict[str, Any]:
    """Run one cell and return its row. Its trace goes to `out/traces/`, a SQLite database to `out/db/`;
    with `out=None` no trace file is written and a database lives in a temporary folder removed afterwards."""
    t0 = time.perf_counter()
    EPISODE.set(cell.run_id)  # an opaque tag for a cassette's route, never shown to the model
    with ExitStack() as stack:
        setup, agent, hashes = resolve_cell(matrix, cell, out, stack)
        result = on_thread_loop(play_setup(setup, agent))
    return episode_row(cell.key(), cell.run_id, setup.mechanisms.to_dict(), result,  # type: ignore[union-attr]
                       time.perf_counter() - t0, hashes, setup.clock)


async def run_cell_async(matrix: Matrix, cell: Cell, out: Path | None) -> dict[str, Any]:
    """`run_cell` on the caller's event loop, for agents that wait on the network (many episodes at once)."""
    t0 = time.perf_counter()
    EPISODE.set(cell.run_id)  # this episode's task only: each one runs in its own copy of the context
    with ExitStack() as stack:
        setup, agent, hashes = resolve_cell(matrix, cell, out, stack)
        result = await play_setup(setup, agent)
    return episode_row(cell.key(), cell.run_id, setup.mechanisms.to_dict(), result,  # type: ignore[union-attr]
                       time.perf_counter() - t0, hashes, setup.clock)


async def play_setup(setup: Setup | ExternalSetup, agent: Agent) -> EpisodeResult:
    """Play a resolved cell: an external world's episode or a built-in one."""
    if isinstance(setup, ExternalSetup):
        return await run_external_episode(setup, agent)
    return await run_episode(setup, agent)


def network_of(matrix: Matrix, cell: Cell) -> dict[str, float] | None:
    """The network profile a cell runs under: its own on a network axis, else the experiment's one, else none."""
    if cell.network is not None:
        return json.loads(cell.network)
    exp = getattr(matrix, "experiment", None)  # a served episode's context has no experiment
    net = exp.network if exp is not None else None
    return net.model_dump() if net is not None and not isinstance(net, tuple) else None


def resolve_cell(matrix: Matrix, cell: Cell, out: Path | None,
                 stack: ExitStack) -> tuple[Setup | ExternalSetup, Agent, dict[str, str | None]]:
    """Every name of `cell` looked up: the episode's setup, a fresh agent, and the hashes its row records."""
    wl = matrix.workloads.get(cell.workload)
    task = next(t for t in wl.tasks if t.id == cell.task_id)
    if wl.external is not None:
        return _resolve_external(matrix, cell, out, wl.external, wl, task)
    variant = next(v for v in wl.variants if v.id == cell.fault)
    schedule = wl.schedule(variant, task)
    world = world_for(wl, task, cell.catalog_size, cell.fault_seed)
    mech = matrix.conditions.resolve(cell.condition)
    agent = build_agent(AgentSpec.parse(cell.agent_spec), task.script, (cell.world, cell.network))
    store: Store | None = None
    if cell.backend == "sqlite":
        from aft_bench.world.sqlite_store import SqliteStore

        db_dir = out / "db" if out is not None else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        store = SqliteStore(db_dir / f"{cell.run_id}.sqlite", world)
        stack.callback(store.close)
    setup = Setup(world, task, schedule, cell.fault_seed, mech, store=store,
                  trace_path=out / "traces" / f"{cell.run_id}.jsonl" if out is not None else None,
                  header={**cell.key(), "run_id": cell.run_id, "mechanisms": mech.to_dict()},
                  clock=network_of(matrix, cell), rep=cell.rep)
    return setup, agent, {"world_hash": world.hash, "task_hash": task.hash, "schedule_hash": schedule.hash,
                          "server": None}


def _resolve_external(matrix: Matrix, cell: Cell, out: Path | None, world: ExternalWorld, wl: Workload,
                      task: Task) -> tuple[ExternalSetup, Agent, dict[str, str | None]]:
    """A cell on an external world: the gateway's schedule, the condition, a fresh agent; the server's package
    and version go into the trace's header and the row's world hash."""
    variant = next(v for v in wl.variants if v.id == cell.fault)
    schedule = wl.gateway_schedule(variant, task)  # type: ignore[arg-type]
    mech = matrix.conditions.resolve(cell.condition)
    agent = build_agent(AgentSpec.parse(cell.agent_spec), task.script, (cell.world, cell.network))
    scratch = None
    if out is not None:  # the run directory's scratch folder: a killed session's leftovers go with the next one
        scratch = out / ".scratch"
        scratch.mkdir(exist_ok=True)
    setup = ExternalSetup(world, task, mech, schedule, cell.fault_seed,
                          trace_path=out / "traces" / f"{cell.run_id}.jsonl" if out is not None else None,
                          header={**cell.key(), "run_id": cell.run_id, "mechanisms": mech.to_dict()}, rep=cell.rep,
                          resource_parent=scratch)
    return setup, agent, {"world_hash": world.hash, "task_hash": task.hash, "schedule_hash": schedule.hash,
                          "server": f"{world.server.package} {world.server.version}"}
