"""Real MCP servers as worlds (issue 41): mcp-server-git, started for real at its two pinned versions behind the
fault-injecting gateway, labelled from the repository read with git plumbing. Nothing here mocks a server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aft_bench.agents.deterministic import DeterministicAgent, Params
from aft_bench.common.errors import InputError
from aft_bench.episode.episode import EpisodeResult
from aft_bench.episode.external import ExternalSetup, run_external_episode
from aft_bench.interface.mechanisms import load_conditions
from aft_bench.runtime.gateway import Gateway, GatewayFault, GatewaySchedule, WorldFailed
from aft_bench.runtime.trace import Trace
from aft_bench.tasks.task import Task
from aft_bench.world.external import load_external, servers_dir
from aft_bench.world.mcp_stdio import ServerFailed, StdioServer

ROOT = Path(__file__).resolve().parents[1]
GIT = load_external(ROOT / "worlds" / "git")
OLD = "2025.11.25"


@pytest.fixture(scope="module", autouse=True)
def _servers_installed() -> None:
    exe = servers_dir() / f"mcp-server-git-{GIT.server.version}" / "bin" / "mcp-server-git"
    assert exe.exists(), f"{exe} is missing: `make worlds` installs the pinned servers"


def _commit_task(**extra: object) -> Task:
    return Task(id="commit_notes", world="git", spec="Stage notes.txt and commit it as 'Update notes'.",
                inputs={"repo_path": "/workspace"},
                goal=[{"collection": "commits", "where": {"message": "Update notes"}, "count": 1}],
                target_ops=["git_commit"], allowed_ops=["git_add"],
                plan=[{"call": "git_add", "args": {"repo_path": "/workspace", "files": ["notes.txt"]}},
                      {"call": "git_commit", "args": {"repo_path": "/workspace", "message": "Update notes"}}],
                **extra)


def _play(task: Task, condition: str, *faults: tuple[str, str], version: str | None = None) -> EpisodeResult:
    world = GIT.with_version(version) if version else GIT
    sched = GatewaySchedule(id="t", faults=tuple(GatewayFault(kind=k, tool=t) for k, t in faults))  # type: ignore[arg-type]
    setup = ExternalSetup(world, task, load_conditions().resolve(condition), sched)
    return asyncio.run(run_external_episode(setup, DeterministicAgent(Params(), task.script)))


def _answers(r: EpisodeResult, tool: str) -> list[dict]:
    invs = {e.data["inv"] for e in r.events if e.kind == "invocation" and e.data["tool"] == tool}
    return [e.data["answer"] for e in r.events if e.kind == "server_answer" and e.data["inv"] in invs]


def _commits(r: EpisodeResult, message: str) -> list[dict]:
    return [c for c in r.terminal_state["records"]["commits"].values() if c["message"] == message]


def test_a_reissued_commit_after_a_lost_answer_is_a_false_failure_on_the_current_server() -> None:
    r = _play(_commit_task(), "GW-bare", ("response_loss", "git_commit"))
    first, second = _answers(r, "git_commit")
    assert not first["isError"] and "committed successfully" in first["content"][0]["text"]
    assert second["isError"] and "No changes staged" in second["content"][0]["text"]
    assert len(_commits(r, "Update notes")) == 1  # the commit exists, once
    L = r.labels
    assert (L.fault_fired, L.y_goal, L.duplicate_effects, L.terminal_claim, L.false_failure) == (
        True, True, 0, "failure", True)


def test_the_same_reissue_is_a_duplicate_empty_commit_on_the_older_server() -> None:
    r = _play(_commit_task(), "GW-bare", ("response_loss", "git_commit"), version=OLD)
    assert [a["isError"] for a in _answers(r, "git_commit")] == [False, False]
    made = _commits(r, "Update notes")
    assert sorted(c["empty"] for c in made) == [False, True]  # a second commit with the same tree
    L = r.labels
    assert (L.duplicate_effects, L.outcome, L.y_goal, L.false_success, L.unsafe_commits) == (
        1, "unsafely_committed", False, True, 1)


@pytest.mark.parametrize("version", [None, OLD])
def test_the_gateway_key_answers_the_reissue_from_its_record(version: str | None) -> None:
    r = _play(_commit_task(), "GW-key", ("response_loss", "git_commit"), version=version)
    assert len(_answers(r, "git_commit")) == 1  # the re-issue never reached the server
    assert [e.data["key"] for e in r.events if e.kind == "key_replayed"] == ["commit_notes:1"]
    assert len(_commits(r, "Update notes")) == 1
    L = r.labels
    assert (L.outcome, L.duplicate_effects, L.claim_correct, L.fault_fired) == ("completed", 0, True, True)


def test_verification_from_the_real_state_reconciles_a_lost_answer() -> None:
    r = _play(_commit_task(), "GW-verify", ("response_loss", "git_commit"))
    checks = [e.data for e in r.events if e.kind == "verification" and e.data["tool"] == "git_commit"]
    assert [c["holds"] for c in checks] == [False, True]  # baseline, then the lost call's effect found in git
    assert len(_answers(r, "git_commit")) == 1 and r.labels.claim_correct is True


def test_a_reissued_checkout_is_a_silent_success() -> None:
    task = Task(id="co", world="git", spec="Check out release.", goal=[
        {"record": "head/HEAD", "field": "branch", "equals": "release"}], target_ops=["git_checkout"],
        plan=[{"call": "git_checkout", "args": {"repo_path": "/workspace", "branch_name": "release"}}])
    r = _play(task, "GW-bare", ("response_loss", "git_checkout"))
    assert [a["isError"] for a in _answers(r, "git_checkout")] == [False, False]
    effects = [e.data["changes"] for e in r.events if e.kind == "effect"]
    assert effects[0] and effects[1] == {}  # the second call changed nothing in the repository
    assert (r.labels.outcome, r.labels.claim_correct, r.labels.duplicate_effects) == ("completed", True, 0)


def test_an_interruption_never_reaches_the_server_and_the_reissue_is_safe() -> None:
    r = _play(_commit_task(), "GW-bare", ("interruption", "git_commit"))
    commit_invs = [e.data["inv"] for e in r.events if e.kind == "invocation" and e.data["tool"] == "git_commit"]
    forwarded = {e.data["inv"] for e in r.events if e.kind == "forwarded"}
    assert commit_invs[0] not in forwarded and commit_invs[1] in forwarded
    assert (r.labels.outcome, r.labels.recovered, r.labels.claim_correct) == ("completed", True, True)


def test_false_success_is_a_success_told_for_a_request_never_sent() -> None:
    r = _play(_commit_task(), "GW-bare", ("false_success", "git_commit"))
    assert _answers(r, "git_commit") == [] and _commits(r, "Update notes") == []
    L = r.labels
    assert (L.terminal_claim, L.y_goal, L.false_success, L.outcome) == ("success", False, True,
                                                                        "unnecessarily_failed")


def test_false_failure_is_a_failure_told_for_a_commit_the_server_made() -> None:
    r = _play(_commit_task(), "GW-bare", ("false_failure", "git_commit"))
    (answer,) = _answers(r, "git_commit")
    delivered = [e.data for e in r.events if e.kind == "delivered" and e.data["answer"]
                 and e.data["answer"]["isError"]]
    assert not answer["isError"] and len(delivered) == 1  # the server's real answer beside the one delivered
    assert (r.labels.false_failure, r.labels.y_goal) == (True, True)


def test_stale_state_is_another_writer_before_the_call_and_counted_against_the_policy() -> None:
    task = _commit_task(policy={"abort_if": [{"event": "concurrent_write"}]})
    r = _play(task, "GW-bare", ("stale_state", "git_commit"))
    (write,) = [e.data for e in r.events if e.kind == "world_write"]
    assert write["changes"]["commits"]["added"]  # the foreign commit, read by the probe
    assert any(c["message"] == "Edit elsewhere" for c in r.terminal_state["records"]["commits"].values())
    L = r.labels
    assert (L.stale_writes, L.unintended_effects, L.alpha, L.outcome) == (1, 1, False, "unsafely_committed")


def test_a_server_restart_between_calls_starts_a_new_process_on_the_same_repository() -> None:
    r = _play(_commit_task(), "GW-bare", ("server_restart", "git_commit"))
    assert [e.kind for e in r.events].count("server_restart") == 1
    assert r.labels.outcome == "completed" and len(_commits(r, "Update notes")) == 1


def test_the_trace_and_labels_do_not_depend_on_where_the_folder_was_made(tmp_path: Path) -> None:
    a = _play(_commit_task(), "GW-bare", ("response_loss", "git_commit"))
    b = _play(_commit_task(), "GW-bare", ("response_loss", "git_commit"))
    assert a.trace_head == b.trace_head and a.labels == b.labels
    assert not any("/tmp/" in str(e.data) for e in a.events)  # the real folder is /workspace in the trace


# -- bad input and misbehaving servers: one line naming the world and what failed, no process left ------------
def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    status = Path(f"/proc/{pid}/status").read_text() if Path(f"/proc/{pid}/status").exists() else ""
    return "zombie" in status


def test_an_overlay_naming_a_tool_the_server_lacks_is_one_error_naming_world_and_tool() -> None:
    bad = GIT.model_copy(update={"tools": {**GIT.tools, "git_push": GIT.tools["git_commit"]}})
    gw = Gateway(bad, Trace())
    with pytest.raises(InputError, match=r"git_push.*world 'git': the server lists no such tool"):
        gw.open()
    assert gw.server is None and not gw.resource.root.exists()


def test_a_server_that_never_answers_is_cut_at_its_deadline_and_killed(tmp_path: Path) -> None:
    srv = StdioServer([sys.executable, "-c", "import time; time.sleep(60)"], cwd=tmp_path, timeout_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(ServerFailed, match="no answer to initialize within 1 s"):
        srv.start()
    assert time.monotonic() - t0 < 10 and srv.proc is None


def test_a_command_that_does_not_start_and_a_crash_say_why(tmp_path: Path) -> None:
    with pytest.raises(ServerFailed, match="cannot start '/nonexistent/server'"):
        StdioServer(["/nonexistent/server"], cwd=tmp_path).start()
    log = tmp_path / "err.log"
    crash = [sys.executable, "-c", "import sys; sys.stderr.write('boom: no config\\n'); sys.exit(3)"]
    with pytest.raises(ServerFailed, match=r"exited \(status 3\) (before it answered initialize|while we wrote to "
                                           r"it); its last words: boom"):
        StdioServer(crash, cwd=tmp_path, stderr_path=log).start()


def test_a_probe_that_prints_no_json_fails_the_episode_naming_the_world() -> None:
    bad = GIT.model_copy(update={"probe": GIT.probe.model_copy(update={"builtin": None,
                                                                       "command": ("echo", "not json")})})
    with pytest.raises(WorldFailed, match="world 'git': probe failed: 'echo' printed something other than JSON"):
        _play_world(bad)


def _play_world(world: object, *faults: tuple[str, str]) -> EpisodeResult:
    task = _commit_task()
    sched = GatewaySchedule(id="t", faults=tuple(GatewayFault(kind=k, tool=t) for k, t in faults))  # type: ignore[arg-type]
    setup = ExternalSetup(world, task, load_conditions().resolve("GW-bare"), sched)  # type: ignore[arg-type]
    return asyncio.run(run_external_episode(setup, DeterministicAgent(Params(), task.script)))


def test_a_server_killed_mid_episode_fails_the_episode_and_leaves_nothing(tmp_path: Path) -> None:
    trace = Trace()
    gw = Gateway(GIT, trace, resource_parent=tmp_path).open()
    pid = gw.pids[0]
    os.kill(pid, 9)
    with pytest.raises(WorldFailed, match="world 'git': git_status: the server"):
        gw.invoke("git_status", {"repo_path": "/workspace"})
    gw.close()
    assert _gone(pid) and list(tmp_path.iterdir()) == []


def test_a_killed_runner_leaves_no_server_behind(tmp_path: Path) -> None:
    script = ("import sys, time; from aft_bench.runtime.gateway import Gateway; from aft_bench.runtime.trace import "
              "Trace; from aft_bench.world.external import load_external; "
              f"g = Gateway(load_external({str(ROOT / 'worlds' / 'git')!r}), Trace(), "
              f"resource_parent=__import__('pathlib').Path({str(tmp_path)!r})).open(); "
              "print(g.pids[0], flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    pid = int(proc.stdout.readline())  # type: ignore[union-attr]
    assert not _gone(pid)
    between = _ancestors(pid, proc.pid)  # the forked launcher that forked it (and its namespace's init), the runner's
    assert between and between[0] != proc.pid
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while not all(_gone(p) for p in (pid, *between)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in (pid, *between) if not _gone(p)] == []


def _ancestors(pid: int, top: int) -> list[int]:
    """The processes between `pid` and its ancestor `top` (neither included); fails if `top` is no ancestor."""
    chain, at = [], _parent(pid)
    while at != top:
        assert at > 1, f"{top} is not an ancestor of {pid}"
        chain.append(at)
        at = _parent(at)
    return chain


def _parent(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))


def test_a_forked_server_plays_the_episode_a_server_started_from_nothing_plays() -> None:
    """The forked launcher changes how a server process starts, never what it does: the same episode, started
    either way, gives the same sealed trace and labels, on both pinned versions."""
    for version in (None, OLD):
        world = GIT.with_version(version) if version else GIT
        assert world.server.fork is not None
        forked = _play_world(world, ("response_loss", "git_commit"))
        fresh = _play_world(world.model_copy(update={"server": world.server.model_copy(update={"fork": None})}),
                            ("response_loss", "git_commit"))
        assert forked.trace_head == fresh.trace_head and forked.labels == fresh.labels
        assert forked.labels.fault_fired and [e.kind for e in forked.events].count("server_answer") == 3


def test_a_launcher_that_cannot_load_its_server_or_whose_server_crashes_says_why(tmp_path: Path) -> None:
    here = (sys.executable, "no_such_module_anywhere:main", ())
    with pytest.raises(ServerFailed, match="the forked launcher could not load no_such_module_anywhere:main: "
                                           "ModuleNotFoundError: No module named 'no_such_module_anywhere'"):
        StdioServer(["server"], cwd=tmp_path, fork=here, timeout_s=30).start()
    log = tmp_path / "err.log"
    crashing = (sys.executable, "json:loads", ("json",))  # a function that fails without its argument
    # it may die before or after the initialize request is written: either way, its status and why
    with pytest.raises(ServerFailed, match=r"exited \(status 1\) (before it answered initialize|while we wrote to "
                                           r"it); its last words: TypeError: loads\(\) missing 1 required positional"):
        StdioServer(["server"], cwd=tmp_path, fork=crashing, stderr_path=log, timeout_s=30).start()


# -- a matrix on the real server: executors agree, a killed run resumes with nothing lost or duplicated ---------
CONFIG = """[experiment]
id = "git_small"
comparisons = ["gateway_key_duplicates"]
tasks_per_workload = 3
seeds = [0]
"""


def _run(cfg: Path, out: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aft_bench.cli", "run", str(cfg), "--out", str(out), *extra],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, **(env or {})}, timeout=600)


def _labels(out: Path) -> list[tuple]:
    import pandas as pd

    df = pd.read_parquet(out / "results.parquet")
    cols = ["run_id", "outcome", "duplicate_effects", "claim_correct", "fault_fired", "trace_head"]
    return sorted(tuple(r) for r in df[cols].itertuples(index=False))


def _servers_under(folder: Path) -> list[int]:
    """Live processes working in an episode folder under `folder` (a server runs in its resource, whether it was
    started from nothing or forked by the launcher, whose children keep the launcher's command line)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cwd = os.readlink(d / "cwd")
                state = (d / "status").read_text()
            except OSError:
                continue
            if cwd.startswith(str(folder) + "/") and "zombie" not in state:
                found.append(int(d.name))
    return found


def test_a_real_server_matrix_killed_mid_call_resumes_equal_to_serial_and_workers_agree(tmp_path: Path) -> None:
    cfg = tmp_path / "git_small.toml"
    cfg.write_text(CONFIG)
    # the serial run makes each episode's world when it opens; the others prepare the next one ahead (the pool)
    pooled = {"AFT_BENCH_POOL": "1"}
    serial = _run(cfg, tmp_path / "serial", "--workers", "1")
    assert serial.returncode == 0, serial.stderr
    expected = _labels(tmp_path / "serial")
    assert len(expected) == 6 and {r[2] for r in expected} == {0, 1}  # GW-bare duplicates a commit, GW-key never
    two = _run(cfg, tmp_path / "two", "--workers", "2", env=pooled)
    assert two.returncode == 0, two.stderr
    assert _labels(tmp_path / "two") == expected
    killed = _run(cfg, tmp_path / "killed", "--workers", "1",
                  env={"AFT_BENCH_KILL_AT": "after_server_answer:5", **pooled})
    assert killed.returncode == -9
    scratch = tmp_path / "killed" / ".scratch"
    assert [p for p in scratch.iterdir() if p.is_dir()]  # the episode's folder, left by the SIGKILL
    deadline = time.monotonic() + 10
    while _servers_under(scratch) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _servers_under(scratch) == []  # the server died with its runner
    resumed = _run(cfg, tmp_path / "killed", "--workers", "1", env=pooled)
    assert resumed.returncode == 0, resumed.stderr
    assert not scratch.exists()  # the resumed session removed what the killed one left
    assert _labels(tmp_path / "killed") == expected
    assert _servers_under(tmp_path) == []  # nothing prepared ahead outlived its run


def test_validate_reads_an_external_world_and_names_a_bad_field(tmp_path: Path) -> None:
    ok = subprocess.run([sys.executable, "-m", "aft_bench.cli", "validate", "worlds/git"], capture_output=True,
                        text=True, cwd=ROOT)
    assert ok.returncode == 0 and "external world: 'git', mcp-server-git 2026.10.19, 12 tools (5 writing" in ok.stdout
    bad = tmp_path / "w" / "world.toml"
    bad.parent.mkdir()
    bad.write_text((ROOT / "worlds" / "git" / "world.toml").read_text().replace(
        'effect = "write"\nidempotent = false\nidentity = { collection = "commits"', 'effect = "writes"\nidempotent = '
        'false\nidentity = { collection = "commits"'))
    out = subprocess.run([sys.executable, "-m", "aft_bench.cli", "validate", str(bad)], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 2 and out.stdout == ""
    assert f"{bad}: field 'tools.git_commit.effect'" in out.stderr and "'writes'" in out.stderr


def test_a_write_that_touches_nothing_the_other_writer_changed_is_not_stale() -> None:
    task = Task(id="br", world="git", spec="Create branch x.", goal=[
        {"record": "branches/x", "field": "commit", "equals": "ignored"}], target_ops=["git_create_branch"],
        plan=[{"call": "git_create_branch", "args": {"repo_path": "/workspace", "branch_name": "x"}}])
    r = _play(task, "GW-bare", ("stale_state", "git_create_branch"))
    assert [e.kind for e in r.events].count("world_write") == 1 and r.labels.commits == 1
    assert (r.labels.stale_writes, r.labels.unsafe_commits) == (0, 0)  # a new branch: nothing of theirs changed


def test_serve_puts_an_mcp_client_in_front_of_the_real_git_server_behind_the_gateway(tmp_path: Path) -> None:
    """The official SDK client, served a git episode by `aft-bench serve`: its lost commit answer, its re-issue
    refused by the real server, its failure claim, all labelled from the repository."""
    import pandas as pd
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp import ClientSession

    out = tmp_path / "out"
    exe = str(Path(sys.executable).with_name("aft-bench"))
    params = StdioServerParameters(command=exe, args=[
        "serve", "--workload", "git_response_loss", "--task", "commit_notes", "--condition", "GW-bare",
        "--out", str(out), "--agent", "sdk-test"])

    async def play() -> tuple[list[str], list, object]:
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            names = [t.name for t in (await s.list_tools()).tools]
            annotated = [t.annotations for t in (await s.list_tools()).tools if t.name == "git_commit"]
            await s.call_tool("git_add", {"repo_path": "/workspace", "files": ["notes.txt"]})
            first = await s.call_tool("git_commit", {"repo_path": "/workspace", "message": "Update notes"})
            second = await s.call_tool("git_commit", {"repo_path": "/workspace", "message": "Update notes"})
            await s.call_tool("report_outcome", {"action": "finish", "claim": "failure"})
            return names, [first, second], annotated

    names, (first, second), annotated = asyncio.run(play())
    assert "git_commit" in names and "report_outcome" in names and annotated == [None]  # GW-bare: legacy effects
    assert "No changes staged" in second.content[0].text and second.is_error
    deadline = time.monotonic() + 20
    while not (out / "results.parquet").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    row = pd.read_parquet(out / "results.parquet").iloc[0]
    assert (row["world"], row["outcome"], row["fault_fired"], row["incorrect_claim"]) == (
        "git", "completed", True, True)


@pytest.mark.parametrize(("condition", "expected"), [
    ("GW-bare", None),  # legacy effects: no annotations
    ("GW-key", {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True}),  # keyed: truthful
    ("GW-misleading", {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True}),  # a lie
])
def test_served_annotations_are_none_truthful_or_misleading_by_condition(condition: str, expected: dict | None,
                                                                          tmp_path: Path) -> None:
    """What `aft-bench serve` tells a client about the real server's git_commit: the overlay says each call makes
    a new commit, so `idempotentHint` is true only where the gateway's key makes it so, or where it lies."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    exe = str(Path(sys.executable).with_name("aft-bench"))
    params = StdioServerParameters(command=exe, args=[
        "serve", "--workload", "git_response_loss", "--task", "commit_notes", "--condition", condition,
        "--out", str(tmp_path / "out"), "--agent", "sdk-annotations"])

    async def listed() -> dict[str, object]:
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            return {t.name: t.annotations for t in (await s.list_tools()).tools}

    tools = asyncio.run(listed())
    got = tools["git_commit"]
    assert (None if got is None else {"readOnlyHint": got.read_only_hint, "destructiveHint": got.destructive_hint,
                                      "idempotentHint": got.idempotent_hint}) == expected
    assert GIT.tools["git_commit"].idempotent is False  # what the person's overlay says


def test_selective_discovery_at_the_gateway_loads_only_what_the_task_needs() -> None:
    eager = _play(_commit_task(), "GW-bare")
    selective = _play(_commit_task(), "GW-selective")
    (shown,) = [e.data["tools"] for e in selective.events if e.kind == "surface"]
    assert shown == ["search_tools", "describe_tool"]
    loaded = [t for e in selective.events if e.kind == "materialize" for t in e.data["tools"]]
    assert loaded == ["git_add", "git_commit"]
    assert selective.labels.outcome == eager.labels.outcome == "completed"
    assert selective.labels.capability_recall == 1.0
    assert selective.labels.context_tokens < eager.labels.context_tokens / 3


def test_the_git_probe_reads_head_on_a_branch_detached_and_unborn(tmp_path: Path) -> None:
    """HEAD is read from the repository's own file where it is plain, and agrees with git rev-parse."""
    from aft_bench.world.resource import Resource, probe_git

    res = Resource(GIT, tmp_path).make()
    env, root = res.env(), res.root

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, env={**os.environ, **env}, capture_output=True, text=True,
                              check=True).stdout.strip()

    try:
        head = probe_git(root, env, 10)["records"]["head"]["HEAD"]
        assert head == {"branch": "main", "commit": git("rev-parse", "HEAD")}
        git("checkout", "-q", "--detach", "release")
        snap = probe_git(root, env, 10)["records"]
        assert snap["head"]["HEAD"] == {"branch": None, "commit": git("rev-parse", "release")}
        git("checkout", "-q", "--orphan", "fresh")
        snap = probe_git(root, env, 10)["records"]
        assert snap["head"]["HEAD"] == {"branch": "fresh", "commit": None} and "fresh" not in snap["branches"]
        assert set(snap["staged"]) == {"README.md", "notes.txt", "src/app.py"}  # against an unborn HEAD: all new
    finally:
        res.remove()
