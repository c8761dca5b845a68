"""What an agent is shown and told on a real server (issue 49): the gateway surface of each GW condition over the
standard-library echo server (`tests/data/echo_mcp.py`, a real process), asserted whole: which tools, their
schemas and descriptions, the idempotency key on writes only (a tool the overlay omits counts as a write), the
lifecycle tools, selective discovery, and every result as rendered; and the annotations `serve` gives a real
server's tools, a tool the overlay omits declared as MCP's default (not read-only), never as a read."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from aft_bench.common.canonical import canonical_json
from aft_bench.interface.gateway_surface import GatewayInterface
from aft_bench.interface.mechanisms import load_conditions
from aft_bench.runtime.gateway import Gateway, GatewayFault, GatewaySchedule
from aft_bench.runtime.trace import Trace
from aft_bench.world.external import load_external

ECHO = Path(__file__).parent / "data" / "echo_mcp.py"
ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}
APPEND_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
KEY_PROPERTY = {"type": "string", "description": "Caller-chosen key naming this logical effect."}
KEY_SENTENCE = " A repeated idempotency_key is answered from the gateway's record, never sent to the server twice."
# `append` is a write whose effect is the record of notes.txt (the folder probe names files by path): a call with
# text "notes.txt" names that record, so verify_effect can be asked of it
OVERLAY = ('[tools.echo]\neffect = "read"\n[tools.append]\neffect = "write"\n'
           'identity = { collection = "files", key_arg = "text" }\n')  # `refuse`: omitted


def _world(tmp_path: Path, overlay: str = OVERLAY) -> Any:
    (tmp_path / "world.toml").write_text(
        f'kind = "mcp_stdio"\nid = "echoes"\n[server]\npackage = "echo"\nversion = "1"\n'
        f'command = ["{sys.executable}", "{ECHO}", "{tmp_path}"]\n[probe]\nbuiltin = "folder"\n{overlay}')
    return load_external(tmp_path)


@pytest.fixture
def opened(tmp_path: Path) -> Iterator[Gateway]:
    """A gateway that keeps the key record (as the episode builder opens it under a key condition)."""
    gw = Gateway(_world(tmp_path), Trace(), keys=True).open()
    try:
        yield gw
    finally:
        gw.close()


def _surface(gw: Gateway, condition: str) -> tuple[GatewayInterface, list[dict[str, Any]]]:
    face = GatewayInterface(gw, load_conditions().resolve(condition))
    return face, [t.schema() for t in face.surface()]


def test_the_bare_surface_is_the_servers_tools_as_it_lists_them(opened: Gateway) -> None:
    """GW-bare: the server's three tools in its order, its schemas and descriptions untouched, nothing added."""
    face, shown = _surface(opened, "GW-bare")
    assert shown == [{"name": "echo", "description": "Echo the text back.", "parameters": ECHO_SCHEMA},
                     {"name": "append", "description": "Append the text to notes.txt.", "parameters": APPEND_SCHEMA},
                     {"name": "refuse", "description": "Refuse, with isError.", "parameters": {"type": "object"}}]
    assert face.writes == {"append", "refuse"}  # a tool the overlay omits is treated as a write
    assert face.shown_bytes == len(canonical_json(shown).encode("utf-8"))
    (event,) = [e for e in opened.trace.events() if e.kind == "surface"]
    assert {k: v for k, v in event.data.items() if k != "tokens"} == {
        "tools": ["echo", "append", "refuse"], "full": True, "business": ["echo", "append", "refuse"]}
    assert isinstance(event.data["tokens"], int) and event.data["tokens"] > 20


def test_the_key_condition_adds_a_key_to_writes_only_and_says_what_it_does(opened: Gateway) -> None:
    """GW-key: append and the omitted refuse get idempotency_key and the sentence; the read echo gets neither."""
    _, shown = _surface(opened, "GW-key")
    by = {t["name"]: t for t in shown}
    assert by["echo"] == {"name": "echo", "description": "Echo the text back.", "parameters": ECHO_SCHEMA}
    assert by["append"] == {"name": "append", "description": "Append the text to notes.txt." + KEY_SENTENCE,
                            "parameters": {**APPEND_SCHEMA, "properties": {"text": {"type": "string"},
                                                                           "idempotency_key": KEY_PROPERTY}}}
    assert by["refuse"]["parameters"] == {"type": "object", "properties": {"idempotency_key": KEY_PROPERTY}}
    assert opened.listed[1]["inputSchema"] == APPEND_SCHEMA  # the server's own listing is not changed


def test_each_condition_adds_exactly_its_lifecycle_tools(opened: Gateway) -> None:
    """status adds get_invocation_status, verify adds verify_effect, full both; bare and key none."""
    names = {c: [t["name"] for t in _surface(opened, c)[1]][3:] for c in
             ("GW-bare", "GW-key", "GW-status", "GW-verify", "GW-full")}
    assert names == {"GW-bare": [], "GW-key": [], "GW-status": ["get_invocation_status"],
                     "GW-verify": ["verify_effect"], "GW-full": ["get_invocation_status", "verify_effect"]}
    _, full = _surface(opened, "GW-full")
    assert full[3] == {"name": "get_invocation_status", "description": "Whether an invocation reached the server, "
                       "and its answer.", "parameters": {"type": "object", "properties": {"invocation_id": {
                           "type": "string", "description": "Invocation id from an earlier result."}},
                           "required": ["invocation_id"]}}
    assert full[4]["parameters"]["required"] == ["tool", "arguments"]


def test_results_are_rendered_as_the_built_in_interface_renders_them(opened: Gateway) -> None:
    """A success, a server's isError and the key's record, each in the exact shape of each condition."""
    bare, _ = _surface(opened, "GW-bare")
    assert bare.call("echo", {"text": "hi"}).content == {"status": "ok", "result": {"text": "hi"}}
    assert bare.call("refuse", {}).content == {"status": "error", "error": "tool_error", "detail": "refused"}
    full, _ = _surface(opened, "GW-full")
    assert full.call("append", {"text": "a", "idempotency_key": "k1"}).content == {
        "status": "ok", "result": {"text": "appended"}, "invocation_id": "inv-3",
        "effect": {"idempotency_key": "k1", "replayed": False}}
    assert full.call("append", {"text": "a", "idempotency_key": "k1"}).content == {  # its own invocation, answered
        "status": "ok", "result": {"text": "appended"}, "invocation_id": "inv-4",  # from the record
        "effect": {"idempotency_key": "k1", "replayed": True}}
    assert full.call("append", {"text": "other", "idempotency_key": "k1"}).content == {
        "status": "error", "error": "key_conflict", "detail": "this idempotency key was used with other arguments"}
    assert full.call("echo", {"text": "no key"}).content == {"status": "ok", "result": {"text": "no key"},
                                                              "invocation_id": "inv-6"}
    assert (opened.resource.root / "notes.txt").read_text() == "a\n"  # the replay never reached the server
    args = [e.data["args"] for e in opened.trace.events() if e.kind == "tool_call"]
    assert args[2] == {"text": "a", "idempotency_key": "k1"}  # the agent's call as made, key and all


def test_without_structured_results_text_is_shown(tmp_path: Path) -> None:
    """Under I0's text results: `OK: <json>` and `ERROR tool_error: <text>`, and no key on anything."""
    gw = Gateway(_world(tmp_path), Trace()).open()
    try:
        face = GatewayInterface(gw, load_conditions().resolve("I0"))
        assert face.call("echo", {"text": "hi"}).content == 'OK: {"text":"hi"}'
        assert face.call("refuse", {}).content == "ERROR tool_error: refused"
        assert face.call("append", {"text": "x", "idempotency_key": "k"}).content == 'OK: {"text":"appended"}'
        assert face.writes == {"append", "refuse"} and not face.lifecycle
    finally:
        gw.close()


def test_status_and_verify_answer_from_the_record_and_the_real_state(opened: Gateway) -> None:
    """get_invocation_status of a known and an unknown id; verify_effect true after the write, false before, and
    no_postcondition for a tool without an identity; the key an agent passes to verify is ignored."""
    face, _ = _surface(opened, "GW-full")
    assert face.call("verify_effect", {"tool": "append", "arguments": {"text": "notes.txt"}}).content == {
        "status": "ok", "result": {"holds": False}}
    face.call("append", {"text": "notes.txt"})
    assert face.call("verify_effect", {"tool": "append", "arguments": {
        "text": "notes.txt", "idempotency_key": "z"}}).content == {"status": "ok", "result": {"holds": True}}
    assert face.call("verify_effect", {"tool": "echo", "arguments": {"text": "x"}}).content == {
        "status": "error", "error": "no_postcondition", "detail": "no known effect to check for echo"}
    assert face.call("verify_effect", {"tool": "append", "arguments": "not an object"}).content == {
        "status": "ok", "result": {"holds": False}}  # read as no arguments: no record named by them
    assert face.call("get_invocation_status", {"invocation_id": "inv-1"}).content == {"status": "ok", "result": {
        "invocation_id": "inv-1", "tool": "append", "reached_server": True, "committed": True,
        "answer": {"content": [{"type": "text", "text": "appended"}], "isError": False}}}
    assert face.call("get_invocation_status", {"invocation_id": "inv-9"}).content == {
        "status": "error", "error": "unknown_invocation", "detail": "no invocation inv-9"}


def test_lifecycle_tools_a_condition_lacks_are_unknown_tools(opened: Gateway) -> None:
    """Under GW-bare, get_invocation_status, verify_effect, search_tools and describe_tool are no tools at all."""
    face, _ = _surface(opened, "GW-bare")
    for name in ("get_invocation_status", "verify_effect", "search_tools", "describe_tool", "nope"):
        assert face.call(name, {"invocation_id": "inv-1", "tool": "append", "arguments": {}, "query": "x",
                                "name": "echo"}).content == {"status": "error", "error": "unknown_tool",
                                                             "detail": f"no tool named {name}"}
    errors = [e.data for e in opened.trace.events() if e.kind == "tool_error"]
    assert errors == [{"tool": n, "reason": "unknown_tool"} for n in
                      ("get_invocation_status", "verify_effect", "search_tools", "describe_tool", "nope")]
    assert not [e for e in opened.trace.events() if e.kind == "server_call"]


def test_selective_discovery_finds_then_loads_a_tool_before_it_can_be_called(opened: Gateway) -> None:
    """GW-selective: no server tool shown at first; calling one says to load it; search ranks cards; describe
    loads the schema (an unknown name is refused) and only then does the call reach the server."""
    face, shown = _surface(opened, "GW-selective")
    assert [t["name"] for t in shown] == ["search_tools", "describe_tool"]
    assert shown[0]["description"] == "Search the server's tools; returns the top 5 capability cards."
    assert face.call("append", {"text": "x"}).content == {
        "status": "error", "error": "unknown_tool", "detail": "no tool named append (load it with describe_tool first)"}
    found = face.call("search_tools", {"query": "append text to notes"}).content
    assert found["status"] == "ok" and found["result"]["tools"][0] == {
        "name": "append", "card": "append: Append the text to notes.txt."}
    assert sorted(t["name"] for t in found["result"]["tools"]) == ["append", "echo", "refuse"]
    assert face.call("describe_tool", {"name": "push"}).content == {
        "status": "error", "error": "unknown_tool", "detail": "no tool named push"}
    assert face.call("describe_tool", {"name": "append"}).content == {"status": "ok", "result": {
        "name": "append", "description": "Append the text to notes.txt.", "parameters": APPEND_SCHEMA}}
    assert face.materialized == {"append"}
    assert face.call("append", {"text": "x"}).content == {"status": "ok", "result": {"text": "appended"}}
    kinds = [(e.kind, e.data.get("tools")) for e in opened.trace.events() if e.kind in ("discovered", "materialize")]
    assert kinds == [("discovered", found and [t["name"] for t in found["result"]["tools"]]),
                     ("materialize", ["append"])]


@pytest.mark.parametrize(("condition", "shown"), [
    ("GW-bare", {"status": "timeout"}),
    ("GW-status", {"status": "interrupted", "invocation_id": "inv-1", "resumable": False}),
    ("I0", "TIMEOUT: no response"),
])
def test_a_lost_answer_is_a_timeout_and_an_interruption_is_one_only_with_the_record(condition: str, shown: Any,
                                                                                  tmp_path: Path) -> None:
    """A dropped answer is a timeout under every condition (marked dropped); an interruption is shown as one only
    where the gateway keeps an invocation record."""
    for kind in ("response_loss", "interruption"):
        folder = tmp_path / kind
        folder.mkdir()
        gw = Gateway(_world(folder), Trace(), GatewaySchedule(id="t", faults=(GatewayFault(kind=kind, tool="append"),)))
        gw.open()
        try:
            told = GatewayInterface(gw, load_conditions().resolve(condition)).call("append", {"text": "x"})
        finally:
            gw.close()
        if kind == "response_loss":
            assert told.content == ({"status": "timeout"} if condition != "I0" else "TIMEOUT: no response")
            assert told.dropped is True
        else:
            assert told.content == shown and told.dropped is False


# -- the annotations `serve` gives a real server's tools ---------------------------------------------------------
WORKLOAD = ('[workload]\nid = "e_rl"\nworld = "echoes"\ndescription = "One append."\n[[variants]]\n'
            'id = "response_loss"\nfaults = [{ kind = "response_loss" }]\n[[tasks]]\nid = "t1"\nworld = "echoes"\n'
            'spec = "Append hi."\ngoal = [{ collection = "files", where = { }, count = 1 }]\n'
            'target_ops = ["append"]\nallowed_ops = ["echo"]\nplan = [{ call = "append", args = { text = "hi" } }]\n')


@pytest.mark.parametrize(("condition", "expected"), [
    ("GW-key", {"echo": (True, None, None), "append": (False, False, True), "refuse": (False, True, True)}),
    ("GW-bare", {"echo": None, "append": None, "refuse": None}),
    ("GW-misleading", {"echo": None, "append": (False, False, True), "refuse": (False, False, True)}),
])
def test_serve_annotates_a_real_servers_tools_from_the_overlay_and_an_omitted_one_as_mcp_s_default(
        condition: str, expected: dict[str, Any], tmp_path: Path) -> None:
    """(readOnly, destructive, idempotent) as a client lists them: a tool the overlay leaves out is not known to
    be a read, so it is never declared read-only (MCP's default: destructive); a write is idempotent only where the
    gateway's key makes it so."""
    from mcp import Client

    from aft_bench.serving.record import ServedDirectory
    from aft_bench.serving.server import Served, Target, build_server

    worlds = tmp_path / "worlds"
    (worlds / "workloads").mkdir(parents=True)
    (worlds / "echoes").mkdir()
    _world(worlds / "echoes")
    (worlds / "workloads" / "e_rl.toml").write_text(WORKLOAD)

    async def listed() -> list[Any]:
        with ServedDirectory(tmp_path / "out", worlds) as directory:
            served = Served(Target("e_rl", "t1", condition), worlds, directory)
            async with Client(build_server(served)) as client:
                return (await client.list_tools()).tools

    tools = {t.name: t for t in asyncio.run(listed()) if t.name in expected}
    got = {n: None if t.annotations is None else (t.annotations.read_only_hint, t.annotations.destructive_hint,
                                                  t.annotations.idempotent_hint) for n, t in tools.items()}
    assert got == expected
    assert json.dumps(sorted(tools)) == '["append", "echo", "refuse"]'
