"""`aft-bench scorecard` (issue 42) on the real servers: the classes measured by hand in the real-server issue,
the key turning every duplicate safe, the version comparison, the CI gate, and bad input (one line, exit 2,
nothing written, no server left)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from aft_bench.scorecard.card import classify, contradictions, measure
from aft_bench.scorecard.render import compare, failures
from aft_bench.world.external import load_external

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aft_bench.cli", "scorecard", *args, "--quiet"],
                          capture_output=True, text=True, cwd=cwd, env=dict(os.environ), timeout=600)


def _classes(card: dict, treatment: str = "bare") -> dict[str, str]:
    out = {}
    for t in card["tools"]:
        name = t["tool"] + (f"#{t['example'] + 1}" if sum(x["tool"] == t["tool"] for x in card["tools"]) > 1 else "")
        out[name] = next(o["cls"] for o in t["outcomes"] if o["treatment"] == treatment)
    return out


def test_the_filesystem_scorecard_matches_the_hand_measurements_and_the_key_makes_all_safe(tmp_path: Path) -> None:
    done = _cli("filesystem", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    card = json.loads((tmp_path / "filesystem-2026.8.31.json").read_text())
    assert card["package"] == "@modelcontextprotocol/server-filesystem" and card["version"] == "2026.8.31"
    assert _classes(card) == {"create_directory": "silent_success", "edit_file#1": "duplicate",
                              "edit_file#2": "false_failure", "move_file": "false_failure",
                              "write_file": "silent_success"}
    assert set(_classes(card, "key").values()) == {"safe"} and set(_classes(card, "verify").values()) == {"safe"}
    edit = next(t for t in card["tools"] if t["tool"] == "edit_file" and t["example"] == 1)
    bare = next(o for o in edit["outcomes"] if o["treatment"] == "bare")
    assert bare["reissue"]["isError"] and "Could not find exact match" in bare["reissue"]["content"][0]["text"]
    assert bare["realized"] == 1 and bare["changes"] == {}
    md = (tmp_path / "filesystem-2026.8.31.md").read_text()
    assert "| `edit_file #1` | DUPLICATE | safe | safe | state: the effect is there 2 times |" in md


def test_the_gate_fails_on_the_named_classes_only(tmp_path: Path) -> None:
    dup = _cli("filesystem", "--fail-on", "duplicate")
    assert dup.returncode == 1 and "scorecard gate: edit_file #1: a re-issued call made a second effect" in dup.stderr
    memory = _cli("memory", "--fail-on", "duplicate,false-failure")
    assert memory.returncode == 0, memory.stderr  # the memory server re-issues without harm
    lying = _cli("memory", "--fail-on", "annotation")
    assert lying.returncode == 1
    assert "create_entities: idempotentHint=false, but the re-issue made no second effect" in lying.stderr
    unknown = _cli("memory", "--fail-on", "flaky")
    assert unknown.returncode == 2 and "--fail-on: unknown class 'flaky'" in unknown.stderr


def test_the_memory_server_answers_a_reissued_entity_with_an_empty_list() -> None:
    card = measure(load_external(ROOT / "worlds" / "memory"), ("bare",)).to_dict()
    create = next(t for t in card["tools"] if t["tool"] == "create_entities")
    (bare,) = create["outcomes"]
    assert bare["cls"] == "silent_success" and bare["reissue"]["content"][0]["text"] == "[]"
    assert create["annotations"]["idempotentHint"] is False and create["contradictions"]


def test_git_commit_went_from_a_duplicate_to_a_false_failure_between_versions() -> None:
    git = load_external(ROOT / "worlds" / "git")
    only = {n: (t if n == "git_commit" else t.model_copy(update={"examples": ()})) for n, t in git.tools.items()}
    world = git.model_copy(update={"tools": only})
    new = measure(world, ("bare", "key")).to_dict()
    old = measure(world.with_version("2025.11.25"), ("bare", "key")).to_dict()
    assert _classes(old) == {"git_commit": "duplicate"} and _classes(new) == {"git_commit": "false_failure"}
    assert _classes(old, "key") == _classes(new, "key") == {"git_commit": "safe"}
    lines = compare(old, new)
    assert lines[0].startswith("git_commit (bare): DUPLICATE in 2025.11.25 -> false failure in 2026.10.19")
    assert failures(old, ("duplicate",)) == ["git_commit: a re-issued call made a second effect"]
    assert failures(new, ("duplicate",)) == []


def test_classify_and_contradictions_known_positives_and_negatives() -> None:
    ok, err = {"isError": False}, {"isError": True}
    # the identity's count where it held
    assert classify(2, True, True, ok, None)[0] == "duplicate"
    assert classify(1, True, False, err, "isError") == ("false_failure", "state: the effect is there once; "
                                                         "answer: isError")
    assert classify(1, True, False, ok, None)[0] == "silent_success"
    assert classify(1, True, True, ok, None)[0] == "silent_success"  # changed something, not the effect twice
    assert classify(1, True, False, None, None)[0] == "safe"
    # no identity: the diffs decide
    assert classify(None, True, True, ok, None) == ("duplicate", "state: the re-issue changed it again")
    assert classify(None, True, False, ok, 'text "not found"') == (
        "false_failure", 'state: the call changed it; answer: text "not found"')
    assert classify(None, True, False, ok, None)[0] == "silent_success"
    assert classify(None, False, False, ok, None)[0] == "no_effect"
    # an identity that never held never hides a change of the state
    assert classify(0, True, True, ok, None) == ("duplicate", "state: the identity never held; the re-issue "
                                                 "changed it again")
    assert classify(0, False, False, ok, None)[0] == "no_effect"
    assert classify(0, True, False, ok, None)[0] == "silent_success"
    from aft_bench.scorecard.card import Outcome, undeclared

    def out(cls: str, realized: int) -> Outcome:
        return Outcome("bare", cls, realized, None, None, None, {})

    assert contradictions({"idempotentHint": True}, out("duplicate", 2)) == (
        "idempotentHint=true, but the re-issue made a second effect",)
    assert contradictions({"idempotentHint": True}, out("silent_success", 1)) == ()
    assert contradictions({"idempotentHint": False}, out("duplicate", 2)) == ()
    assert contradictions({"idempotentHint": False}, out("false_failure", 1)) == (
        "idempotentHint=false, but the re-issue made no second effect",)
    assert contradictions({}, out("false_failure", 1)) == ()  # absent: undeclared, not a contradiction
    assert undeclared({}, out("false_failure", 1)) == ("readOnlyHint", "idempotentHint")
    assert undeclared({"readOnlyHint": False, "idempotentHint": False}, out("duplicate", 2)) == ()
    assert "readOnlyHint=true" in contradictions({"readOnlyHint": True, "idempotentHint": True},
                                                 out("silent_success", 1))[0]


def test_a_failure_is_read_from_isError_or_from_a_phrase_the_first_answer_lacked() -> None:
    from aft_bench.scorecard.answers import failure_signal
    from aft_bench.world.external import FAILURE_PHRASES

    def said(text: str, is_error: bool = False) -> dict:
        return {"content": [{"type": "text", "text": text}], "isError": is_error}

    first = said("Todo added with ID 1")
    assert failure_signal(said("ok", True), first, FAILURE_PHRASES) == "isError"
    assert failure_signal(said("Database error: table notes already exists"), first, FAILURE_PHRASES) == \
        'text "error"'
    assert failure_signal(said("Todo with ID '1' not found"), first, FAILURE_PHRASES) == 'text "not found"'
    assert failure_signal(said("Todo added with ID 2"), first, FAILURE_PHRASES) is None
    assert failure_signal(said("0 errors, 1 row written"), first, FAILURE_PHRASES) is None  # whole words only
    # a phrase the first answer had too is how this server always answers, not a failure
    assert failure_signal(said("Error log rotated"), said("Error log rotated"), FAILURE_PHRASES) is None
    assert failure_signal(said("Nope, that is gone"), first, ("nope",)) == 'text "nope"'
    assert failure_signal(None, first, FAILURE_PHRASES) is None


# -- bad input: one line naming the file and the problem, exit 2, nothing written, no server left ------------
def _copy_world(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    folder = tmp_path / "w"
    folder.mkdir()
    (folder / "world.toml").write_text(edit((ROOT / "worlds" / "filesystem" / "world.toml").read_text()))
    return folder


def _no_server_under(tmp: Path) -> bool:
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "server-filesystem" in cmd and str(tmp) in cmd:
                return False
    return True


def test_a_wrong_tool_name_a_refused_example_and_a_failing_probe_are_bad_input(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cases = {
        "tool": (lambda t: t.replace("[tools.move_file]", "[tools.move_files]"),
                 "field 'tools.move_files': world 'filesystem': the server lists no such tool"),
        "schema": (lambda t: t.replace('{ path = "/workspace/reports" }', '{ path = 7 }'),
                   "field 'tools.create_directory.examples.0.args': world 'filesystem': the server's schema for "
                   "create_directory refuses it: 7 is not of type 'string'"),
        "probe": (lambda t: t.replace('builtin = "folder"', 'command = ["sh", "-c", "echo nope"]'),
                  "field 'probe.command': world 'filesystem': probe failed: 'sh' printed something other than JSON"),
    }
    for name, (edit, said) in cases.items():
        folder = _copy_world(tmp_path / name, edit) if (tmp_path / name).mkdir() is None else None
        done = _cli(str(folder), "--out", str(out))
        assert done.returncode == 2, (name, done.stderr)
        assert done.stderr.count("\n") == 1 and said in done.stderr and str(folder / "world.toml") in done.stderr
        assert not out.exists() and _no_server_under(folder)


def test_a_server_that_never_answers_is_bad_input_and_is_stopped(tmp_path: Path) -> None:
    folder = _copy_world(tmp_path, lambda t: t.replace(
        'command = ["node", "{servers}/node/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", '
        '"{root}"]', f'command = ["{sys.executable}", "-c", "import time; time.sleep(60)", "{{root}}"]\n'
        'start_timeout_s = 1'))
    done = _cli(str(folder), "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "no answer to initialize within 1 s" in done.stderr
    assert done.stderr.count("\n") == 1 and not (tmp_path / "out").exists()


# -- the tutorial, followed: init-world on a server, the draft finished by hand, validate --live, the scorecard --
def _block(text: str, tool: str, body: str) -> str:
    import re

    return re.sub(rf"\[tools\.{tool}\]\n(?:(?!\[tools\.).*\n)*", lambda m: f"[tools.{tool}]\n{body}\n\n", text)


def test_the_tutorial_from_init_world_to_a_scorecard(tmp_path: Path) -> None:
    from aft_bench.world.external import servers_dir

    server = servers_dir() / "node" / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist"
    folder = tmp_path / "my-worlds" / "notes"
    init = subprocess.run([sys.executable, "-m", "aft_bench.cli", "init-world", "--into", str(folder), "notes", "--",
                           "node", str(server / "index.js"), "{root}"], capture_output=True, text=True, cwd=tmp_path)
    assert init.returncode == 0, init.stderr
    assert "14 tools, 4 may write" in init.stdout
    assert "@modelcontextprotocol/server-filesystem 2026.8.31 (read from the install)" in init.stdout
    text = (folder / "world.toml").read_text()
    assert text.count("verified = false") == 14 and '[tools.edit_file]\neffect = "write"\nidempotent = false' in text
    again = subprocess.run([sys.executable, "-m", "aft_bench.cli", "init-world", "--into", str(folder), "notes", "--",
                            "node", str(server / "index.js"), "{root}"], capture_output=True, text=True, cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr  # a finished draft is never overwritten
    text = text.replace('files = {}', 'files = { "notes.md" = "hello\\n", "config.ini" = "port = 8080\\n" }')
    text = _block(text, "write_file", 'effect = "write"\nidempotent = true\ndestructive = true\n'
                  'identity = { collection = "files", key_arg = "path", match = { text = "content" } }\n'
                  'examples = [{ args = { path = "/workspace/summary.md", content = "# Summary\\n" } }]')
    text = _block(text, "edit_file", 'effect = "write"\nidentity = { collection = "files", record_arg = "path", '
                  'field = "text", replace_old = "edits.*.oldText", replace_new = "edits.*.newText" }\n'
                  'examples = [{ args = { path = "/workspace/notes.md", edits = [{ oldText = "hello", '
                  'newText = "hello world" }] } }]')
    for tool in ("create_directory", "move_file"):  # left as drafted, their examples removed: not measured
        text = _block(text, tool, 'effect = "write"\nverified = false')
    (folder / "world.toml").write_text(text)
    live = subprocess.run([sys.executable, "-m", "aft_bench.cli", "validate", "--live", str(folder)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert live.returncode == 0, live.stderr
    assert "2 example calls accepted; s0 has 2 records; 12 tools unverified" in live.stdout
    card = _cli(str(folder), "--out", str(tmp_path / "sc"), cwd=tmp_path)
    assert card.returncode == 0, card.stderr
    data = json.loads((tmp_path / "sc" / "notes-2026.8.31.json").read_text())  # the install's version, not 0.2.0
    assert _classes(data) == {"edit_file": "duplicate", "write_file": "silent_success"}
    assert set(_classes(data, "key").values()) == {"safe"}
    assert data["untested"] == ["create_directory", "move_file"]
    gate = _cli(str(folder), "--fail-on", "duplicate", cwd=tmp_path)
    assert gate.returncode == 1 and "edit_file: a re-issued call made a second effect" in gate.stderr
