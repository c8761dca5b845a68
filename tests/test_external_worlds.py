"""The reference filesystem and memory MCP servers as worlds (issue 41), started for real behind the gateway and
judged from the folder and the JSONL file; and the pure snapshot functions every external label rests on, with
known positives and negatives."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from aft_bench.agents.deterministic import DeterministicAgent, Params
from aft_bench.episode.episode import EpisodeResult
from aft_bench.episode.external import ExternalSetup, run_external_episode
from aft_bench.interface.mechanisms import load_conditions
from aft_bench.runtime.gateway import GatewayFault, GatewaySchedule
from aft_bench.tasks.workloads import load_workloads
from aft_bench.world import snapshot
from aft_bench.world.external import Identity, load_external, servers_dir

ROOT = Path(__file__).resolve().parents[1]
WL = load_workloads(ROOT / "worlds").items
MEMORY = load_external(ROOT / "worlds" / "memory")


@pytest.fixture(scope="module", autouse=True)
def _servers_installed() -> None:
    node = servers_dir() / "node" / "node_modules" / "@modelcontextprotocol"
    assert (node / "server-filesystem").is_dir() and (node / "server-memory").is_dir(), \
        f"{node} is missing: `make worlds` installs the pinned servers"


def _play(workload: str, task_id: str, condition: str, lose: bool = True) -> EpisodeResult:
    wl = WL[workload]
    task = next(t for t in wl.tasks if t.id == task_id)
    faults = (GatewayFault(kind="response_loss", tool=task.target_ops[0]),) if lose else ()
    setup = ExternalSetup(wl.external, task, load_conditions().resolve(condition),  # type: ignore[arg-type]
                          GatewaySchedule(id="t", faults=faults))
    return asyncio.run(run_external_episode(setup, DeterministicAgent(Params(), task.script)))


def _answers(r: EpisodeResult) -> list[dict]:
    return [e.data["answer"] for e in r.events if e.kind == "server_answer"]


def test_an_edit_that_keeps_its_old_text_is_applied_twice_by_a_reissue() -> None:
    r = _play("filesystem_response_loss", "edit_notes_append", "GW-bare")
    assert [a["isError"] for a in _answers(r)] == [False, False]
    assert r.terminal_state["records"]["files"]["notes.md"]["text"] == "hello world world\n"
    L = r.labels
    assert (L.duplicate_effects, L.y_goal, L.outcome, L.false_success) == (1, False, "unsafely_committed", True)


def test_the_key_applies_that_edit_once() -> None:
    r = _play("filesystem_response_loss", "edit_notes_append", "GW-key")
    assert len(_answers(r)) == 1
    assert r.terminal_state["records"]["files"]["notes.md"]["text"] == "hello world\n"
    assert (r.labels.duplicate_effects, r.labels.outcome, r.labels.claim_correct) == (0, "completed", True)


@pytest.mark.parametrize(("task", "said"), [("edit_config_port", "Could not find exact match"),
                                            ("move_draft_a", "")])
def test_a_replacing_edit_and_a_move_fail_on_the_reissue_although_they_happened(task: str, said: str) -> None:
    r = _play("filesystem_response_loss", task, "GW-bare")
    first, second = _answers(r)
    assert not first["isError"] and second["isError"] and said in second["content"][0]["text"]
    L = r.labels
    assert (L.y_goal, L.duplicate_effects, L.false_failure, L.outcome) == (True, 0, True, "completed")


def test_verification_from_the_folder_turns_the_false_failure_into_a_correct_claim() -> None:
    r = _play("filesystem_response_loss", "move_draft_a", "GW-verify")
    holds = [e.data["holds"] for e in r.events if e.kind == "verification" and e.data["tool"] == "move_file"]
    assert holds == [False, True] and r.labels.claim_correct is True and len(_answers(r)) == 1


def test_the_memory_server_answers_a_reissued_entity_with_nothing_and_keeps_it_once() -> None:
    r = _play("memory_response_loss", "entity_carol", "GW-bare")
    first, second = _answers(r)
    assert "Carol" in first["content"][0]["text"] and second["content"][0]["text"] == "[]"  # a silent empty success
    carol = [k for k in r.terminal_state["records"]["entities"] if k.startswith("Carol")]
    assert carol == ["Carol"]
    assert (r.labels.duplicate_effects, r.labels.outcome, r.labels.claim_correct) == (0, "completed", True)


def test_a_relation_with_a_new_entity_first_is_judged_from_the_file() -> None:
    r = _play("memory_response_loss", "relation_frank_billing", "GW-key", lose=False)
    rels = r.terminal_state["records"]["relations"]
    assert "Frank|works_on|Billing" in rels and r.labels.outcome == "completed"


def test_the_memory_worlds_foreign_write_removes_bob_with_his_relations() -> None:
    world = load_external(ROOT / "worlds" / "memory")
    from aft_bench.world.resource import Resource

    res = Resource(world).make()
    try:
        before = res.probe()
        res.foreign_write()
        after = res.probe()
    finally:
        res.remove()
    assert "Bob" in before["records"]["entities"] and "Bob" not in after["records"]["entities"]
    assert snapshot.diff(before, after) == {
        "entities": {"added": [], "removed": ["Bob"], "changed": []},
        "relations": {"added": [], "removed": ["Bob|account_manager_of|Acme"], "changed": []}}


# -- the snapshot functions: known positives and negatives ------------------------------------------------
def _files(**texts: str) -> dict:
    return {"records": {"files": {k.replace("_", "."): {"text": v} for k, v in texts.items()}}}


EDIT = Identity(collection="files", record_arg="path", field="text", replace_old="edits.*.oldText",
                replace_new="edits.*.newText")


@pytest.mark.parametrize(("after", "times"), [("hello\n", 0), ("hello world\n", 1), ("hello world world\n", 2),
                                             ("goodbye\n", 0), ("hello world world world\n", 3)])
def test_an_edit_is_counted_by_replaying_it_on_s0(after: str, times: int) -> None:
    args = {"path": "/workspace/notes.md", "edits": [{"oldText": "hello", "newText": "hello world"}]}
    assert snapshot.realized(EDIT, _files(notes_md="hello\n"), _files(notes_md=after), args) == times
    assert snapshot.holds(EDIT, _files(notes_md=after), args, _files(notes_md="hello\n")) is (times > 0)


def test_records_are_counted_per_key_and_a_repeated_line_is_a_duplicate() -> None:
    ident = Identity(collection="entities", key_arg="entities.*.name")
    args = {"entities": [{"name": "Carol"}, {"name": "Dave"}]}
    s0 = {"records": {"entities": {}}}
    once = {"records": {"entities": {"Carol": {}, "Dave": {}}}}
    twice = {"records": {"entities": {"Carol": {}, "Carol#2": {}, "Dave": {}}}}
    assert snapshot.realized(ident, s0, once, args) == 1 and snapshot.realized(ident, s0, twice, args) == 2
    assert snapshot.holds(ident, once, args) and not snapshot.holds(ident, {"records": {"entities": {"Carol": {}}}},
                                                                     args)
    composite = Identity(collection="relations", key_arg=("relations.*.from", "relations.*.relationType",
                                                          "relations.*.to"))
    rel = {"relations": [{"from": "A", "relationType": "knows", "to": "B"}]}
    assert snapshot.holds(composite, {"records": {"relations": {"A|knows|B": {}}}}, rel)
    assert not snapshot.holds(composite, {"records": {"relations": {"B|knows|A": {}}}}, rel)


def test_a_matched_record_needs_every_field_and_an_unchanged_one_is_not_new() -> None:
    ident = Identity(collection="commits", match={"message": "message"})
    s0 = {"records": {"commits": {"a": {"message": "Seed"}}}}
    s = {"records": {"commits": {"a": {"message": "Seed"}, "b": {"message": "Fix"}, "c": {"message": "Fix"}}}}
    assert snapshot.realized(ident, s0, s, {"message": "Fix"}) == 2
    assert snapshot.realized(ident, s0, s, {"message": "Seed"}) == 0  # there before: not realized by the call
    assert snapshot.values({"a": [{"b": 1}, {"b": 2}]}, "a.*.b") == [1, 2]
    assert snapshot.values({"a": [{"b": 1}, {"b": 2}]}, "a.1.b") == [2] and snapshot.values({}, "a.b") == []


# -- every executor and the llm agent, unchanged, on real servers ----------------------------------------------
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

EXECUTORS = """[experiment]
id = "real_executors"
comparisons = ["gateway_key_duplicates_fs", "gateway_key_claims"]
tasks_per_workload = 2
seeds = [0]
"""


def _run(cfg: Path, out: Path, *extra: str) -> None:
    done = subprocess.run([sys.executable, "-m", "aft_bench.cli", "run", str(cfg), "--out", str(out), *extra],
                          capture_output=True, text=True, cwd=ROOT, env=dict(os.environ), timeout=900)
    assert done.returncode == 0, done.stderr


def _rows(out: Path) -> list[tuple]:
    import pandas as pd

    df = pd.read_parquet(out / "results.parquet")
    return sorted(tuple(r) for r in df[["run_id", "outcome", "duplicate_effects", "claim_correct",
                                        "trace_head"]].itertuples(index=False))


def test_loops_and_a_dask_local_cluster_give_the_serial_rows_on_real_servers(tmp_path: Path) -> None:
    cfg = tmp_path / "real.toml"
    cfg.write_text(EXECUTORS)
    _run(cfg, tmp_path / "serial", "--workers", "1")
    serial = _rows(tmp_path / "serial")
    assert len(serial) == 8 and {r[2] for r in serial} == {0, 1}
    _run(cfg, tmp_path / "loops", "--loops", "2")
    assert _rows(tmp_path / "loops") == serial
    _run(cfg, tmp_path / "dask", "--executor", "dask", "--scheduler", "local:2")
    assert _rows(tmp_path / "dask") == serial


LLM = """[experiment]
id = "llm_real"
comparisons = ["gateway_key_duplicates_fs"]
tasks_per_workload = 2
seeds = [0]

[[experiment.agents]]
name = "llm"
model = "openai/fake-capability"
api_base = "offline"
concurrency = 2
"""


def test_the_llm_agent_meets_a_real_server_unchanged(tmp_path: Path) -> None:
    cfg = tmp_path / "llm.toml"
    cfg.write_text(LLM)
    _run(cfg, tmp_path / "o")
    import pandas as pd

    df = pd.read_parquet(tmp_path / "o" / "results.parquet").set_index("condition")
    assert set(df["model_calls"]) == {3} and df["fault_fired"].all()
    assert list(df.loc["GW-bare", "duplicate_effects"]) == [1, 1]  # the appending edits, applied twice
    assert list(df.loc["GW-key", "duplicate_effects"]) == [0, 0]
    assert set(df.loc["GW-key", "outcome"]) == {"completed"}


def test_a_server_that_fails_in_a_matrix_leaves_its_tuples_pending_with_one_line_each(tmp_path: Path) -> None:
    """A server command that cannot start: no row is made, each tuple's failure names the world and the cause."""
    worlds = tmp_path / "worlds"
    shutil.copytree(ROOT / "worlds" / "memory", worlds / "memory")
    (worlds / "workloads").mkdir()
    shutil.copy(ROOT / "worlds" / "workloads" / "memory_response_loss.toml", worlds / "workloads")
    world = worlds / "memory" / "world.toml"
    world.write_text(world.read_text().replace('command = ["node",', 'command = ["/nonexistent/node",'))
    cfg = tmp_path / "m.toml"
    cfg.write_text('[experiment]\nid = "m"\nworkloads = ["memory_response_loss"]\nconditions = ["GW-bare"]\n'
                   'tasks_per_workload = 2\n')
    done = subprocess.run([sys.executable, "-m", "aft_bench.cli", "run", str(cfg), "--out", str(tmp_path / "o"),
                           "--worlds", str(worlds), "--workers", "1"], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode != 0
    failures = [json.loads(x) for x in (tmp_path / "o" / "failures.jsonl").read_text().splitlines()]
    assert len(failures) == 2 and all("world 'memory': cannot start '/nonexistent/node'" in f["message"] for f in failures)
    assert not (tmp_path / "o" / "journal.jsonl").exists() or (tmp_path / "o" / "journal.jsonl").read_text() == ""


def _pinned_worlds() -> list[tuple[str, str, str]]:
    """(workload, package, version) of the server every workload on an external world runs."""
    return sorted((name, w.external.server.package, w.external.server.version) for name, w in WL.items()
                  if w.external is not None)


def test_every_server_a_world_runs_is_pinned_to_its_version_by_the_install_files() -> None:
    """`make worlds` installs exactly the versions the worlds declare: Python servers as `package==version` lines,
    npm servers as exact dependencies resolved to that version in the committed lock file (npm ci)."""
    import json

    python = {line.split()[0] for line in (ROOT / "worlds" / "servers" / "python.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    npm = json.loads((ROOT / "worlds" / "servers" / "package.json").read_text())["dependencies"]
    lock = json.loads((ROOT / "worlds" / "servers" / "package-lock.json").read_text())["packages"]
    worlds = _pinned_worlds()
    assert {(p, v) for _, p, v in worlds} == {("mcp-server-git", "2026.10.19"), ("mcp-server-git", "2025.11.25"),
                                              ("@modelcontextprotocol/server-filesystem", "2026.8.31"),
                                              ("@modelcontextprotocol/server-memory", "2026.8.31")}
    for world, package, version in worlds:
        if package.startswith("@"):
            assert npm.get(package) == version, (world, package)  # exact, no range
            assert lock[f"node_modules/{package}"]["version"] == version, (world, package)
            assert lock[f"node_modules/{package}"]["integrity"].startswith("sha512-")
        else:
            assert f"{package}=={version}" in python, (world, package)


def test_a_server_installed_at_another_version_than_its_world_pins_is_refused(tmp_path: Path, monkeypatch) -> None:
    """A stale install would run another release under the pinned one's name: refused with one line, nothing
    started, nothing left."""
    from aft_bench.common.errors import InputError
    from aft_bench.world import external, pool

    package = tmp_path / "node" / "node_modules" / "@modelcontextprotocol" / "server-memory"
    package.mkdir(parents=True)
    (package / "package.json").write_text('{"name": "@modelcontextprotocol/server-memory", "version": "2099.1.1"}')
    monkeypatch.setenv(external.SERVERS_ENV, str(tmp_path))
    parent = tmp_path / "scratch"
    parent.mkdir()
    with pytest.raises(InputError, match=r"world 'memory': the installed @modelcontextprotocol/server-memory is "
                                         r"2099.1.1, not the pinned 2026.8.31"):
        pool.prepare(MEMORY, parent)
    assert list(parent.iterdir()) == []
    (package / "package.json").write_text('{"name": "@modelcontextprotocol/server-memory", "version": "2026.8.31"}')
    external._servers_layout.cache_clear()
    assert external.installed_version(MEMORY) == "2026.8.31"


def test_a_served_real_server_world_is_prepared_before_the_clients_first_request(tmp_path: Path) -> None:
    """`serve` starts the episode's real server while the client connects (openai-agents gives up after 5 s, and a
    start-up took 13-16 s on a busy machine): before any request, its folder and its server are there."""
    import signal
    import subprocess
    import sys
    import time

    exe = str(Path(sys.executable).with_name("aft-bench"))
    out = tmp_path / "out"
    proc = subprocess.Popen([exe, "serve", "--workload", "memory_response_loss", "--task", "entity_carol",
                             "--condition", "GW-bare", "--transport", "http", "--port", "0", "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def kids(pid: int) -> list[str]:
        out_ = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                    cmd = (d / "cmdline").read_bytes().decode(errors="replace")
                except OSError:
                    continue
                if int(fields[1]) == pid:
                    out_ += [cmd] + kids(int(d.name))
        return out_

    def prepared() -> bool:
        folders = list((out / ".scratch").glob("aft-memory-*/memory.jsonl")) if (out / ".scratch").is_dir() else []
        return bool(folders) and any("server-memory" in c for c in kids(proc.pid))

    try:
        deadline = time.monotonic() + 60
        while not prepared() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert prepared()  # no client has connected: the folder made and the server started ahead
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert not any("server-memory" in c for c in kids(proc.pid))


def test_a_served_real_server_that_cannot_start_is_one_line_not_an_internal_error(tmp_path: Path) -> None:
    import shutil
    import sys
    import tempfile

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    worlds = tmp_path / "worlds"
    shutil.copytree(ROOT / "worlds" / "memory", worlds / "memory")
    (worlds / "workloads").mkdir()
    shutil.copy(ROOT / "worlds" / "workloads" / "memory_response_loss.toml", worlds / "workloads")
    world = worlds / "memory" / "world.toml"
    world.write_text(world.read_text().replace('command = ["node",', 'command = ["/nonexistent/node",'))
    exe = str(Path(sys.executable).with_name("aft-bench"))
    params = StdioServerParameters(command=exe, args=[
        "serve", "--workload", "memory_response_loss", "--task", "entity_carol", "--condition", "GW-bare",
        "--out", str(tmp_path / "out"), "--worlds", str(worlds), "--agent", "probe"])

    async def play(errlog) -> None:  # type: ignore[no-untyped-def]
        async with stdio_client(params, errlog=errlog) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            await s.list_tools()

    with tempfile.TemporaryFile("w+") as errlog:
        asyncio.run(play(errlog))
        errlog.seek(0)
        said = errlog.read()
    assert "internal error" not in said, said
    assert "aft-bench: world 'memory': cannot start '/nonexistent/node'" in said and "not recorded" in said
    assert not (tmp_path / "out" / "results.parquet").exists()
