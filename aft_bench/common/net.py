"""Loopback plumbing for the servers aft-bench starts (MCP over HTTP, model servers): a free port on
127.0.0.1, and waiting until a server listens there."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

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
