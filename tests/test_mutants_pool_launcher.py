"""The pool of prepared worlds (`world/pool.py`) and the forked launcher (`world/launcher.py`) on tiny
standard-library servers written here: a stdio and an HTTP "witness" that lists one tool whose description says
what it was started with (its arguments, its folder, its environment), so every path, port and variable the pool
expands is read back from the real process. Exact outcomes throughout: which world a take returns, what is left
after a release (no process by PID, no folder, no log), the exact ServerFailed and LaunchFailed messages, and that
a dead launcher is never reused. Written for `make mutants`; every wait is bounded, no episode is run."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from aft_bench.common.errors import InputError
from aft_bench.common.lifetime import pid_namespace
from aft_bench.world import launcher as lm
from aft_bench.world import pool
from aft_bench.world.external import ExternalWorld, load_external
from aft_bench.world.launcher import ForkedProcess, LaunchFailed, Launcher, _pid_of, launcher
from aft_bench.world.mcp_http import HttpServer
from aft_bench.world.mcp_stdio import ServerFailed, StdioServer
from aft_bench.world.pool import Pool, PoolDrained, Prepared
from aft_bench.world.resource import Resource, ResourceFailed

DATA = Path(__file__).resolve().parent / "data"  # forkable_echo.py: `module:main` that runs argv[1] as a script
FORK = f'[server.fork]\npython = {json.dumps(sys.executable)}\nentry = "forkable_echo:main"\n'

# a stdio MCP server that reports how it was started; WITNESS_* variables make it misbehave
WITNESS = r'''
import json, os, sys, time
report = {"argv": sys.argv[1:], "cwd": os.getcwd(), "where": os.environ.get("WHERE"),
          "fixture": os.environ.get("FIXTURE")}
time.sleep(float(os.environ.get("WITNESS_START_SLEEP") or 0))
for line in sys.stdin:
    if os.environ.get("WITNESS_EXIT"):  # read the first request, say why on stderr and exit with that status
        print(os.environ.get("WITNESS_SAY", ""), file=sys.stderr, flush=True)
        sys.exit(int(os.environ["WITNESS_EXIT"]))
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg.get("method")
    if method == "initialize":
        time.sleep(float(os.environ.get("WITNESS_INIT_SLEEP") or 0))
        result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "witness", "version": "1"}}
    elif method == "tools/list":
        time.sleep(float(os.environ.get("WITNESS_LIST_SLEEP") or 0))
        result = {"tools": [{"name": "where", "description": json.dumps(report), "inputSchema": {"type": "object"}}]}
    else:
        result = {"content": [{"type": "text", "text": "ok"}], "isError": False}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
'''

# the same over streamable HTTP (one JSON body per POST): `witness_http.py PORT ARG...`
WITNESS_HTTP = r'''
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
if os.environ.get("WITNESS_EXIT"):
    print(os.environ.get("WITNESS_SAY", ""), file=sys.stderr, flush=True)
    sys.exit(int(os.environ["WITNESS_EXIT"]))
report = {"argv": sys.argv[1:], "cwd": os.getcwd(), "where": os.environ.get("WHERE"),
          "fixture": os.environ.get("FIXTURE")}
class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if "id" not in msg:
            self.send_response(202)
            self.end_headers()
            return
        if msg.get("method") == "initialize":
            result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                      "serverInfo": {"name": "witness-http", "version": "1"}}
        else:
            result = {"tools": [{"name": "where", "description": json.dumps(report),
                                 "inputSchema": {"type": "object"}}]}
        body = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
'''


@pytest.fixture(autouse=True)
def _forkable(monkeypatch) -> None:
    """The forked launcher imports `forkable_echo` from tests/data (it inherits this process's environment)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(DATA), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    monkeypatch.delenv(pool.POOL_ENV, raising=False)
    monkeypatch.delenv("AFT_BENCH_FORK", raising=False)


def _world(tmp_path: Path, *, env: dict[str, str] | None = None, forked: bool = False, http: bool = False,
           call_timeout: float = 5, start_timeout: float = 5, commands: str = "", name: str = "w") -> ExternalWorld:
    """A world of the witness server: its command, environment and fixture all use `{root}` and `{world}`."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "witness.py").write_text(WITNESS)
    (folder / "witness_http.py").write_text(WITNESS_HTTP)
    env = {"WHERE": "{root}|{world}", **(env or {})}
    if http:
        command = [sys.executable, "{world}/witness_http.py", "{port}", "{root}"]
        env["WHERE"] = "{root}|{port}|{world}"
        url = 'url = "http://127.0.0.1:{port}/mcp"\n'
    else:
        command, url = [sys.executable, "{world}/witness.py", "{root}", "{world}"], ""
    envs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    (folder / "world.toml").write_text(
        f'kind = "{"mcp_http" if http else "mcp_stdio"}"\nid = "witness"\n[server]\npackage = "witness"\n'
        f'version = "1"\ncommand = {json.dumps(command)}\n{url}env = {{ {envs} }}\n'
        f"call_timeout_s = {call_timeout}\nstart_timeout_s = {start_timeout}\n{FORK if forked else ''}"
        '[fixture]\nfiles = { "seed.txt" = "seed\\n" }\nenv = { FIXTURE = "made in {root}" }\n'
        f"{commands}"
        '[probe]\nbuiltin = "folder"\n[tools.where]\neffect = "read"\n')
    return load_external(folder)


def _report(prepared: Prepared) -> dict[str, Any]:
    (tool,) = prepared.listed
    return json.loads(tool["description"])


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _until(cond: Callable[[], bool], seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.02)
    return cond()


def _working_in(folder: Path) -> list[int]:
    """Live processes whose current folder is `folder` or under it (a server runs in its resource)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cwd = os.readlink(d / "cwd")
            except OSError:
                continue
            if (cwd == str(folder) or cwd.startswith(str(folder) + "/")) and _alive(int(d.name)):
                found.append(int(d.name))
    return found


def _nspid(pid: int) -> list[int]:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("NSpid:"))
    return [int(x) for x in line.split()[1:]]


def _scratch(tmp_path: Path) -> Path:
    parent = tmp_path / "scratch"
    parent.mkdir()
    return Path(os.path.realpath(parent))


# -- prepare / start_server / release ----------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["stdio", "forked", "http"])
def test_a_prepared_world_runs_its_server_in_its_resource_with_every_placeholder_expanded(how: str,
                                                                                          tmp_path: Path) -> None:
    """A server started on the wrong folder, port or arguments would play another episode's (or no) resource."""
    world = _world(tmp_path, forked=how == "forked", http=how == "http")
    parent = _scratch(tmp_path)
    before = time.perf_counter()
    got = pool.prepare(world, parent)
    spent = time.perf_counter() - before
    root, folder = got.resource.root, str(world.folder)
    try:
        assert root.parent == parent and root.name.startswith("aft-witness-") and not got.ahead
        assert got.s0 == {"records": {"files": {"seed.txt": got.s0["records"]["files"]["seed.txt"]}, "dirs": {}}}
        assert 0 < got.start_s <= spent
        assert pool.server_log(got.resource) == parent / f"{root.name}.server.log"
        said = _report(got)
        if how == "http":
            assert isinstance(got.server, HttpServer)
            port = int(got.server.url.split(":")[2].split("/")[0])
            assert got.server.url == f"http://127.0.0.1:{port}/mcp"
            assert said == {"argv": [str(port), str(root)], "cwd": str(root), "where": f"{root}|{port}|{folder}",
                            "fixture": f"made in {root}"}
        else:
            assert isinstance(got.server, StdioServer)
            assert isinstance(got.server.proc, ForkedProcess) == (how == "forked")
            assert said == {"argv": [str(root), folder], "cwd": str(root), "where": f"{root}|{folder}",
                            "fixture": f"made in {root}"}
        assert got.server.timeout_s == 5 and got.server.server_info["name"].startswith("witness")
        pid = got.server.pid
        working = _working_in(root)  # the server (with, unforked, its PID namespace's unshare and init)
        assert pid is not None and _alive(pid) and pid in working
        assert len(working) == (1 if how == "forked" else 1 + 2 * bool(pid_namespace()))
        assert sorted(p.name for p in parent.iterdir()) == sorted([root.name, f"{root.name}.server.log"])
    finally:
        got.discard()
    assert list(parent.iterdir()) == [] and _until(lambda: not _alive(pid))


def test_release_stops_the_server_and_removes_the_folder_and_its_log(tmp_path: Path) -> None:
    """An episode's server or folder left behind after it ends would pile up over a run of thousands."""
    world = _world(tmp_path)
    parent = _scratch(tmp_path)
    got = pool.prepare(world, parent)
    pid = got.server.pid
    assert pid is not None
    pool.release(got.server, got.resource)
    assert got.server.proc is None and list(parent.iterdir()) == [] and _until(lambda: not _alive(pid))
    pool.release(None, got.resource)  # again, with nothing left and no log: not an error
    bare = Resource(world, parent).make()
    assert sorted(p.name for p in parent.iterdir()) == [bare.root.name]
    pool.release(None, bare)  # a resource that never had a server (nor a log)
    assert list(parent.iterdir()) == []


@pytest.mark.parametrize("how", ["stdio", "forked", "http"])
def test_a_server_that_exits_at_start_says_why_from_its_log_and_leaves_nothing(how: str, tmp_path: Path) -> None:
    """Without its stderr kept in the log a crashed server's failure would not say why."""
    world = _world(tmp_path, forked=how == "forked", http=how == "http",
                   env={"WITNESS_EXIT": "3", "WITNESS_SAY": "boom: the disk is full"})
    parent = _scratch(tmp_path)
    with pytest.raises(ServerFailed) as failed:
        pool.prepare(world, parent)
    assert str(failed.value) == ("the server exited (status 3) before it answered initialize; its last words: "
                                 "boom: the disk is full")
    assert list(parent.iterdir()) == []


@pytest.mark.parametrize("forked", [False, True], ids=["stdio", "forked"])
def test_tools_list_is_bounded_by_the_call_timeout_and_initialize_by_the_start_timeout(forked: bool,
                                                                                       tmp_path: Path) -> None:
    """A server that hangs after it started would hold an episode for the start timeout (or forever)."""
    parent = _scratch(tmp_path)
    hangs = _world(tmp_path, forked=forked, call_timeout=1, start_timeout=4, env={"WITNESS_LIST_SLEEP": "600"})
    with pytest.raises(ServerFailed) as failed:
        pool.prepare(hangs, parent)
    assert str(failed.value) == "no answer to tools/list within 1 s"
    slow = _world(tmp_path, forked=forked, call_timeout=4, start_timeout=1, env={"WITNESS_INIT_SLEEP": "600"},
                  name="slow")
    with pytest.raises(ServerFailed) as failed:
        pool.prepare(slow, parent)
    assert str(failed.value) == "no answer to initialize within 1 s"
    assert list(parent.iterdir()) == [] and _until(lambda: _working_in(parent) == [])


def test_a_fixture_that_fails_leaves_nothing_and_says_which_command(tmp_path: Path) -> None:
    """A failed fixture must fail the episode by name, with no half-made folder left in the run's scratch."""
    world = _world(tmp_path, commands='commands = [["sh", "-c", "echo no space >&2; exit 4"]]\n')
    parent = _scratch(tmp_path)
    with pytest.raises(ResourceFailed) as failed:
        pool.prepare(world, parent)
    assert str(failed.value) == "world 'witness': fixture command 'sh -c echo no space >&2; exit 4' exited 4: no space"
    assert list(parent.iterdir()) == []


def test_a_server_whose_installed_version_is_not_the_pinned_one_is_refused_before_it_starts(tmp_path: Path) -> None:
    """A stale install would play another release under the pinned one's name."""
    import pytest as installed

    folder = tmp_path / "stale"
    folder.mkdir()
    (folder / "witness.py").write_text(WITNESS)
    (folder / "world.toml").write_text(
        'kind = "mcp_stdio"\nid = "stale"\n[server]\npackage = "pytest"\nversion = "0.0.1"\n'
        f'command = [{json.dumps(sys.executable)}, "{{world}}/witness.py"]\n[probe]\nbuiltin = "folder"\n'
        '[tools.where]\neffect = "read"\n')
    parent = _scratch(tmp_path)
    with pytest.raises(InputError, match=f"world 'stale': the installed pytest is {installed.__version__}, not the "
                                         "pinned 0.0.1"):
        pool.prepare(load_external(folder), parent)
    assert list(parent.iterdir()) == [] and _working_in(parent) == []


# -- the pool ----------------------------------------------------------------------------------------------------
def _ahead(p: Pool) -> Prepared:
    """The one world the pool holds, once it is made."""
    (fut,) = list(p._made)
    return fut.result(timeout=30)


def test_the_third_take_of_a_folder_returns_the_very_world_prepared_while_the_second_played(tmp_path: Path) -> None:
    """The pool exists to hide start-up: the prepared world must be handed out, exactly once, and the next made."""
    world = _world(tmp_path)
    parent = _scratch(tmp_path)
    p = Pool()
    first = p.take(world, parent)
    assert not first.ahead and p._made == {} and not p.has_ahead(world, parent)  # asked once: nothing ahead
    second = p.take(world, parent)
    assert not second.ahead and p.has_ahead(world, parent)
    waiting = _ahead(p)
    third = p.take(world, parent)
    try:
        assert third is waiting and third.ahead and _alive(third.server.pid)
        assert len({first.resource.root, second.resource.root, third.resource.root}) == 3
        assert len({first.server.pid, second.server.pid, third.server.pid}) == 3
        fourth = _ahead(p)  # the next, prepared while the third plays
        assert fourth is not third and not fourth.ahead and p.has_ahead(world, parent)
    finally:
        for t in (first, second, third):
            t.discard()
    pid, root = fourth.server.pid, fourth.resource.root
    assert p.drain(parent) == 1 and not p.has_ahead(world, parent) and p._made == {}
    assert not root.exists() and _until(lambda: not _alive(pid)) and list(parent.iterdir()) == []
    assert p.drain(parent) == 0


def test_a_prepared_world_whose_server_exited_is_discarded_and_a_fresh_one_made(tmp_path: Path) -> None:
    """A dead server handed to an episode would fail it for nothing the agent did."""
    world = _world(tmp_path, forked=True)
    parent = _scratch(tmp_path)
    p = Pool()
    for _ in range(2):
        p.take(world, parent).discard()
    dead = _ahead(p)
    os.kill(dead.server.pid, signal.SIGKILL)
    assert _until(lambda: dead.server.proc.poll() is not None) and dead.server.proc.poll() == -9
    got = p.take(world, parent)
    try:
        assert not got.ahead and got.server.pid != dead.server.pid and got.server.proc.poll() is None
        assert not dead.resource.root.exists() and not pool.server_log(dead.resource).exists()
        assert got.server.call("where", {}).text == "ok"  # it answers
        again = _ahead(p)  # asked before: the next is prepared
        assert again is not got and again.resource.root.is_dir()
    finally:
        got.discard()
    assert p.drain() == 1 and list(parent.iterdir()) == []


def test_a_prepared_world_whose_folder_was_removed_is_discarded_and_its_server_stopped(tmp_path: Path) -> None:
    """A server on a removed folder would play against nothing; it must also not be left running."""
    import shutil

    world = _world(tmp_path)
    parent = _scratch(tmp_path)
    p = Pool()
    for _ in range(2):
        p.take(world, parent).discard()
    gone = _ahead(p)
    pid = gone.server.pid
    shutil.rmtree(gone.resource.root)
    got = p.take(world, parent)
    try:
        assert not got.ahead and got.resource.root.is_dir() and got.server.pid != pid
        assert _until(lambda: not _alive(pid)) and not pool.server_log(gone.resource).exists()
    finally:
        got.discard()
    assert p.drain() == 1 and list(parent.iterdir()) == []


def test_a_world_prepared_ahead_that_failed_is_made_again_for_the_episode(tmp_path: Path) -> None:
    """A failure while preparing ahead belongs to no episode: the one that takes it makes its own."""
    world = _world(tmp_path, commands='commands = [["sh", "-c", "test ! -e {world}/broken"]]\n')
    broken = world.folder / "broken"
    parent = _scratch(tmp_path)
    p = Pool()
    broken.write_text("")
    p.prefetch(world, parent)
    assert p.has_ahead(world, parent)
    (fut,) = list(p._made)
    assert isinstance(fut.exception(timeout=30), ResourceFailed)
    assert list(parent.iterdir()) == []  # the failed one left nothing
    broken.unlink()
    got = p.take(world, parent)
    try:
        assert not got.ahead and got.resource.root.is_dir() and _report(got)["cwd"] == str(got.resource.root)
        assert not p.has_ahead(world, parent)  # prefetched, never asked before: nothing more
    finally:
        got.discard()
    assert p.drain() == 0 and list(parent.iterdir()) == []  # the failed one is not counted: it left nothing


def test_prefetch_prepares_one_world_whatever_it_is_asked_and_take_hands_it_out(tmp_path: Path) -> None:
    """A served episode's first request must find its world ready, and a second prefetch must not make another."""
    world = _world(tmp_path)
    parent = _scratch(tmp_path)
    p = Pool()
    p.prefetch(world, parent)
    p.prefetch(world, parent)
    assert len(p._made) == 1 and p.has_ahead(world, parent)
    ready = _ahead(p)
    assert ready.resource.root.parent == parent  # in the folder asked for, never the system's temp folder
    got = p.take(world, parent)
    try:
        assert got is ready and got.ahead
        assert not p.has_ahead(world, parent) and p._made == {}  # a prefetch's one world: none made after it
    finally:
        got.discard()
    assert p.drain() == 0 and list(parent.iterdir()) == []


def test_drain_of_one_folder_leaves_the_other_folders_worlds_and_forgets_what_it_was_asked(tmp_path: Path) -> None:
    """A runner's drain of its scratch must not stop another run's worlds in the same process."""
    world = _world(tmp_path)
    one, two = _scratch(tmp_path), Path(os.path.realpath(tmp_path / "two"))
    two.mkdir()
    p = Pool()
    for parent in (one, two):
        for _ in range(2):
            p.take(world, parent).discard()
    assert p.has_ahead(world, one) and p.has_ahead(world, two) and len(p._made) == 2
    keep = [f.result(timeout=30) for f in p._made if p._made[f][2] == str(two)][0]
    assert p.drain(one) == 1
    assert not p.has_ahead(world, one) and p.has_ahead(world, two) and keep.resource.root.is_dir()
    assert _alive(keep.server.pid) and list(one.iterdir()) == []
    p.take(world, one).discard()  # drained: asked for the first time again, so nothing is made ahead
    assert not p.has_ahead(world, one)
    got = p.take(world, two)
    try:
        assert got is keep and got.ahead
    finally:
        got.discard()
    assert p.drain() == 1 and list(two.iterdir()) == []


def test_nothing_is_prepared_ahead_without_a_named_folder(tmp_path: Path) -> None:
    """Worlds prepared ahead in the system's temp folder would outlive a process killed without its exit hooks."""
    world = _world(tmp_path)
    p = Pool()
    for _ in range(3):
        got = p.take(world, None)
        assert not got.ahead and got.resource.root.is_dir()
        got.discard()
    assert p._made == {} and not p.has_ahead(world, None) and p.drain() == 0


def test_a_take_waiting_for_a_world_being_made_when_the_pool_is_drained_is_told_so(tmp_path: Path) -> None:
    """On the way out, a world handed to a dying episode after drain would never be stopped."""
    world = _world(tmp_path, commands='commands = [["sh", "-c", "while [ ! -e {world}/gate ]; do sleep 0.02; '
                                      'done"]]\n')
    parent = _scratch(tmp_path)
    p = Pool()
    p.prefetch(world, parent)
    failed: list[BaseException] = []

    def take() -> None:
        try:
            p.take(world, parent)
        except BaseException as exc:  # noqa: BLE001 - what the episode is told
            failed.append(exc)

    taker = threading.Thread(target=take)
    taker.start()
    assert _until(lambda: not p.has_ahead(world, parent))  # the take holds it and waits
    drained: list[int] = []
    drainer = threading.Thread(target=lambda: drained.append(p.drain(parent)))
    drainer.start()
    assert _until(lambda: p._made == {})  # drain took it back, and waits for it too
    (world.folder / "gate").write_text("")
    taker.join(30)
    drainer.join(30)
    assert [type(e) for e in failed] == [PoolDrained] and drained == [1]
    assert str(failed[0]) == "the world pool was drained while this episode waited for its world"
    assert list(parent.iterdir()) == [] and _until(lambda: _working_in(parent) == [])


def test_a_world_prepared_by_the_launcher_is_not_taken_once_forking_is_turned_off(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """AFT_BENCH_FORK=0 must start every server from nothing, even one the pool prepared forked before."""
    world = _world(tmp_path, forked=True)
    parent = _scratch(tmp_path)
    p = Pool()
    for _ in range(2):
        got = p.take(world, parent)
        assert isinstance(got.server.proc, ForkedProcess)
        got.discard()
    assert p.has_ahead(world, parent)
    monkeypatch.setenv("AFT_BENCH_FORK", "0")
    assert not p.has_ahead(world, parent)
    got = p.take(world, parent)
    try:
        assert not got.ahead and isinstance(got.server.proc, subprocess.Popen)
    finally:
        got.discard()
    monkeypatch.setenv("AFT_BENCH_FORK", "1")  # another setting again: not the world prepared with it unset
    assert not p.has_ahead(world, parent)
    monkeypatch.delenv("AFT_BENCH_FORK")
    assert p.has_ahead(world, parent) and p.drain() == 1 and list(parent.iterdir()) == []


def test_a_child_forked_from_a_process_holding_a_prepared_world_starts_with_an_empty_pool(tmp_path: Path) -> None:
    """A forked child must never hand out (or stop) its parent's prepared server."""
    world = _world(tmp_path)
    parent = _scratch(tmp_path)
    p = Pool()
    for _ in range(2):
        p.take(world, parent).discard()
    held = _ahead(p)
    pid = os.fork()
    if pid == 0:
        ok = (p._made, p._ahead, p._asked, p._thread) == ({}, {}, set(), None) and p.drain() == 0
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _alive(held.server.pid) and p.drain() == 1 and list(parent.iterdir()) == []


def test_the_process_pool_is_used_only_when_turned_on_or_asked_for_ahead(tmp_path: Path, monkeypatch) -> None:
    """Off by default (it gained nothing on 2 cores); AFT_BENCH_POOL=1 turns it on; a prefetch is always honoured."""
    world = _world(tmp_path)
    parent = _scratch(tmp_path)
    for value in (None, "0", "yes"):
        if value is not None:
            monkeypatch.setenv(pool.POOL_ENV, value)
        for _ in range(2):
            got = pool.take(world, parent)
            assert not got.ahead and got.resource.root.parent == parent
            got.discard()
        assert not pool.POOL.has_ahead(world, parent)
    monkeypatch.setenv("AFT_BENCH_POOL", "1")
    got = [pool.take(world, parent) for _ in range(3)]
    assert [g.ahead for g in got] == [False, False, True]
    for g in got:
        g.discard()
    assert pool.drain(parent) == 1
    monkeypatch.delenv("AFT_BENCH_POOL")
    other = Path(os.path.realpath(tmp_path / "other"))
    other.mkdir()
    pool.prefetch(world, parent)
    pool.prefetch(world, other)
    got = pool.take(world, parent)
    try:
        assert got.ahead and got.resource.root.parent == parent
    finally:
        got.discard()
    assert pool.drain(parent) == 0 and list(parent.iterdir()) == []  # nothing prepared after a prefetch's world
    assert pool.POOL.has_ahead(world, other) and pool.drain(other) == 1 and list(other.iterdir()) == []


# -- the forked launcher ----------------------------------------------------------------------------------------
def _spawn(l: Launcher, tmp_path: Path, env: dict[str, str] | None = None,
           log: Path | None = None) -> ForkedProcess:
    script = tmp_path / "witness.py"
    script.write_text(WITNESS)
    return l.spawn([sys.executable, str(script), "x"], tmp_path, {**os.environ, **(env or {})}, log, 10)


def test_a_forked_server_is_known_by_its_pid_here_and_reaped_with_its_exit_status(tmp_path: Path) -> None:
    """A wrong pid would signal another process; a wrong status would call a clean exit a crash."""
    l = launcher(sys.executable, "forkable_echo:main", (), 30)
    held = len(os.listdir("/proc/self/fd"))
    proc = _spawn(l, tmp_path)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b'{"jsonrpc": "2.0", "id": 1, "method": "initialize"}\n')
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["result"]["serverInfo"] == {"name": "witness", "version": "1"}
    assert proc.poll() is None and _alive(proc.pid)  # it runs the witness: in its folder, in its own group
    assert _nspid(proc.pid)[0] == proc.pid and proc.local == _nspid(proc.pid)[-1]
    assert os.readlink(f"/proc/{proc.pid}/cwd") == str(tmp_path) and os.getpgid(proc.pid) == proc.pid
    with pytest.raises(subprocess.TimeoutExpired) as waited:
        proc.wait(timeout=0.1)
    assert (waited.value.cmd, waited.value.timeout) == (str(proc.pid), 0.1)
    proc.stdin.close()  # end of its input: the witness exits 0
    assert proc.wait() == 0 and proc.poll() == 0 and proc.returncode == 0
    killed = _spawn(l, tmp_path)
    os.kill(killed.pid, signal.SIGKILL)
    assert killed.wait(timeout=10) == -9
    crashed = _spawn(l, tmp_path, {"WITNESS_EXIT": "5"})
    assert crashed.stdin is not None
    crashed.stdin.write(b"{}\n")
    crashed.stdin.flush()
    assert crashed.wait(timeout=10) == 5
    for p in (proc, killed, crashed):
        p.stdout.close()  # type: ignore[union-attr]
        p.stdin.close()  # type: ignore[union-attr]
    assert len(os.listdir("/proc/self/fd")) == held  # no descriptor kept per server (a run starts thousands)


def test_a_forked_server_s_stderr_is_appended_to_its_log(tmp_path: Path) -> None:
    """The log of a crash must keep what was there and be readable (its last words are read back)."""
    l = launcher(sys.executable, "forkable_echo:main", (), 30)
    log = tmp_path / "kept.log"
    log.write_text("earlier\n")
    fresh = tmp_path / "fresh.log"
    for target in (log, fresh):
        proc = _spawn(l, tmp_path, {"WITNESS_EXIT": "2", "WITNESS_SAY": "said"}, target)
        assert proc.stdin is not None
        proc.stdin.write(b"{}\n")
        proc.stdin.flush()
        assert proc.wait(timeout=10) == 2
    assert log.read_text() == "earlier\nsaid\n" and fresh.read_text() == "said\n"
    mask = os.umask(0)
    os.umask(mask)
    assert fresh.stat().st_mode & 0o777 == 0o644 & ~mask


def test_a_launcher_is_reused_while_it_lives_and_a_dead_one_is_replaced(tmp_path: Path) -> None:
    """A dead launcher reused would fail every later episode; a live one not reused would pay start-up each time."""
    l = launcher(sys.executable, "forkable_echo:main", (), 30)
    assert launcher(sys.executable, "forkable_echo:main", (), 30) is l and l.alive
    assert l.key == (sys.executable, "forkable_echo:main", ())
    assert os.getpgid(l.proc.pid) == l.proc.pid  # its own group: a Ctrl-C is the runner's to handle
    other = launcher(sys.executable, "forkable_echo:main", ("json",), 30)
    assert other is not l and other.alive
    server = _spawn(l, tmp_path)
    l.proc.kill()
    l.proc.wait(timeout=10)
    assert not l.alive
    assert server.wait(timeout=10) == -9  # its servers die with it; the status nobody can ask reads as killed
    assert _until(lambda: not _alive(server.pid))
    with pytest.raises(LaunchFailed, match=r"^the forked launcher is gone: \[Errno 32\] Broken pipe$"):
        _spawn(l, tmp_path)
    again = launcher(sys.executable, "forkable_echo:main", (), 30)
    assert again is not l and again.alive
    started = _spawn(again, tmp_path)
    assert started.poll() is None
    started.stdin.close()  # type: ignore[union-attr]
    assert started.wait(timeout=10) == 0
    started.stdout.close()  # type: ignore[union-attr]
    server.stdout.close()  # type: ignore[union-attr]
    server.stdin.close()  # type: ignore[union-attr]


def _module(tmp_path: Path, name: str, body: str) -> str:
    (tmp_path / f"{name}.py").write_text(body)
    return name


@pytest.mark.parametrize(("preload", "body", "timeout", "said"), [
    ("dies", "import os\nos._exit(3)\n", 30, "the forked launcher exited during start"),
    ("slow", "import time\ntime.sleep(3)\n", 1, "the forked launcher did not answer start within 1 s"),
    ("raises", "raise RuntimeError('no licence')\n", 30,
     "the forked launcher could not load forkable_echo:main: RuntimeError: no licence"),
])
def test_a_launcher_that_cannot_start_says_exactly_why(preload: str, body: str, timeout: float, said: str,
                                                       tmp_path: Path, monkeypatch) -> None:
    """A world whose launcher fails must name the cause, not hang or crash the run."""
    name = _module(tmp_path, f"preload_{preload}_{os.getpid()}_{time.monotonic_ns()}", body)
    monkeypatch.setenv("PYTHONPATH", f"{DATA}{os.pathsep}{tmp_path}")
    with pytest.raises(LaunchFailed) as failed:
        launcher(sys.executable, "forkable_echo:main", (name,), timeout)
    assert str(failed.value) == said
    assert (os.getpid(), (sys.executable, "forkable_echo:main", (name,))) not in lm._LAUNCHERS


def test_a_launcher_that_cannot_load_its_entry_or_run_its_interpreter_fails_the_world(tmp_path: Path) -> None:
    """Through prepare: the world fails with the launcher's reason and leaves nothing behind."""
    parent = _scratch(tmp_path)
    for python, entry, said in [
        (sys.executable, "json:no_such_function",
         "the forked launcher could not load json:no_such_function: ImportError: json:no_such_function is not a "
         "function"),
        ("/nonexistent/python3", "forkable_echo:main",
         "cannot start the forked launcher '/nonexistent/python3': No such file or directory"),
    ]:
        world = _world(tmp_path, forked=True, name=f"w{len(said)}")
        fork = world.server.fork.model_copy(update={"python": python, "entry": entry})  # type: ignore[union-attr]
        world = world.model_copy(update={"server": world.server.model_copy(update={"fork": fork})})
        with pytest.raises(ServerFailed) as failed:
            pool.prepare(world, parent)
        assert str(failed.value) == said
        assert list(parent.iterdir()) == []


def test_a_launcher_s_own_output_never_reaches_the_runner_s_terminal(tmp_path: Path, monkeypatch, capfd) -> None:
    """What a server's modules print while they are imported would be mixed into the runner's progress lines."""
    name = _module(tmp_path, f"noisy_{os.getpid()}_{time.monotonic_ns()}",
                   "import sys\nprint('out noise')\nprint('err noise', file=sys.stderr)\n")
    monkeypatch.setenv("PYTHONPATH", f"{DATA}{os.pathsep}{tmp_path}")
    capfd.readouterr()
    l = launcher(sys.executable, "forkable_echo:main", (name,), 30)
    assert l.alive and capfd.readouterr() == ("", "")
    l.close()
    assert not l.alive and l.proc.returncode is not None


def test_a_launcher_that_stops_answering_fails_the_spawn_within_its_timeout(tmp_path: Path) -> None:
    """A launcher frozen mid-run (stopped, swapped out) must fail that episode's start, not hang the run."""
    l = Launcher(sys.executable, "forkable_echo:main", (), 30)  # its own, not the process's shared one
    try:
        os.killpg(l.proc.pid, signal.SIGSTOP)  # the launcher's group: unshare, its init and the zygote
        script = tmp_path / "witness.py"
        script.write_text(WITNESS)
        with pytest.raises(LaunchFailed) as failed:
            l.spawn([sys.executable, str(script)], tmp_path, dict(os.environ), None, 1)
        assert str(failed.value) == "the forked launcher did not answer spawn within 1 s"
    finally:
        os.killpg(l.proc.pid, signal.SIGKILL)
        l.close()
    assert not l.alive


# -- the launcher's corners: a large request, its stdin, a frozen launcher at reap and at close ---------------------
def test_a_forked_server_with_a_large_environment_is_spawned_whole(tmp_path: Path) -> None:
    """A spawn request (argv, folder, environment) reaches the server whole however long it is: 300 KB of
    environment is more than one datagram can carry (the socket's send buffer, about 208 KB by default), which once
    failed as "the forked launcher is gone" while the launcher was alive."""
    l = launcher(sys.executable, "forkable_echo:main", (), 30)
    big = {f"AFT_TEST_BIG{i}": str(i) * 100_000 for i in range(3)}
    (tmp_path / "size.py").write_text("import os, sys\nprint([len(os.environ[f'AFT_TEST_BIG{i}']) for i in range(3)],"
                                      " os.environ['AFT_TEST_BIG2'][:2], sys.argv[1:])\n")
    proc = l.spawn([sys.executable, str(tmp_path / "size.py"), "a"], tmp_path, {**os.environ, **big}, None, 10)
    assert proc.stdout is not None and proc.stdin is not None
    assert (proc.stdout.read(), proc.wait(timeout=30)) == (b"[100000, 100000, 100000] 22 ['a']\n", 0)
    proc.stdout.close()
    proc.stdin.close()
    assert l.alive


def _without_pidfd(tmp_path: Path) -> str:
    """An interpreter like this one whose `os` has no `pidfd_open`, as Python 3.8's (a server's venv may be old)."""
    site = tmp_path / "nopidfd"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\ndel os.pidfd_open\n")
    wrapper = tmp_path / "python-nopidfd"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(site))}:$PYTHONPATH exec {shlex.quote(sys.executable)} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def test_a_launcher_whose_interpreter_cannot_make_pidfds_knows_its_servers_by_pid_when_not_contained(
        tmp_path: Path, monkeypatch) -> None:
    """Outside a PID namespace the launcher's pid is this process's: the server is found, waited for and reaped
    by it, with its real exit status."""
    monkeypatch.setenv("AFT_BENCH_CONTAIN", "0")
    pid_namespace.cache_clear()
    try:
        l = Launcher(_without_pidfd(tmp_path), "forkable_echo:main", (), 30)
    finally:
        pid_namespace.cache_clear()
    try:
        proc = _spawn(l, tmp_path)
        assert proc.stdin is not None and proc.stdout is not None
        assert (proc.stdin.mode, proc.stdout.mode) == ("wb", "rb")  # the stdio client reads bytes to its b"" end
        proc.stdin.write(b'{"jsonrpc": "2.0", "id": 1, "method": "initialize"}\n')
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["result"]["serverInfo"] == {"name": "witness", "version": "1"}
        assert proc.pid == proc.local and os.getpgid(proc.pid) == proc.pid  # it answered: it is in its folder
        assert os.readlink(f"/proc/{proc.pid}/cwd") == str(tmp_path) and proc.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.1)
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0 and proc.poll() == 0
        crashed = _spawn(l, tmp_path, {"WITNESS_EXIT": "3"})
        assert crashed.stdin is not None
        crashed.stdin.write(b"{}\n")
        crashed.stdin.flush()
        assert crashed.wait(timeout=10) == 3 and crashed.returncode == 3
        killed = _spawn(l, tmp_path)
        os.kill(killed.pid, signal.SIGKILL)
        assert killed.wait(timeout=10) == -9
        for p in (proc, crashed, killed):
            p.stdout.close()  # type: ignore[union-attr]
            p.stdin.close()  # type: ignore[union-attr]
    finally:
        l.close()


def test_a_contained_launcher_whose_interpreter_cannot_make_pidfds_is_refused_with_the_way_out(
        tmp_path: Path) -> None:
    """In its own PID namespace the launcher's pids mean nothing here: a server known only by one would be
    waited for, signalled and reaped as some other process. The launcher is refused before any server starts."""
    if not pid_namespace():
        pytest.fail("this machine refuses a PID namespace (unshare): servers are not contained here")
    python = _without_pidfd(tmp_path)
    with pytest.raises(LaunchFailed) as failed:
        Launcher(python, "forkable_echo:main", (), 30)
    assert str(failed.value) == (
        f"the forked launcher's interpreter {python!r} cannot make a pidfd (Python 3.9 and Linux 5.3 or later "
        "can), which a launcher in a PID namespace of its own needs: start this world without [server.fork], "
        "or with AFT_BENCH_CONTAIN=0")


def test_a_descriptor_that_is_not_a_pidfd_is_named_as_one_this_kernel_cannot_read(tmp_path: Path) -> None:
    r, w = os.pipe()
    try:
        with pytest.raises(LaunchFailed) as failed:
            _pid_of(r)
        assert str(failed.value) == "the forked launcher sent a pidfd this kernel cannot read"
    finally:
        os.close(r)
        os.close(w)


def test_the_launcher_never_holds_the_runners_stdin(tmp_path: Path) -> None:
    """`serve` speaks MCP over its own stdin: the launcher it starts reads /dev/null, not the runner's stdin."""
    program = ("import os, sys; from aft_bench.world.launcher import launcher; "
               "l = launcher(sys.executable, 'forkable_echo:main', (), 30); "
               "print(os.readlink(f'/proc/{l.proc.pid}/fd/0'), flush=True); l.close()")
    done = subprocess.run([sys.executable, "-c", program], input="", capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "/dev/null\n"), done.stderr


def test_wait_with_no_time_left_says_it_waited_none(tmp_path: Path) -> None:
    """As subprocess.Popen says it: a wait of 0 s on a running server times out after 0 seconds."""
    l = launcher(sys.executable, "forkable_echo:main", (), 30)
    proc = _spawn(l, tmp_path)
    with pytest.raises(subprocess.TimeoutExpired) as waited:
        proc.wait(timeout=0)
    assert (waited.value.cmd, waited.value.timeout) == (str(proc.pid), 0)
    assert str(waited.value) == f"Command '{proc.pid}' timed out after 0.0 seconds"
    proc.stdin.close()  # type: ignore[union-attr]
    assert proc.wait(timeout=30) == 0
    proc.stdout.close()  # type: ignore[union-attr]


def test_a_launcher_that_stops_answering_at_reap_reads_as_killed_not_a_hang(tmp_path: Path) -> None:
    """The server exited while its launcher is frozen: its status cannot be asked, so the wait ends (after the
    reap's 10 s bound) with the status of a killed server instead of hanging the episode's stop."""
    l = Launcher(sys.executable, "forkable_echo:main", (), 30)  # its own, not the process's shared one
    proc = _spawn(l, tmp_path)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b'{"jsonrpc": "2.0", "id": 1, "method": "initialize"}\n')  # it runs (in its own group)
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["result"]["serverInfo"] == {"name": "witness", "version": "1"}
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append(proc.wait()))
    try:
        os.killpg(l.proc.pid, signal.SIGSTOP)  # the launcher's group; the server has its own and runs on
        proc.stdin.close()  # end of its input: the witness exits
        waiter.start()
        waiter.join(60)
        assert not waiter.is_alive() and got == [-9]  # answered while the launcher was still frozen
    finally:
        os.killpg(l.proc.pid, signal.SIGKILL)
        waiter.join(60)
        l.close()
        proc.stdout.close()


def test_a_launcher_whose_preload_never_finishes_is_killed_not_waited_for(tmp_path: Path, monkeypatch) -> None:
    """A server module whose import hangs: the start fails after its timeout and the launcher is killed (after
    close's 10 s grace), so the world fails by name instead of holding the run until the import ends."""
    name = _module(tmp_path, f"preload_hangs_{os.getpid()}_{time.monotonic_ns()}", "import time\ntime.sleep(150)\n")
    monkeypatch.setenv("PYTHONPATH", f"{DATA}{os.pathsep}{tmp_path}")
    said: list[str] = []

    def start() -> None:
        try:
            launcher(sys.executable, "forkable_echo:main", (name,), 1)
        except LaunchFailed as exc:
            said.append(str(exc))

    starter = threading.Thread(target=start)
    starter.start()
    starter.join(60)
    finished = not starter.is_alive()
    starter.join(240)
    assert finished and said == ["the forked launcher did not answer start within 1 s"]


# -- the pool's keys, folders and thread -------------------------------------------------------------------------
def test_a_world_prepared_forked_is_not_handed_to_the_same_world_started_from_nothing(tmp_path: Path) -> None:
    """How a server is launched is left out of the world's hash, so the pool's key holds it: the same world without
    its [server.fork] must not be given the forked server the pool prepared (nor the other way round)."""
    world = _world(tmp_path, forked=True)
    plain = world.model_copy(update={"server": world.server.model_copy(update={"fork": None})})
    assert plain.hash == world.hash
    parent = _scratch(tmp_path)
    p = Pool()
    for _ in range(2):
        p.take(world, parent).discard()
    assert p.has_ahead(world, parent) and not p.has_ahead(plain, parent)
    got = p.take(plain, parent)
    try:
        assert not got.ahead and isinstance(got.server.proc, subprocess.Popen)
        assert p.has_ahead(world, parent)  # the forked one is still there for the forked world
    finally:
        got.discard()
    got = p.take(world, parent)
    try:
        assert got.ahead and isinstance(got.server.proc, ForkedProcess)
    finally:
        got.discard()
    assert p.drain() == 1 and list(parent.iterdir()) == []


def test_every_world_the_pool_makes_is_made_in_the_folder_asked_for(tmp_path: Path) -> None:
    """Made now or made ahead (after one made now, after one taken from ahead), each world's folder is in the
    caller's folder (a run's scratch, removed with it), never the system's temp folder."""
    world = _world(tmp_path)
    parent = _scratch(tmp_path)
    p = Pool()
    first = p.take(world, parent)  # made now, asked for the first time
    second = p.take(world, parent)  # made now, then the next made ahead
    ahead = _ahead(p)
    third = p.take(world, parent)  # the one made ahead, then the next made ahead
    fourth = _ahead(p)
    try:
        assert third is ahead and [w.resource.root.parent for w in (first, second, third, fourth)] == [parent] * 4
        assert (first.ahead, second.ahead, third.ahead) == (False, False, True)
    finally:
        for w in (first, second, third):
            w.discard()
    assert p.drain() == 1 and list(parent.iterdir()) == []


def test_the_pool_makes_every_world_on_one_thread(tmp_path: Path) -> None:
    """One long-lived thread starts every server the pool makes (a server dies with the thread that started it):
    however many worlds are made, made ahead and taken, the pool has started one thread."""
    def pool_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "aft-bench-world-pool"]

    before = pool_threads()
    world = _world(tmp_path)
    parent = _scratch(tmp_path)
    p = Pool()
    for _ in range(4):
        p.take(world, parent).discard()
    p.prefetch(world, Path(os.path.realpath(tmp_path)))
    new = [t for t in pool_threads() if t not in before]
    assert new == [p._thread] and new[0].is_alive()
    assert p.drain() == 2 and list(parent.iterdir()) == []


def test_a_runner_that_ends_with_a_world_prepared_ahead_exits_and_removes_it(tmp_path: Path) -> None:
    """The pool's thread must not keep a process alive at its end: a runner that ends with a world prepared ahead
    exits, and its exit hook stops that world and removes its folder."""
    world = _world(tmp_path)
    parent = _scratch(tmp_path)
    program = ("import sys; from pathlib import Path; from aft_bench.world import pool; "
               "from aft_bench.world.external import load_external; "
               "w, parent = load_external(Path(sys.argv[1])), Path(sys.argv[2]); "
               "[pool.take(w, parent).discard() for _ in range(2)]; "
               "made = [f.result(timeout=60) for f in list(pool.POOL._made)]; "
               "print(pool.POOL.has_ahead(w, parent), len(made), len(list(parent.iterdir())), flush=True)")
    done = subprocess.run([sys.executable, "-c", program, str(world.folder), str(parent)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, pool.POOL_ENV: "1"})
    assert (done.returncode, done.stdout) == (0, "True 1 2\n"), done.stderr  # the world ahead: its folder and log
    assert list(parent.iterdir()) == []


@pytest.mark.parametrize("where", ["{world}", "{root}"])
def test_a_fork_interpreter_named_by_the_worlds_or_the_resources_folder_is_found(where: str, tmp_path: Path) -> None:
    """[server.fork]'s python may be kept beside world.toml ({world}) or made by the fixture ({root}): expanded for
    the episode's resource like the command, never started as the literal text."""
    link = 'commands = [["ln", "-s", ' + json.dumps(sys.executable) + ', "{root}/python"]]\n'
    world = _world(tmp_path, forked=True, commands=link if where == "{root}" else "")
    (world.folder / "python").symlink_to(sys.executable)
    fork = world.server.fork.model_copy(update={"python": f"{where}/python"})  # type: ignore[union-attr]
    world = world.model_copy(update={"server": world.server.model_copy(update={"fork": fork})})
    parent = _scratch(tmp_path)
    got = pool.prepare(world, parent)
    try:
        python = (world.folder if where == "{world}" else got.resource.root) / "python"
        assert isinstance(got.server.proc, ForkedProcess) and _report(got)["cwd"] == str(got.resource.root)
        assert Path(f"/proc/{got.server.pid}/cmdline").read_bytes().split(b"\0")[0] == str(python).encode()
    finally:
        got.discard()
    assert list(parent.iterdir()) == []


def test_an_http_server_that_never_listens_is_bounded_by_the_worlds_start_timeout(tmp_path: Path) -> None:
    """Over HTTP too the world's start_timeout_s bounds the wait for a server that never answers initialize."""
    import re

    world = _world(tmp_path, http=True, start_timeout=1)
    (world.folder / "witness_http.py").write_text("import time\ntime.sleep(600)\n")
    parent = _scratch(tmp_path)
    with pytest.raises(ServerFailed) as failed:
        pool.prepare(world, parent)
    assert re.fullmatch(r"no answer to initialize within 1 s at http://127\.0\.0\.1:\d+/mcp", str(failed.value))
    assert list(parent.iterdir()) == [] and _until(lambda: _working_in(parent) == [])


def test_a_launcher_killed_while_a_spawn_waits_for_its_answer_says_so(tmp_path: Path) -> None:
    """The launcher dies (the OOM killer, a kill) after it was asked for a server and before it answered: the start
    fails naming that, with the system's reason."""
    import fcntl
    import termios

    l = Launcher(sys.executable, "forkable_echo:main", (), 30)  # its own, not the process's shared one
    said: list[str] = []

    def spawn() -> None:
        try:
            _spawn(l, tmp_path)
        except LaunchFailed as exc:
            said.append(str(exc))

    os.killpg(l.proc.pid, signal.SIGSTOP)  # it cannot read the request
    spawner = threading.Thread(target=spawn)
    try:
        spawner.start()
        # the request is sent (and unread) once the socket holds bytes the launcher has not taken
        assert _until(lambda: int.from_bytes(fcntl.ioctl(l._sock.fileno(), termios.TIOCOUTQ, b"\0" * 4),
                                             sys.byteorder) > 0, 60)
    finally:
        os.killpg(l.proc.pid, signal.SIGKILL)
        spawner.join(60)
        l.close()
    assert said == ["the forked launcher failed during spawn: [Errno 104] Connection reset by peer"]
