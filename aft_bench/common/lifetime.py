"""Processes that die with their parent: a worker or the forkserver left running after the runner was killed
(SIGKILL gives it no chance to clean up) would hold the run directory's files and a core."""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import signal
import subprocess
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


CONTAIN_ENV = "AFT_BENCH_CONTAIN"  # "0": start servers without a PID namespace of their own

# The first process of a server's PID namespace (run by `python -I -c`, standard library only): it starts the
# server, reaps whatever ends up under it, and exits with the server's status, or at once when the lifeline (a
# pipe whose other end only the runner holds) closes: the runner is gone, however it died. When it exits, the
# kernel kills every process left in the namespace, sessions and daemons of the server's included.
INIT = r"""
import os, select, signal, sys
fd, argv = int(sys.argv[1]), sys.argv[3:]
wake_r, wake_w = os.pipe()
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)
pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for x in (fd, wake_r, wake_w):
        os.close(x)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"cannot run {argv[0]!r}: {exc.strerror}\n")
        os._exit(127)
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(null, 1)
poller = select.poll()
poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
poller.register(wake_r, select.POLLIN)
while True:
    while True:
        try:
            done, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            done = 0
        if done == 0:
            break
        if done == pid:
            code = os.waitstatus_to_exitcode(status)
            os._exit(code if code >= 0 else 128 - code)
    for ready, _ in poller.poll(1000):
        if ready == fd:
            os._exit(137)
        os.read(wake_r, 4096)
"""


@functools.lru_cache(maxsize=1)
def pid_namespace() -> tuple[str, ...]:
    """The prefix that starts a command as the first process of a PID namespace of its own (`unshare --pid
    --fork --kill-child`, as root or in a user namespace): a server that wraps itself in `sh -c`, daemonizes or
    calls setsid cannot leave it. Empty where the kernel or the machine refuses one (checked once per process),
    and with AFT_BENCH_CONTAIN=0."""
    if not sys.platform.startswith("linux") or os.environ.get(CONTAIN_ENV) == "0":
        return ()
    exe = shutil.which("unshare")
    if exe is None:
        return ()
    for prefix in ([exe, "--pid", "--fork", "--kill-child"],
                   [exe, "--user", "--map-root-user", "--pid", "--fork", "--kill-child"]):
        try:
            ok = subprocess.run([*prefix, "--", "true"], capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return (*prefix, "--")
    return ()


_LIFELINE: list[int] = []  # [read end, write end] of this process's lifeline, made at first use


def lifeline() -> int:
    """The read end of a pipe whose write end only this process holds (and what it forks): it reads EOF once
    they are all gone. Each server's namespace init watches it."""
    if not _LIFELINE or _LIFELINE[2:] != [os.getpid()]:
        r, w = os.pipe()  # both ends close on exec: a server never holds the write end
        _LIFELINE[:] = [r, w, os.getpid()]
    return _LIFELINE[0]


def contained(argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> tuple[list[str],
                                                                                                  tuple[int, ...]]:
    """`argv` started inside its own PID namespace where the machine allows one, and the descriptors to pass to
    it. The program is looked up first, so that a missing one fails as it would without the namespace (an
    OSError naming it), not as the namespace's exit status."""
    prefix = pid_namespace()
    if not prefix or not argv:
        return list(argv), ()
    prog = argv[0]
    if "/" in prog:
        path = prog if os.path.isabs(prog) or cwd is None else os.path.join(cwd, prog)
        found = path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    else:
        found = shutil.which(prog, path=(env or os.environ).get("PATH"))
    if found is None:
        raise FileNotFoundError(2, "No such file or directory", prog)
    fd = lifeline()
    return [*prefix, sys.executable, "-I", "-c", INIT, str(fd), "--", *argv], (fd,)


def main(argv: list[str]) -> None:
    """`python -m aft_bench.common.lifetime [--sigkill] COMMAND ARG...`: run COMMAND (by exec, so its pid and exit
    status are its own) as a process that gets SIGTERM (or SIGKILL) when its parent dies, whatever program it is: serve-matrix starts its
    client command this way, so a SIGKILL of serve-matrix does not leave the client running."""
    sig = signal.SIGTERM
    if argv[:1] == ["--sigkill"]:  # for a command that ignores SIGTERM (unshare, while it waits for its child)
        sig, argv = signal.SIGKILL, argv[1:]
    if not argv:
        print("usage: python -m aft_bench.common.lifetime [--sigkill] COMMAND [ARG...]", file=sys.stderr)
        os._exit(2)
    die_with_parent(sig)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:  # as a shell says it: the command could not be run
        print(f"aft-bench: cannot run {argv[0]!r}: {exc.strerror}", file=sys.stderr)
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
