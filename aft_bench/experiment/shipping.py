"""The worker's side of the Dask executor: a matrix's inputs shipped to each worker once (a WorkerPlugin carrying
the config and the worlds folder), checked against the driver's fingerprint (aft-bench version, tokenizer, the
lock-style hash of every input, frozen code included), and `play`, which runs one cell into a private temporary
folder and sends back its row with the sealed trace (and SQLite database) instead of anything on a shared disk."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import tempfile
from contextlib import closing
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from distributed import WorkerPlugin, get_worker

from aft_bench.common.canonical import digest
from aft_bench.common.scratch import scratch_dir
from aft_bench.common.secrets import redact
from aft_bench.experiment import executors, freeze
from aft_bench.experiment.config import Matrix, load_matrix
from aft_bench.interface import tokens


@dataclass(frozen=True)
class Fingerprint:
    """What a worker must share with the driver: the package version, the tokenizer, every frozen input's hash."""

    version: str
    tokenizer: str
    inputs: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, matrix: Matrix) -> Fingerprint:
        import aft_bench  # read at call time: the version this process really runs

        try:
            litellm = metadata.version("litellm")
        except metadata.PackageNotFoundError:
            litellm = "absent"
        return cls(str(aft_bench.__version__), f"{tokens.TOKENIZER_MODEL} via litellm {litellm}",
                   tuple(sorted(freeze.inputs(matrix).items())))

    def difference(self, worker: Fingerprint) -> str | None:
        """The first way `worker` differs from this (the driver's) fingerprint, in words; None if they match."""
        if worker.version != self.version:
            return f"aft-bench {worker.version} on the worker, {self.version} on the driver"
        if worker.tokenizer != self.tokenizer:
            return f"tokenizer {worker.tokenizer} on the worker, {self.tokenizer} on the driver"
        mine, theirs = dict(self.inputs), dict(worker.inputs)
        changed = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
        if changed:
            more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
            return f"input {changed[0]} hashes differently on the worker{more}"
        return None


@dataclass(frozen=True)
class Bundle:
    """A matrix's inputs as bytes (the config file and every file of its worlds folder) with the driver's
    fingerprint; `token` names this input set on the cluster."""

    token: str
    config_name: str
    config: bytes
    worlds: tuple[tuple[str, bytes], ...]
    expected: Fingerprint
    extra: tuple[tuple[tuple[str, bytes], ...], ...] = ()  # each of the config's own worlds folders


def bundle(matrix: Matrix) -> Bundle:
    """The inputs a worker needs to rebuild `matrix` without sharing a disk with the driver."""
    files = _files(matrix.worlds_dir)
    expected = Fingerprint.of(matrix)
    return Bundle(digest([expected.version, expected.tokenizer, list(expected.inputs)])[:16], matrix.path.name,
                  matrix.path.read_bytes(), files, expected, tuple(_files(d) for d in matrix.extra_worlds))


def _files(root: Path) -> tuple[tuple[str, bytes], ...]:
    return tuple((p.relative_to(root).as_posix(), p.read_bytes()) for p in sorted(root.rglob("*"))
                 if p.is_file() and "__pycache__" not in p.parts)


@dataclass(frozen=True)
class Returned:
    """What one attempt sends home: its row or failure record (`kind` "row" | "failure" | "refused"), the sealed
    trace's text and the SQLite database's bytes (None when there is none), and the worker that ran it."""

    run_id: str
    attempt: int
    worker: str
    kind: str
    data: dict[str, Any]
    trace: str | None = None
    database: bytes | None = None


@dataclass
class _Prepared:
    """A worker's copy of one input set: the matrix rebuilt from it, or why this worker refuses it."""

    folder: Path
    matrix: Matrix | None
    problem: str | None


_PREPARED: dict[str, _Prepared] = {}


class ShippedInputs(WorkerPlugin):
    """Puts a Bundle on a worker once (also on workers that join or restart later) and checks it there."""

    def __init__(self, shipped: Bundle) -> None:
        self.bundle = shipped
        self.name = f"aft-bench-inputs-{shipped.token}"

    async def setup(self, worker: Any) -> None:
        """Rebuild the matrix off the worker's event loop (loading worlds and the tokenizer takes seconds)."""
        _PREPARED[self.bundle.token] = await asyncio.get_running_loop().run_in_executor(None, prepare, self.bundle)

    def teardown(self, worker: Any) -> None:
        gone = _PREPARED.pop(self.bundle.token, None)
        if gone is not None:
            shutil.rmtree(gone.folder, ignore_errors=True)


def prepare(shipped: Bundle) -> _Prepared:
    """Unpack the inputs into a private folder, load the matrix from them and compare fingerprints."""
    folder = Path(tempfile.mkdtemp(prefix=f"aft-bench-inputs-{shipped.token}-", dir=scratch_dir()))
    try:
        names = ["worlds", *(f"extra-{i}" for i in range(len(shipped.extra)))]
        for name, files in zip(names, (shipped.worlds, *shipped.extra)):
            (folder / name).mkdir()
            for rel, data in files:
                path = folder / name / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        config = folder / shipped.config_name
        config.write_bytes(shipped.config)
        matrix = load_matrix(config, folder / "worlds", extra_worlds=tuple(folder / n for n in names[1:]))
        tokens.warm()
        problem = shipped.expected.difference(Fingerprint.of(matrix))
    except Exception as exc:  # noqa: BLE001 - whatever stops this worker from rebuilding the inputs refuses it
        return _Prepared(folder, None, f"cannot rebuild the shipped inputs: {type(exc).__name__}: {exc}")
    for spec in matrix.agents:  # what the driver checked before the run, in this worker's environment (its keys)
        reason = spec.kind.preflight(spec.kind.params.model_validate(spec.params)) if spec.kind.preflight else None
        if reason is not None and problem is None:
            problem = f"agent {spec.name} cannot run here: {redact(reason)}"
    return _Prepared(folder, matrix if problem is None else None, problem)


def verdict(token: str) -> str | None:
    """This worker's refusal of input set `token` (None: it accepts it); run on every worker by the driver."""
    prepared = _PREPARED.get(token)
    if prepared is None:
        return "the inputs were not shipped to this worker"
    return prepared.problem


def play(token: str, index: int, run_id: str, attempt: int, topic: str, key: str) -> Returned:
    """Run cell `index` of input set `token` into a private temporary folder and send back its evidence. The start
    is announced on `topic` first, so the driver notices when the engine runs one attempt twice. Nothing but a
    Returned leaves it: an exception is sent as a failure record (a deep traceback can fail to travel at all)."""
    worker = get_worker()
    worker.log_event(topic, {"key": key, "worker": worker.address})
    try:
        return _play(worker.address, token, index, run_id, attempt)
    except Exception as exc:  # noqa: BLE001 - as in executors.attempt: recorded, then the tuple is retried
        return Returned(run_id, attempt, worker.address, "failure",
                        {"run_id": run_id, "error": type(exc).__name__, "message": redact(str(exc))[:2000]})


def _play(address: str, token: str, index: int, run_id: str, attempt: int) -> Returned:
    problem = verdict(token)
    prepared = _PREPARED.get(token)
    if problem is not None or prepared is None or prepared.matrix is None:
        return Returned(run_id, attempt, address, "refused", {"message": problem or "no matrix"})
    matrix = prepared.matrix
    if not 0 <= index < len(matrix.cells) or matrix.cells[index].run_id != run_id:
        return Returned(run_id, attempt, address, "refused",
                        {"message": f"cell {index} is not run {run_id} on this worker"})
    # in the worker's own scratch folder: a worker killed with SIGKILL leaves it to the next command's sweep
    with tempfile.TemporaryDirectory(prefix=f"aft-bench-{run_id}-", dir=scratch_dir()) as tmp:
        out = Path(tmp)
        (out / "traces").mkdir()
        kind, data = executors.attempt(matrix, index, out)
        if kind != "row":
            return Returned(run_id, attempt, address, kind, data)
        trace = out / "traces" / f"{run_id}.jsonl"
        db = out / "db" / f"{run_id}.sqlite"
        return Returned(run_id, attempt, address, kind, data,
                        trace.read_bytes().decode("utf-8") if trace.exists() else None,  # whatever the locale
                        _database_bytes(db) if db.exists() else None)


def _database_bytes(path: Path) -> bytes:
    """The database as one self-contained file: its write-ahead log folded in first."""
    with closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.read_bytes()
