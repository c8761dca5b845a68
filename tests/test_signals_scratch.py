"""What a killed command leaves (issue 48): SIGTERM of `scorecard`, `validate --live` or `init-world` while a real
server is running stops it and removes its folders at once; after a SIGKILL, what the dead one left is removed by
the reaper it started, or, where that could not run, by the next such command (its process is gone). Real server processes throughout."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ECHO = Path(__file__).parent / "data" / "echo_mcp.py"


def _world(tmp_path: Path) -> Path:
    folder = tmp_path / "w"
    folder.mkdir()
    (folder / "world.toml").write_text(
        f'kind = "mcp_stdio"\nid = "slow"\n[server]\npackage = "echo"\nversion = "1"\n'
        f'command = ["{sys.executable}", "{ECHO}", "{tmp_path}"]\nenv = {{ ECHO_SLEEP = "60" }}\n'
        '[probe]\nbuiltin = "folder"\n[tools.append]\neffect = "write"\nexamples = [{ args = { text = "hi" } }]\n')
    return folder


def _servers(tmp_path: Path) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().decode(errors="replace")
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if str(ECHO) in cmd and str(tmp_path) in cmd and state != "Z":
                out.append(int(d.name))
    return out


def _start(args: list[str], tmp_path: Path, scratch: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TMPDIR": str(scratch)}
    # as started from a terminal: SIGHUP at its default, even where the suite itself runs under nohup (an ignored
    # signal is inherited, and a command rightly leaves a signal ignored that it was started ignoring)
    return subprocess.Popen([sys.executable, "-m", "aft_bench.cli", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))


def _wait(pred, seconds: float = 60) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _folders(scratch: Path) -> list[Path]:
    return sorted(p for p in (scratch / "aft-bench-scratch").rglob("*") if p.is_dir())


@pytest.mark.parametrize(("command", "sig"), [("scorecard", signal.SIGTERM), ("validate", signal.SIGTERM),
                                             ("scorecard", signal.SIGHUP)], ids=["scorecard", "validate", "hup"])
def test_sigterm_stops_the_server_and_removes_the_folders(command: str, sig: int, tmp_path: Path) -> None:
    """SIGTERM (a CI runner's timeout, kill) or SIGHUP (a closed terminal) ends the command as Ctrl-C does."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    folder = _world(tmp_path)
    args = ["scorecard", str(folder), "--quiet"] if command == "scorecard" else ["validate", "--live", str(folder)]
    proc = _start(args, tmp_path, scratch)
    # an example's call is under way (the server sleeps in it): a server is up and its folder made
    assert _wait(lambda: any(p.name.startswith("aft-slow-") for p in _folders(scratch)) and _servers(tmp_path))
    time.sleep(0.5)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and b"interrupted" in err and err.count(b"\n") == 1, err
    assert _wait(lambda: not _servers(tmp_path), 20)
    assert not (scratch / "aft-bench-scratch").exists() or _folders(scratch) == []


def _reapers(folder: Path) -> list[int]:
    """The reaper processes waiting to remove `folder` (scratch.REAPER, given the folder as its argument)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                args = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(folder).encode() in args and any(b"shutil.rmtree" in a for a in args):
                out.append(int(d.name))
    return out


def test_after_a_sigkill_the_commands_reaper_removes_its_folder_and_no_server_is_left(tmp_path: Path) -> None:
    """SIGKILL runs no exit handler: the reaper the command started, which waits for it to be gone, removes its
    scratch folder (the server's episode folder in it) and the emptied aft-bench-scratch; the server dies with it."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    folder = _world(tmp_path)
    proc = _start(["scorecard", str(folder), "--quiet"], tmp_path, scratch)
    assert _wait(lambda: any(p.name.startswith("aft-slow-") for p in _folders(scratch)) and _servers(tmp_path))
    mine = [d for d in (scratch / "aft-bench-scratch").iterdir() if d.name.startswith(f"{proc.pid}-")]
    assert len(mine) == 1 and len(_reapers(mine[0])) == 1
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _wait(lambda: not (scratch / "aft-bench-scratch").exists(), 30)
    assert _wait(lambda: not _servers(tmp_path) and not _reapers(mine[0]), 20)


def test_after_a_sigkill_the_next_command_removes_what_the_dead_one_left(tmp_path: Path) -> None:
    """Where the reaper could not do it (killed itself, here first), the next command's sweep does."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    folder = _world(tmp_path)
    proc = _start(["scorecard", str(folder), "--quiet"], tmp_path, scratch)
    assert _wait(lambda: any(p.name.startswith("aft-slow-") for p in _folders(scratch)))
    mine = [d for d in (scratch / "aft-bench-scratch").iterdir() if d.name.startswith(f"{proc.pid}-")]
    assert len(mine) == 1
    for pid in _reapers(mine[0]):
        os.kill(pid, signal.SIGKILL)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    left = [p for p in _folders(scratch) if p.name.startswith("aft-slow-")]
    assert left  # SIGKILL gives no chance to clean up, and no reaper was left to
    again = _start(["init-world", "echoes", "--", sys.executable, str(ECHO)], tmp_path, scratch)
    _, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    assert not any(p.exists() for p in left)
    assert _wait(lambda: not (scratch / "aft-bench-scratch").exists() or _folders(scratch) == [], 30)
    assert tempfile.gettempdir() != str(scratch)  # the test's own temp folder untouched


HOLD = """
import sys
from multiprocessing import util
from aft_bench.common.scratch import hold_multiprocessing_temp, scratch_dir
hold_multiprocessing_temp()
print(util.get_temp_dir(), scratch_dir(), sep="\\n")
"""


@pytest.mark.parametrize("long", [False, True], ids=["short", "too long for a socket"])
def test_multiprocessing_s_folder_lies_in_the_scratch_folder_where_its_socket_fits(long: bool, tmp_path: Path) -> None:
    """run's forkserver binds a Unix socket in multiprocessing's folder: inside the scratch folder (swept after a
    SIGKILL) where the path fits in a socket address, multiprocessing's own place where it would not; both removed
    at exit."""
    temp = Path(tempfile.mkdtemp(prefix="t-", dir="/tmp")) if not long else tmp_path / ("x" * 60)
    temp.mkdir(exist_ok=True)
    try:
        out = subprocess.run([sys.executable, "-c", HOLD], env={**os.environ, "TMPDIR": str(temp)},
                             capture_output=True, text=True, check=True)
        made, mine = (Path(x) for x in out.stdout.split())
        assert (made.parent == mine) is not long and made.name.startswith("pymp-") and temp in made.parents
        assert not made.exists() and not mine.exists() and out.stderr == ""
    finally:
        if not long:
            shutil.rmtree(temp, ignore_errors=True)
