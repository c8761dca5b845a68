"""`aft-bench init-world` on what a server may list and what a person may type (issue 47): the draft goes under
the current folder's worlds/ (never the project's), is valid TOML for any tool list, names its package from the
install (or says it cannot), and bad input is one line with nothing left behind. The scorecard's gate tells an
annotation that lies from one that is absent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ECHO = Path(__file__).parent / "data" / "echo_mcp.py"


def _cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aft_bench.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **env}, timeout=300)


def test_without_into_the_draft_goes_under_the_current_folder(tmp_path: Path) -> None:
    done = _cli("init-world", "echoes", "--", sys.executable, str(ECHO), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    draft = tmp_path / "worlds" / "echoes" / "world.toml"
    assert draft.is_file() and not (ROOT / "worlds" / "echoes").exists()
    data = tomllib.loads(draft.read_text())
    assert data["tools"]["echo"]["effect"] == "read"  # measured: called with no arguments, nothing changed
    assert "measured" in data["tools"]["echo"]["note"]
    assert data["tools"]["append"]["effect"] == "write"  # needs an argument: assumed, and said so
    assert data["tools"]["append"]["examples"] == [{"args": {"text": "TODO"}}]
    assert data["server"]["package"] == "TODO"  # a script in no venv or node package: unknown, never serverInfo
    assert "could not be read" in draft.read_text() and "package and version unknown" in done.stdout


@pytest.mark.parametrize("tools", [
    [{"name": "smile 😀", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}},
                                         "required": ["q"]}}],
    [{"name": 'a"b.c\\d', "inputSchema": {}}, {"name": "x\u007fy\ttab", "inputSchema": {}}],
    [{"name": "arr", "inputSchema": {"type": "object", "properties": {"xs": {"type": "array"}, "o": {
        "type": "object"}, "n": {"type": "integer"}}, "required": ["xs", "o", "n"]}}],
])
def test_any_tool_list_drafts_valid_toml(tools: list, tmp_path: Path) -> None:
    done = _cli("init-world", "odd", "--", sys.executable, str(ECHO), cwd=tmp_path, ECHO_TOOLS=json.dumps(tools))
    assert done.returncode == 0, done.stderr
    data = tomllib.loads((tmp_path / "worlds" / "odd" / "world.toml").read_text())
    assert set(data["tools"]) == {t["name"] for t in tools}
    check = _cli("validate", str(tmp_path / "worlds" / "odd"), cwd=tmp_path)
    assert check.returncode == 0, check.stderr  # the draft loads as a world


@pytest.mark.parametrize(("tools", "said"), [
    ([{"name": "dup", "inputSchema": {}}, {"name": "dup", "inputSchema": {}}], "lists 'dup' twice"),
    (["a string"], "tool 0 is a str, not an object"),
    ([{"name": 7}], "tool 0 has no name"),
    ([{"name": "x", "inputSchema": {"required": "x"}}], "its inputSchema is not a JSON Schema"),
    ([{"name": "x", "annotations": "bad"}], "its annotations are a str"),
    ([{"name": "x", "annotations": {"idempotentHint": "yes"}}], "its idempotentHint is 'yes', not true or false"),
    (5, "tools are a int, not a list"),
])
def test_a_malformed_tool_list_is_one_line_and_leaves_nothing(tools: object, said: str, tmp_path: Path) -> None:
    done = _cli("init-world", "odd", "--", sys.executable, str(ECHO), cwd=tmp_path, ECHO_TOOLS=json.dumps(tools))
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "the server sent a malformed answer" in done.stderr and said in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("args", "said"), [
    (["../escape", "--", sys.executable, str(ECHO)], "NAME"),
    (["w", "--timeout", "nan", "--", sys.executable, str(ECHO)], "--timeout"),
    (["w", "--timeout", "-1", "--", sys.executable, str(ECHO)], "--timeout"),
    (["w", "--timeout", "inf", "--", sys.executable, str(ECHO)], "--timeout"),
    (["w"], "COMMAND"),
    (["n" * 65, "--", sys.executable, str(ECHO)], "NAME"),  # it names folders and scratch files (rerun: init.name-300)
])
def test_bad_input_is_one_line_and_leaves_nothing(args: list[str], said: str, tmp_path: Path) -> None:
    done = _cli("init-world", *args, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == [] and not (tmp_path.parent / "escape").exists()


def test_a_draft_stopped_while_measuring_leaves_no_folder_it_made(tmp_path: Path) -> None:
    """The draft is written, then its tools measured: SIGTERM then (a tool that takes 30 s) leaves neither the
    world's folder nor the ./worlds it made (the rerun's sig.sigterm-init-world-measuring left worlds/)."""
    import os
    import signal
    import time

    env = {**os.environ, "ECHO_SLEEP": "30", "ECHO_TOOLS": json.dumps([{"name": "ping", "inputSchema": {
        "type": "object"}}])}
    proc = subprocess.Popen([sys.executable, "-m", "aft_bench.cli", "init-world", "slow", "--", sys.executable,
                             str(ECHO)], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (tmp_path / "worlds" / "slow" / "world.toml").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "worlds" / "slow" / "world.toml").exists()  # the first draft: measuring has begun
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and b"interrupted" in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_program_that_is_not_a_server_says_so_and_leaves_nothing(tmp_path: Path) -> None:
    done = _cli("init-world", "nope", "--", sys.executable, "-c", "import sys; print('usage: nope', "
                "file=sys.stderr); sys.exit(4)", cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "exited (status 4) before it answered initialize; its last words: usage: nope" in done.stderr
    assert list(tmp_path.iterdir()) == []


def _echo_world(tmp_path: Path, annotations: dict | None) -> Path:
    folder = tmp_path / "w"
    folder.mkdir(parents=True, exist_ok=True)
    env = ""
    if annotations is not None:
        tools = [{"name": "append", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
                  "annotations": annotations}]
        env = f"env = {{ ECHO_TOOLS = {json.dumps(json.dumps(tools))} }}\n"
    (folder / "world.toml").write_text(
        f'kind = "mcp_stdio"\nid = "echoes"\n[server]\npackage = "echo"\nversion = "1"\n'
        f'command = ["{sys.executable}", "{ECHO}"]\n{env}[probe]\nbuiltin = "folder"\npath = "notes.txt"\n'
        '[tools.append]\neffect = "write"\nexamples = [{ args = { text = "hello" } }]\n')
    return folder


def test_an_absent_annotation_is_undeclared_and_a_lie_is_a_contradiction(tmp_path: Path) -> None:
    bare = _echo_world(tmp_path / "none", None)
    lax = _cli("scorecard", str(bare), "--fail-on", "annotation", "--quiet", cwd=tmp_path)
    assert lax.returncode == 0, lax.stderr  # declares nothing: no contradiction
    strict = _cli("scorecard", str(bare), "--fail-on", "undeclared", "--quiet", cwd=tmp_path)
    assert strict.returncode == 1
    assert "append: readOnlyHint undeclared" in strict.stderr and "append: idempotentHint undeclared" in strict.stderr
    lying = _echo_world(tmp_path / "lie", {"readOnlyHint": False, "idempotentHint": True})
    gate = _cli("scorecard", str(lying), "--fail-on", "annotation,undeclared", "--quiet", cwd=tmp_path)
    assert gate.returncode == 1
    assert gate.stderr.strip().splitlines() == [
        "scorecard gate: append: idempotentHint=true, but the re-issue made a second effect"]
    card = _cli("scorecard", str(lying), "--json", "--quiet", cwd=tmp_path)
    row = json.loads(card.stdout)["tools"][0]
    bare_row = next(o for o in row["outcomes"] if o["treatment"] == "bare")
    assert bare_row["cls"] == "duplicate" and bare_row["signal"] == "state: the re-issue changed it again"
