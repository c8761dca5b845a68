"""Executors: where a matrix's pending cells run, in this process or in worker processes. Each yields
(index, kind, data) in matrix order, kind "row" or "failure"; the runner is the single writer.

Worker processes start with `forkserver` (fresh, thread-free processes forked from a clean server), never by
forking the runner itself, which may hold threads (progress display, HTTP clients of model providers).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from aft_bench.agents import endpoints
from aft_bench.agents.registry import AgentSpec
from aft_bench.common import heap
from aft_bench.common.lifetime import die_with_parent
from aft_bench.common.scratch import hold_multiprocessing_temp
from aft_bench.common.secrets import redact
from aft_bench.experiment.build import run_cell, run_cell_async
from aft_bench.experiment.config import Cell, Matrix, load_matrix
from aft_bench.experiment.spend import STOP, WAIT, SharedSpend, Spend, Start
from aft_bench.interface import tokens

Outcome = tuple[int, str, dict[str, Any]]
CHUNK = 8


def failure(cell: Cell, exc: BaseException) -> dict[str, Any]:
    """The failure record of an attempt (redacted): the tuple stays pending."""
    return {"run_id": cell.run_id, **cell.key(), "error": type(exc).__name__, "message": redact(str(exc))[:2000]}


def attempt(matrix: Matrix, index: int, out: Path) -> tuple[str, dict[str, Any]]:
    """Run one cell; an exception is an infrastructure failure record, never a result row."""
    cell = matrix.cells[index]
    try:
        return "row", run_cell(matrix, cell, out)
    except Exception as exc:  # noqa: BLE001 - every harness/backend failure is recorded, then the tuple stays pending
        return "failure", failure(cell, exc)


WAIT_POLL_S = 0.02  # how often an episode held back by the spend reservations looks again


def concurrent(matrix: Matrix, pending: list[int], out: Path, limits: dict[str, int],
               may_start: Callable[[], Start], spent: Callable[[dict[str, Any] | None], None] | None = None
               ) -> Iterator[Outcome]:
    """Cells whose agents wait on the network, many at once on one event loop (in a helper thread), at most
    `limits[agent_spec]` in flight per agent; a cell starts only while `may_start()` (the spend ceiling, which
    reserves for it), and `spent(row)` (None for a failure) is told each outcome before its slot frees. Outcomes
    arrive as episodes finish; the runner stays the single writer."""
    outcomes: queue.Queue[Outcome | None] = queue.Queue()
    tokens.warm()  # the tokenizer and litellm load here, once, not on the loop while 32 episodes wait for them
    tokens.litellm_module()
    heap.settle()  # and stay for the process: full collections during the episodes do not walk them

    async def one(i: int, gate: asyncio.Semaphore) -> None:
        cell = matrix.cells[i]
        async with gate:
            while (verdict := may_start()) == WAIT:  # room may free when an episode in flight finishes
                await asyncio.sleep(WAIT_POLL_S)
            if verdict == STOP:
                return
            try:
                row = await run_cell_async(matrix, cell, out)
            except Exception as exc:  # noqa: BLE001 - as in `attempt`
                if spent is not None:
                    spent(None)
                outcomes.put((i, "failure", failure(cell, exc)))
                return
            if spent is not None:
                spent(row)
            outcomes.put((i, "row", row))

    async def main() -> None:
        gates = {spec: asyncio.Semaphore(n) for spec, n in limits.items()}
        await asyncio.gather(*(one(i, gates[matrix.cells[i].agent_spec]) for i in pending))

    def loop() -> None:
        try:
            asyncio.run(main())
        finally:
            outcomes.put(None)

    thread = threading.Thread(target=loop, name="episodes", daemon=True)
    thread.start()
    while (item := outcomes.get()) is not None:
        yield item
    thread.join()


def _loop_worker(config: str, worlds: str, out: str, indices: list[int], limits: dict[str, int], results: Any,
                 stop: Any, spend: SharedSpend, gates: dict[tuple[str, str], Any]) -> None:
    """One event-loop process: its share of the cells, at most `limits[spec]` in flight, none started once the
    shared spend reaches the ceiling or the runner sets `stop`, adaptive endpoints limited by the runner's shared
    counters (`gates`); every outcome goes back as soon as it exists, then a None."""
    die_with_parent()
    endpoints.use(gates)
    try:
        matrix = load_matrix(config, Path(worlds))
        for item in concurrent(matrix, indices, Path(out), limits, lambda: STOP if stop.is_set() else spend.begin(),
                               spend.end):
            results.put(item)
    finally:
        results.put(None)


def endpoint_of(spec_json: str) -> tuple[str, str] | None:
    """(provider, api_base) of an agent spec that calls a model provider, else None."""
    params = AgentSpec.parse(spec_json).params
    model = params.get("model")
    if not isinstance(model, str) or "/" not in model:
        return None
    return endpoints.endpoint(model, str(params.get("api_base") or ""))


def adaptive_endpoints(limits: dict[str, int]) -> dict[tuple[str, str], int]:
    """The endpoints of the adaptive agents among `limits` (agent spec -> `concurrency`), each with the largest
    `concurrency` of the agents that call it (the ceiling of its limit)."""
    out: dict[tuple[str, str], int] = {}
    for spec, concurrency in limits.items():
        ep = endpoint_of(spec)
        if ep is not None and AgentSpec.parse(spec).params.get("adaptive"):
            out[ep] = max(out.get(ep, 0), concurrency)
    return out


def concurrent_processes(matrix: Matrix, pending: list[int], out: Path, limits: dict[str, int], spend: Spend,
                         loops: int) -> Iterator[Outcome]:
    """`concurrent` spread over `loops` processes, each with its own event loop (one loop is CPU-bound by the
    provider client's per-call work long before the network is): cells dealt round-robin, each agent's
    `concurrency` split between the loops, outcomes streamed back as they happen; the runner stays the single
    writer; the loops share spend counters, so none starts a cell once the ceiling is reached. A loop process
    that dies leaves its unfinished cells pending."""
    ctx = context()
    results = ctx.Queue()
    stop = ctx.Event()
    shared = spend.shared(ctx)
    gates = endpoints.shared(ctx, adaptive_endpoints(limits))
    endpoints.use(gates)  # the runner's own view, for the session record of the limit over time
    share = {s: max(1, n // loops) for s, n in limits.items()}
    procs = [ctx.Process(target=_loop_worker, args=(str(matrix.path), str(matrix.worlds_dir), str(out),
                                                     pending[k::loops], share, results, stop, shared, gates),
                         daemon=True)
             for k in range(loops)]
    for proc in procs:
        proc.start()
    running = len(procs)
    try:
        while running:
            try:
                item = results.get(timeout=1.0)
            except queue.Empty:
                if not any(proc.is_alive() for proc in procs):
                    break  # every loop died without saying so: what they held stays pending
                continue
            if item is None:
                running -= 1
                continue
            yield item
            if not spend.open():
                stop.set()
    finally:
        stop.set()
        for proc in procs:
            proc.join(timeout=30)


def serial(matrix: Matrix, pending: list[int], out: Path, may_start: Callable[[], bool] = lambda: True
           ) -> Iterator[Outcome]:
    heap.settle()
    for i in pending:
        if not may_start():
            return
        kind, data = attempt(matrix, i, out)
        yield i, kind, data


_WORKER: dict[str, Any] = {}


def _init_worker(config: str, worlds: str, out: str) -> None:
    die_with_parent()  # a worker ends with the forkserver, which ends with the runner
    _WORKER.update(matrix=load_matrix(config, Path(worlds)), out=Path(out))
    heap.settle()


def _run_chunk(chunk: list[int]) -> list[Outcome]:
    return [(i, *attempt(_WORKER["matrix"], i, _WORKER["out"])) for i in chunk]  # type: ignore[misc]


def context() -> Any:
    """The start method for worker processes: forkserver where the platform has it, else spawn."""
    hold_multiprocessing_temp()
    method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(["aft_bench.experiment.preload"])
    return ctx


def start_process_server() -> None:
    """Start the forkserver now where the platform has one: its preload (the package and the tokenizer, about
    0.5 s) then overlaps the runner's own start-up (loading, checking and admitting the matrix) instead of
    following it when the first worker is asked for. Idempotent; a process that never asks for a worker only
    has an idle server, which ends with it."""
    ctx = context()
    if ctx.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


def process_pool(matrix: Matrix, pending: list[int], out: Path, workers: int) -> Iterator[list[Outcome]]:
    """Cells in `workers` processes, each loading the matrix once from its config, CHUNK cells per task; results
    in matrix order, a chunk's together (the runner records them with one fsync: a group commit)."""
    chunks = [pending[k:k + CHUNK] for k in range(0, len(pending), CHUNK)]
    with ProcessPoolExecutor(workers, mp_context=context(), initializer=_init_worker,
                             initargs=(str(matrix.path), str(matrix.worlds_dir), str(out))) as pool:
        yield from pool.map(_run_chunk, chunks)
