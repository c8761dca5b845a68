"""Every process a world starts dies with its runner (issue 48): a server that starts children in sessions of
their own, and one started through a `sh -c` wrapper (as npx and uvx start theirs), leave no process behind when the
process holding them is SIGKILLed, checked by PID. Each server runs as the first process of a PID namespace of its
own where the machine allows one (`unshare`); the test says so when it does not, rather than pass vacuously."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aft_bench.common.lifetime import pid_namespace

ROOT = Path(__file__).resolve().parents[1]
ECHO = Path(__file__).parent / "data" / "echo_mcp.py"

HOLDER = """
import sys, time
from pathlib import Path
from aft_bench.runtime.gateway import Gateway
from aft_bench.runtime.trace import Trace
from aft_bench.world.external import load_external
gw = Gateway(load_external(Path(sys.argv[1])), Trace())
gw.open()
print("open", flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _marked(mark: str) -> list[int]:
    """The PIDs (as this process sees them) of live processes whose command line holds `mark`."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if mark in cmd and _alive(int(d.name)):
                out.append(int(d.name))
    return out


def _world(tmp_path: Path, command: list[str], mark: str, forked: bool = False) -> Path:
    """A world of the echo server that escapes; `forked`: started by the forked launcher (`[server.fork]`)."""
    import json

    folder = tmp_path / "w"
    folder.mkdir()
    fork = (f'[server.fork]\npython = {json.dumps(sys.executable)}\nentry = "forkable_echo:main"\n'
            if forked else "")
    (folder / "world.toml").write_text(
        f'kind = "mcp_stdio"\nid = "escape"\n[server]\npackage = "echo"\nversion = "1"\n'
        f'command = {json.dumps(command)}\nenv = {{ ECHO_ESCAPE = "{mark}", ECHO_SLEEP = "30" }}\n{fork}'
        '[probe]\nbuiltin = "folder"\n[tools.append]\neffect = "write"\n'
        'examples = [{ args = { text = "hello" } }]\n')
    return folder


def _mark() -> str:
    return f"600.{os.getpid()}{time.monotonic_ns() % 1000000:06d}"  # seconds to sleep, unique to this test


def _gone(mark: str, started: list[int]) -> list[str]:
    """What is left of the marked processes after a while: each as its PID, command line and state."""
    deadline = time.monotonic() + 20
    while (_marked(mark) or any(_alive(p) for p in started)) and time.monotonic() < deadline:
        time.sleep(0.1)  # a process on its way out may have let go of its command line before it is gone
    left = []
    for p in sorted(set(_marked(mark)) | {p for p in started if _alive(p)}):
        try:
            left.append(f"{p}: {Path(f'/proc/{p}/cmdline').read_bytes()!r} {Path(f'/proc/{p}/stat').read_text()}")
        except OSError:
            continue
    return left


@pytest.mark.parametrize("how", ["direct", "sh -c", "forked"])
def test_no_process_a_server_starts_outlives_its_killed_runner(how: str, tmp_path: Path) -> None:
    """`forked`: the server is forked by the pre-imported launcher (as the git world's are), which runs in a PID
    namespace of its own; its pid is known from the pidfd the launcher sends."""
    assert pid_namespace(), "this machine refuses a PID namespace (unshare): servers are not contained here"
    mark = _mark()
    command = ["sh", "-c", f"{sys.executable} {ECHO} {mark}"] if how == "sh -c" else [sys.executable, str(ECHO), mark]
    folder = _world(tmp_path, command, mark, forked=how == "forked")
    env = {**os.environ, "PYTHONPATH": str(ECHO.parent), "AFT_BENCH_FORK": "1"}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        started = _marked(mark)
        # the server (and its wrapper) and both of its escapees, by PID; a forked server's command line is its
        # launcher's, so only its escapees carry the mark
        assert len(started) >= (2 if how == "forked" else 3)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert _gone(mark, started) == []


def test_a_scorecard_killed_mid_call_leaves_no_server_process(tmp_path: Path) -> None:
    assert pid_namespace(), "this machine refuses a PID namespace (unshare): servers are not contained here"
    mark = _mark()
    folder = _world(tmp_path, ["sh", "-c", f"{sys.executable} {ECHO} {mark}"], mark)
    card = subprocess.Popen([sys.executable, "-m", "aft_bench.cli", "scorecard", str(folder), "--quiet"],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(_marked(mark)) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)  # a server and its escapees are up (the example's call then sleeps 30 s)
    time.sleep(1)
    started = _marked(mark)
    card.send_signal(signal.SIGKILL)
    card.wait()
    assert len(started) >= 3 and _gone(mark, started) == []


def test_a_sigterm_of_catalog_import_leaves_no_stdio_server(tmp_path: Path) -> None:
    """The import's server is started through the lifetime launcher: it gets SIGTERM when the import dies."""
    mark = _mark()
    silent = f"{sys.executable} -c 'import sys, time; time.sleep({mark})'"
    imp = subprocess.Popen([sys.executable, "-m", "aft_bench.cli", "catalog", "import-mcp", "--cmd", silent,
                            "--out", str(tmp_path / "c.toml"), "--timeout", "300"], cwd=tmp_path,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not _marked(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    started = _marked(mark)
    assert started
    imp.send_signal(signal.SIGTERM)
    imp.wait(timeout=60)
    assert _gone(mark, started) == [] and not (tmp_path / "c.toml").exists()
