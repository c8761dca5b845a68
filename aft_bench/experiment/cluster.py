"""Where the Dask executor's cells run: a running scheduler (`tcp://host:port`), or `local[:N]`, a LocalCluster of
N worker processes on 127.0.0.1 that the runner starts and stops. Dask is the optional extra `aft-bench[dask]`,
imported only here and by the modules that run cells on it."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

EXTRA = "aft-bench[dask]"
MAX_LOCAL_WORKERS = 64
CONNECT_TIMEOUT_S = 10.0
WORKER_WAIT_S = 600.0  # a batch system may take minutes to start the first worker
_TCP = re.compile(r"^tcp://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]{1,5})$")


class ClusterError(Exception):
    """The cluster cannot run this matrix (no scheduler answers, no worker came, a worker was refused): one line,
    exit 1; everything recorded before it is intact and the folder resumes."""


@dataclass(frozen=True)
class Address:
    """A parsed `--scheduler`: `workers` local worker processes to start, or the `url` of a running scheduler."""

    workers: int | None
    url: str | None

    def __str__(self) -> str:
        return self.url if self.url is not None else f"local:{self.workers}"


def parse(text: str) -> Address:
    """`local`, `local:N` (1..64 worker processes) or `tcp://host:port`; ValueError says what is wrong."""
    if text == "local":
        return Address(min(2, os.cpu_count() or 1), None)
    if text.startswith("local:"):
        n = text.removeprefix("local:")
        if not n.isdigit() or not 1 <= int(n) <= MAX_LOCAL_WORKERS:
            raise ValueError(f"{text!r}: local:N takes 1..{MAX_LOCAL_WORKERS} worker processes")
        return Address(int(n), None)
    m = _TCP.match(text)
    if m is None:
        raise ValueError(f"{text!r} is neither tcp://host:port (a running Dask scheduler) nor local[:N]")
    if not 1 <= int(m["port"]) <= 65535:
        raise ValueError(f"{text!r}: port {int(m['port'])} is outside 1..65535")
    return Address(None, text)


def missing_extra() -> str | None:
    """Why Dask cannot be used here (the extra is not installed), or None when it can."""
    try:
        import distributed  # noqa: F401 - only whether it imports
    except ImportError as exc:
        return f"needs the optional extra {EXTRA}: pip install '{EXTRA}' ({exc})"
    return None


@contextmanager
def connect(address: Address) -> Iterator[Any]:
    """A Client of the scheduler at `address` with at least one worker; a LocalCluster is started with engine
    retries off (`allowed-failures` 0: a task whose worker dies errs at once instead of running again) and stopped
    afterwards. Dask's own log lines below CRITICAL are silenced while it runs (aft-bench reports what happened)."""
    import dask
    from distributed import Client, LocalCluster

    quiet = _Quiet()
    cluster = None
    try:
        if address.workers is not None:
            with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
                cluster = LocalCluster(n_workers=address.workers, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address=None, silence_logs=logging.CRITICAL)
            client = Client(cluster)
        else:
            try:
                client = Client(address.url, timeout=CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                raise ClusterError(f"--scheduler {address.url}: no Dask scheduler answers there "
                                   f"({' '.join(str(exc).split())[:200]})") from None
        try:
            try:
                client.wait_for_workers(1, timeout=WORKER_WAIT_S)
            except TimeoutError:
                raise ClusterError(f"--scheduler {address}: no worker joined within {WORKER_WAIT_S:.0f} s") from None
            yield client
        finally:
            client.close()
    finally:
        if cluster is not None:
            cluster.close()
        quiet.restore()


def allowed_failures(client: Any) -> int:
    """How often the scheduler runs a task again after its worker died (0 for the clusters aft-bench starts)."""
    return int(client.run_on_scheduler(_allowed_failures))


def _allowed_failures(dask_scheduler: Any) -> int:
    return int(dask_scheduler.allowed_failures)


def threads(client: Any) -> dict[str, int]:
    """Worker address -> threads, as the scheduler knows them now."""
    return {addr: int(w.get("nthreads", 1)) for addr, w in client.scheduler_info(n_workers=-1)["workers"].items()}


class _Quiet:
    """Dask's loggers at CRITICAL for the run, restored afterwards."""

    NAMES = ("distributed", "distributed.scheduler", "distributed.worker", "distributed.nanny", "distributed.core",
             "distributed.client", "distributed.comm", "distributed.batched")

    def __init__(self) -> None:
        self._saved = {n: logging.getLogger(n).level for n in self.NAMES}
        for n in self.NAMES:
            logging.getLogger(n).setLevel(logging.CRITICAL)

    def restore(self) -> None:
        for n, level in self._saved.items():
            logging.getLogger(n).setLevel(level)
