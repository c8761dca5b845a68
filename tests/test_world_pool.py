"""The pool of prepared external worlds (issue 41): the next episode's resource and server are made while this one
plays, never reused, drained with nothing left behind; real servers throughout (mcp-server-git and the node
memory server), nothing mocked."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from aft_bench.world import pool
from aft_bench.world.external import load_external
from aft_bench.world.pool import Pool

ROOT = Path(__file__).resolve().parents[1]
GIT = load_external(ROOT / "worlds" / "git")
MEMORY = load_external(ROOT / "worlds" / "memory")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def _until(cond, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


@pytest.mark.parametrize("world", [GIT, MEMORY], ids=["git (forked)", "memory (node)"])
def test_a_repeated_world_is_prepared_ahead_and_never_handed_out_twice(world, tmp_path: Path) -> None:
    p = Pool()
    taken = [p.take(world, tmp_path) for _ in range(4)]
    try:
        # the first two are made when asked; from the second on, the next one is made ahead
        assert [t.ahead for t in taken] == [False, False, True, True]
        assert len({t.resource.root for t in taken}) == 4 and len({t.server.pid for t in taken}) == 4
        assert all(t.s0 == taken[0].s0 for t in taken)  # each a fresh resource in the same state
        assert all(t.listed == taken[0].listed for t in taken)
    finally:
        for t in taken:
            t.discard()
    ahead = [f for f in p._made]  # the fifth, made ahead for an episode that will not come
    assert len(ahead) == 1
    fifth = ahead[0].result()
    pid, root = fifth.server.pid, fifth.resource.root
    assert _alive(pid) and root.is_dir()
    assert p.drain(tmp_path) == 1
    assert not root.exists() and _until(lambda: not _alive(pid))
    assert sorted(x.name for x in tmp_path.iterdir()) == []


def test_a_folder_asked_for_once_is_never_prepared_ahead(tmp_path: Path) -> None:
    """A Dask worker runs each cell in its own private folder: nothing is made there for nobody."""
    p = Pool()
    for i in range(2):
        parent = tmp_path / f"cell-{i}"
        parent.mkdir()
        got = p.take(GIT, parent)
        got.discard()
    assert p._made == {} and p.drain() == 0


def test_a_world_prepared_ahead_whose_folder_was_removed_is_discarded_and_made_again(tmp_path: Path) -> None:
    import shutil

    p = Pool()
    parent = tmp_path / "scratch"
    parent.mkdir()
    for _ in range(2):
        p.take(GIT, parent).discard()
    waiting = next(iter(p._made)).result()
    pid = waiting.server.pid
    assert pid is not None and _alive(pid)
    shutil.rmtree(waiting.resource.root)
    got = p.take(GIT, parent)
    try:
        assert got.resource.root.is_dir() and not got.ahead and got.resource.root != waiting.resource.root
        assert _until(lambda: not _alive(pid))
    finally:
        got.discard()
        p.drain()


def test_a_world_that_cannot_be_prepared_fails_the_take_and_leaves_nothing(tmp_path: Path) -> None:
    bad = GIT.model_copy(update={"server": GIT.server.model_copy(update={"command": ("/nonexistent/server",),
                                                                         "fork": None})})
    p = Pool()
    for _ in range(3):
        with pytest.raises(Exception, match="cannot start '/nonexistent/server'"):
            p.take(bad, tmp_path)
    p.drain()
    assert list(tmp_path.iterdir()) == []


def test_the_pool_is_off_unless_turned_on(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(pool.POOL_ENV, raising=False)
    for _ in range(3):
        got = pool.take(GIT, tmp_path)
        assert not got.ahead
        got.discard()
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv(pool.POOL_ENV, "1")
    got = [pool.take(GIT, tmp_path) for _ in range(3)]
    assert [g.ahead for g in got] == [False, False, True]
    for g in got:
        g.discard()
    assert pool.drain(tmp_path) == 1 and list(tmp_path.iterdir()) == []


def test_a_world_at_another_version_or_with_another_server_has_its_own_hash() -> None:
    """Rows record the world's hash and the pool keys prepared worlds by it: a copy must never keep the original's
    cached hash, which pydantic's model_copy would carry over."""
    original = GIT.hash  # cached on the original first
    older = GIT.with_version("2025.11.25")
    other = GIT.model_copy(update={"server": GIT.server.model_copy(update={"call_timeout_s": 7.0})})
    assert len({original, older.hash, other.hash}) == 3
    # how the server is launched is not part of the world's identity (the same episode either way)
    assert GIT.model_copy(update={"server": GIT.server.model_copy(update={"fork": None})}).hash == original
    assert older.hash == load_external(ROOT / "worlds" / "git").with_version("2025.11.25").hash


def test_a_world_started_from_nothing_never_gets_a_server_prepared_by_the_forked_launcher(tmp_path: Path) -> None:
    from aft_bench.world.launcher import ForkedProcess

    fresh = GIT.model_copy(update={"server": GIT.server.model_copy(update={"fork": None})})
    p = Pool()
    kinds = []
    for world in (GIT, fresh) * 3:
        got = p.take(world, tmp_path)
        kinds.append((world.server.fork is not None, isinstance(got.server.proc, ForkedProcess), got.ahead))
        got.discard()
    p.drain()
    assert [k[:2] for k in kinds] == [(True, True), (False, False)] * 3
    assert [k[2] for k in kinds] == [False, False, False, False, True, True]  # each kind prepared its own ahead


def test_a_forked_server_is_stopped_in_a_process_holding_more_than_1024_descriptors() -> None:
    """A forked server's exit is watched through a pidfd: with select() a busy process (a test runner, a server
    of many sessions) holding descriptors past FD_SETSIZE failed to stop it ('filedescriptor out of range')."""
    import subprocess
    import sys

    script = ("import os, resource; soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE); "
              "resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard)); "
              "held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]; "
              "from pathlib import Path; from aft_bench.world.pool import prepare; "
              "from aft_bench.world.external import load_external; "
              f"w = load_external(Path({str(ROOT / 'worlds' / 'git')!r})); "
              "p = prepare(w, None); assert p.server.proc.stdin.fileno() > 1024; p.discard(); print('stopped')")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "stopped", done.stderr[-500:]


def test_a_child_forked_from_a_process_with_a_world_prepared_ahead_starts_with_an_empty_pool(tmp_path: Path) -> None:
    p = Pool()
    for _ in range(2):
        p.take(GIT, tmp_path).discard()
    assert len(p._made) == 1  # the parent's, prepared ahead
    pid = os.fork()
    if pid == 0:  # the child must never hand out the parent's world (its server belongs to the parent)
        code = 0 if (p._made, p._ahead, p._asked, p._thread) == ({}, {}, set(), None) else 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(p._made) == 1 and p.drain() == 1


def test_nothing_is_prepared_ahead_in_the_system_s_temp_folder() -> None:
    """Only a named folder (a run's scratch, removed by the runner) gets worlds ahead: a process that ends without
    its exit handlers (an xdist worker, a SIGKILL) would leave them in /tmp."""
    p = Pool()
    for _ in range(3):
        got = p.take(GIT, None)
        assert not got.ahead
        got.discard()
    assert p._made == {}


def test_a_world_prepared_ahead_whose_server_has_exited_is_discarded_and_made_again(tmp_path: Path) -> None:
    """A server may exit while its prepared world waits (crashed, idled out): never handed to an episode."""
    import signal

    p = Pool()
    parent = tmp_path / "scratch"
    parent.mkdir()
    for _ in range(2):
        p.take(MEMORY, parent).discard()
    (fut,) = list(p._made)
    ahead = fut.result()
    os.killpg(ahead.server.pid, signal.SIGKILL)  # the prepared server dies before anyone takes it
    assert _until(lambda: ahead.server.proc.poll() is not None)
    got = p.take(MEMORY, parent)
    try:
        assert not got.ahead and got.server.pid != ahead.server.pid and got.server.proc.poll() is None
        assert not ahead.resource.root.exists()  # the dead one's folder went with it
        assert [t["name"] for t in got.server.tools()] == [t["name"] for t in got.listed]  # it answers
    finally:
        got.discard()
        p.drain()
