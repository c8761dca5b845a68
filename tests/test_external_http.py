"""A real MCP server that offers only streamable HTTP as a world (issue 42, item 5): the official SDK's MCPServer
(tests/data/notes_http_server.py) started on a free port of 127.0.0.1 per episode, driven over POST and event
streams, its lost answer withheld at the gateway; the scorecard and an episode read the folder it writes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aft_bench.agents.deterministic import DeterministicAgent, Params
from aft_bench.episode.external import ExternalSetup, run_external_episode
from aft_bench.interface.mechanisms import load_conditions
from aft_bench.runtime.gateway import GatewayFault, GatewaySchedule
from aft_bench.tasks.task import Task
from aft_bench.world.external import load_external

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "tests" / "data" / "notes_http_server.py"
WORLD = f"""kind = "mcp_http"
id = "notes_http"
[server]
package = "notes-http (tests/data)"
version = "0.1.0"
command = [{json.dumps(sys.executable)}, {json.dumps(str(SERVER))}, "{{root}}", "{{port}}"]
url = "http://127.0.0.1:{{port}}/mcp"
start_timeout_s = START
[fixture]
files = {{ "todo.md" = "- milk\\n" }}
[probe]
builtin = "folder"
[tools.read_note]
effect = "read"
[tools.append_note]
effect = "write"
identity = {{ collection = "files", record_arg = "name", field = "text", text_of = "text" }}
examples = [{{ args = {{ name = "todo.md", text = "- bread\\n" }} }}]
[tools.write_note]
effect = "write"
idempotent = true
identity = {{ collection = "files", key_arg = "name", match = {{ text = "text" }} }}
examples = [{{ args = {{ name = "summary.md", text = "done\\n" }} }}]
"""


@pytest.fixture()
def world(tmp_path: Path) -> Path:
    folder = tmp_path / "notes_http"
    folder.mkdir()
    (folder / "world.toml").write_text(WORLD.replace("START", "30"))
    return folder


def _scorecard(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aft_bench.cli", "scorecard", *args, "--quiet"], capture_output=True,
                          text=True, cwd=ROOT, env=dict(os.environ), timeout=600)


def test_the_scorecard_of_an_http_only_server(world: Path, tmp_path: Path) -> None:
    done = _scorecard(str(world), "--out", str(tmp_path / "sc"))
    assert done.returncode == 0, done.stderr
    card = json.loads((tmp_path / "sc" / "notes_http-0.1.0.json").read_text())
    assert card["server"] == {"name": "notes-http", "version": "0.1.0"}
    classes = {t["tool"]: {o["treatment"]: o["cls"] for o in t["outcomes"]} for t in card["tools"]}
    assert classes == {"append_note": {"bare": "duplicate", "key": "safe", "verify": "safe"},
                       "write_note": {"bare": "silent_success", "key": "safe", "verify": "safe"}}


def test_an_episode_on_an_http_server_labels_the_reissued_append_a_duplicate(world: Path) -> None:
    task = Task(id="append", world="notes_http", spec="Add '- bread' to todo.md.", goal=[
        {"record": "files/todo.md", "field": "text", "equals": "- milk\n- bread\n"}], target_ops=["append_note"],
        plan=[{"call": "append_note", "args": {"name": "todo.md", "text": "- bread\n"}}])
    results = {}
    for cond in ("GW-bare", "GW-key"):
        setup = ExternalSetup(load_external(world), task, load_conditions().resolve(cond),
                              GatewaySchedule(id="t", faults=(GatewayFault(kind="response_loss", tool="append_note"),)))
        results[cond] = asyncio.run(run_external_episode(setup, DeterministicAgent(Params(), task.script)))
    bare, key = results["GW-bare"], results["GW-key"]
    assert bare.terminal_state["records"]["files"]["todo.md"]["text"] == "- milk\n- bread\n- bread\n"
    assert (bare.labels.duplicate_effects, bare.labels.fault_fired) == (1, True)
    assert (key.labels.duplicate_effects, key.labels.outcome) == (0, "completed")


def test_an_http_server_that_never_listens_is_bad_input(world: Path, tmp_path: Path) -> None:
    text = (world / "world.toml").read_text().replace(str(SERVER), "-c").replace(
        '"{root}", "{port}"]', '"import time; time.sleep(60)"]').replace("start_timeout_s = 30", "start_timeout_s = 1")
    (world / "world.toml").write_text(text)
    done = _scorecard(str(world), "--out", str(tmp_path / "sc"))
    assert done.returncode == 2 and "no answer to initialize within 1 s at http://127.0.0.1:" in done.stderr
    assert not (tmp_path / "sc").exists()
