"""Prepared external worlds: a fresh resource (fixture made, s0 probed) with its server started and its tools
listed, and a small per-process pool that prepares the next episode's while this one plays.

A prepared world is handed to exactly one episode and never back: the pool hides start-up, it never reuses a
server or a resource. It refills a slot only for a (world, folder) it has been asked for before, so a caller
that never repeats one (a Dask worker's private folder per cell) never pays for a world nobody takes, and only
in a folder the caller names (a run's scratch folder, which the runner removes), never in the system's temp
folder, where a process that ends without running its exit handlers would leave it.
Everything it holds is stopped and removed by `drain` (the runner, before it removes its scratch folder) and
when the process exits; its servers are started by one thread that lives as long as the process, so they die
with it (a server started by a thread gets SIGKILL when that thread exits).
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
import time
import weakref
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from aft_bench.world.external import FORK_ENV, ExternalWorld, check_installed
from aft_bench.world.mcp_http import HttpServer, free_port
from aft_bench.world.mcp_stdio import StdioServer
from aft_bench.world.resource import Resource

POOL_ENV = "AFT_BENCH_POOL"  # "1": prepare the next episode's world ahead (off by default: see take)


def server_log(resource: Resource) -> Path:
    """Where a server's stderr goes: beside its resource folder, removed with it."""
    return resource.root.parent / f"{resource.root.name}.server.log"


def _running(server: StdioServer | HttpServer) -> bool:
    """Whether a prepared world's server process is still running (a server may exit while it waits)."""
    proc = server.proc
    return proc is not None and proc.poll() is None


def release(server: StdioServer | HttpServer | None, resource: Resource) -> None:
    """Stop an episode's server (if any) and remove its resource with the server's log."""
    if server is not None:
        server.stop()
    server_log(resource).unlink(missing_ok=True)
    resource.remove()


def start_server(world: ExternalWorld, resource: Resource) -> tuple[StdioServer | HttpServer, list[dict[str, Any]],
                                                                      float]:
    """Start the world's server on `resource` and list its tools: (server, tools, seconds it took)."""
    check_installed(world)
    root = resource.root
    t0 = time.perf_counter()
    srv = world.server
    log = server_log(resource)
    server: StdioServer | HttpServer
    if srv.url is not None:  # streamable HTTP on a free port of 127.0.0.1
        port = free_port()
        server = HttpServer(srv.argv(root, port, world.folder), srv.url.replace("{port}", str(port)), cwd=root,
                            env={**resource.env(), **srv.environment(root, port, world.folder)}, stderr_path=log,
                            timeout_s=srv.start_timeout_s).start()
    else:
        server = StdioServer(srv.argv(root, folder=world.folder), cwd=root,
                             env={**resource.env(), **srv.environment(root, folder=world.folder)}, stderr_path=log,
                             timeout_s=srv.start_timeout_s, fork=srv.launch(root, world.folder)).start()
    try:
        server.timeout_s = srv.call_timeout_s
        listed = server.tools()
    except BaseException:
        server.stop()
        raise
    return server, listed, time.perf_counter() - t0


@dataclass
class Prepared:
    """One episode's world before it opens: the resource, its s0 snapshot, the started server and its tools."""

    resource: Resource
    s0: dict[str, Any]
    server: StdioServer | HttpServer
    listed: list[dict[str, Any]]
    start_s: float
    ahead: bool = field(default=False)  # prepared while an earlier episode played

    def discard(self) -> None:
        """Stop the server and remove the resource (a prepared world nobody took)."""
        release(self.server, self.resource)


def prepare(world: ExternalWorld, parent: Path | None) -> Prepared:
    """Make a fresh resource under `parent`, probe s0, start the server and list its tools; on any failure
    nothing is left behind and the exception (ResourceFailed, ServerFailed, ...) propagates."""
    resource = Resource(world, parent)
    try:
        resource.make()
        s0 = resource.probe()
        server, listed, seconds = start_server(world, resource)
    except BaseException:
        release(None, resource)
        raise
    return Prepared(resource, s0, server, listed, seconds)


Key = tuple[str, str, str]  # (the world's hash, how its server is launched, the folder its resources are made in)


def _key(world: ExternalWorld, parent: Path | None) -> Key:
    launch = "" if world.server.fork is None else world.server.fork.model_dump_json()
    return world.hash, f"{launch} {os.environ.get(FORK_ENV, '')}", str(parent)


class PoolDrained(Exception):
    """A prepared world was taken back by `drain` while an episode waited for it (only on the way out)."""


class Pool:
    """Per process: at most one world prepared ahead per (world, folder), every one made by one long-lived thread;
    every world made and not yet handed out is tracked, so `drain` can stop it whatever state it is in."""

    def __init__(self) -> None:
        self._forget()
        me = weakref.ref(self)  # the hook must not keep every pool ever made alive
        os.register_at_fork(after_in_child=lambda: (pool := me()) is not None and pool._forget())

    def _forget(self) -> None:
        """A new, empty pool (also in a child forked from this process: what the parent prepared is the parent's,
        and its thread did not come along)."""
        self._lock = threading.Lock()
        self._ahead: dict[Key, Future[Prepared]] = {}  # the next episode's, per key
        self._made: dict[Future[Prepared], Key] = {}  # every world being made or made and not yet handed out
        self._asked: set[Key] = set()
        self._jobs: queue.Queue[tuple[Future[Prepared], Callable[[], Prepared]]] = queue.Queue()
        self._thread: threading.Thread | None = None

    def take(self, world: ExternalWorld, parent: Path | None) -> Prepared:
        """A world for one episode: the one prepared ahead if there is one (waiting for it if it is being made),
        else one made now; then, for a (world, folder) asked for before, the next one is started."""
        key = _key(world, parent)
        with self._lock:
            ahead = self._ahead.pop(key, None)
            again = key in self._asked and parent is not None  # never ahead into the system's temp folder
            self._asked.add(key)
        if ahead is not None:
            try:
                got = self._claim(ahead)
            except PoolDrained:
                raise
            except Exception:  # noqa: BLE001 - made ahead and failed: this episode makes its own, and says why
                got = None
            if got is not None and (not got.resource.root.is_dir() or not _running(got.server)):
                got.discard()  # its folder was removed under it, or its server has exited since: not usable
                got = None
            if got is not None:
                got.ahead = True
                if again:  # not after a prefetch's one world (a served episode): nothing is left made for nobody
                    self._start(key, world, parent)
                return got
        made = self._claim(self._submit(key, lambda: prepare(world, parent)))
        if again:
            self._start(key, world, parent)
        return made

    def prefetch(self, world: ExternalWorld, parent: Path) -> None:
        """Start preparing one world for an episode known to come (a served episode, before its client's first
        request, so that request is not kept waiting for a server's start-up); nothing more is made ahead after it
        is taken."""
        key = _key(world, parent)
        with self._lock:
            if key in self._ahead:
                return
        self._start(key, world, parent)

    def has_ahead(self, world: ExternalWorld, parent: Path | None) -> bool:
        with self._lock:
            return _key(world, parent) in self._ahead

    def _claim(self, fut: Future[Prepared]) -> Prepared:
        """Wait for a world and take it out of the pool's hands (an exception if making it failed)."""
        try:
            got = fut.result()
        finally:  # a world that failed while made is forgotten too, not kept with its traceback until drain
            with self._lock:
                drained = self._made.pop(fut, None) is None
        if drained:
            raise PoolDrained("the world pool was drained while this episode waited for its world")
        return got

    def _start(self, key: Key, world: ExternalWorld, parent: Path | None) -> None:
        fut = self._submit(key, lambda: prepare(world, parent))
        with self._lock:
            self._ahead[key] = fut

    def _submit(self, key: Key, job: Callable[[], Prepared]) -> Future[Prepared]:
        fut: Future[Prepared] = Future()
        with self._lock:
            self._made[fut] = key
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="aft-bench-world-pool", daemon=True)
                self._thread.start()
        self._jobs.put((fut, job))
        return fut

    def _work(self) -> None:
        while True:
            fut, job = self._jobs.get()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(job())
            except BaseException as exc:  # noqa: BLE001 - handed to whoever takes it
                fut.set_exception(exc)

    def drain(self, parent: Path | None = None) -> int:
        """Stop and remove every world made and not handed out (under `parent` only, if given), waiting for any
        being made; how many there were. The pool then starts afresh for those folders."""
        with self._lock:
            mine = [f for f, k in self._made.items() if parent is None or k[2] == str(parent)]
            for f in mine:
                del self._made[f]
            for k in [k for k in self._ahead if parent is None or k[2] == str(parent)]:
                del self._ahead[k]
            self._asked = {k for k in self._asked if not (parent is None or k[2] == str(parent))}
        n = 0
        for fut in mine:
            try:
                fut.result().discard()
                n += 1
            except BaseException:  # noqa: BLE001 - one that failed left nothing behind
                pass
        return n


POOL = Pool()
atexit.register(POOL.drain)


def take(world: ExternalWorld, parent: Path | None) -> Prepared:
    """A prepared world for one episode: made now, in the caller's thread; from the process's pool with
    AFT_BENCH_POOL=1. The pool is off by default because it was measured to gain nothing with the deterministic
    agent on this project's 2-core machines (docs/real_worlds.md): start-up there is processor work, not waiting."""
    if os.environ.get(POOL_ENV) == "1" or POOL.has_ahead(world, parent):  # or one was asked for (`prefetch`)
        return POOL.take(world, parent)
    return prepare(world, parent)


def prefetch(world: ExternalWorld, parent: Path) -> None:
    """Prepare one world ahead for an episode known to come (whatever AFT_BENCH_POOL says)."""
    POOL.prefetch(world, parent)


def drain(parent: Path | None = None) -> int:
    return POOL.drain(parent)
