"""A command's own scratch folder in the system's temp folder, for what it makes outside any run directory (a
scorecard's or `validate --live`'s episode folders, init-world's trial folder): `aft-bench-scratch/PID-START`,
removed at exit; after a SIGKILL (no exit handler runs), by a small reaper process that waits for this one to be
gone, and failing that by the next command that makes one (its process is gone)."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BASE = "aft-bench-scratch"
_MINE: list[Path] = []


def _started(pid: int) -> str | None:
    """A process's start time (clock ticks since boot), which tells a reused pid from the one that made a folder."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _sweep(base: Path) -> None:
    """Remove the folders of processes that are gone (killed before their exit handlers ran)."""
    for d in base.iterdir() if base.is_dir() else []:
        pid, _, start = d.name.partition("-")
        if pid.isdigit() and start and _started(int(pid)) != start and int(pid) != os.getpid():
            shutil.rmtree(d, ignore_errors=True)


def scratch_dir() -> Path:
    """This process's scratch folder, made (and the dead's swept) at first use, removed at exit."""
    if _MINE and _MINE[0].name.startswith(f"{os.getpid()}-") and _MINE[0].is_dir():
        return _MINE[0]
    base = Path(tempfile.gettempdir()) / BASE
    base.mkdir(exist_ok=True)
    _sweep(base)
    mine = base / f"{os.getpid()}-{_started(os.getpid()) or 'x'}"
    mine.mkdir(parents=True, exist_ok=True)  # (another command's reaper may just have removed an empty base)
    if not _MINE:
        atexit.register(_remove)
    _MINE[:] = [mine]
    _reap_when_gone(mine)
    return mine


# reads this process's lifeline to its end (EOF: this process and what it forked are gone), then removes the folder,
# and the shared aft-bench-scratch too where no other command's folder is left in it
REAPER = ("import os, shutil, sys\nwhile os.read(int(sys.argv[1]), 1): pass\nshutil.rmtree(sys.argv[2], True)\n"
          "try:\n    os.rmdir(os.path.dirname(sys.argv[2]))\nexcept OSError:\n    pass")


def _reap_when_gone(folder: Path) -> None:
    """Start the process that removes `folder` once this one is gone, however it ended (a SIGKILL runs no exit
    handler); in a session of its own, so a signal to this process's group does not end it first."""
    from aft_bench.common.lifetime import lifeline

    fd = lifeline()
    try:
        subprocess.Popen([sys.executable, "-I", "-c", REAPER, str(fd), str(folder)], pass_fds=[fd], cwd="/",
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    except OSError:
        pass  # the next command's sweep still removes it


def hold_multiprocessing_temp() -> None:
    """multiprocessing's own temp folder (`pymp-*`, the forkserver's socket; made once per process, then cached)
    made inside this process's scratch folder, where the next command sweeps it if a SIGKILL left it, instead of
    loose in the temp folder."""
    from multiprocessing import util

    mine = scratch_dir()
    if len(os.fsencode(mine)) + len(SOCKET_TAIL) > SOCKET_PATH_MAX:
        return  # the forkserver's socket path would not fit: multiprocessing's default place, loose but working
    saved = tempfile.tempdir
    tempfile.tempdir = str(mine)
    try:
        made = Path(util.get_temp_dir())
    finally:
        tempfile.tempdir = saved
    if made.parent == mine:
        _MP[:] = [made]


SOCKET_PATH_MAX = 107  # the longest path a Unix socket can bind (sun_path holds 108 bytes with its NUL)
SOCKET_TAIL = "/pymp-XXXXXXXX/listener-XXXXXXXX"  # what multiprocessing adds to the folder for its socket
_MP: list[Path] = []  # multiprocessing's temp folder, when it lies in ours


def _remove() -> None:
    for d in _MINE:
        if not d.name.startswith(f"{os.getpid()}-"):  # never a folder a forked child inherited the name of
            continue
        if _MP and _MP[0].parent == d and _MP[0].exists():
            # multiprocessing removes its folder in its own exit handler, which runs after this one (it was
            # registered first): remove ours after it, as its last finalizer, or its removal would fail
            from multiprocessing import util

            util.Finalize(None, shutil.rmtree, args=(d,), kwargs={"ignore_errors": True}, exitpriority=-200)
        else:
            shutil.rmtree(d, ignore_errors=True)
