"""The oracle trace: append-only, hash-chained events; JSON Lines on disk, written in append mode.

The API offers `append` and reading, nothing else. Each event carries a sequence number and the hash of
the previous event; `seal` closes a trace with its event count, so modification, reordering and
truncation are all detectable by `verify`.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from aft_bench.common.canonical import canonical_json, canonical_pair, parse_fast, recanonical
from aft_bench.common.errors import InputError, TraceIntegrityError
from aft_bench.common.files import read_text
from aft_bench.common.secrets import redact_json

GENESIS = "0" * 64
SEAL = "sealed"


@dataclass(frozen=True)
class Event:
    seq: int
    kind: str
    data: Mapping[str, Any]
    prev: str
    hash: str
    # the canonical JSON text `data` was parsed from, when the event was written or read here (verify hashes it
    # instead of encoding `data` again); not part of the event's identity
    data_json: str | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "kind": self.kind, "data": dict(self.data), "prev": self.prev, "hash": self.hash}


def _body(seq: int, kind: str, data_json: str, prev: str) -> str:
    """canonical_json({"data", "kind", "prev", "seq"}) built from already-canonical data (sorted keys)."""
    return f'{{"data":{data_json},"kind":{_kind_json(kind)},"prev":"{prev}","seq":{seq}}}'


_kind_json = lru_cache(maxsize=1024)(canonical_json)  # a trace uses a few dozen kinds, each encoded once


def _hash(seq: int, kind: str, data_json: str, prev: str) -> str:
    """The hash an event must carry: sha256 of its canonical body (the one definition append and verify share)."""
    return hashlib.sha256(_body(seq, kind, data_json, prev).encode("utf-8")).hexdigest()


def _event_hash(seq: int, kind: str, data: Any, prev: str) -> str:
    return _hash(seq, kind, canonical_json(data), prev)


class Trace:
    """An append-only event log, optionally mirrored to a JSONL file opened in append mode.

    The file is created when the trace is; lines are buffered (encoded as they are appended) and written when
    _FLUSH_BYTES have gathered and when the trace is sealed; an unsealed file (a crashed run) fails `verify`. A
    plain descriptor and one write per flush: a text-mode file object cost a quarter of a millisecond per episode.
    """

    _FLUSH_BYTES = 8192  # what a text-mode file buffered before this class wrote its own lines

    def __init__(self, path: str | Path | None = None) -> None:
        self._events: list[Event] = []
        self._path = Path(path) if path is not None else None
        self._fd: int | None = None
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        if self._path is not None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o666)

    def _flush(self) -> None:
        """Write the buffered lines (all of them: a short write is continued)."""
        assert self._fd is not None
        data = memoryview(b"".join(self._pending))
        self._pending, self._pending_bytes = [], 0
        while data:
            data = data[os.write(self._fd, data):]

    def __del__(self) -> None:
        """A trace dropped unsealed (an episode that raised) still writes what it holds, as a file object would."""
        if getattr(self, "_fd", None) is not None:
            try:
                self._flush()
            finally:
                os.close(self._fd)  # type: ignore[arg-type]
                self._fd = None

    @property
    def head(self) -> str:
        return self._events[-1].hash if self._events else GENESIS

    @property
    def sealed(self) -> bool:
        return bool(self._events) and self._events[-1].kind == SEAL

    def append(self, kind: str, /, **data: Any) -> Event:
        # Data is stored as parsed from its canonical JSON: detached from the caller's objects, JSON-exact.
        return self.append_canonical(kind, *canonical_pair(data))

    def append_canonical(self, kind: str, data_json: str, data: dict[str, Any]) -> Event:
        """Append an event whose data the caller already holds as canonical JSON (`data_json`) and as the
        value parsed from exactly that text (`data`, owned by the trace from now on)."""
        if self.sealed:
            raise TraceIntegrityError("append to a sealed trace")
        clean = redact_json(data_json)  # before hashing: a credential never enters the chain (an echoed header)
        if clean is not data_json:
            data_json, data = clean, json.loads(clean)
        seq, prev = len(self._events), self.head
        digest_ = _hash(seq, kind, data_json, prev)
        ev = Event(seq, kind, MappingProxyType(data), prev, digest_, data_json)
        self._events.append(ev)
        if self._fd is not None:
            line = f'{{"data":{data_json},"hash":"{digest_}","kind":{_kind_json(kind)},"prev":"{prev}","seq":{seq}}}\n'
            encoded = line.encode("utf-8")
            self._pending.append(encoded)
            self._pending_bytes += len(encoded)
            if self._pending_bytes >= self._FLUSH_BYTES:
                self._flush()
        return ev

    def seal(self) -> Event:
        """Close the trace with its event count; returns the seal event, whose hash anchors the whole trace."""
        ev = self.append(SEAL, count=len(self._events))
        if self._fd is not None:
            try:
                self._flush()
            finally:
                os.close(self._fd)
                self._fd = None
        return ev

    def events(self) -> tuple[Event, ...]:
        return tuple(self._events)

    def of_kind(self, *kinds: str) -> list[Event]:
        return [e for e in self._events if e.kind in kinds]


def read_events(path: str | Path) -> list[Event]:
    """Parse a JSONL trace file. Every line must be exactly the canonical bytes the trace wrote (a line
    re-serialized with other spacing or key order is a modification); chain and seal are `verify`'s job."""
    out = []
    try:
        text = read_text(Path(path))
    except InputError as exc:
        raise TraceIntegrityError(f"{path}: {exc.problem}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for lineno, line in enumerate(lines, start=1):
        out.append(_fast_event(line) or _event(path, lineno, line))
    return out


_FIELDS = {"data", "hash", "kind", "prev", "seq"}


def _fast_event(line: str) -> Event | None:
    """The event of a canonical line, parsed by orjson, with its data's canonical text cut from the line; None
    for anything else (the standard path then decides, with its error messages)."""
    try:
        raw = parse_fast(line)
        if not isinstance(raw, dict) or raw.keys() != _FIELDS or not isinstance(raw["data"], dict) \
                or recanonical(raw) != line:  # a long integer read as a float also lands here
            return None
        rest = recanonical({"hash": raw["hash"], "kind": raw["kind"], "prev": raw["prev"], "seq": raw["seq"]})
        if rest is None:
            return None
        return Event(raw["seq"], raw["kind"], MappingProxyType(raw["data"]), raw["prev"], raw["hash"],
                     line[len('{"data":'):len(line) - len(rest)])  # the line is {"data":D,<rest without its {>
    except (ValueError, TypeError, RecursionError):
        return None


def _event(path: str | Path, lineno: int, line: str) -> Event:
    try:
        raw = json.loads(line)
        ev = Event(raw["seq"], raw["kind"], MappingProxyType(raw["data"]), raw["prev"], raw["hash"])
    except (json.JSONDecodeError, KeyError, TypeError, RecursionError) as exc:
        raise TraceIntegrityError(f"{path}: line {lineno}: unreadable event ({type(exc).__name__})") from None
    try:
        canonical = canonical_json(raw)
    except ValueError:  # NaN/Infinity: never written by a trace
        canonical = None
    if canonical != line:
        raise TraceIntegrityError(f"{path}: line {lineno}: not the canonical bytes the trace wrote "
                                  f"(re-serialized or edited)")
    return ev


def verify(events: Iterable[Event], expected_head: str | None = None, where: str = "trace") -> str:
    """Check sequence, chain and seal; returns the head hash or raises TraceIntegrityError naming the event."""
    prev = GENESIS
    last: Event | None = None
    for i, ev in enumerate(events):
        if ev.seq != i:
            raise TraceIntegrityError(f"{where}: event {i} has seq {ev.seq} (events missing or reordered)")
        if ev.prev != prev:
            raise TraceIntegrityError(f"{where}: event {i} does not chain to its predecessor")
        data_json = ev.data_json if ev.data_json is not None else canonical_json(dict(ev.data))
        if _hash(ev.seq, ev.kind, data_json, ev.prev) != ev.hash:
            raise TraceIntegrityError(f"{where}: event {i} ({ev.kind}) was modified")
        if last is not None and last.kind == SEAL:
            raise TraceIntegrityError(f"{where}: events after the seal")
        prev, last = ev.hash, ev
    if last is None or last.kind != SEAL:
        raise TraceIntegrityError(f"{where}: no seal at the end (truncated or unfinished)")
    if last.data.get("count") != last.seq:
        raise TraceIntegrityError(f"{where}: seal count {last.data.get('count')} != {last.seq} events")
    if expected_head is not None and last.hash != expected_head:
        raise TraceIntegrityError(f"{where}: head {last.hash[:12]} differs from recorded {expected_head[:12]}")
    return last.hash


def verify_file(path: str | Path, expected_head: str | None = None) -> str:
    return verify(read_events(path), expected_head, where=str(path))
