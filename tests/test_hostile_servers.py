"""A server that answers in shapes MCP does not allow (issue 48), a real process each (tests/data/echo_mcp.py with
ECHO_BAD): at `scorecard` and `validate --live`, one line naming the world and what was malformed, exit 2 when the
server breaks before any example ran (bad input) or 1 when it breaks while measuring, no internal error, no
traceback, nothing written, no server left."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ECHO = Path(__file__).parent / "data" / "echo_mcp.py"

CASES = {  # ECHO_BAD -> what the line names
    "info-string": "initialize's serverInfo is a str, not an object",
    "tools-strings": "tools/list's tool 0 is a str, not an object",
    "tools-number": "tools/list's tools are a int, not a list",
    "annotations": "tool 'echo': its annotations are a str, not an object",
    "annotation-values": "tool 'echo': its readOnlyHint is 'no', not true or false",
    "schema": "tool 'echo': its inputSchema is not a JSON Schema",
    "deep": "JSON nested too deep to read",
    "content": "append's answer content is not a list of objects",
    "error-code-string": "an error whose code is 'oops', not an integer",
    "error-code-null": "an error whose code is None, not an integer",
    "result-list": "answered tools/call with a result that is not an object",
    # JSON that parses but that no writer of evidence could keep (the rerun's call.* cases: internal errors)
    "nan-answer": "holds NaN, which JSON does not have",
    "surrogate-answer": "holds text that is not valid Unicode",
    "deep-struct": "JSON nested more than 200 levels deep",
}
DURING = {"content", "error-code-string", "error-code-null", "result-list", "nan-answer", "surrogate-answer",
          "deep-struct"}  # broken only when a tool is called


def _world(tmp_path: Path, bad: str) -> Path:
    folder = tmp_path / "w"
    folder.mkdir()
    (folder / "world.toml").write_text(
        f'kind = "mcp_stdio"\nid = "hostile"\n[server]\npackage = "echo"\nversion = "1"\n'
        f'command = ["{sys.executable}", "{ECHO}", "{tmp_path}"]\nenv = {{ ECHO_BAD = "{bad}" }}\n'
        '[probe]\nbuiltin = "folder"\n[tools.append]\neffect = "write"\nexamples = [{ args = { text = "hi" } }]\n')
    return folder


def _left(mark: Path) -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(ECHO) in cmd and str(mark) in cmd:
                out.append(d.name)
    return out


@pytest.mark.parametrize("bad", sorted(CASES))
@pytest.mark.parametrize("command", ["scorecard", "validate"])
def test_a_malformed_answer_is_one_line_naming_the_world_and_what(bad: str, command: str, tmp_path: Path) -> None:
    folder = _world(tmp_path, bad)
    out = tmp_path / "out"
    args = ["scorecard", str(folder), "--quiet", "--out", str(out)] if command == "scorecard" else \
        ["validate", "--live", str(folder)]
    done = subprocess.run([sys.executable, "-m", "aft_bench.cli", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=dict(os.environ), timeout=120)
    expected = 1 if command == "scorecard" and bad in DURING else 2
    assert done.returncode == expected, done.stderr
    assert done.stderr.count("\n") == 1 and "internal error" not in done.stderr, done.stderr
    assert "world 'hostile'" in done.stderr and CASES[bad] in done.stderr, done.stderr
    assert not out.exists() and _left(tmp_path) == []


def test_a_server_whose_tools_change_between_starts_fails_the_card_not_the_world_file(tmp_path: Path) -> None:
    """Its first start lists `append`, later ones do not: the world file was right, the server changed under the
    scorecard, so exit 1 (a server problem), one line naming the world and the tool, never exit 2 (bad input)."""
    folder = _world(tmp_path, "tools-change")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "aft_bench.cli", "scorecard", str(folder), "--quiet", "--out",
                           str(out)], capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ), timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "internal error" not in done.stderr, done.stderr
    assert "world 'hostile': the server's tools changed after an earlier start matched the world: tools.append" \
        in done.stderr, done.stderr
    assert not out.exists() and _left(tmp_path) == []
    assert (tmp_path / "echo-starts").read_text().count("start") >= 2  # the case was reached: it started again


HTTP = Path(__file__).parent / "data" / "hostile_http.py"


@pytest.mark.parametrize(("mode", "said"), [
    ("endless", "no complete answer within 3 s (the server kept sending)"),
    ("huge", "the server sent a malformed answer: an answer longer than 16 MB"),
    ("bad-chunked", "broke its answer to tools/list"),  # the rerun's http.bad-chunked: an internal error
])
def test_an_http_server_that_never_stops_or_sends_too_much_is_one_line(mode: str, said: str,
                                                                        tmp_path: Path) -> None:
    import time

    folder = tmp_path / "w"
    folder.mkdir()
    (folder / "world.toml").write_text(
        f'kind = "mcp_http"\nid = "hostile"\n[server]\npackage = "hostile"\nversion = "1"\n'
        f'command = ["{sys.executable}", "{HTTP}", "{{port}}", "{mode}"]\nurl = "http://127.0.0.1:{{port}}/mcp"\n'
        'call_timeout_s = 3\n[probe]\nbuiltin = "folder"\n[tools.append]\neffect = "write"\n')
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "aft_bench.cli", "validate", "--live", str(folder)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "world 'hostile'" in done.stderr and said in done.stderr, done.stderr
    assert time.monotonic() - t0 < 60


def test_a_credential_in_what_a_server_calls_itself_is_shown_nowhere(tmp_path: Path) -> None:
    """The scorecard prints and writes what the server said (its info in the card's header): redacted, as `run`
    redacts it (the rerun's secret.server-info.scorecard printed the key)."""
    folder = _world(tmp_path, "info-secret")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "aft_bench.cli", "scorecard", str(folder), "--out", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    written = "".join(p.read_text() for p in out.iterdir())
    assert "sk-canary" not in done.stdout + done.stderr + written
    assert "echo" in done.stdout or "echo" in written  # the rest of what it said is still there


@pytest.mark.parametrize(("field", "line", "said"), [
    ("server.url", 'url = "http://127.0.0.1:1@127.0.0.2:{port}/mcp"', "http://127.0.0.1:PORT/"),
    ("server.url", 'url = "http://127.0.0.1.evil.example:{port}/mcp"', "should match pattern"),
    ("server.command.1", 'command = ["python3", "a\\u0000b"]', "a NUL character cannot be passed"),
    ("server.env.A=B", 'env = { "A=B" = "1" }', "an environment variable's name has no '='"),
    ("id", None, "should match pattern"),
])
def test_a_world_file_a_process_cannot_be_given_is_bad_input(field: str, line: str | None, said: str,
                                                             tmp_path: Path) -> None:
    """What a server could never be started with, or an endpoint that reaches beyond 127.0.0.1 through a user part
    of the URL (the rerun's http.url-userinfo-other-host posted 51 times to 127.0.0.2): exit 2 naming the field."""
    folder = tmp_path / "w"
    folder.mkdir()
    ident = "x" * 65 if line is None else "h"
    server = f'[server]\npackage = "p"\nversion = "1"\n'
    server += (line + "\n") if line is not None and not line.startswith("command") else ""
    command = line if line is not None and line.startswith("command") else 'command = ["python3", "-c", "pass"]'
    (folder / "world.toml").write_text(f'kind = "{"mcp_http" if "url" in field else "mcp_stdio"}"\nid = "{ident}"\n'
                                       f'{server}{command}\n[probe]\nbuiltin = "folder"\n'
                                       '[tools.echo]\neffect = "read"\n')
    done = subprocess.run([sys.executable, "-m", "aft_bench.cli", "validate", str(folder)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"field '{field}'" in done.stderr and said in done.stderr, done.stderr


@pytest.mark.parametrize(("schema", "said"), [
    ('{"type": "object", "properties": {"text": {"$ref": "#/properties/text"}}}', "cannot be checked against"),
    ('{"type": "object", "properties": {"text": {"$ref": "#/nope"}}}', "cannot be checked against"),
])
def test_an_example_is_checked_against_a_hostile_schema_without_hanging_or_crashing(schema: str, said: str,
                                                                                      tmp_path: Path) -> None:
    """A schema whose $ref loops or leads nowhere is a line naming the example (the rerun's schema-ref-loop was an
    internal error); a pattern that backtracks without end is not matched at all (schema-redos hung 120 s)."""
    import json as _json

    folder = tmp_path / "w"
    folder.mkdir()
    tools = [{"name": "append", "description": "x", "inputSchema": _json.loads(schema)}]
    (folder / "world.toml").write_text(
        f'kind = "mcp_stdio"\nid = "hostile"\n[server]\npackage = "echo"\nversion = "1"\n'
        f'command = ["{sys.executable}", "{ECHO}", "{tmp_path}"]\nenv = {{ ECHO_TOOLS = {_json.dumps(_json.dumps(tools))} }}\n'
        '[probe]\nbuiltin = "folder"\n[tools.append]\neffect = "write"\nexamples = [{ args = { text = "hi" } }]\n')
    done = subprocess.run([sys.executable, "-m", "aft_bench.cli", "validate", "--live", str(folder)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "field 'tools.append.examples.0.args'" in done.stderr and said in done.stderr, done.stderr
    redos = [{"name": "append", "description": "x", "inputSchema": {"type": "object", "properties": {
        "text": {"type": "string", "pattern": "^(a+)+$"}}}}]
    (folder / "world.toml").write_text((folder / "world.toml").read_text().replace(
        _json.dumps(_json.dumps(tools)), _json.dumps(_json.dumps(redos))).replace('text = "hi"', f'text = "{"a" * 40}!"'))
    done = subprocess.run([sys.executable, "-m", "aft_bench.cli", "validate", "--live", str(folder)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr  # the pattern is the server's to enforce: never matched here


@pytest.mark.parametrize(("extra", "field", "said"), [
    ('[fixture]\nfiles = { "a" = "x", "a/b" = "y" }\n', "fixture.files.a/b", "'a' is a file here"),
    ('[tools.append]\neffect = "write"\nexamples = [{ args = { text = "{before.3.x}" } }]\n',
     "tools.append.examples.0.args", "names set-up call 3, but 0 set-up call(s) come before it"),
    ('[tools.append]\neffect = "write"\nexamples = [{ before = [{ tool = "append", args = { text = "{before.0.x}" } }],'
     ' args = { text = "hi" } }]\n', "tools.append.examples.0.before.0.args", "names set-up call 0, but 0"),
])
def test_what_a_world_file_asks_that_cannot_be_is_bad_input_before_any_server_starts(extra: str, field: str,
                                                                                    said: str, tmp_path: Path) -> None:
    """A fixture file that another needs as its folder, a placeholder naming a set-up call that comes after it or
    not at all: exit 2 naming the field (the rerun's cases exited 1 after starting the server)."""
    folder = tmp_path / "w"
    folder.mkdir()
    (folder / "world.toml").write_text(
        f'kind = "mcp_stdio"\nid = "h"\n[server]\npackage = "echo"\nversion = "1"\n'
        f'command = ["{sys.executable}", "{ECHO}", "{tmp_path}"]\n[probe]\nbuiltin = "folder"\n{extra}')
    done = subprocess.run([sys.executable, "-m", "aft_bench.cli", "validate", str(folder)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"field '{field}'" in done.stderr and said in done.stderr, done.stderr


def test_a_stopped_stdio_serve_ends_while_its_client_still_holds_a_hung_call(tmp_path: Path) -> None:
    """`serve` over stdio, its client's tool call hung in the real server, the client keeping its pipe open: SIGTERM
    ends serve (the episode recorded or its failure said) without waiting for the client's next line. The SDK's
    stdin reader sits in a thread no cancellation reaches; serve waited for the client to let go (61 s)."""
    import json as _json
    import signal
    import time

    worlds = tmp_path / "worlds"
    (worlds / "workloads").mkdir(parents=True)
    (worlds / "h").mkdir()
    (worlds / "h" / "world.toml").write_text(
        f'kind = "mcp_stdio"\nid = "h"\n[server]\npackage = "echo"\nversion = "1"\n'
        f'command = ["{sys.executable}", "{ECHO}", "{tmp_path}"]\nenv = {{ ECHO_SLEEP = "600" }}\n'
        'call_timeout_s = 5\n[probe]\nbuiltin = "folder"\n[tools.echo]\neffect = "read"\n'
        '[tools.append]\neffect = "write"\n')
    (worlds / "workloads" / "h_rl.toml").write_text(
        '[workload]\nid = "h_rl"\nworld = "h"\ndescription = "One append."\n[[variants]]\nid = "response_loss"\n'
        'faults = [{ kind = "response_loss" }]\n[[tasks]]\nid = "t1"\nworld = "h"\nspec = "Append hi."\n'
        'goal = [{ collection = "files", where = { }, count = 1 }]\ntarget_ops = ["append"]\nallowed_ops = ["echo"]\n'
        'plan = [{ call = "append", args = { text = "hi" } }]\n')
    proc = subprocess.Popen([sys.executable, "-m", "aft_bench.cli", "serve", "--workload", "h_rl", "--task", "t1",
                             "--condition", "GW-bare", "--out", str(tmp_path / "served"), "--worlds", str(worlds),
                             "--agent", "probe"], cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None

    def send(msg: dict) -> None:
        proc.stdin.write(_json.dumps({"jsonrpc": "2.0", **msg}) + "\n")
        proc.stdin.flush()

    try:
        send({"id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                                          "clientInfo": {"name": "raw", "version": "1"}}})
        assert '"id":1' in proc.stdout.readline().replace(" ", "")
        send({"method": "notifications/initialized"})
        send({"id": 2, "method": "tools/list"})
        assert "append" in proc.stdout.readline()
        send({"id": 3, "method": "tools/call", "params": {"name": "append", "arguments": {"text": "hi"}}})
        time.sleep(2)  # wherever the call then is (still in the gateway or hung in the server), the stop must end it
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        rc = proc.wait(timeout=120)  # the client's pipe stays open throughout: before, serve never ended here
        waited = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdin.close()
    err = proc.stderr.read() if proc.stderr else ""
    assert rc in (0, 1, 130), err
    assert "Traceback" not in err and "internal error" not in err, err
    assert ("episode recorded" in err or "world 'h'" in err or "interrupted" in err), err
    assert waited < 110 and _left(tmp_path) == []
