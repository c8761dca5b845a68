"""One results directory as the viewer sees it: what is there, what is missing, and a content key that changes
whenever the results do (the in-memory index is rebuilt on a new key). Nothing here writes."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aft_bench.common.errors import InputError
from aft_bench.common.files import read_json, refuse_special
from aft_bench.experiment.journal import read_records

# the files whose content makes the key (traces are verified one by one when opened)
KEYED = ("results.parquet", "journal.jsonl", "manifest.json", "failures.jsonl", "sessions.jsonl",
         "analysis/meta.json", "analysis/pairs.parquet")


def _stat_key(directory: Path) -> tuple[Any, ...]:
    """A cheap fingerprint (size and mtime of each keyed file): when it changes the content key is recomputed."""
    out: list[Any] = []
    for name in KEYED:
        try:
            st = (directory / name).stat()
            out.append((name, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((name, None, None))
    return tuple(out)


def content_key(directory: Path) -> str:
    """sha256 over the keyed files' contents (absent files count as absent)."""
    h = hashlib.sha256()
    for name in KEYED:
        path = directory / name
        h.update(name.encode() + b"\0")
        if path.is_file():
            with path.open("rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
        else:
            h.update(b"<absent>")
        h.update(b"\0")
    return h.hexdigest()


@dataclass
class Source:
    """A results directory opened for reading: manifest, failures and the notes on what is missing."""

    directory: Path
    manifest: dict[str, Any] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    sessions: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    key: str = ""
    stat: tuple[Any, ...] = ()

    @property
    def has_parquet(self) -> bool:
        return (self.directory / "results.parquet").is_file()

    @property
    def has_analysis(self) -> bool:
        return (self.directory / "analysis" / "meta.json").is_file()


def open_source(directory: Path) -> Source:
    """Open `directory` or raise InputError (exit 2) when it is not a results directory at all."""
    if not directory.exists():
        raise InputError(directory, "<dir>", str(directory), "no such results folder")
    if not directory.is_dir():
        raise InputError(directory, "<dir>", str(directory), "not a folder (give a results directory)")
    if not any((directory / n).is_file() for n in ("results.parquet", "journal.jsonl", "manifest.json")):
        raise InputError(directory, "<dir>", str(directory),
                         "not a results directory (no results.parquet, journal.jsonl or manifest.json)")
    refuse_special(directory, ("traces", "analysis"))
    src = Source(directory, stat=_stat_key(directory), key=content_key(directory))
    mpath = directory / "manifest.json"
    if mpath.is_file():
        manifest = read_json(mpath, "aft-bench manifest")
        if not isinstance(manifest, dict):
            raise InputError(mpath, "<root>", type(manifest).__name__, "not an aft-bench manifest (an object)")
        src.manifest = manifest
    else:
        src.notes.append("manifest.json is missing: no config, code version or pending tuples to show")
    src.failures = read_records(directory / "failures.jsonl")
    src.sessions = read_records(directory / "sessions.jsonl")
    if not src.has_parquet:
        src.notes.append("results.parquet is missing: runs are read from journal.jsonl (not compacted yet)")
    if not (directory / "traces").is_dir():
        src.notes.append("traces/ is missing: no run can show its trace")
    if not src.has_analysis:
        src.notes.append("analysis/ is missing: no comparison tables (run `aft-bench analyze`); pairs are "
                         "matched here from the results")
    return src


def changed(src: Source) -> bool:
    """Whether the directory's results changed since `src` was opened (stat first, content to confirm)."""
    now = _stat_key(src.directory)
    if now == src.stat:
        return False
    return content_key(src.directory) != src.key


def journal_tail(directory: Path) -> tuple[int, bool]:
    """(complete lines, torn last line?) of the journal, without parsing its rows."""
    path = directory / "journal.jsonl"
    if not path.is_file():
        return 0, False
    data = path.read_bytes()
    return data.count(b"\n"), bool(data) and not data.endswith(b"\n")
