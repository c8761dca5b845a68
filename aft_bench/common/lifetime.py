"""Processes that die with their parent: a worker or the forkserver left running after the runner was killed
(SIGKILL gives it no chance to clean up) would hold the run directory's files and a core."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> None:
    """Ask the kernel to send this process SIGTERM when the thread that started it exits (Linux; elsewhere a
    no-op), and exit now if that already happened."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent or parent == 1:  # orphaned before the request took effect
        os._exit(1)
