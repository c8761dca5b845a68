"""The spend ceiling's ledger: what an experiment has consumed (cost, tokens) against its ceilings. The runner
keeps one; loop processes share their counters so that none starts a tuple once the ceiling is reached.

With many episodes in flight the ledger also reserves, for each one, the most any finished tuple has cost so far:
a tuple starts only while committed spend plus those reservations plus its own stays under the ceiling, so
concurrency does not multiply the overshoot. Until one tuple has finished there is nothing to reserve by, so under
a ceiling the first tuple runs alone (a slow start). The reservation is an estimate (no provider bounds a
tuple's spend), so the overshoot that remains is reported, never hidden."""

from __future__ import annotations

import threading
from typing import Any, Literal

Start = Literal["start", "wait", "stop"]
START, WAIT, STOP = "start", "wait", "stop"


def _cost(row: dict[str, Any]) -> float:
    return float(row.get("cost_usd") or 0.0)


def _tokens(row: dict[str, Any]) -> int:
    return int(row.get("prompt_tokens") or 0) + int(row.get("completion_tokens") or 0)


class Ledger:
    """Committed spend, the largest tuple seen (the per-tuple reservation) and the tuples in flight, with the
    rule for starting one; the plain counters of Spend and the shared ones of SharedSpend both obey it."""

    max_cost: float | None
    max_tokens: int | None

    def _admits(self, cost: float, tokens: int, peak_cost: float, peak_tokens: int, inflight: int, seen: int
                ) -> bool:
        """May one more tuple start, with `inflight` running and each reserving the peak of `seen` finished?"""
        if (self.max_cost is not None or self.max_tokens is not None) and not seen and inflight:
            return False  # slow start: the first tuple alone, until there is a peak to reserve
        n = inflight + 1
        return not ((self.max_cost is not None and (cost >= self.max_cost or
                                                    (peak_cost > 0 and cost + n * peak_cost > self.max_cost)))
                    or (self.max_tokens is not None and (tokens >= self.max_tokens or
                                                         (peak_tokens > 0 and tokens + n * peak_tokens >
                                                          self.max_tokens))))

    def _decide(self, cost: float, tokens: int, peak_cost: float, peak_tokens: int, inflight: int, seen: int
                ) -> Start:
        """START the tuple; WAIT for those in flight to finish (their reservations may free room); or STOP."""
        if self._admits(cost, tokens, peak_cost, peak_tokens, inflight, seen):
            return START
        return WAIT if inflight and self._admits(cost, tokens, peak_cost, peak_tokens, 0, seen) else STOP

    def overshoot(self) -> float | None:
        """Committed cost past the cost ceiling (None when there is no ceiling or it held)."""
        cost = self.committed()[0]
        return cost - self.max_cost if self.max_cost is not None and cost > self.max_cost else None

    def committed(self) -> tuple[float, int]:
        raise NotImplementedError


class Spend(Ledger):
    """What the experiment has consumed (every recorded row, all sessions) against its ceilings; the runner
    adds each new row, executors ask `open()` (or `begin()`, which reserves) before they start a tuple and
    `end(row)` when it finishes. Thread-safe."""

    def __init__(self, rows: list[dict[str, Any]], max_cost: float | None, max_tokens: int | None) -> None:
        self.max_cost, self.max_tokens = max_cost, max_tokens
        self.cost = 0.0
        self.tokens = 0
        self.peak_cost, self.peak_tokens = 0.0, 0
        self.inflight = 0
        self.seen = 0
        self._lock = threading.Lock()
        self._counted: set[Any] = set()
        for r in rows:
            self.add(r)

    def add(self, row: dict[str, Any]) -> None:
        """Count a row's spend once (an executor counts it before its slot frees, the runner again on receipt)."""
        with self._lock:
            if row.get("run_id") is not None:
                if row["run_id"] in self._counted:
                    return
                self._counted.add(row["run_id"])
            self.seen += 1
            self.cost += _cost(row)
            self.tokens += _tokens(row)
            self.peak_cost = max(self.peak_cost, _cost(row))
            self.peak_tokens = max(self.peak_tokens, _tokens(row))

    def committed(self) -> tuple[float, int]:
        with self._lock:
            return self.cost, self.tokens

    def open(self) -> bool:
        """Is there room for one more tuple, none being in flight (the serial executor, the runner's check)?"""
        with self._lock:
            return self._admits(self.cost, self.tokens, self.peak_cost, self.peak_tokens, 0, self.seen)

    def begin(self) -> Start:
        """Reserve a slot for one tuple (START) if the ceiling leaves room for it and for every tuple in flight;
        WAIT while only the reservations stand in the way; STOP once committed spend alone closes the ceiling."""
        with self._lock:
            verdict = self._decide(self.cost, self.tokens, self.peak_cost, self.peak_tokens, self.inflight, self.seen)
            self.inflight += verdict == START
            return verdict

    def end(self, row: dict[str, Any] | None) -> None:
        """A reserved tuple finished: its row (None: it failed) is counted and its reservation released."""
        with self._lock:
            self.inflight = max(0, self.inflight - 1)
        if row is not None:
            self.add(row)

    def shared(self, ctx: Any) -> SharedSpend:
        """Counters loop processes add to (starting from everything recorded so far), with the same ceilings."""
        with self._lock:
            return SharedSpend(ctx, (self.cost, self.tokens, self.peak_cost, self.peak_tokens, self.seen),
                               self.max_cost, self.max_tokens)


AMOUNT, COUNT = "d", "q"  # a double (dollars), a signed 64-bit integer (tokens, rows, tuples in flight)


def _counter(ctx: Any, typecode: str, value: float) -> Any:
    """One counter in shared memory without a lock of its own: every access holds the ledger's one lock."""
    return ctx.Value(typecode, value, lock=False)


class SharedSpend(Ledger):
    """Spend counters in shared memory under one lock: each loop process reserves before it starts a tuple and
    counts its rows as they finish, so every loop sees the ceiling (and the others' reservations) at once."""

    def __init__(self, ctx: Any, start: tuple[float, int, float, int, int], max_cost: float | None,
                 max_tokens: int | None) -> None:
        """`start`: (cost, tokens, peak cost, peak tokens, rows seen) of everything recorded so far."""
        cost, tokens, peak_cost, peak_tokens, seen = start
        self._lock = ctx.Lock()
        self._cost, self._peak_cost = _counter(ctx, AMOUNT, cost), _counter(ctx, AMOUNT, peak_cost)
        self._tokens, self._peak_tokens = _counter(ctx, COUNT, tokens), _counter(ctx, COUNT, peak_tokens)
        self._inflight, self._seen = _counter(ctx, COUNT, 0), _counter(ctx, COUNT, seen)
        self.max_cost, self.max_tokens = max_cost, max_tokens

    def committed(self) -> tuple[float, int]:
        with self._lock:
            return self._cost.value, self._tokens.value

    def _now(self, inflight: int) -> bool:
        return self._admits(self._cost.value, self._tokens.value, self._peak_cost.value, self._peak_tokens.value,
                            inflight, self._seen.value)

    def open(self) -> bool:
        with self._lock:
            return self._now(0)

    def begin(self) -> Start:
        with self._lock:
            verdict = self._decide(self._cost.value, self._tokens.value, self._peak_cost.value,
                                   self._peak_tokens.value, self._inflight.value, self._seen.value)
            self._inflight.value += verdict == START
            return verdict

    def end(self, row: dict[str, Any] | None) -> None:
        with self._lock:
            self._inflight.value = max(0, self._inflight.value - 1)
            if row is not None:
                self._count(row)

    def add(self, row: dict[str, Any]) -> None:
        """Count a row that held no reservation."""
        with self._lock:
            self._count(row)

    def _count(self, row: dict[str, Any]) -> None:
        """Add a row to the counters (the caller holds the lock)."""
        self._seen.value += 1
        self._cost.value += _cost(row)
        self._tokens.value += _tokens(row)
        self._peak_cost.value = max(self._peak_cost.value, _cost(row))
        self._peak_tokens.value = max(self._peak_tokens.value, _tokens(row))
