"""The Dask executor: a matrix's pending cells on a Dask cluster, outcomes streamed back to the runner, which stays
the single writer. The harness owns retries: each attempt is a task with an explicit key (run id and attempt
number), `pure=False`; a lost worker, a task error or evidence that fails verification is a failure record and
the cell is resubmitted up to MAX_ATTEMPTS; a re-execution by the engine itself (a scheduler whose
`allowed-failures` is above 0) is detected from the start each execution announces and recorded as a lost
attempt; a second completion of a run is dropped and counted. The spend ceiling and per-agent concurrency are
held here, on the driver: nothing is submitted beyond them."""

from __future__ import annotations

import secrets
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

from distributed import as_completed

from aft_bench.agents import endpoints
from aft_bench.common.secrets import redact
from aft_bench.experiment import cluster, landing, shipping
from aft_bench.experiment.config import Matrix
from aft_bench.experiment.executors import Outcome, adaptive_endpoints, endpoint_of
from aft_bench.experiment.spend import STOP, WAIT, Start

MAX_ATTEMPTS = 3  # per tuple and session; a tuple that used them all stays pending, as a failed local one does
STATUS_EVERY_S = 10.0
REFRESH_EVERY_S = 5.0
WINDOW_PER_THREAD = 4  # attempts queued per worker thread: enough to hide the round trip, few to lose to a death


def dask_outcomes(matrix: Matrix, pending: list[int], out: Path, address: str, limits: dict[str, int],
                  may_start: Callable[[], Start], finished: Callable[[dict[str, Any] | None], None]
                  ) -> Iterator[Outcome]:
    """Run `pending` on the cluster at `address` (see cluster.parse); `limits[agent_spec]`: most attempts of that
    agent in flight at once; `may_start()` reserves spend for one submission, `finished(row or None)` releases it."""
    with cluster.connect(cluster.parse(address)) as client:
        token = ship(client, matrix)
        driver = Driver(client, matrix, pending, out, token, limits, may_start, finished)
        yield from driver.run()


def ship(client: Any, matrix: Matrix) -> str:
    """Send the matrix's inputs to every worker once and refuse the cluster if any worker differs from the driver."""
    shipped = shipping.bundle(matrix)
    answers = client.register_plugin(shipping.ShippedInputs(shipped))
    for worker, answer in sorted((answers or {}).items()):
        if isinstance(answer, dict) and answer.get("status") == "error":
            raise cluster.ClusterError(f"dask worker {worker} could not take the inputs: {answer.get('exception')}")
    refusals = {w: v for w, v in client.run(shipping.verdict, shipped.token).items() if v is not None}
    if refusals:
        worker, why = min(refusals.items())
        more = f" (and {len(refusals) - 1} more workers)" if len(refusals) > 1 else ""
        raise cluster.ClusterError(f"dask worker {worker} refused: {why}{more}; run the same aft-bench and inputs "
                                   f"on every worker")
    return shipped.token


class Driver:
    """Submission, limits, retries and the dedupe of one session's cells on one cluster."""

    def __init__(self, client: Any, matrix: Matrix, pending: list[int], out: Path, token: str,
                 limits: dict[str, int], may_start: Callable[[], Start],
                 finished: Callable[[dict[str, Any] | None], None]) -> None:
        self.client, self.matrix, self.out, self.token = client, matrix, out, token
        self.limits, self.may_start, self.finished = limits, may_start, finished
        self.queue: deque[int] = deque(pending)
        self.attempts: Counter[int] = Counter()
        self.inflight: dict[Any, tuple[int, int]] = {}  # future -> (cell index, attempt number)
        self.running: Counter[str] = Counter()  # agent spec -> attempts in flight
        # agents that share a provider endpoint (provider and api_base) share its cap, the largest of their
        # `concurrency`, across every worker: a cluster does not multiply what one endpoint is asked to take
        self.endpoint = {spec: ep for spec in limits if (ep := endpoint_of(spec)) is not None}
        self.endpoint_cap: dict[tuple[str, str], int] = {}
        for spec, ep in self.endpoint.items():
            self.endpoint_cap[ep] = max(self.endpoint_cap.get(ep, 0), limits[spec])
        self.running_endpoint: Counter[Any] = Counter()
        # an endpoint of adaptive agents: its cap is an AIMD limit on episodes in flight across the cluster,
        # halved when an episode needed provider retries (a rate limit, timeout or server error), +1 after a window
        # of episodes that needed none (per call, each worker process's agents also limit themselves); it starts at
        # the cap, without the per-call limits' slow start (a window of whole episodes is far too slow a signal)
        self.adaptive: dict[tuple[str, str], endpoints.Aimd] = {
            ep: endpoints.limiter(*ep, self.endpoint_cap[ep], slow_start=False) for ep in adaptive_endpoints(limits)}
        self.epoch_of: dict[Any, int] = {}  # future -> the limit's epoch when it was submitted
        self.done: set[str] = set()
        self.duplicates = 0
        self.stopped = False  # the spend ceiling: no new submission
        self.nonce = secrets.token_hex(3)  # keys of a session never collide with a killed earlier session's
        self.topic = f"aft-bench-start-{self.nonce}"
        self.starts: dict[str, list[str]] = {}  # task key -> workers that started it, as announced
        self.settled: dict[str, tuple[int, int, list[str]]] = {}  # key -> (index, attempt, starts still due)
        self.late_starts: list[tuple[str, str]] = []  # (key, worker) announced after the key had settled
        self.lock = threading.Lock()
        self.per_worker: Counter[str] = Counter()
        self.window = 2
        self._refreshed = self._reported = time.monotonic()
        self._t0 = time.monotonic()

    # -- the loop ----------------------------------------------------------------------------------------------
    def run(self) -> Iterator[Outcome]:
        self.client.subscribe_topic(self.topic, self._started)
        self._refresh(force=True)
        if cluster.allowed_failures(self.client) > 0:
            print("aft-bench: this scheduler runs a lost worker's task again (distributed.scheduler.allowed-failures"
                  " > 0); each such re-execution is detected and recorded as a lost attempt; start the scheduler "
                  "with DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=0 to leave every retry to aft-bench",
                  file=sys.stderr)
        pool = as_completed(with_results=False)
        try:
            self._fill(pool)
            while self.inflight:
                future = next(pool)
                index, n = self.inflight.pop(future)
                self._freed(self.matrix.cells[index].agent_spec)
                for outcome in self.settle(future, index, n):
                    if outcome[1] == "row":
                        self._adapt(future, outcome[2])
                    yield outcome
                self.epoch_of.pop(future, None)
                yield from self._late()
                self._refresh()
                self._fill(pool)
            yield from self._late()
        finally:
            if self.inflight:  # Ctrl-C, a refused worker, or the runner stopped reading: nothing left running
                self.client.cancel(list(self.inflight), force=True)
                for _ in self.inflight:
                    self.finished(None)
                self.inflight.clear()
            with suppress(Exception):  # a scheduler already gone has nothing left to unsubscribe
                self.client.unsubscribe_topic(self.topic)
            if self.duplicates:
                print(f"aft-bench: {self.duplicates} second completion(s) of a recorded run dropped", file=sys.stderr)

    def _fill(self, pool: Any) -> None:
        """Submit queued cells while the window, each agent's limit and the spend ceiling leave room."""
        while self.queue and len(self.inflight) < self.window and not self.stopped:
            index = self._next()
            if index is None:
                return
            verdict = self.may_start()
            if verdict == WAIT:  # only the reservations of attempts in flight stand in the way: after the next one
                return
            if verdict == STOP:
                self.stopped = True
                return
            self.queue.remove(index)
            cell = self.matrix.cells[index]
            self.attempts[index] += 1
            n = self.attempts[index]
            key = f"aft-bench-{cell.run_id}-attempt-{n}-{self.nonce}"
            future = self.client.submit(shipping.play, self.token, index, cell.run_id, n, self.topic, key,
                                        key=key, pure=False, retries=0)
            self.inflight[future] = (index, n)
            self.running[cell.agent_spec] += 1
            ep = self.endpoint.get(cell.agent_spec)
            self.running_endpoint[ep] += 1
            if ep in self.adaptive:
                self.epoch_of[future] = self.adaptive[ep].epoch
            pool.add(future)

    def _next(self) -> int | None:
        """The first queued cell whose agent, and whose agent's provider endpoint, has a free slot."""
        for index in self.queue:
            spec = self.matrix.cells[index].agent_spec
            if spec in self.limits and self.running[spec] >= self.limits[spec]:
                continue
            ep = self.endpoint.get(spec)
            if ep is not None and self.running_endpoint[ep] >= self._cap(ep):
                continue
            return index
        return None

    def _cap(self, ep: tuple[str, str]) -> int:
        """Episodes of an endpoint allowed in flight: its adaptive limit, else the largest `concurrency`."""
        gate = self.adaptive.get(ep)
        return gate.limit if gate is not None else self.endpoint_cap[ep]

    def _adapt(self, future: Any, row: dict[str, Any]) -> None:
        """A finished episode of an adaptive endpoint moves its limit: down if it needed provider retries."""
        epoch = self.epoch_of.get(future)
        ep = self.endpoint.get(str(row.get("agent_spec")))
        if epoch is not None and ep in self.adaptive:
            self.adaptive[ep].observe(epoch, rate_limited=int(row.get("retries") or 0) > 0)

    def _freed(self, spec: str) -> None:
        self.running[spec] -= 1
        self.running_endpoint[self.endpoint.get(spec)] -= 1

    # -- one finished task -------------------------------------------------------------------------------------
    def settle(self, future: Any, index: int, n: int) -> Iterator[Outcome]:
        """The outcomes of one task that ended: its row (after its evidence landed), or failure records. Every
        start announced for its key beyond the one that ended it is an execution the engine ran unasked."""
        key = str(future.key)
        status = future.status
        got: shipping.Returned | None = None
        exc: BaseException | None = None
        if status == "finished":
            try:
                got = future.result()
            except Exception as err:  # noqa: BLE001 - a result that cannot come home is a lost attempt
                exc = err
        elif status == "error":
            exc = future.exception()
        last = got.worker if got is not None else getattr(getattr(exc, "last_worker", None), "address", None)
        with self.lock:
            starts = self.starts.pop(key, [])
            if last is not None and last in starts:
                starts.remove(last)
                expected = []
            else:  # its start is still on its way (or died with its worker): not an extra execution when it comes
                expected = [last] if last is not None else []
                last = last or (starts.pop() if starts else None)
            self.settled[key] = (index, n, expected)
        for worker in starts:
            yield from self._lost(index, n, "EngineReexecution", f"attempt {n} also started on {worker}, which died; "
                                  f"the scheduler ran it again", worker, retry=False)
        if got is not None:
            yield from self.accept(index, got)
            return
        self.finished(None)
        if exc is None:
            yield from self._lost(index, n, "Cancelled", f"the scheduler dropped attempt {n} ({status})", None)
        elif type(exc).__name__ == "KilledWorker":
            yield from self._lost(index, n, "KilledWorker", f"worker {last} died during attempt {n}", last)
        else:
            yield from self._lost(index, n, type(exc).__name__, f"attempt {n} on {last}: {exc}", last)

    def accept(self, index: int, got: shipping.Returned) -> Iterator[Outcome]:
        """A completed attempt: a refusal stops the run; a failure is recorded and retried; a row whose run is
        already recorded is dropped and counted; else its evidence lands in `out` and the row goes to the journal."""
        cell = self.matrix.cells[index]
        if got.kind == "refused":
            self.finished(None)
            raise cluster.ClusterError(f"dask worker {got.worker} refused run {cell.run_id}: {got.data['message']}; "
                                       f"run the same aft-bench and inputs on every worker")
        if got.kind != "row":
            self.finished(None)
            yield from self._lost(index, got.attempt, str(got.data.get("error")), str(got.data.get("message")),
                                  got.worker)
            return
        if cell.run_id in self.done:
            self.duplicates += 1
            self.finished(None)
            return
        problem = landing.land(self.out, got)
        if problem is not None:
            self.finished(None)
            yield from self._lost(index, got.attempt, "EvidenceRejected", problem, got.worker)
            return
        self.done.add(cell.run_id)
        self.per_worker[got.worker] += 1
        self.finished(got.data)
        yield index, "row", got.data
        self._status()

    def _lost(self, index: int, n: int, error: str, message: str, worker: str | None, retry: bool = True
              ) -> Iterator[Outcome]:
        """A failure record for an attempt that produced no row. A cell that is resubmitted in this session is
        recorded with `attempt_of` (run_id null, as for a dead process pool: the tuple did not stay pending); the
        last allowed attempt keeps `run_id`, and the tuple stays pending for the next session."""
        cell = self.matrix.cells[index]
        again = retry and self.attempts[index] < MAX_ATTEMPTS and not self.stopped
        record = {**cell.key(), "run_id": None if again or not retry else cell.run_id, "attempt_of": cell.run_id,
                  "attempt": n, "executor": "dask", "worker": worker, "error": error,
                  "message": redact(message)[:2000]}
        if again and index not in self.queue:
            self.queue.appendleft(index)
        yield index, "failure", record

    # -- engine re-executions, announced by each start ---------------------------------------------------------
    def _started(self, event: Any) -> None:
        """Subscription handler (the client's thread): one execution of a task key began on a worker."""
        _ts, msg = event
        with self.lock:
            key, worker = str(msg.get("key")), str(msg.get("worker"))
            if key in self.settled:
                due = self.settled[key][2]
                if worker in due:
                    due.remove(worker)
                else:
                    self.late_starts.append((key, worker))
            else:
                self.starts.setdefault(key, []).append(worker)

    def _late(self) -> Iterator[Outcome]:
        """Starts announced after their task had settled: executions that ran unseen until now."""
        with self.lock:
            late, self.late_starts = self.late_starts, []
        for key, worker in late:
            index, n, _due = self.settled[key]
            yield from self._lost(index, n, "EngineReexecution",
                                  f"attempt {n} started on {worker} after it had ended elsewhere", worker, retry=False)

    # -- capacity and progress ---------------------------------------------------------------------------------
    def _refresh(self, force: bool = False) -> None:
        """The submission window: WINDOW_PER_THREAD attempts per worker thread, re-read as workers come and go."""
        now = time.monotonic()
        if force or now - self._refreshed >= REFRESH_EVERY_S:
            self._refreshed = now
            self.window = max(2, WINDOW_PER_THREAD * sum(cluster.threads(self.client).values()))

    def _status(self) -> None:
        """Every STATUS_EVERY_S: done / running / pending and each worker's throughput, on stderr."""
        now = time.monotonic()
        if now - self._reported < STATUS_EVERY_S:
            return
        self._reported = now
        wall = max(now - self._t0, 1e-9)
        rates = ", ".join(f"{w.removeprefix('tcp://')} {n / wall:.1f}/s" for w, n in sorted(self.per_worker.items()))
        print(f"aft-bench: dask: {len(self.done)} done, {len(self.inflight)} running, {len(self.queue)} pending; "
              f"per worker: {rates}", file=sys.stderr, flush=True)
