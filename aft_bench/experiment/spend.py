"""The spend ceiling's ledger: what an experiment has consumed (cost, tokens) against its ceilings. The runner
keeps one; loop processes share their counters so that none starts a tuple once the ceiling is reached."""

from __future__ import annotations

import threading
from typing import Any


class Spend:
    """What the experiment has consumed (every recorded row, all sessions) against its ceilings; the runner
    adds each new row, executors ask `open()` before they start a tuple. Thread-safe."""

    def __init__(self, rows: list[dict[str, Any]], max_cost: float | None, max_tokens: int | None) -> None:
        self.max_cost, self.max_tokens = max_cost, max_tokens
        self.cost = 0.0
        self.tokens = 0
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
            self.cost += row.get("cost_usd") or 0.0
            self.tokens += int(row.get("prompt_tokens") or 0) + int(row.get("completion_tokens") or 0)

    def open(self) -> bool:
        with self._lock:
            return not ((self.max_cost is not None and self.cost >= self.max_cost)
                        or (self.max_tokens is not None and self.tokens >= self.max_tokens))

    def shared(self, ctx: Any) -> SharedSpend:
        """Counters loop processes add to (starting from everything recorded so far), with the same ceilings."""
        with self._lock:
            return SharedSpend(ctx.Value("d", self.cost), ctx.Value("q", self.tokens), self.max_cost, self.max_tokens)


class SharedSpend:
    """Spend counters in shared memory: each loop process adds its own rows as they finish, before it starts
    another tuple, so every loop sees the ceiling as soon as any reaches it."""

    def __init__(self, cost: Any, tokens: Any, max_cost: float | None, max_tokens: int | None) -> None:
        self.cost, self.tokens, self.max_cost, self.max_tokens = cost, tokens, max_cost, max_tokens

    def add(self, row: dict[str, Any]) -> None:
        with self.cost.get_lock():
            self.cost.value += row.get("cost_usd") or 0.0
        with self.tokens.get_lock():
            self.tokens.value += int(row.get("prompt_tokens") or 0) + int(row.get("completion_tokens") or 0)

    def open(self) -> bool:
        return not ((self.max_cost is not None and self.cost.value >= self.max_cost)
                    or (self.max_tokens is not None and self.tokens.value >= self.max_tokens))
