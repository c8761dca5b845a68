"""The forked launcher: one pre-imported process per Python server (and per runner process) that forks a fresh
server for each episode, so an episode pays a fork (milliseconds) instead of an interpreter's start-up and
imports (about a second for mcp-server-git). Each server is still a new process on its own resource, never reused;
only the imports are shared, read-only, from before the fork. A world opts in with `[server.fork]`.

The launcher runs `zygote.py` with the server's own interpreter, as the first process of a PID namespace of its
own where the machine allows one (common/lifetime.py). When this process exits or is killed, the launcher's socket
closes and it kills every server it started, and the namespace ends with it: a server that started children in
sessions of their own leaves none behind (no orphans). Servers are known here by the pidfd the launcher sends.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import threading
from pathlib import Path
from typing import IO, Any, Mapping, Sequence

from aft_bench.common.lifetime import contained

ZYGOTE = Path(__file__).with_name("zygote.py")
# run the zygote as a script without its folder (aft_bench/world, whose module names could shadow the standard
# library's) or the current folder on sys.path, with the interpreter's usual environment and site handling
BOOT = "import runpy, sys; del sys.path[0]; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
MAX_MESSAGE = 1 << 20


class LaunchFailed(Exception):
    """The launcher did not start, could not import the server, or stopped answering; the message says which."""


def _own_group() -> None:
    os.setpgid(0, 0)  # a Ctrl-C at the terminal is the runner's to handle: the launcher ends when its socket does


class Launcher:
    """A running zygote for one (interpreter, entry point, preloaded modules); thread-safe."""

    def __init__(self, python: str, entry: str, preload: Sequence[str], timeout_s: float) -> None:
        self.key = (python, entry, tuple(preload))
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = ours
        self._lock = threading.Lock()
        spec = {"fd": theirs.fileno(), "entry": entry, "preload": list(preload)}
        try:
            argv, fds = contained([python, "-c", BOOT, str(ZYGOTE), json.dumps(spec)])
            self.proc = subprocess.Popen(argv, pass_fds=[theirs.fileno(), *fds], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         preexec_fn=_own_group)
        except OSError as exc:
            ours.close()
            raise LaunchFailed(f"cannot start the forked launcher {python!r}: {exc.strerror or exc}") from None
        finally:
            theirs.close()
        try:
            ready = self._receive(timeout_s, "start")
        except LaunchFailed:
            self.close()
            raise
        if "error" in ready:
            self.close()
            raise LaunchFailed(f"the forked launcher could not load {entry}: {ready['error']}")
        if fds and not ready.get("pidfd"):  # in a PID namespace of its own, the pid it names is not ours
            self.close()
            raise LaunchFailed(f"the forked launcher's interpreter {python!r} cannot make a pidfd (Python 3.9 and "
                               "Linux 5.3 or later can), which a launcher in a PID namespace of its own needs: "
                               "start this world without [server.fork], or with AFT_BENCH_CONTAIN=0")

    def _receive(self, timeout_s: float, what: str) -> dict[str, Any]:
        return self._receive_fds(timeout_s, what)[0]

    def _receive_fds(self, timeout_s: float, what: str) -> tuple[dict[str, Any], list[int]]:
        self._sock.settimeout(timeout_s)
        try:
            data, fds, _flags, _addr = socket.recv_fds(self._sock, MAX_MESSAGE, 1)
        except socket.timeout:
            raise LaunchFailed(f"the forked launcher did not answer {what} within {timeout_s:g} s") from None
        except OSError as exc:
            raise LaunchFailed(f"the forked launcher failed during {what}: {exc}") from None
        if not data:
            for fd in fds:
                os.close(fd)
            raise LaunchFailed(f"the forked launcher exited during {what}")
        return json.loads(data), list(fds)

    def spawn(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str], stderr_path: Path | None,
              timeout_s: float) -> ForkedProcess:
        """A fresh server process with pipes for its stdin and stdout, its stderr appended to `stderr_path`."""
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err = os.open(stderr_path if stderr_path is not None else os.devnull,
                      os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        body = _sealed(json.dumps({"argv": list(argv), "cwd": str(cwd), "env": dict(env)}).encode())
        try:
            with self._lock:
                try:
                    socket.send_fds(self._sock, [b'{"op": "spawn"}'], [in_r, out_w, err, body])
                except OSError as exc:
                    raise LaunchFailed(f"the forked launcher is gone: {exc}") from None
                answer, pidfds = self._receive_fds(timeout_s, "spawn")
        except BaseException:
            os.close(in_w)
            os.close(out_r)
            raise
        finally:
            for fd in (in_r, out_w, err, body):
                os.close(fd)
        local = int(answer["pid"])
        if pidfds:
            return ForkedProcess(_pid_of(pidfds[0]), os.fdopen(in_w, "wb"), os.fdopen(out_r, "rb"), self,
                                 local=local, pidfd=pidfds[0])
        return ForkedProcess(local, os.fdopen(in_w, "wb"), os.fdopen(out_r, "rb"), self)

    def reap(self, pid: int) -> int | None:
        """The exit status of a child that has exited (it is a zombie until this asks)."""
        with self._lock:
            try:
                self._sock.send(json.dumps({"op": "reap", "pid": pid}).encode())
                return self._receive(10.0, "reap").get("status")
            except (OSError, LaunchFailed):
                return None

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        self._sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ForkedProcess:
    """A server the launcher forked, with the part of `subprocess.Popen` the stdio client uses (pid, stdin,
    stdout, poll, wait); its exit is watched through a pidfd, its status asked of the launcher."""

    def __init__(self, pid: int, stdin: IO[bytes], stdout: IO[bytes], launcher: Launcher, local: int | None = None,
                 pidfd: int | None = None) -> None:
        self.pid = pid  # as this process sees it (for signals to its group)
        self.local = pid if local is None else local  # as the launcher sees it (for reaping)
        self.stdin: IO[bytes] | None = stdin
        self.stdout: IO[bytes] | None = stdout
        self.returncode: int | None = None
        self._launcher = launcher
        self._pidfd: int | None = os.pidfd_open(pid) if pidfd is None else pidfd

    def poll(self) -> int | None:
        return self._settle(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._settle(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
        return code

    def _settle(self, timeout: float | None) -> int | None:
        if self.returncode is not None or self._pidfd is None:
            return self.returncode
        poller = select.poll()  # not select(): a busy process may hold more than FD_SETSIZE descriptors
        poller.register(self._pidfd, select.POLLIN)
        if not poller.poll(None if timeout is None else max(0, int(timeout * 1000))):
            return None
        os.close(self._pidfd)
        self._pidfd = None
        status = self._launcher.reap(self.local)
        self.returncode = status if status is not None else -int(signal.SIGKILL)
        return self.returncode


def _sealed(data: bytes) -> int:
    """A memory file holding `data`, read from its start: a spawn request's argv, folder and environment travel in
    it, as a datagram cannot be longer than the socket's send buffer (about 208 KB by default)."""
    fd = os.memfd_create("aft-bench-spawn", os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _pid_of(pidfd: int) -> int:
    """The pid a pidfd refers to, in this process's PID namespace (the `Pid:` line of its fdinfo)."""
    for line in Path(f"/proc/self/fdinfo/{pidfd}").read_text().splitlines():
        if line.startswith("Pid:"):
            return int(line.split()[1])
    raise LaunchFailed("the forked launcher sent a pidfd this kernel cannot read")


_LAUNCHERS: dict[tuple[int, tuple[str, str, tuple[str, ...]]], Launcher] = {}
_LAUNCHERS_LOCK = threading.Lock()


def launcher(python: str, entry: str, preload: Sequence[str], timeout_s: float) -> Launcher:
    """This process's launcher for that server, started on first use (a process forked from this one starts its
    own: a socket is never shared between processes)."""
    key = (os.getpid(), (python, entry, tuple(preload)))
    with _LAUNCHERS_LOCK:
        found = _LAUNCHERS.get(key)
        if found is not None and found.alive:
            return found
        made = _LAUNCHERS[key] = Launcher(python, entry, preload, timeout_s)
        return made
