"""Loopback plumbing for the servers aft-bench starts (MCP over HTTP, model servers, the viewer): a free port on
127.0.0.1, a socket bound before anything is written, and waiting until a server listens there."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from aft_bench.common.errors import InputError

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout_s: float, alive: Callable[[], bool] = lambda: True) -> bool:
    """True once something accepts connections on 127.0.0.1:`port`; False when `alive()` turns false (the
    server process exited) or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive():
        try:
            socket.create_connection((LOOPBACK, port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def listen(host: str, port: int) -> socket.socket:
    """A listening socket, bound before anything is written or served: an unknown host is an InputError naming
    `--host` (exit 2), a port in use an OSError naming `--port` (exit 1)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):  # UnicodeError: a name the IDNA codec refuses (`not..a..host`)
        raise InputError("--host", "--host", host, "not a host name or address this machine can listen on") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}", f"--port {port}") from None
    return sock
