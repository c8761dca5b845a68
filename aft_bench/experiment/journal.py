"""The results journal: append-only JSON Lines, one checksummed line per finished run, fsync'd before the
run counts as done. `results.parquet` is compacted from it atomically; the journal is the truth.

A torn last line (a crash mid-write) is detected by its checksum and cut off on the next open, so the
run it belonged to is simply pending again; damage anywhere else is an error, never silently skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterable

from aft_bench.common import crashpoints
from aft_bench.common.canonical import canonical_json
from aft_bench.common.errors import EvidenceError, InputError
from aft_bench.common.files import read_bytes
from aft_bench.common.secrets import redact_json
from aft_bench.episode.row import row_problems, with_late_columns
from aft_bench.experiment.config import Cell

KEY_COLUMNS = tuple(f.name for f in fields(Cell))  # what the run id hashes


class UnrecordableRow(ValueError):
    """A row the row model cannot hold (an integer beyond 64 bits, a non-finite number, a missing column): it is
    never journaled, so no folder reaches a state that compaction or a rerun cannot complete."""


def encode(row: dict[str, Any]) -> str:
    return _line(canonical_json(row))


def _line(body: str) -> str:
    """The journal line of a row's canonical JSON: canonical_json({"row", "sha256"}) built from the body as is
    ("row" sorts before "sha256"), without encoding the row a second time."""
    return f'{{"row":{body},"sha256":"{hashlib.sha256(body.encode()).hexdigest()}"}}\n'


def _parse(text: str) -> dict[str, Any] | None:
    try:
        rec = json.loads(text)
        body = canonical_json(rec["row"])
        if hashlib.sha256(body.encode()).hexdigest() != rec["sha256"]:
            return None
        return rec["row"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return None


def read_rows(path: Path, repair: bool = False) -> list[dict[str, Any]]:
    """Every verified row. A bad final line is a torn write: cut off if `repair`, else ignored."""
    if not path.exists():
        return []
    raw = read_bytes(path)  # bounded: an endless file (a link to /dev/zero) is an InputError naming it
    lines = raw.split(b"\n")
    complete, tail = lines[:-1], lines[-1]
    rows: list[dict[str, Any]] = []
    good_bytes = 0
    for i, line in enumerate(complete):
        row = _parse(line.decode("utf-8", errors="replace"))
        if row is None:
            if i == len(complete) - 1 and not tail:
                tail = line  # a last line that is complete but corrupt counts as torn too
                break
            raise InputError(path, f"line {i + 1}", line[:80].decode("utf-8", "replace"),
                             "journal line is corrupt (not a torn tail): refusing to guess")
        rows.append(with_late_columns(row))
        good_bytes += len(line) + 1
    _check_rows(path, rows)
    if tail and repair:
        with open(path, "r+b") as fh:
            fh.truncate(good_bytes)
            fh.flush()
            os.fsync(fh.fileno())
    return rows


def _check_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """Refuse a journal whose verified lines are still not results: a row off the row model, or a run twice."""
    first: dict[Any, int] = {}
    for i, row in enumerate(rows, start=1):
        found = row_problems(row)
        if found:
            raise EvidenceError(f"{path}: line {i}: {found[0]}{f' (and {len(found) - 1} more)' if len(found) > 1 else ''}"
                                f"; the journal is damaged or was not written by this aft-bench")
        rid = row.get("run_id")
        if rid in first:
            raise EvidenceError(f"{path}: lines {first[rid]} and {i} both record run {rid}; the journal is damaged "
                                f"(a run is recorded once)")
        first[rid] = i


class Journal:
    """Append-only writer; one process (the runner's parent) writes it. A row counts (is in `rows`) once fsync'd:
    `append` makes one row durable; `write` then `sync` make a group of rows durable with one fsync (a group
    commit: the rows a worker process returns together)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows = read_rows(path, repair=True)
        self._ids = {r["run_id"] for r in self.rows}
        self._unsynced: list[dict[str, Any]] = []
        self._fh = open(path, "a", encoding="utf-8")

    def append(self, row: dict[str, Any]) -> None:
        """Make one row durable; a row the row model cannot hold raises UnrecordableRow and writes nothing."""
        self.write(row)
        self.sync()

    def write(self, row: dict[str, Any]) -> None:
        """Write one row's line (complete, flushed to the OS, not yet fsync'd: it counts at the next `sync`); a row
        the row model cannot hold raises UnrecordableRow and writes nothing."""
        found = row_problems(row)
        if found:
            raise UnrecordableRow("; ".join(found))
        if row["run_id"] in self._ids:
            raise UnrecordableRow(f"run {row['run_id']} is recorded already")
        body = canonical_json(row)
        clean = redact_json(body)  # the row as it may be recorded: no credential in any value
        if clean is not body:
            redacted = json.loads(clean)
            keys = [k for k in KEY_COLUMNS if redacted.get(k) != row.get(k)]
            if keys:  # redacting a key column would break the run id: refuse rather than record either form
                raise UnrecordableRow(f"key column {keys[0]} carries a credential")
            row, body = redacted, clean
        line = _line(body)
        if crashpoints.armed("mid_row"):
            self._fh.write(line[: len(line) // 2])
            self._fh.flush()
            crashpoints.hit("mid_row")
            self._fh.write(line[len(line) // 2:])
        else:
            self._fh.write(line)
        self._fh.flush()
        self._unsynced.append(row)
        self._ids.add(row["run_id"])

    def sync(self) -> None:
        """fsync the rows written since the last sync; from here on they count."""
        if not self._unsynced:
            return
        os.fsync(self._fh.fileno())
        done, self._unsynced = self._unsynced, []
        for row in done:
            self.rows.append(row)
            crashpoints.hit("after_row")

    def close(self) -> None:
        try:
            self.sync()
        finally:
            self._fh.close()


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line durably (failures, sessions)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(redact_json(canonical_json(record)) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of an append-only log (failures, sessions). Read through the bounded reader, so an endless or
    oversized file is an InputError naming it; a complete line that is not UTF-8 text is one too (a binary file
    where the log should be); the last, unterminated line may be torn mid-character and is skipped if so."""
    if not path.exists():
        return []
    lines = read_bytes(path).split(b"\n")
    out = []
    for i, raw in enumerate(lines):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            if i == len(lines) - 1:
                continue  # a torn last record, cut inside a character
            raise InputError(path, f"line {i + 1}", f"byte {exc.start}", "not UTF-8 text: not a log aft-bench "
                             "wrote (damaged or replaced?)") from None
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn last record of an append-only log
    return out


def ids(rows: Iterable[dict[str, Any]]) -> list[str]:
    return [r["run_id"] for r in rows]
