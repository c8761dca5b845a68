"""Judging a run again from its sealed trace alone: the terminal state the trace recorded (checked against
the hash recorded beside it) and the task's criteria give the labels, which must equal the recorded row's."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from aft_bench.common.canonical import canonical_bytes
from aft_bench.common.errors import TraceIntegrityError
from aft_bench.judge.external import external_labels
from aft_bench.judge.labels import Labels, compute_labels
from aft_bench.runtime.trace import Event
from aft_bench.tasks.task import Criteria


def recorded_state(events: Iterable[Event]) -> Mapping[str, Any]:
    """The terminal world state recorded in the trace; its canonical hash must equal the recorded hash."""
    last = None
    for e in events:
        if e.kind == "terminal_state":
            last = e
    if last is None or "state" not in last.data:
        raise TraceIntegrityError("the trace records no terminal state (made before aft-bench recorded it?)")
    state = last.data["state"]
    if hashlib.sha256(_state_bytes(last)).hexdigest() != last.data.get("hash"):
        raise TraceIntegrityError("the recorded terminal state does not match its recorded hash")
    return state


_HEX64 = re.compile(r"[0-9a-f]{64}")


def _state_bytes(event: Event) -> bytes:
    """The canonical bytes of a terminal_state event's state: cut from the event's own canonical text when it has
    one (`{"hash":"<64 hex>","state":S}`), else encoded again."""
    h, text = event.data.get("hash"), event.data_json
    if text is not None and event.data.keys() == {"hash", "state"} and isinstance(h, str) and _HEX64.fullmatch(h):
        return text[len('{"hash":"') + 64 + len('","state":'):-1].encode("utf-8")
    return canonical_bytes(event.data["state"])


def rejudge(events: Iterable[Event], criteria: Criteria) -> Labels:
    """The labels of a sealed trace, computed exactly as when the run was made (an external world's from the
    snapshots its trace recorded)."""
    evs = list(events)
    state = recorded_state(evs)
    if any(e.kind == "gateway_open" for e in evs):
        for e in evs:
            if e.kind == "snapshot" and hashlib.sha256(canonical_bytes(e.data["state"])).hexdigest() != e.data["hash"]:
                raise TraceIntegrityError(f"the snapshot at event {e.seq} does not match its recorded hash")
        return external_labels(evs, criteria)
    return compute_labels(evs, state, criteria)
