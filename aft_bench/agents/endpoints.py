"""Adaptive concurrency per provider endpoint (AIMD): the in-flight model calls of every agent that shares an
endpoint (same provider and `api_base`), halved on a rate-limit answer and raised by one after a window of
successes, never below 1 nor above the agents' `concurrency`. Like TCP, it begins with a slow start: from one call,
doubled after each window of successes until the first rate limit (a run that began at the ceiling against a
provider taking 3 calls drew most of its 429s converging from 32 to 3: 29, then 13, 5 and 1). Loop-agnostic (a lock and a short poll), so agents
on different event loops of one process share it; the loop processes of `run --loops N` share it too, through
counters in shared memory that the runner makes before it starts them (`shared` / `use`)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Protocol

POLL_S = 0.005  # how often a call held back by the limit looks again
HISTORY = 256  # changes of the limit kept per endpoint (each one a halving or a +1); later ones are counted only
# the counters of one endpoint, in this order, then HISTORY (seconds, limit) pairs from index HIST; GROWING is 1
# while the slow start lasts (a window of successes doubles the limit), 0 from the first rate limit on
CEILING, LIMIT, INFLIGHT, STREAK, EPOCH, CHANGES, T0, GROWING, HIST = range(9)
SLOTS = HIST + 2 * HISTORY


class _Cells(Protocol):
    def __getitem__(self, i: int) -> float: ...
    def __setitem__(self, i: int, v: float) -> None: ...


class Aimd:
    """One endpoint's limit. A decrease counts once per congestion event: only a call that started under the
    current limit's epoch can halve it, so a burst of 429s answered together halves it once, not to 1. Its
    counters live in `cells` under `lock`: a list in this process, or shared memory across loop processes."""

    def __init__(self, ceiling: int, cells: _Cells | None = None, lock: Any = None, slow_start: bool = True) -> None:
        """A fresh limit starts at one call and grows by doubling (`slow_start`), or at the ceiling without it."""
        if cells is None:
            start = 1 if slow_start else ceiling
            cells = [0.0] * SLOTS
            cells[CEILING], cells[LIMIT], cells[T0], cells[CHANGES] = ceiling, start, time.monotonic(), 1
            cells[GROWING] = float(slow_start)  # until the first rate limit (a ceiling raised later grows too)
            cells[HIST + 1] = start  # history[0] = (0.0, start)
        self._c, self._lock = cells, lock if lock is not None else threading.Lock()

    @property
    def ceiling(self) -> int:
        return int(self._c[CEILING])

    @ceiling.setter
    def ceiling(self, value: int) -> None:
        with self._lock:
            self._c[CEILING] = value

    @property
    def limit(self) -> int:
        return int(self._c[LIMIT])

    @property
    def inflight(self) -> int:
        return int(self._c[INFLIGHT])

    @property
    def epoch(self) -> int:
        return int(self._c[EPOCH])

    @property
    def history(self) -> list[tuple[float, int]]:
        """(seconds since start, limit) at each change, the first HISTORY of them."""
        with self._lock:
            n = min(int(self._c[CHANGES]), HISTORY)
            return [(self._c[HIST + 2 * i], int(self._c[HIST + 2 * i + 1])) for i in range(n)]

    async def acquire(self) -> int:
        """Wait for a slot; returns the epoch the call starts in (give it back to `release`)."""
        c = self._c
        while True:
            with self._lock:
                if c[INFLIGHT] < c[LIMIT]:
                    c[INFLIGHT] += 1
                    return int(c[EPOCH])
            await asyncio.sleep(POLL_S)

    def release(self, epoch: int, rate_limited: bool) -> None:
        with self._lock:
            self._c[INFLIGHT] -= 1
            self._observe(epoch, rate_limited)

    def observe(self, epoch: int, rate_limited: bool) -> None:
        """An outcome counted by someone who holds slots themselves (the Dask driver, per episode in flight)."""
        with self._lock:
            self._observe(epoch, rate_limited)

    def _observe(self, epoch: int, rate_limited: bool) -> None:
        """Halve on a rate limit (once per epoch, never below 1), which also ends the slow start; after a window of
        `limit` successes, double during the slow start (up to the ceiling), else +1."""
        c = self._c
        if rate_limited:
            c[STREAK] = 0
            c[GROWING] = 0
            if epoch == c[EPOCH] and c[LIMIT] > 1:
                self._set(max(1, int(c[LIMIT]) // 2))
        else:
            c[STREAK] += 1
            if c[STREAK] >= c[LIMIT] and c[LIMIT] < c[CEILING]:
                c[STREAK] = 0
                limit = int(c[LIMIT])
                self._set(min(int(c[CEILING]), 2 * limit) if c[GROWING] else limit + 1)

    def _set(self, limit: int) -> None:
        c = self._c
        c[LIMIT] = limit
        c[EPOCH] += 1
        n = int(c[CHANGES])
        if n < HISTORY:
            c[HIST + 2 * n], c[HIST + 2 * n + 1] = round(time.monotonic() - c[T0], 3), limit
        c[CHANGES] = n + 1


_LIMITERS: dict[tuple[str, str], Aimd] = {}
_LOCK = threading.Lock()


def limiter(provider: str, api_base: str | None, ceiling: int, slow_start: bool = True) -> Aimd:
    """The shared limiter of an endpoint (created on first use; a larger ceiling seen later raises it)."""
    key = (provider, api_base or "")
    with _LOCK:
        found = _LIMITERS.get(key)
        if found is None:
            found = _LIMITERS[key] = Aimd(ceiling, slow_start=slow_start)
        elif ceiling > found.ceiling:
            found.ceiling = ceiling
        return found


def endpoint(model: str, api_base: str | None) -> tuple[str, str]:
    """The endpoint key of an agent: its model's provider prefix and its `api_base`."""
    return model.split("/", 1)[0], api_base or ""


def shared(ctx: Any, ceilings: dict[tuple[str, str], int]) -> dict[tuple[str, str], Any]:
    """Counters in shared memory for each endpoint (a `ctx.Array` with its lock), to hand to loop processes."""
    out = {}
    for key, ceiling in ceilings.items():
        arr = ctx.Array("d", Aimd(ceiling)._c)  # a fresh limiter's counters, now in shared memory
        out[key] = arr
    return out


def use(arrays: dict[tuple[str, str], Any]) -> None:
    """This process's limiters of those endpoints are the shared ones (the runner's and every loop process's)."""
    with _LOCK:
        for key, arr in arrays.items():
            _LIMITERS[key] = Aimd(int(arr[CEILING]), arr.get_obj(), arr.get_lock())  # raw cells, under its lock


def snapshot() -> dict[str, Any]:
    """Every endpoint's limit over time, for sessions.jsonl: {"provider api_base": [[seconds, limit], ...]}."""
    with _LOCK:
        return {f"{p} {b}".strip(): [list(h) for h in a.history] for (p, b), a in sorted(_LIMITERS.items())}


def forget() -> None:
    """Drop every limiter (a new run starts from its ceilings)."""
    with _LOCK:
        _LIMITERS.clear()
