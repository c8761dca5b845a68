"""The forked launcher's other end: run by a Python server's own interpreter (its venv), it imports the server's
modules once, then forks one fresh server process per request, so an episode pays a fork instead of the
interpreter's start-up and imports. Standard library only: it never imports aft_bench (another venv runs it).

    python -c BOOT zygote.py '{"fd": 3, "entry": "pkg:main", "preload": ["pkg.server"]}'   (launcher.BOOT)

Over the Unix socket at `fd` (SOCK_SEQPACKET, one JSON message each way per request); the first message says
`{"ready": true, "pid": N, "pidfd": B}` (B: whether this interpreter can make pidfds) or `{"error": ...}`:
- `{"op": "spawn"}` with four file descriptors (the child's stdin, stdout, stderr, and a file holding the request's
  body `{"argv": [...], "cwd": ..., "env": {...}}`, which may be longer than a datagram can be) answers
  `{"pid": N}` (this process's view of it) with a pidfd for it: the child has its own process group, gets SIGKILL
  if this process dies, and runs `entry` with `sys.argv = argv` in `cwd` with exactly `env`.
- `{"op": "reap", "pid": N}` (after the child exited, or was killed) answers `{"status": S}`, its exit status as
  `subprocess` gives it (negative: killed by that signal). Until then the exited child keeps its pid, so a
  signal to its group can never reach a recycled one.
When the socket closes (the runner exited or was killed), every child's group is killed and this process exits.
"""

from __future__ import annotations

import ctypes
import importlib
import io
import json
import os
import signal
import socket
import sys
from typing import Any

PR_SET_PDEATHSIG = 1
MAX_MESSAGE = 1 << 20


def _die_with(parent: int) -> None:
    """SIGKILL when this process's parent (the launcher) exits; exit now if it already has."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def _child(sock: socket.socket, request: dict[str, Any], fds: list[int], entry: str, launcher: int) -> None:
    """In the forked child: become the server process the request describes, run it, and exit with its status."""
    code: Any = 1
    try:
        os.setpgid(0, 0)
        _die_with(launcher)
        sock.close()
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        _reopen_stdio()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = list(request["argv"])
        sys.path.insert(0, os.path.dirname(os.path.realpath(sys.argv[0])))  # as for a script started from nothing
        module, _, name = entry.partition(":")
        code = getattr(importlib.import_module(module), name)()
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:  # noqa: BLE001 - the server crashed: say why on its stderr, as a fresh one would
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    if code is None:
        os._exit(0)
    os._exit(code if isinstance(code, int) else 1)


def _reopen_stdio() -> None:
    """Text streams over the new fds 0-2, made as the interpreter's start-up makes them (same encoding, errors and
    buffering): the launcher's own, opened on /dev/null, would think a pipe seekable."""
    for fd, name, mode in ((0, "stdin", "rb"), (1, "stdout", "wb"), (2, "stderr", "wb")):
        old = getattr(sys, name)
        raw = io.FileIO(fd, mode, closefd=False)
        buffered = io.BufferedReader(raw) if mode == "rb" else io.BufferedWriter(raw)
        new = io.TextIOWrapper(buffered, encoding=old.encoding, errors=old.errors, line_buffering=old.line_buffering,
                               write_through=getattr(old, "write_through", False))
        setattr(sys, name, new)
        setattr(sys, f"__{name}__", new)


def _status(raw: int) -> int:
    return -os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)


def _body(fd: int) -> dict[str, Any]:
    """The spawn request's body, from the file the launcher sent with it (closed here)."""
    with os.fdopen(fd, "rb") as f:
        return json.loads(f.read())


def _can_pidfd() -> bool:
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (OSError, AttributeError):
        return False
    return True


def _answer_spawn(sock: socket.socket, pid: int) -> None:
    """The child's pid as this process sees it, with a pidfd for it: in a PID namespace of its own (where the
    launcher runs contained) that pid means nothing to the runner, the pidfd does."""
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        sock.send(json.dumps({"pid": pid}).encode())
        return
    try:
        socket.send_fds(sock, [json.dumps({"pid": pid}).encode()], [pidfd])
    finally:
        os.close(pidfd)


def serve(spec: dict[str, Any]) -> None:
    sock = socket.socket(fileno=int(spec["fd"]))
    try:
        for module in spec.get("preload") or []:
            importlib.import_module(module)
        module, _, name = str(spec["entry"]).partition(":")
        if not callable(getattr(importlib.import_module(module), name, None)):
            raise ImportError(f"{spec['entry']} is not a function")
    except BaseException as exc:  # noqa: BLE001 - reported to the launcher, which names the world
        sock.send(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
        return
    sock.send(json.dumps({"ready": True, "pid": os.getpid(), "pidfd": _can_pidfd()}).encode())
    children: set[int] = set()
    me = os.getpid()
    try:
        while True:
            data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 4)
            if not data:
                return  # the launcher has gone
            request = json.loads(data)
            if request.get("op") == "spawn":
                request.update(_body(fds.pop()))
                pid = os.fork()
                if pid == 0:
                    _child(sock, request, fds, str(spec["entry"]), me)
                for fd in fds:
                    os.close(fd)
                children.add(pid)
                _answer_spawn(sock, pid)
            elif request.get("op") == "reap":
                pid = int(request["pid"])
                status = _status(os.waitpid(pid, 0)[1]) if pid in children else None
                children.discard(pid)
                sock.send(json.dumps({"status": status}).encode())
    finally:
        for pid in children:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]))
