"""Adaptive concurrency per provider endpoint (AIMD): the in-flight model calls of every agent that shares an
endpoint (same provider and `api_base`) in this process, halved on a rate-limit answer and raised by one after a
window of successes, never below 1 nor above the agents' `concurrency`. Loop-agnostic (a lock and a short poll),
so agents on different event loops of one process share it; separate processes each keep their own."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

POLL_S = 0.005  # how often a call held back by the limit looks again


@dataclass
class Aimd:
    """One endpoint's limit. A decrease counts once per congestion event: only a call that started under the
    current limit's epoch can halve it, so a burst of 429s answered together halves it once, not to 1."""

    ceiling: int
    limit: int = 0
    inflight: int = 0
    streak: int = 0
    epoch: int = 0
    history: list[tuple[float, int]] = field(default_factory=list)  # (seconds since start, limit) at each change
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _t0: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.limit = self.limit or self.ceiling
        self.history.append((0.0, self.limit))

    async def acquire(self) -> int:
        """Wait for a slot; returns the epoch the call starts in (give it back to `release`)."""
        while True:
            with self._lock:
                if self.inflight < self.limit:
                    self.inflight += 1
                    return self.epoch
            await asyncio.sleep(POLL_S)

    def release(self, epoch: int, rate_limited: bool) -> None:
        with self._lock:
            self.inflight -= 1
            if rate_limited:
                self.streak = 0
                if epoch == self.epoch and self.limit > 1:
                    self._set(max(1, self.limit // 2))
            else:
                self.streak += 1
                if self.streak >= self.limit and self.limit < self.ceiling:
                    self.streak = 0
                    self._set(self.limit + 1)

    def _set(self, limit: int) -> None:
        self.limit = limit
        self.epoch += 1
        self.history.append((round(time.monotonic() - self._t0, 3), limit))


_LIMITERS: dict[tuple[str, str], Aimd] = {}
_LOCK = threading.Lock()


def limiter(provider: str, api_base: str | None, ceiling: int) -> Aimd:
    """The shared limiter of an endpoint (created on first use; a larger ceiling seen later raises it)."""
    key = (provider, api_base or "")
    with _LOCK:
        found = _LIMITERS.get(key)
        if found is None:
            found = _LIMITERS[key] = Aimd(ceiling)
        elif ceiling > found.ceiling:
            found.ceiling = ceiling
        return found


def snapshot() -> dict[str, Any]:
    """Every endpoint's limit over time, for sessions.jsonl: {"provider api_base": [[seconds, limit], ...]}."""
    with _LOCK:
        return {f"{p} {b}".strip(): [list(h) for h in a.history] for (p, b), a in sorted(_LIMITERS.items())}


def forget() -> None:
    """Drop every limiter (a new run starts from its ceilings)."""
    with _LOCK:
        _LIMITERS.clear()
