"""Where served episodes go: a results directory like any run's (journal first, then results.parquet, traces,
manifest), which `analyze`, `report` and `audit` read unchanged. Several served episodes, of any tuples and
clients, can go into one directory, one server at a time (the runner lock)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aft_bench.common.canonical import digest
from aft_bench.common.errors import InputError, OutputError
from aft_bench.common.files import read_json, write_atomic
from aft_bench.common.secrets import json_text, redacted_dumps
from aft_bench.episode.row import write_parquet
from aft_bench.experiment.journal import Journal
from aft_bench.experiment.provenance import code_version, package_versions
from aft_bench.experiment.rundir import RunDirectory

SERVE_HASH = digest({"aft-bench": "served episodes"})  # the config identity every served row carries
PLAN_KEYS = ("comparisons", "families")  # what a manifest says analyze is to compute, as a run's manifest does


class ServedDirectory:
    """A run directory receiving served episodes; `record` makes one episode's row durable."""

    def __init__(self, out: Path, worlds_dir: Path, session: bool = True,
                 plan: dict[str, Any] | None = None) -> None:
        """`plan`: the comparisons and families of the config whose tuples are served here (serve-matrix), which
        the manifest records for `analyze`; without one, the directory keeps the plan it has."""
        self.out = out
        self.plan = dict(plan or {})
        self._open_session = session  # False: only make (or check) the directory, as serve-matrix does first
        self.worlds_dir = worlds_dir
        self._dir = RunDirectory(out)
        self.journal: Journal | None = None
        self.session = 0

    def __enter__(self) -> ServedDirectory:
        self._dir.__enter__()
        path = self.out / "manifest.json"
        try:
            if path.exists():
                m = read_json(path, "aft-bench manifest")
                if not isinstance(m, dict) or m.get("kind") != "served":
                    self._dir.__exit__()
                    raise InputError(path, "kind", m.get("kind") if isinstance(m, dict) else None,
                                     "this directory holds a config's runs, not served episodes; use a new --out")
                if not self.plan:
                    self.plan = {k: m[k] for k in PLAN_KEYS if k in m}
                else:
                    self._write_manifest(list(m.get("run_ids") or []))
            else:
                self._write_manifest([])
            self.journal = Journal(self.out / "journal.jsonl")
            (self.out / "traces").mkdir(exist_ok=True)
            if self._open_session:
                self.session = self._dir.start_session(0)
        except OSError as exc:
            self._dir.__exit__()
            raise OutputError(self.out, exc) from None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.journal is not None:
            self.journal.close()
        self._dir.__exit__()

    def repetitions_of(self, run_key: dict[str, Any]) -> int:
        """How many served episodes of this tuple are recorded already (the next one's `rep`)."""
        assert self.journal is not None
        keys = list(run_key)
        return sum(1 for r in self.journal.rows if all(r.get(k) == run_key[k] for k in keys))

    def record(self, row: dict[str, Any]) -> None:
        """Journal first (fsync'd), then the manifest's run list and results.parquet, atomically."""
        assert self.journal is not None
        try:
            self.journal.append({**row, "config_hash": SERVE_HASH, "lock_hash": None,
                                 "code_version": code_version()["version"], "session": self.session})
            self._write_manifest([r["run_id"] for r in self.journal.rows])
            write_parquet(self.journal.rows, self.out / "results.parquet")
        except OSError as exc:
            raise OutputError(self.out, exc) from None

    def record_wire(self, run_id: str, calls: list[dict[str, Any]]) -> None:
        """The episode's tools/call requests as they arrived (`wire/<run_id>.jsonl`), written before its row."""
        try:
            (self.out / "wire").mkdir(exist_ok=True)
            write_atomic(self.out / "wire" / f"{run_id}.jsonl", "".join(json_text(c, indent=None) for c in calls),
                         redacted=True)
        except OSError as exc:
            raise OutputError(self.out, exc) from None

    def holds(self, run_id: str) -> bool:
        """Whether the journal holds this run's row (durable, whatever happened after)."""
        assert self.journal is not None
        return any(r["run_id"] == run_id for r in self.journal.rows)

    def quarantine(self, run_id: str) -> None:
        """Move an abandoned episode's partial trace (and database) aside, never deleting it."""
        self._dir.quarantine([run_id], self.session)

    def _write_manifest(self, run_ids: list[str]) -> None:
        manifest = {"kind": "served", "config_path": "", "config_hash": SERVE_HASH,
                    "experiment": {"id": "served"}, "worlds_dir": str(self.worlds_dir), "run_ids": run_ids,
                    "runs": len(run_ids), "code": code_version(), "packages": package_versions(), **self.plan}
        write_atomic(self.out / "manifest.json", redacted_dumps(manifest))
