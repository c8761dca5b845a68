"""A run directory held by one runner at a time: its lock, its manifest (refusing a different config), its
sessions, and the quarantine of what unfinished attempts left behind."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

from aft_bench.common.errors import InputError, OutputError
from aft_bench.common.files import read_json, refuse_special, write_atomic
from aft_bench.common.secrets import redacted_dumps
from aft_bench.experiment.config import Matrix
from aft_bench.experiment.journal import append_record, read_records
from aft_bench.experiment.provenance import manifest

LEFTOVERS = ("manifest.json.tmp",)  # what an interrupted first write of ours leaves: not someone else's folder


class RunDirectory:
    """An output directory held by one runner at a time (an exclusive lock file)."""

    LOCK = ".runner.lock"

    def __init__(self, out: Path) -> None:
        self.out = out
        self._fh: Any = None

    def __enter__(self) -> RunDirectory:
        if self.out.exists() and not self.out.is_dir():
            raise InputError(self.out, "--out", str(self.out), "is a file, not a folder")
        refuse_special(self.out)  # a FIFO where the lock or the journal should be would block forever
        if self._foreign():  # refuse before creating anything in someone else's folder
            raise InputError(self.out, "--out", str(self.out),
                             "directory holds files but no aft-bench manifest.json; choose a new or empty one")
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.out / self.LOCK, "a")
        except OSError as exc:
            raise OutputError(self.out, exc) from None
        try:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fh.close()
            raise InputError(self.out, "--out", str(self.out),
                             "another aft-bench runner is writing this directory; wait for it or choose another") from None
        if self._foreign():  # checked again under the lock: a runner that held it may have left no manifest
            self.__exit__()
            raise InputError(self.out, "--out", str(self.out),
                             "directory holds files but no aft-bench manifest.json; choose a new or empty one")
        return self

    def _foreign(self) -> bool:
        """Files here that no aft-bench run directory would hold (anything but our lock, without a manifest)."""
        try:
            names = {p.name for p in self.out.iterdir()} if self.out.is_dir() else set()
        except OSError as exc:
            raise InputError(self.out, "--out", str(self.out), f"cannot list: {exc.strerror}") from None
        return bool(names - {self.LOCK, *LEFTOVERS}) and "manifest.json" not in names

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
        self._fh.close()

    def admit(self, matrix: Matrix, inputs: dict[str, str], lock_hash: str | None) -> dict[str, Any]:
        """Write the manifest, or check that the existing one describes the same resolved config."""
        path = self.out / "manifest.json"
        fresh = manifest(matrix)
        fresh.update(inputs=inputs, lock_hash=lock_hash, run_ids=[c.run_id for c in matrix.cells])
        if path.exists():
            old = read_json(path, "aft-bench manifest")
            if not isinstance(old, dict) or not isinstance(old.get("experiment"), dict):
                raise InputError(path, "experiment", type(old).__name__, "not an aft-bench manifest")
            diffs = _differences(old, fresh)
            if diffs:
                raise InputError(path, "resolved config", diffs[:8],
                                 "this directory holds results of a different config or inputs; use a new --out")
            return old
        write_atomic(path, redacted_dumps(fresh))
        return fresh

    def next_session(self) -> int:
        """One more than the highest session recorded (a session may add records after its first)."""
        return 1 + max((int(r.get("session") or 0) for r in read_records(self.out / "sessions.jsonl")), default=0)

    def start_session(self, pending: int) -> int:
        n = self.next_session()
        append_record(self.out / "sessions.jsonl", {"session": n, "pid": os.getpid(), "pending": pending})
        return n

    def quarantine(self, run_ids: list[str], session: int) -> None:
        """Move leftovers of unfinished attempts (partial traces, databases) aside, never deleting them."""
        wanted = set(run_ids)
        for sub, suffix in (("traces", ".jsonl"), ("db", ".sqlite")):
            try:
                names = os.listdir(self.out / sub)  # one listing, not a glob per run id
            except FileNotFoundError:
                continue
            for name in sorted(names):
                rid, dot, _rest = name.partition(".")
                if rid in wanted and name.startswith(rid + suffix):
                    dest = self.out / "quarantine" / f"session-{session}" / sub
                    dest.mkdir(parents=True, exist_ok=True)
                    os.replace(self.out / sub / name, dest / name)


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = []
    for k in sorted(set(old["experiment"]) | set(new["experiment"])):
        if old["experiment"].get(k) != new["experiment"].get(k):
            out.append(f"experiment.{k}: {old['experiment'].get(k)!r} -> {new['experiment'].get(k)!r}")
    oi, ni = old.get("inputs", {}), new.get("inputs", {})
    out += [f"input {k} changed" for k in sorted(set(oi) | set(ni)) if oi.get(k) != ni.get(k)]
    if old.get("lock_hash") != new.get("lock_hash"):
        out.append(f"lock {old.get('lock_hash')} -> {new.get('lock_hash')}")
    return out


