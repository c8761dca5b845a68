"""The stdio MCP client every real-server world runs on (`world/mcp_stdio.py`), against real server processes: a
small standard-library server written into each test's folder plays a script (exact lines, malformed answers,
notifications, requests to the client, an exit, a hang) and logs every line the client sent. Asserted whole: what
the client sends (initialize, ids, the initialized notification, tools/list's cursor, tools/call), what it reads
back (serverInfo, protocol, tools, `ToolAnswer`), and the one ServerFailed line for each malformed answer and each
failure (no answer within the deadline, an exit with its last words, output closed, a write to a gone server).
Written for `make mutants`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from aft_bench.world.mcp_stdio import (CLIENT_INFO, PROTOCOL_VERSION, ServerFailed, StdioServer, ToolAnswer,
                                       check_tool, loads, malformed, rpc_error)

# A server that plays PLAN: {method or "method#n" (its n-th request): [steps]}; a step is a line to send ("{id}"
# is the request's id, as JSON) or a directive: "!exit N", "!stderr TEXT", "!wait" (read and log the client's
# next line before going on), "!sleep S", "!close" (close its stdout), "!hex HEX" (raw bytes), "!big N" (an answer
# padded to N bytes). A method the plan does not name gets a normal answer. Every line received goes to LOG.
SCRIPTED = r'''
import json, os, sys, time
LOG = os.environ.get("LOG")
PLAN = json.loads(os.environ.get("PLAN") or "{}")
INFO = {"name": "scripted", "version": "2", "cwd": os.getcwd(), "mark": os.environ.get("MARK"),
        "inherited": os.environ.get("AFT_TEST_INHERITED")}
DEFAULT = {"initialize": {"protocolVersion": "2025-03-26", "capabilities": {"tools": {}}, "serverInfo": INFO},
           "tools/list": {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]},
           "tools/call": {"content": [{"type": "text", "text": "ok"}]}}
counts = {}


def out(data):
    sys.stdout.buffer.write(data + b"\n")
    sys.stdout.buffer.flush()


def note(line):
    if LOG:
        with open(LOG, "a", encoding="utf-8") as fh:
            fh.write(line)


for line in iter(sys.stdin.readline, ""):
    note(line)
    msg = json.loads(line)
    if "method" not in msg or "id" not in msg:
        continue
    method = msg["method"]
    counts[method] = counts.get(method, 0) + 1
    steps = PLAN.get(f"{method}#{counts[method]}", PLAN.get(method))
    if steps is None:
        out(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": DEFAULT.get(method, {})}).encode())
        continue
    for step in steps:
        if step.startswith("!exit "):
            sys.exit(int(step[6:]))
        elif step.startswith("!stderr "):
            sys.stderr.write(step[8:] + "\n")
            sys.stderr.flush()
        elif step == "!wait":
            note(sys.stdin.readline())
        elif step.startswith("!sleep "):
            time.sleep(float(step[7:]))
        elif step == "!close":
            sys.stdout.close()
            os.close(1)
        elif step.startswith("!hex "):
            out(bytes.fromhex(step[5:]))
        elif step.startswith("!big "):
            out(b'{"jsonrpc": "2.0", "id": %s, "result": {"content": [{"type": "text", "text": "big"}], "pad": "%s"}}'
                % (json.dumps(msg["id"]).encode(), b"x" * int(step[5:])))
        else:
            out(step.replace("{id}", json.dumps(msg["id"])).encode())
'''
# what the scripted server is sent for a whole session (start, tools, call), line by line
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "aft-bench-gateway", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
ECHO_TOOL = {"name": "echo", "inputSchema": {"type": "object"}}
OK = ToolAnswer(({"type": "text", "text": "ok"},), False, None)
KEY = "sk-canary0123456789abcdef0123"


def _answer(result: Any) -> str:
    """A line answering the request it is played for with `result`."""
    return '{"jsonrpc": "2.0", "id": {id}, "result": ' + json.dumps(result) + "}"


def _server(tmp_path: Path, plan: dict[str, list[str]] | None = None, **kw: Any) -> StdioServer:
    script = tmp_path / "scripted.py"
    script.write_text(SCRIPTED)
    env = {"PLAN": json.dumps(plan or {}), "LOG": str(tmp_path / "got.jsonl"), **kw.pop("env", {})}
    return StdioServer([sys.executable, str(script)], cwd=tmp_path, env=env, **kw)


def _got(tmp_path: Path) -> list[dict[str, Any]]:
    """Every line the client sent the server, parsed."""
    return [json.loads(line) for line in (tmp_path / "got.jsonl").read_text().splitlines()]


def _failure(srv: StdioServer, then: str | None = None, *args: Any) -> str:
    """The ServerFailed message of starting `srv` (unless it runs) or, started, of `then(*args)`; stopped after."""
    try:
        if srv.proc is None:
            try:
                srv.start()
            except ServerFailed:
                assert srv.proc is None  # a failed start stops what it started
                raise
        if then is not None:
            getattr(srv, then)(*args)
    except ServerFailed as exc:
        return str(exc)
    finally:
        srv.stop()
    raise AssertionError("no ServerFailed")


# -- a whole session, as the server sees it and as the client reads it ---------------------------------------------
def test_a_session_sends_initialize_the_notification_and_numbered_requests(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Initialize with our protocol and name, then `initialized`, then requests numbered 2, 3, ...: a server that
    sees anything else refuses the session (or answers the wrong request)."""
    monkeypatch.setenv("AFT_TEST_INHERITED", "from the runner")
    monkeypatch.setenv("MARK", "outer")
    srv = _server(tmp_path, env={"MARK": "inner"})
    assert srv.pid is None and srv.proc is None and srv.server_info == {} and srv.protocol is None
    with srv as started:
        assert started is srv and srv.pid == srv.proc.pid  # type: ignore[union-attr]
        assert os.getpgid(srv.pid) == srv.pid  # its own process group, killed whole at stop
        assert srv.server_info == {"name": "scripted", "version": "2", "cwd": str(tmp_path), "mark": "inner",
                                   "inherited": "from the runner"}
        assert srv.protocol == "2025-03-26"  # the server's pick, not ours
        assert srv.tools() == [ECHO_TOOL]
        assert srv.call("echo", {"text": "hi", "n": 2}) == OK
        assert srv.call("echo", {}) == OK
        proc = srv.proc
    assert srv.proc is None and srv.pid is None and proc is not None and proc.returncode == 0  # told to end (stdin
    # closed), it ended on its own before the kill that follows for a server that does not
    assert proc.stdout is not None and proc.stdout.closed
    assert _got(tmp_path) == [
        INITIALIZE, INITIALIZED, {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo",
                                                                       "arguments": {"text": "hi", "n": 2}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "echo", "arguments": {}}}]
    assert PROTOCOL_VERSION == "2025-06-18" and CLIENT_INFO == {"name": "aft-bench-gateway", "version": "1"}
    srv.stop()  # a second stop does nothing
    assert srv.proc is None


def test_what_initialize_may_leave_out_and_how_its_answer_is_kept(tmp_path: Path) -> None:
    """No serverInfo is an empty one, no protocolVersion is None; the info kept is a copy of what was said."""
    with _server(tmp_path, {"initialize": [_answer({"capabilities": {}})]}) as srv:
        assert srv.server_info == {} and srv.protocol is None
        assert srv.tools() == [ECHO_TOOL]


@pytest.mark.parametrize(("result", "said"), [
    ({"serverInfo": "echo 1.0"}, "initialize's serverInfo is a str, not an object"),
    ({"serverInfo": None}, "initialize's serverInfo is a null, not an object"),
    ({"serverInfo": [1]}, "initialize's serverInfo is a list, not an object"),
    ({"serverInfo": {}, "protocolVersion": 5}, "initialize's protocolVersion is 5, not text"),
    ({"serverInfo": {}, "protocolVersion": ["2025-06-18"]}, "initialize's protocolVersion is ['2025-06-18'], not text"),
])
def test_a_malformed_initialize_answer_is_one_line_and_the_server_is_stopped(result: dict[str, Any], said: str,
                                                                             tmp_path: Path) -> None:
    """A serverInfo that is not an object or a protocolVersion that is not text: the world fails naming it, no
    crash later where the harness reads the info, no process left."""
    srv = _server(tmp_path, {"initialize": [_answer(result)]})
    assert _failure(srv) == f"the server sent a malformed answer: {said}"
    assert _got(tmp_path) == [INITIALIZE]  # never told it was initialized


def test_an_error_answer_to_initialize_fails_the_start_with_the_servers_words(tmp_path: Path) -> None:
    """A server that refuses to initialize: its code and message, the server stopped."""
    srv = _server(tmp_path, {"initialize": ['{"jsonrpc": "2.0", "id": {id}, "error": {"code": -32000, '
                                            '"message": "not ready"}}']})
    assert _failure(srv) == "MCP error -32000: not ready"


# -- tools/list --------------------------------------------------------------------------------------------------
def test_tools_list_follows_every_page_sending_the_cursor_it_was_given(tmp_path: Path) -> None:
    """Pagination: each page's nextCursor is sent back as the next request's cursor, an empty cursor ends the
    list, a page without `tools` adds none; a client that stopped early would miss tools."""
    tool = {"name": "b", "description": "x", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
            "annotations": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True,
                            "openWorldHint": False, "title": "B"}}
    plan = {"tools/list#1": [_answer({"tools": [{"name": "a"}], "nextCursor": "page 2"})],
            "tools/list#2": [_answer({"nextCursor": "page 3"})],
            "tools/list#3": [_answer({"tools": [tool], "nextCursor": ""})]}
    with _server(tmp_path, plan) as srv:
        assert srv.tools() == [{"name": "a"}, tool]
    lists = [m for m in _got(tmp_path) if m.get("method") == "tools/list"]
    assert [(m["id"], m["params"]) for m in lists] == [(2, {}), (3, {"cursor": "page 2"}), (4, {"cursor": "page 3"})]


def test_tools_list_without_tools_is_an_empty_list(tmp_path: Path) -> None:
    """A server with nothing to list (no `tools`, no cursor) lists no tools rather than failing."""
    with _server(tmp_path, {"tools/list": [_answer({})]}) as srv:
        assert srv.tools() == []


def test_a_server_that_paginates_forever_is_stopped_after_100_pages(tmp_path: Path) -> None:
    """A cursor that never ends: one line after exactly 100 requests, never an endless loop."""
    srv = _server(tmp_path, {"tools/list": [_answer({"tools": [], "nextCursor": "again"})]})
    assert _failure(srv, "tools") == "tools/list never stopped paginating (100 pages)"
    assert sum(m.get("method") == "tools/list" for m in _got(tmp_path)) == 100


@pytest.mark.parametrize(("pages", "said"), [
    ([{"tools": 5}], "tools/list's tools are a int, not a list"),
    ([{"tools": {"echo": {}}}], "tools/list's tools are a dict, not a list"),
    ([{"tools": ["echo", "append"]}], "tools/list's tool 0 is a str, not an object"),
    ([{"tools": [{"name": "a"}, None]}], "tools/list's tool 1 is a null, not an object"),
    ([{"tools": [{"name": "a"}], "nextCursor": "2"}, {"tools": [{"name": "b"}, 7]}],
     "tools/list's tool 2 is a int, not an object"),  # counted across pages
    ([{"tools": [{"description": "no name"}]}], "tools/list's tool 0 has no name (its name is None)"),
    ([{"tools": [{"name": "a"}, {"name": ""}]}], "tools/list's tool 1 has no name (its name is '')"),
    ([{"tools": [{"name": 3}]}], "tools/list's tool 0 has no name (its name is 3)"),
    ([{"tools": [{"name": "a", "annotations": "yes"}]}], "tool 'a': its annotations are a str, not an object"),
    ([{"tools": [{"name": "a", "annotations": {"readOnlyHint": "no"}}]}],
     "tool 'a': its readOnlyHint is 'no', not true or false"),
    ([{"tools": [{"name": "z"}, {"name": "a"}, {"name": "z"}, {"name": "a"}]}],
     "tools/list lists 'a' twice (a client could call only one of them)"),
    ([{"tools": [{"name": "a"}], "nextCursor": "2"}, {"tools": [{"name": "a"}]}],
     "tools/list lists 'a' twice (a client could call only one of them)"),
    ([{"tools": [], "nextCursor": 7}], "tools/list's nextCursor is 7, not text"),
    ([{"tools": [], "nextCursor": True}], "tools/list's nextCursor is True, not text"),
])
def test_a_malformed_tools_list_is_one_line_naming_what(pages: list[dict[str, Any]], said: str,
                                                        tmp_path: Path) -> None:
    """Each shape a tools/list answer may not have: the world fails naming the tool and what is wrong with it."""
    plan = {f"tools/list#{n}": [_answer(page)] for n, page in enumerate(pages, 1)}
    assert _failure(_server(tmp_path, plan), "tools") == f"the server sent a malformed answer: {said}"


# -- one entry of tools/list, checked alone ----------------------------------------------------------------------
@pytest.mark.parametrize(("tool", "said"), [
    ("echo", "tools/list's tool 4 is a str, not an object"),
    (None, "tools/list's tool 4 is a null, not an object"),
    ([{"name": "a"}], "tools/list's tool 4 is a list, not an object"),
    ({}, "tools/list's tool 4 has no name (its name is None)"),
    ({"name": None}, "tools/list's tool 4 has no name (its name is None)"),
    ({"name": ""}, "tools/list's tool 4 has no name (its name is '')"),
    ({"name": ["a"]}, "tools/list's tool 4 has no name (its name is ['a'])"),
    ({"name": "t", "inputSchema": "object"}, "tool 't': its inputSchema is a str, not an object"),
    ({"name": "t", "inputSchema": None}, "tool 't': its inputSchema is a null, not an object"),
    ({"name": "t", "inputSchema": [{"type": "object"}]}, "tool 't': its inputSchema is a list, not an object"),
    ({"name": "t", "inputSchema": {"type": 5}},
     "tool 't': its inputSchema is not a JSON Schema: 5 is not valid under any of the given schemas"),
    ({"name": "t", "inputSchema": {"type": "object", "required": "text"}},
     "tool 't': its inputSchema is not a JSON Schema: 'text' is not of type 'array'"),
    ({"name": "t", "inputSchema": {"type": "x" * 200}},
     "tool 't': its inputSchema is not a JSON Schema: " + ("'" + "x" * 200 + "' is not valid under any of the given "
                                                           "schemas")[:120]),
    ({"name": "t", "annotations": "yes"}, "tool 't': its annotations are a str, not an object"),
    ({"name": "t", "annotations": ["readOnlyHint"]}, "tool 't': its annotations are a list, not an object"),
    ({"name": "t", "annotations": {"readOnlyHint": "no"}}, "tool 't': its readOnlyHint is 'no', not true or false"),
    ({"name": "t", "annotations": {"destructiveHint": 0}}, "tool 't': its destructiveHint is 0, not true or false"),
    ({"name": "t", "annotations": {"idempotentHint": [1]}}, "tool 't': its idempotentHint is [1], not true or false"),
    ({"name": "t", "annotations": {"openWorldHint": None}},
     "tool 't': its openWorldHint is None, not true or false"),
    ({"name": "t", "annotations": {"readOnlyHint": True, "destructiveHint": "yes", "idempotentHint": 1}},
     "tool 't': its destructiveHint is 'yes', not true or false"),  # the first in MCP's order
])
def test_a_tool_entry_mcp_does_not_allow_is_named_with_what_is_wrong(tool: Any, said: str) -> None:
    """What init-world and the live check print for a bad tool: its place or name and the exact fault."""
    with pytest.raises(ServerFailed) as caught:
        check_tool(4, tool)
    assert str(caught.value) == f"the server sent a malformed answer: {said}"


@pytest.mark.parametrize("tool", [
    {"name": "t"},  # no schema: an object schema by default
    {"name": "t", "inputSchema": {}},
    {"name": "t", "inputSchema": {"type": "object", "properties": {"q": {"type": "string", "minLength": 1}},
                                  "required": ["q"], "additionalProperties": False}},
    {"name": "t", "inputSchema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                                  "dependencies": {"a": ["b"]}}},
    {"name": "t", "inputSchema": {"type": "object", "prefixItems": [{"type": "string"}]}},
    {"name": "t", "annotations": {}},
    {"name": "t", "annotations": None},  # null annotations: as if none were given
    {"name": "t", "annotations": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False,
                                  "openWorldHint": True, "title": 5, "custom": "anything"}},
])
def test_a_tool_entry_mcp_allows_is_kept_as_the_server_gave_it(tool: dict[str, Any]) -> None:
    """Well-formed tools pass unchanged (other annotation keys are the server's business)."""
    assert check_tool(0, tool) is tool


def test_a_schema_nested_beyond_what_a_checker_can_walk_is_named_not_a_crash() -> None:
    """A schema deep enough to exhaust the schema checker's recursion: a malformed answer, not a RecursionError."""
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(150):
        deep = {"type": "object", "properties": {"x": deep}}
    with pytest.raises(ServerFailed) as caught:
        check_tool(0, {"name": "deep", "inputSchema": deep})
    assert str(caught.value) == "the server sent a malformed answer: tool 'deep': its inputSchema is nested too deep"


# -- tools/call --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("result", "answer"), [
    ({"content": [{"type": "text", "text": "a"}, {"type": "image", "data": "AA==", "mimeType": "image/png"}],
      "isError": True, "structuredContent": {"n": 1}},
     ToolAnswer(({"type": "text", "text": "a"}, {"type": "image", "data": "AA==", "mimeType": "image/png"}), True,
                {"n": 1})),
    ({"content": [{"type": "text", "text": "fine"}], "isError": False, "structuredContent": [1, "two"]},
     ToolAnswer(({"type": "text", "text": "fine"},), False, [1, "two"])),
    ({}, ToolAnswer((), False, None)),  # nothing said: no content, not an error
    ({"structuredContent": 0}, ToolAnswer((), False, 0)),
])
def test_a_tool_answer_is_kept_exactly_as_the_server_gave_it(result: dict[str, Any], answer: ToolAnswer,
                                                             tmp_path: Path) -> None:
    """content, isError and structuredContent as the server sent them: the gateway records and relays this."""
    with _server(tmp_path, {"tools/call": [_answer(result)]}) as srv:
        assert srv.call("echo", {"text": "x"}) == answer


def test_an_error_answer_to_a_call_is_an_answer_with_is_error(tmp_path: Path) -> None:
    """An unknown tool or refused arguments (a JSON-RPC error): the agent is told, with the server's code and
    words, as a failed answer; the session goes on."""
    plan = {"tools/call#1": ['{"jsonrpc": "2.0", "id": {id}, "error": {"code": -32602, "message": "unknown tool"}}'],
            "tools/call#2": ['{"jsonrpc": "2.0", "id": {id}, "error": {"code": 7}}']}
    with _server(tmp_path, plan) as srv:
        first = srv.call("nope", {"a": 1})
        assert first == ToolAnswer(({"type": "text", "text": "MCP error -32602: unknown tool"},), True, None)
        assert first.text == "MCP error -32602: unknown tool"
        assert srv.call("nope", {}) == ToolAnswer(({"type": "text", "text": "MCP error 7: "},), True, None)
        assert srv.call("echo", {}) == OK


@pytest.mark.parametrize(("line", "said"), [
    (_answer({"content": "appended"}), "the server sent a malformed answer: append's answer content is not a list "
                                       "of objects"),
    (_answer({"content": [{"type": "text", "text": "a"}, "b"]}),
     "the server sent a malformed answer: append's answer content is not a list of objects"),
    (_answer({"content": {"type": "text"}}),
     "the server sent a malformed answer: append's answer content is not a list of objects"),
    (_answer({"content": [], "isError": "no"}), "the server sent a malformed answer: append's answer isError is 'no', "
                                                "not true or false"),
    (_answer({"isError": 1}), "the server sent a malformed answer: append's answer isError is 1, not true or false"),
    (_answer({"isError": None}),
     "the server sent a malformed answer: append's answer isError is None, not true or false"),
    (_answer([1, 2]), "answered tools/call with a result that is not an object"),
    (_answer(None), "answered tools/call with a result that is not an object"),
    ('{"jsonrpc": "2.0", "id": {id}}', "answered tools/call with a result that is not an object"),
    ('{"jsonrpc": "2.0", "id": {id}, "error": {"code": "oops", "message": 7}}',
     "the server sent a malformed answer: an error whose code is 'oops', not an integer"),
    ('{"jsonrpc": "2.0", "id": {id}, "error": {"code": null}}',
     "the server sent a malformed answer: an error whose code is None, not an integer"),
    ('{"jsonrpc": "2.0", "id": {id}, "error": {"code": true, "message": "x"}}',
     "the server sent a malformed answer: an error whose code is True, not an integer"),
    ('{"jsonrpc": "2.0", "id": {id}, "error": "boom"}',
     "the server sent a malformed answer: an error whose code is 'boom', not an integer"),
    ('{"jsonrpc": "2.0", "id": {id}, "error": {"code": -1, "message": ["x"]}}',
     "the server sent a malformed answer: an error whose message is a list, not text"),
    ('{"jsonrpc": "2.0", "id": {id}, "result": {"structuredContent": {"n": NaN}}}',
     "the server sent a malformed answer: holds NaN, which JSON does not have"),
    ('{"jsonrpc": "2.0", "id": {id}, "result": {"content": [{"type": "text", "text": "\\ud800"}]}}',
     "the server sent a malformed answer: holds text that is not valid Unicode (a lone surrogate)"),
    ('{"jsonrpc": "2.0", "id": {id}, "result": {"structuredContent": ' + "[" * 250 + "]" * 250 + "}}",
     "the server sent a malformed answer: JSON nested more than 200 levels deep"),
])
def test_a_malformed_call_answer_is_one_line_naming_what(line: str, said: str, tmp_path: Path) -> None:
    """Each shape a tools/call answer may not have: one ServerFailed naming what, the server stopped."""
    assert _failure(_server(tmp_path, {"tools/call": [line]}), "call", "append", {"text": "hi"}) == said


def test_tool_answer_text_and_dict() -> None:
    """What an agent reads (text blocks joined) and what the gateway records (structuredContent only if given)."""
    answer = ToolAnswer(({"type": "text", "text": "a"}, {"type": "image", "data": "AA=="}, {"type": "text"},
                         {"type": "text", "text": 5}, {"text": "untyped"}), True, {"k": [1]})
    assert answer.text == "a\n\n5"
    assert answer.to_dict() == {"content": list(answer.content), "isError": True, "structuredContent": {"k": [1]}}
    assert ToolAnswer((), False).to_dict() == {"content": [], "isError": False}
    assert ToolAnswer((), False).text == ""
    assert ToolAnswer((), False, 0).to_dict() == {"content": [], "isError": False, "structuredContent": 0}
    assert ToolAnswer((), False, {}).to_dict() == {"content": [], "isError": False, "structuredContent": {}}


# -- what the client reads past: logs, notifications, other answers, requests to it -------------------------------
def test_lines_that_are_not_an_answer_are_read_past(tmp_path: Path) -> None:
    """A server that logs to stdout, sends blank lines, non-object JSON, bytes that are not UTF-8, notifications
    (even ones holding what an answer may not: they are never walked) and answers to other ids: the client waits for
    its own answer."""
    noise = ["starting up...", "", "   ", "[1, 2]", "7", '"text"', "{not json", "!hex fffe7b7d",
             '{"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "\\ud800"}}',
             '{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"v": ' + "[" * 250 + "]" * 250 + "}}",
             '{"jsonrpc": "2.0", "id": 999, "result": {"content": "not for you"}}',
             '{"jsonrpc": "2.0", "id": "{id}", "result": {"content": "an id as text is another id"}}',
             '{"jsonrpc": "2.0", "id": null, "error": {"code": "bad"}}']
    plan = {"initialize": [*noise, _answer({"serverInfo": {"name": "noisy"}, "protocolVersion": "2025-06-18"})],
            "tools/call": [*noise, _answer({"content": [{"type": "text", "text": "mine"}]})]}
    with _server(tmp_path, plan) as srv:
        assert srv.server_info == {"name": "noisy"} and srv.protocol == "2025-06-18"
        assert srv.call("echo", {}) == ToolAnswer(({"type": "text", "text": "mine"},), False, None)


def test_a_non_object_line_holding_what_an_answer_may_not_is_malformed(tmp_path: Path) -> None:
    """A top-level array is read (it could be an answer batch) and checked: a lone surrogate in it is malformed."""
    srv = _server(tmp_path, {"tools/call": ['["\\ud800"]', _answer({})]})
    assert _failure(srv, "call", "echo", {}) == ("the server sent a malformed answer: holds text that is not valid "
                                                 "Unicode (a lone surrogate)")


def test_a_request_from_the_server_is_refused_and_the_answer_still_read(tmp_path: Path) -> None:
    """Sampling or roots asked of the client: it answers "no such capability" with the server's own id (a server
    waiting for that reply would otherwise hang), then reads its own answer; even a request that reuses our id."""
    refusal = {"code": -32601, "message": "the client offers no such capability"}
    plan = {"tools/call": ['{"jsonrpc": "2.0", "id": "srv-1", "method": "roots/list"}', "!wait",
                           '{"jsonrpc": "2.0", "id": {id}, "method": "sampling/createMessage", "params": {}}', "!wait",
                           _answer({"content": [{"type": "text", "text": "after"}]})]}
    with _server(tmp_path, plan) as srv:
        assert srv.call("echo", {}).text == "after"
    assert _got(tmp_path)[3:] == [{"jsonrpc": "2.0", "id": "srv-1", "error": refusal},
                                  {"jsonrpc": "2.0", "id": 2, "error": refusal}]


def test_a_line_longer_than_16_mb_is_never_read_as_an_answer(tmp_path: Path) -> None:
    """An answer past the 16 MB limit is cut and read past as garbage (memory bounded); the next answer counts."""
    plan = {"tools/call": [f"!big {16 * 1024 * 1024}", _answer({"content": [{"type": "text", "text": "small"}]})]}
    with _server(tmp_path, plan) as srv:
        assert srv.call("echo", {}).text == "small"


def test_an_answer_just_under_16_mb_is_read(tmp_path: Path) -> None:
    """A large answer within the limit is an answer like any other."""
    with _server(tmp_path, {"tools/call": [f"!big {16 * 1024 * 1024 - 200}"]}) as srv:
        assert srv.call("echo", {}).text == "big"


# -- loads: what may be parsed, what is walked -------------------------------------------------------------------
def test_loads_walks_answers_but_not_notifications() -> None:
    """An answer (an id, or not an object) holding a lone surrogate or deep nesting is malformed; a notification
    is dropped unwalked (a server that floods notifications costs a parse each)."""
    deep = "[" * 250 + "]" * 250
    assert loads('{"method": "m", "params": {"t": "\\ud800"}}') == {"method": "m", "params": {"t": "\ud800"}}
    assert loads(b'{"method": "m", "params": {"v": %s}}' % deep.encode())["method"] == "m"
    for text, said in [('{"id": 1, "t": "\\ud800"}', "holds text that is not valid Unicode (a lone surrogate)"),
                       ('{"id": null, "v": %s}' % deep, "JSON nested more than 200 levels deep"),
                       ('["\\ud800"]', "holds text that is not valid Unicode (a lone surrogate)"),
                       (deep, "JSON nested more than 200 levels deep"),
                       ('{"method": "m", "v": NaN}', "holds NaN, which JSON does not have"),
                       ("[" * 100000 + "]" * 100000, "JSON nested too deep to read (200000 bytes)")]:
        with pytest.raises(ServerFailed) as caught:
            loads(text)
        assert str(caught.value) == f"the server sent a malformed answer: {said}", text
    with pytest.raises(ValueError):
        loads("not json")  # not JSON at all: json's own error, read past as a log line
    assert str(malformed("x")) == "the server sent a malformed answer: x"


@pytest.mark.parametrize(("err", "said"), [
    ("boom", "an error whose code is 'boom', not an integer"),
    (None, "an error whose code is None, not an integer"),
    ([1], "an error whose code is [1], not an integer"),
    ({}, "an error whose code is None, not an integer"),
    ({"code": "1", "message": "x"}, "an error whose code is '1', not an integer"),
    ({"code": 1.5, "message": "x"}, "an error whose code is 1.5, not an integer"),
    ({"code": False, "message": "x"}, "an error whose code is False, not an integer"),
    ({"code": 1, "message": None}, "an error whose message is a null, not text"),
    ({"code": 1, "message": {"text": "x"}}, "an error whose message is a dict, not text"),
])
def test_a_json_rpc_error_object_mcp_does_not_allow_is_malformed(err: Any, said: str) -> None:
    """An error with no integer code or a message that is not text: named, never read as an ordinary error."""
    with pytest.raises(ServerFailed) as caught:
        rpc_error(err)
    assert str(caught.value) == f"the server sent a malformed answer: {said}"


def test_a_json_rpc_error_object_keeps_its_code_and_message() -> None:
    """The code and words the agent is shown for a refused call."""
    err = rpc_error({"code": -32602, "message": "bad args", "data": {"x": 1}})
    assert (str(err), err.code, err.message) == ("MCP error -32602: bad args", -32602, "bad args")
    assert isinstance(err, ServerFailed)
    bare = rpc_error({"code": 0})
    assert (str(bare), bare.code, bare.message) == ("MCP error 0: ", 0, "")


# -- failures: a deadline, an exit, a command that is not there, a write to a gone server ---------------------------
def test_a_server_that_does_not_answer_within_its_deadline_is_named_and_stopped(tmp_path: Path) -> None:
    """A hung tools/list: one line naming the method and the deadline as configured, then the server is killed."""
    srv = _server(tmp_path, {"tools/list": ["!sleep 20"]}).start()
    srv.timeout_s = 0.9  # a generous deadline to start in, then one under a second
    proc = srv.proc
    assert srv.call("echo", {}) == OK  # an answer within the deadline is read, however short the deadline
    with pytest.raises(ServerFailed) as caught:
        srv.tools()
    assert str(caught.value) == "no answer to tools/list within 0.9 s"
    srv.stop()
    assert proc is not None and proc.returncode == -9  # it ignored the closed stdin: killed, reaped


def test_a_server_that_exits_before_answering_initialize_says_its_status_and_last_words(tmp_path: Path) -> None:
    """The crash a user debugs: exit status and the last line of its stderr (trailing blank lines skipped)."""
    log = tmp_path / "stderr.log"
    log.write_bytes(b"an earlier start's line\n")
    srv = _server(tmp_path, {"initialize": ["!stderr loading config", "!stderr boom: no config\n\n", "!exit 3"]},
                  stderr_path=log)
    assert _failure(srv) == "the server exited (status 3) before it answered initialize; its last words: boom: no config"
    assert log.read_bytes() == b"an earlier start's line\nloading config\nboom: no config\n\n\n"  # appended to


def test_without_a_stderr_file_an_exit_has_no_last_words(tmp_path: Path) -> None:
    """No stderr kept: the status alone, no dangling 'last words'."""
    srv = _server(tmp_path, {"tools/list": ["!stderr unseen", "!exit 0"]})
    assert _failure(srv, "tools") == "the server exited (status 0) before it answered tools/list"


def test_an_empty_or_vanished_stderr_file_has_no_last_words(tmp_path: Path) -> None:
    """A server that said nothing, or whose stderr file is gone: the status alone."""
    log = tmp_path / "stderr.log"
    assert _failure(_server(tmp_path, {"initialize": ["!exit 2"]}, stderr_path=log)) == \
        "the server exited (status 2) before it answered initialize"
    assert log.read_bytes() == b""
    srv = _server(tmp_path, {"tools/list": ["!stderr said", "!exit 6"]}, stderr_path=log)
    srv.start()
    log.unlink()
    assert _failure(srv, "tools") == "the server exited (status 6) before it answered tools/list"


@pytest.mark.parametrize(("said", "last"), [
    ("x" * 400, "x" * 300),  # cut to 300 characters
    ("A" + "B" * 4095, "B" * 300),  # only the last 4 KB are read: the A (and the line's start) is outside them
    ("A" + "B" * 4094, "A" + "B" * 299),  # with its newline, exactly 4 KB: all of it
    (f"failed to log in with {KEY}", "failed to log in with [redacted]"),  # a server's stderr may hold a key
])
def test_last_words_are_the_tail_of_stderr_cut_and_redacted(said: str, last: str, tmp_path: Path) -> None:
    """What a crash line shows: the last stderr line, at most 300 characters, never a credential."""
    log = tmp_path / "stderr.log"
    srv = _server(tmp_path, {"initialize": [f"!stderr {said}", "!exit 1"]}, stderr_path=log)
    assert _failure(srv) == f"the server exited (status 1) before it answered initialize; its last words: {last}"


def test_last_words_that_are_not_utf8_are_shown_with_replacement_characters(tmp_path: Path) -> None:
    """A server writing Latin-1 or binary to stderr still gets its crash line shown, not a decode error."""
    log = tmp_path / "stderr.log"
    log.write_bytes(b"caf\xe9 \xff crashed\n")
    assert _failure(_server(tmp_path, {"initialize": ["!exit 1"]}, stderr_path=log)) == \
        "the server exited (status 1) before it answered initialize; its last words: caf\ufffd \ufffd crashed"


def test_a_write_to_a_server_that_has_gone_names_its_status_and_last_words(tmp_path: Path) -> None:
    """The server exited after initialize: the next request fails at the write, saying so, not a BrokenPipeError."""
    log = tmp_path / "stderr.log"
    srv = _server(tmp_path, {"initialize": [_answer({}), "!wait", "!stderr bye", "!exit 4"]}, stderr_path=log).start()
    assert srv.proc is not None and srv.proc.wait(timeout=10) == 4
    assert _failure(srv, "tools") == "the server exited (status 4) while we wrote to it; its last words: bye"


def test_a_stopped_server_is_not_running(tmp_path: Path) -> None:
    """A call after stop is one line, not an AttributeError on a gone process."""
    srv = _server(tmp_path).start()
    srv.stop()
    with pytest.raises(ServerFailed) as caught:
        srv.tools()
    assert str(caught.value) == "the server is not running"


def test_a_command_that_cannot_start_says_which_and_why(tmp_path: Path) -> None:
    """A missing program: the command as given and the system's reason, not a traceback."""
    with pytest.raises(ServerFailed) as caught:
        StdioServer([str(tmp_path / "no-such-server"), "--flag"], cwd=tmp_path, stderr_path=tmp_path / "e.log").start()
    assert str(caught.value) == f"cannot start {str(tmp_path / 'no-such-server')!r}: No such file or directory"


def test_a_command_is_found_on_the_worlds_path_or_relative_to_its_folder(tmp_path: Path) -> None:
    """A server installed in a folder the world puts on PATH, or named relative to the world's folder, starts (as
    the shell would find it), not 'cannot start'."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for exe in (bin_dir / "aft-test-server", tmp_path / "local-server"):
        exe.write_text(f"#!{sys.executable}\n{SCRIPTED}")
        exe.chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "LOG": str(tmp_path / "got.jsonl")}
    for command in (["aft-test-server"], ["./local-server"]):
        with StdioServer(command, cwd=tmp_path, env=env) as srv:
            assert srv.server_info["name"] == "scripted" and srv.tools() == [ECHO_TOOL]
    with pytest.raises(ServerFailed) as caught:
        StdioServer(["aft-test-server"], cwd=tmp_path).start()  # not on the runner's own PATH
    assert str(caught.value) == "cannot start 'aft-test-server': No such file or directory"


# -- the forked launcher: the same client over a server forked from a pre-imported interpreter --------------------
@pytest.fixture
def forking(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str, tuple[()]]:
    """A launcher entry that runs the script named as the command's first argument (as `python script` would)."""
    folder = tmp_path_factory.getbasetemp() / "fork-entry"
    folder.mkdir(exist_ok=True)
    (folder / "aft_test_fork_entry.py").write_text(
        "import runpy, sys\n\n\ndef main():\n    runpy.run_path(sys.argv[0], run_name='__main__')\n")
    monkeypatch.setenv("PYTHONPATH", str(folder))  # read when the launcher starts (once per process)
    return (sys.executable, "aft_test_fork_entry:main", ())


def test_a_forked_server_plays_the_session_a_started_one_plays(tmp_path: Path, forking: Any) -> None:
    """Forked instead of started: the same info, tools and answers, its cwd and env as asked, its stderr kept."""
    log = tmp_path / "stderr.log"
    srv = StdioServer([str(tmp_path / "scripted.py")], cwd=tmp_path, fork=forking, stderr_path=log,
                      env={"PLAN": json.dumps({"tools/list#2": ["!stderr forked and gone", "!exit 9"]}),
                           "LOG": str(tmp_path / "got.jsonl"), "MARK": "forked"})
    (tmp_path / "scripted.py").write_text(SCRIPTED)
    with srv:
        assert srv.server_info["cwd"] == str(tmp_path) and srv.server_info["mark"] == "forked"
        assert srv.tools() == [ECHO_TOOL] and srv.call("echo", {}) == OK
        with pytest.raises(ServerFailed) as caught:
            srv.tools()
    assert str(caught.value) == ("the server exited (status 9) before it answered tools/list; its last words: "
                                 "forked and gone")
    assert _got(tmp_path)[:2] == [INITIALIZE, INITIALIZED]


def test_a_server_that_closes_its_output_but_lives_on_is_named(tmp_path: Path, forking: Any) -> None:
    """Output closed while the process runs on: said as such (no exit status to give), then it is killed."""
    (tmp_path / "scripted.py").write_text(SCRIPTED)
    srv = StdioServer([str(tmp_path / "scripted.py")], cwd=tmp_path, fork=forking,
                      env={"PLAN": json.dumps({"tools/list": ["!close", "!sleep 20"]})})
    assert _failure(srv, "tools") == "the server closed its output before it answered tools/list"
    srv = StdioServer([str(tmp_path / "scripted.py")], cwd=tmp_path, fork=forking,
                      env={"PLAN": json.dumps({"tools/list": ["!close", "!sleep 0.1", "!exit 5"]})})
    assert _failure(srv, "tools") == "the server exited (status 5) before it answered tools/list"


def test_a_launcher_that_cannot_load_its_entry_fails_the_start(tmp_path: Path) -> None:
    """The launcher's own failure, passed on as the server's."""
    srv = StdioServer(["server"], cwd=tmp_path, fork=(sys.executable, "aft_test_no_such_module:main", ()))
    with pytest.raises(ServerFailed) as caught:
        srv.start()
    assert str(caught.value) == ("the forked launcher could not load aft_test_no_such_module:main: "
                                 "ModuleNotFoundError: No module named 'aft_test_no_such_module'")
    assert srv.proc is None


def test_a_schema_with_several_faults_is_named_the_same_whatever_the_hash_seed() -> None:
    """`validate --live` and init-world would print another line for the same server's schema from run to run."""
    import subprocess
    import sys

    program = ("import json; from aft_bench.world.mcp_stdio import _schema_problem; print(_schema_problem(json.dumps("
               "{'type': 'object', 'properties': {'b': {'type': 5}, 'a': {'minimum': 'x'}}}, sort_keys=True)))")
    said = {subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("0", "2", "3", "5")}
    assert said == {"its inputSchema is not a JSON Schema: 'x' is not of type 'number'\n"}


# -- a process that ends without stopping its server, a stop from another thread -------------------------------------
def test_a_runner_that_ends_without_stopping_its_server_still_exits(tmp_path: Path) -> None:
    """The thread reading the server's output must not keep the runner alive at exit: a runner that ends (or
    crashes) with a server still started exits as usual, and the server dies with it."""
    import subprocess

    script = tmp_path / "scripted.py"
    script.write_text(SCRIPTED)
    program = ("import sys; from pathlib import Path; from aft_bench.world.mcp_stdio import StdioServer; "
               f"srv = StdioServer([sys.executable, {str(script)!r}], cwd=Path({str(tmp_path)!r})).start(); "
               "print(srv.server_info['name'], [t['name'] for t in srv.tools()], flush=True)")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "scripted ['echo']\n"), done.stderr


def test_a_stop_from_another_thread_ends_a_waiting_request_with_server_failed(tmp_path: Path) -> None:
    """A request waiting on a hung server when another thread stops it: one ServerFailed line (the server's
    output closed), never an AttributeError on the process that is gone."""
    import threading
    import time

    srv = _server(tmp_path, {"tools/list": ["!sleep 20"]}).start()

    def stop_once_asked() -> None:  # when the server has read tools/list, the client is waiting for its answer
        deadline = time.monotonic() + 60
        while (tmp_path / "got.jsonl").read_bytes().count(b"\n") < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        srv.stop()

    stopper = threading.Thread(target=stop_once_asked)
    stopper.start()
    try:
        with pytest.raises(ServerFailed) as caught:
            srv.tools()
    finally:
        stopper.join(60)
    assert str(caught.value) == "the server closed its output before it answered tools/list"
    assert srv.proc is None and [m.get("method") for m in _got(tmp_path)] == [
        "initialize", "notifications/initialized", "tools/list"]


def test_a_forked_start_is_bounded_by_the_servers_timeout_at_the_launchers_start_and_at_spawn(
        tmp_path: Path, forking: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's start timeout bounds both waits on the launcher: one whose preloads take longer than it to
    import, and one that stops answering (frozen, swapped out) when asked for a server; each fails the start by
    name, never hangs the episode."""
    import signal
    import threading
    import time

    from aft_bench.world.launcher import launcher

    python, entry, _ = forking
    (tmp_path / "scripted.py").write_text(SCRIPTED)
    mark = f"{os.getpid()}_{time.monotonic_ns()}"
    slow, fresh = f"aft_test_slow_{mark}", f"aft_test_fresh_{mark}"
    (tmp_path / f"{slow}.py").write_text("import time\ntime.sleep(4)\n")
    (tmp_path / f"{fresh}.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", f"{os.environ['PYTHONPATH']}{os.pathsep}{tmp_path}")
    srv = StdioServer([str(tmp_path / "scripted.py")], cwd=tmp_path, fork=(python, entry, (slow,)), timeout_s=1)
    assert _failure(srv) == "the forked launcher did not answer start within 1 s"

    frozen = launcher(python, entry, (fresh,), 30)  # this test's own launcher, started, then stopped
    said: list[str] = []

    def start() -> None:
        try:
            StdioServer([str(tmp_path / "scripted.py")], cwd=tmp_path, fork=(python, entry, (fresh,)),
                        timeout_s=1).start().stop()
        except ServerFailed as exc:
            said.append(str(exc))

    os.killpg(frozen.proc.pid, signal.SIGSTOP)
    starter = threading.Thread(target=start)
    try:
        starter.start()
        starter.join(60)
    finally:
        os.killpg(frozen.proc.pid, signal.SIGKILL)
        starter.join(60)
        frozen.close()
    assert said == ["the forked launcher did not answer spawn within 1 s"]


# A server that starts a child in its own process group (as `npx` starts node), then answers until its input ends:
# the child, marked by its command line and holding none of the server's pipes, outlives the server unless stop
# kills the group
SPAWNER = r'''
import json, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", sys.argv[1] + "-child"],
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for line in sys.stdin:
    msg = json.loads(line)
    if "id" in msg:
        result = {"protocolVersion": "2025-03-26", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "spawner", "version": "1"}} if msg["method"] == "initialize" else {"tools": []}
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
'''


def _marked(mark: str) -> list[int]:
    """Live processes (not zombies) whose command line holds `mark`."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and mark in open(f"/proc/{entry}/cmdline", "rb").read().decode(errors="replace") \
                    and open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
                pids.append(int(entry))
        except OSError:
            continue
    return pids


@pytest.mark.parametrize("contain", ["1", "0"])
def test_stop_ends_what_the_server_started_in_its_group_contained_or_not(contain: str, tmp_path: Path,
                                                                        monkeypatch) -> None:
    """Without a PID namespace (AFT_BENCH_CONTAIN=0, or a machine that refuses one) a child the server started was
    left running after stop when only the server's own pid was killed."""
    from aft_bench.common.lifetime import pid_namespace

    import time

    mark = f"aft-spawned-{os.getpid()}-{time.monotonic_ns()}"
    child = f"{mark}-child"
    script = tmp_path / "spawner.py"
    script.write_text(SPAWNER)
    monkeypatch.setenv("AFT_BENCH_CONTAIN", contain)
    pid_namespace.cache_clear()
    try:
        srv = StdioServer([sys.executable, str(script), mark], cwd=tmp_path).start()
        try:
            assert srv.server_info["name"] == "spawner" and srv.tools() == []
            assert len(_marked(child)) == 1
        finally:
            srv.stop()
    finally:
        pid_namespace.cache_clear()
    deadline = time.monotonic() + 10  # SIGKILLed: only the kernel's teardown may still be under way
    while _marked(mark) and time.monotonic() < deadline:  # the server, its child and any wrapper
        time.sleep(0.05)
    left = _marked(mark)
    for pid in left:  # so that a failure does not leave it behind
        os.kill(pid, 9)
    assert left == []
