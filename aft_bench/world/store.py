"""Where a backend keeps its state: the `Store` protocol every store implements, and the in-memory store.

A store holds the world's records, permissions, counters, the effect ledger and a durable key -> text
table (durable invocation state survives process-local state loss only if it is kept here). The SQLite
store (`sqlite_store.py`) implements the same protocol behind a real transaction boundary.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager
from typing import Any, Iterator, Protocol

from aft_bench.common.canonical import canonical_json
from aft_bench.common.jsoncopy import deep_copy
from aft_bench.world.manifest import VERSION


class Store(Protocol):
    """The state a backend reads and writes; every method is the backend's only way in."""

    def load(self, s0: dict[str, Any]) -> None:
        """Replace everything (records, ledger, durable table) with the initial state s0."""

    def reopen(self) -> None:
        """Drop every in-process handle and open the store again (process-local state loss)."""

    def close(self) -> None:
        """Release the store's resources at the end of a run."""

    def transaction(self) -> AbstractContextManager[None]:
        """One atomic unit of writes."""

    def get(self, coll: str, key: str) -> dict[str, Any] | None: ...
    def scan(self, coll: str) -> list[tuple[str, dict[str, Any]]]: ...
    def write(self, coll: str, key: str, values: dict[str, Any], expected_version: int | None = None,
              force: bool = False) -> tuple[int, int, bool] | None:
        """Set fields (version + 1 if anything changed); None if `expected_version` does not hold."""

    def insert(self, coll: str, key: str, rec: dict[str, Any]) -> None: ...
    def bump_counter(self, coll: str) -> int: ...
    def permissions(self, principal: str) -> list[str]: ...
    def revoke(self, principal: str, permission: str) -> None: ...
    def ledger(self) -> list[dict[str, Any]]: ...
    def by_key(self, key: str) -> dict[str, Any] | None: ...
    def append(self, entry: dict[str, Any]) -> None: ...
    def compensate(self, op_name: str, ref: str) -> None: ...
    def snapshot_text(self) -> str:
        """The whole world state as canonical JSON (the durable table is not world state)."""

    def view(self) -> dict[str, Any]: ...
    def durable_get(self, key: str) -> str | None: ...
    def durable_put(self, key: str, data: str) -> None: ...
    def durable_keys(self) -> list[str]: ...
    def self_counts(self) -> dict[str, int] | None:
        """Commit, duplicate and unauthorized counts the store computes on its own (SQL), or None if it cannot;
        the episode checks them against the trace-derived labels."""


class MemoryStore:
    """Backend state as one plain dict; the reference store (and the fastest)."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {}
        self._durable: dict[str, str] = {}

    def load(self, s0: dict[str, Any]) -> None:
        self.state = s0
        self._durable = {}

    def reopen(self) -> None:
        """Nothing to reopen: the dict is the backend's own durable state in this simulation."""

    def close(self) -> None:
        """Nothing to release."""

    @contextmanager
    def transaction(self) -> Iterator[None]:
        yield

    def get(self, coll: str, key: str) -> dict[str, Any] | None:
        rec = self.state["records"][coll].get(key)
        return dict(rec) if rec is not None else None

    def scan(self, coll: str) -> list[tuple[str, dict[str, Any]]]:
        return sorted(self.state["records"][coll].items())

    def write(self, coll: str, key: str, values: dict[str, Any], expected_version: int | None = None,
              force: bool = False) -> tuple[int, int, bool] | None:
        rec = self.state["records"][coll][key]
        before = rec[VERSION]
        if expected_version is not None and before != expected_version:
            return None
        changed = force or any(rec.get(f) != v for f, v in values.items())
        if changed:
            rec.update(deep_copy(values))
            rec[VERSION] = before + 1
        return before, rec[VERSION], changed

    def insert(self, coll: str, key: str, rec: dict[str, Any]) -> None:
        self.state["records"][coll][key] = deep_copy(rec)

    def bump_counter(self, coll: str) -> int:
        self.state["counters"][coll] += 1
        return self.state["counters"][coll]

    def permissions(self, principal: str) -> list[str]:
        return self.state["permissions"].get(principal, [])

    def revoke(self, principal: str, permission: str) -> None:
        self.state["permissions"][principal] = [p for p in self.permissions(principal) if p != permission]

    def ledger(self) -> list[dict[str, Any]]:
        return self.state["ledger"]

    def by_key(self, key: str) -> dict[str, Any] | None:
        idx = self.state["idempotency"].get(key)
        return None if idx is None else self.state["ledger"][idx]

    def append(self, entry: dict[str, Any]) -> None:
        self.state["ledger"].append(entry)
        if entry["idempotency_key"] is not None:
            self.state["idempotency"][entry["idempotency_key"]] = entry["index"]

    def compensate(self, op_name: str, ref: str) -> None:
        for e in self.state["ledger"]:
            if e["op"] == op_name and any(t["ref"] == ref for t in e["targets"]):
                e["compensated"] = True

    def snapshot_text(self) -> str:
        return canonical_json(self.state)

    def view(self) -> dict[str, Any]:
        return self.state

    def durable_get(self, key: str) -> str | None:
        return self._durable.get(key)

    def durable_put(self, key: str, data: str) -> None:
        self._durable[key] = data

    def durable_keys(self) -> list[str]:
        return sorted(self._durable)

    def self_counts(self) -> dict[str, int] | None:
        return None
