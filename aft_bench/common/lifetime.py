"""Processes that die with their parent: a worker or the forkserver left running after the runner was killed
(SIGKILL gives it no chance to clean up) would hold the run directory's files and a core."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send this process `sig` (SIGTERM unless told) when the thread that started it exits
    (Linux; elsewhere a no-op), and exit now if that already happened."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent or parent == 1:  # orphaned before the request took effect
        os._exit(1)


def main(argv: list[str]) -> None:
    """`python -m aft_bench.common.lifetime COMMAND ARG...`: run COMMAND (by exec, so its pid and exit status are
    its own) as a process that gets SIGTERM when its parent dies, whatever program it is: serve-matrix starts its
    client command this way, so a SIGKILL of serve-matrix does not leave the client running."""
    if not argv:
        print("usage: python -m aft_bench.common.lifetime COMMAND [ARG...]", file=sys.stderr)
        os._exit(2)
    die_with_parent()
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:  # as a shell says it: the command could not be run
        print(f"aft-bench: cannot run {argv[0]!r}: {exc.strerror}", file=sys.stderr)
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
