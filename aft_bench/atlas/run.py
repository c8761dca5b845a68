"""Running an atlas: its releases resolved once into the lock, each server × release a cell measured in a worker
process (or on a Dask cluster) and recorded by this process alone, one file per cell written atomically, so a run
killed at any point resumes with exactly the cells that are missing, none measured twice. What people consume is
then built from the recorded cells alone (atlas/publish.py)."""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from aft_bench.atlas import releases as reg
from aft_bench.atlas.cell import CELL_VERSION, measure_cell, untestable
from aft_bench.atlas.spec import Atlas, Entry
from aft_bench.common import crashpoints
from aft_bench.common.canonical import digest
from aft_bench.common.errors import InputError
from aft_bench.common.files import write_atomic
from aft_bench.common.secrets import json_text


@dataclass(frozen=True)
class Planned:
    """One cell: a server's entry and one of its releases, with the release's place in version order and its
    publication time (None: not known)."""

    entry: Entry
    release: str
    order: int
    published: str | None = None


def entry_key(entry: Entry) -> str:
    """What a cell's record depends on in its entry: a changed entry measures its cells again."""
    world = (Path(entry.world) / "world.toml").read_bytes().hex() if entry.world else None  # its content, too
    return digest([entry.model_dump(mode="json", exclude={"note"}), world])[:16]


def resolve(atlas: Atlas, lock_file: Path, refresh: bool = False, offline: bool = False,
            atlas_file: Path | str = "atlas") -> dict[str, list[tuple[str, str | None]]]:
    """Each server's releases, oldest first, with when each was published (its install takes dependencies as they
    were then): from the lock, else from the registry once, then written to the lock. `offline`: a server the lock
    lacks is bad input, never a network call."""
    lock = {} if refresh else reg.read_lock(lock_file)
    out: dict[str, list[tuple[str, str | None]]] = {}
    changed = False
    for i, e in enumerate(atlas.servers):
        want = {"registry": e.registry, "package": e.package, "since": e.since, "last": e.last,
                "listed": list(e.releases)}
        held = lock.get(e.name)
        if isinstance(held, dict) and {k: held.get(k) for k in want} == want and isinstance(held.get("releases"), list):
            when = held.get("published") if isinstance(held.get("published"), dict) else {}
            out[e.name] = [(str(r), when.get(r)) for r in held["releases"]]
            continue
        if offline:
            raise InputError(lock_file, f"servers.{e.name}", e.package, "not in the atlas lock (or its entry "
                             "changed); run once with the registry reachable to resolve it")
        try:
            known = reg.published(e.registry, e.package)
            if e.since is not None:
                picked = reg.since(known, e.since, e.last)
            else:
                when = {r.version: r.published for r in known}
                missing = [r for r in e.releases if r not in when]
                if missing:
                    raise reg.RegistryFailed(f"no stable release {missing[0]} (published: "
                                             f"{', '.join(r.version for r in known[-8:])})")
                picked = sorted((reg.Release(r, when[r]) for r in e.releases), key=lambda r: reg.Version(r.version))
        except reg.RegistryFailed as exc:
            raise InputError(atlas_file, f"servers.{i}.{'since' if e.since else 'releases'}", e.since or list(e.releases),
                             f"{e.package}: {exc}") from None
        out[e.name] = [(r.version, r.published) for r in picked]
        lock[e.name] = {**want, "releases": [r.version for r in picked],
                        "published": {r.version: r.published for r in picked}}
        changed = True
    if changed:
        reg.write_lock(lock_file, {k: v for k, v in lock.items() if k in out})
    return out


def plan(atlas: Atlas, resolved: dict[str, list[tuple[str, str | None]]], only: set[str] | None = None
         ) -> list[Planned]:
    return [Planned(e, r, k, when) for e in atlas.servers if only is None or e.name in only
            for k, (r, when) in enumerate(resolved[e.name])]


def cell_path(out: Path, server: str, release: str) -> Path:
    return out / "cells" / server / f"{release}.json"


def recorded(out: Path, p: Planned, retry_untestable: bool = False) -> dict[str, Any] | None:
    """The cell's record where it was recorded by this shape of record and this entry (and, with
    `retry_untestable`, measured), else None."""
    try:
        rec = json.loads(cell_path(out, p.entry.name, p.release).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(rec, dict) and rec.get("cell") == CELL_VERSION and rec.get("entry") == entry_key(p.entry)
    if ok and retry_untestable and rec.get("status") != "measured":
        return None
    return rec if ok else None


def install_all(todo: list[Planned], cache: Path, say: Callable[[str], None] | None = None) -> int:
    """Install every planned release into the cache (nothing measured); returns how many could not be."""
    from aft_bench.atlas.cache import InstallFailed, ensure

    failed = 0
    for k, p in enumerate(todo, 1):
        try:
            ensure(cache, p.entry, p.release, p.published)
            said = "installed"
        except InstallFailed as exc:
            failed += 1
            said = f"not installable: {exc}"
        if say is not None:
            say(f"[{k}/{len(todo)}] {p.entry.name} {p.release}: {said}")
    return failed


def _task(entry: Entry, release: str, published: str | None, cache: str) -> dict[str, Any]:
    """A cell measured where it runs (a worker process, a Dask worker): never raises for the server's sake."""
    try:
        rec = measure_cell(entry, release, Path(cache), published)
    except Exception as exc:  # noqa: BLE001 - a harness fault is recorded as the cell's, with its type
        rec = untestable(entry, release, f"internal: {type(exc).__name__}: {exc}", time.monotonic())
    from aft_bench.atlas.cache import cutoff

    return {**rec, "entry": entry_key(entry), "as_of": cutoff(published)}


class WorkerLost(Exception):
    """A worker process (or Dask worker) died under a cell: the cells recorded so far stand."""


@contextmanager
def writer(out: Path) -> Iterator[None]:
    """Hold the atlas folder's writer lock (InputError: another atlas process is writing it)."""
    with open(out / ".atlas.lock", "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(out, "--out", str(out), "another aft-bench atlas is writing this folder") from None
        yield


def _init_local() -> None:
    from aft_bench.common.lifetime import die_with_parent

    die_with_parent()


def _local(todo: list[Planned], cache: Path, workers: int) -> Iterator[dict[str, Any]]:
    from aft_bench.experiment.executors import context

    with ProcessPoolExecutor(workers, mp_context=context(), initializer=_init_local) as pool:
        pending: set[Future[dict[str, Any]]] = {pool.submit(_task, p.entry, p.release, p.published, str(cache))
                                                 for p in todo}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                try:
                    yield f.result()
                except BrokenProcessPool as exc:
                    raise WorkerLost(f"a worker process died ({exc})") from None


def _dask(todo: list[Planned], cache: Path, scheduler: str) -> Iterator[dict[str, Any]]:
    from distributed import as_completed

    from aft_bench.experiment import cluster

    with cluster.connect(cluster.parse(scheduler)) as client:
        futures = [client.submit(_task, p.entry, p.release, p.published, str(cache),
                                 key=f"atlas-{p.entry.name}-{p.release}-{os.getpid()}", pure=False) for p in todo]
        for f in as_completed(futures):
            try:
                yield f.result()
            except Exception as exc:  # noqa: BLE001 - a worker lost under the task (the task itself never raises)
                raise WorkerLost(f"a Dask worker failed a cell ({type(exc).__name__}: {exc})") from None


def run(atlas: Atlas, todo: list[Planned], out: Path, cache: Path, workers: int = 2, scheduler: str | None = None,
        say: Callable[[str], None] | None = None) -> int:
    """Measure `todo`'s cells and record each as it comes (this process is the only writer); returns how many."""
    n = 0
    stream = _dask(todo, cache, scheduler) if scheduler else (
        _local(todo, cache, workers) if workers > 1 else (_task(p.entry, p.release, p.published, str(cache))
                                                          for p in todo))
    for rec in stream:
        cell_path(out, rec["server"], rec["release"]).parent.mkdir(parents=True, exist_ok=True)
        # redacted string by string (a secret's value could equal `false` in its text)
        write_atomic(cell_path(out, rec["server"], rec["release"]), json_text(rec), redacted=True)
        n += 1
        crashpoints.hit("atlas_cell")
        if say is not None:
            said = rec["status"] if rec["status"] == "measured" else f"untestable ({rec['reason'][:120]})"
            say(f"[{n}/{len(todo)}] {rec['server']} {rec['release']}: {said} in {rec['seconds']:g} s")
    return n


def progress_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
