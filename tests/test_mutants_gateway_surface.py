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
        "status": "error", "error": "key_conflict", "detail": "this idempotency key was used with another tool or other arguments"}
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


# -- every tool an agent is shown, whole, and the corners of `call` and `_render` ---------------------------------
STATUS_TOOL = {"name": "get_invocation_status", "description": "Whether an invocation reached the server, and its "
               "answer.", "parameters": {"type": "object", "properties": {"invocation_id": {
                   "type": "string", "description": "Invocation id from an earlier result."}},
                   "required": ["invocation_id"]}}
VERIFY_TOOL = {"name": "verify_effect", "description": "Evidence from the real state whether a call's intended "
               "effect holds now.", "parameters": {"type": "object", "properties": {
                   "tool": {"type": "string", "description": "Tool whose effect to check."},
                   "arguments": {"type": "object", "description": "The arguments of that call."}},
                   "required": ["tool", "arguments"]}}
SEARCH_TOOL = {"name": "search_tools", "description": "Search the server's tools; returns the top 5 capability "
               "cards.", "parameters": {"type": "object", "properties": {"query": {
                   "type": "string", "description": "What you want to do."}}, "required": ["query"]}}
DESCRIBE_TOOL = {"name": "describe_tool", "description": "Load the full schema of a tool so it can be called.",
                 "parameters": {"type": "object", "properties": {"name": {"type": "string",
                                                                          "description": "Tool name."}},
                                "required": ["name"]}}


def test_every_lifecycle_and_discovery_tool_is_shown_whole_with_its_role(opened: Gateway) -> None:
    """The exact schema of each added tool (its words are part of the instrument: an agent reads them) and the
    role that decides how `serve` annotates and routes it."""
    face, full = _surface(opened, "GW-full")
    assert full[3:] == [STATUS_TOOL, VERIFY_TOOL]
    assert {t.name: t.role for t in face.surface()} == {"echo": "business", "append": "business",
                                                        "refuse": "business", "get_invocation_status": "lifecycle",
                                                        "verify_effect": "lifecycle"}
    face, selective = _surface(opened, "GW-selective")
    assert selective == [SEARCH_TOOL, DESCRIBE_TOOL]
    assert [t.role for t in face.surface()] == ["discovery", "discovery"]
    assert face.shown_bytes == len(canonical_json(selective).encode("utf-8"))
    surfaces = [e.data for e in opened.trace.events() if e.kind == "surface"]
    assert {k: v for k, v in surfaces[-1].items() if k != "tokens"} == {
        "tools": ["search_tools", "describe_tool"], "full": True, "business": ["echo", "append", "refuse"]}


def test_a_new_surface_under_selective_discovery_forgets_what_was_loaded(opened: Gateway) -> None:
    """A loaded tool must be loaded again after the surface is shown anew (as after a restart of the agent)."""
    face, _ = _surface(opened, "GW-selective")
    face.call("describe_tool", {"name": "echo"})
    assert face.call("echo", {"text": "once"}).content == {"status": "ok", "result": {"text": "once"}}
    face.surface()
    assert face.materialized == set()
    assert face.call("echo", {"text": "twice"}).content == {
        "status": "error", "error": "unknown_tool", "detail": "no tool named echo (load it with describe_tool first)"}


def test_discovery_events_count_the_tokens_of_exactly_what_was_shown(opened: Gateway) -> None:
    """search_tools' event carries the query and the tokens of the cards shown; describe_tool's the tokens of the
    schema; a search without a query ranks against the empty text and still shows all three."""
    from aft_bench.interface.tokens import count_tokens

    face, _ = _surface(opened, "GW-selective")
    found = face.call("search_tools", {}).content["result"]["tools"]
    assert sorted(t["name"] for t in found) == ["append", "echo", "refuse"]
    face.call("describe_tool", {"name": "refuse"})
    discovered, materialize = [e.data for e in opened.trace.events() if e.kind in ("discovered", "materialize")]
    assert discovered == {"query": None, "tools": [t["name"] for t in found],
                          "tokens": count_tokens(canonical_json(found))}
    assert materialize == {"tools": ["refuse"], "tokens": count_tokens(canonical_json(
        {"name": "refuse", "description": "Refuse, with isError.", "parameters": {"type": "object"}}))}


def test_missing_lifecycle_arguments_are_named_as_given(opened: Gateway) -> None:
    """No invocation id, no tool: the answer names what was (not) asked, and nothing reaches the server."""
    face, _ = _surface(opened, "GW-full")
    assert face.call("get_invocation_status", {}).content == {
        "status": "error", "error": "unknown_invocation", "detail": "no invocation None"}
    assert face.call("verify_effect", {}).content == {
        "status": "error", "error": "no_postcondition", "detail": "no known effect to check for None"}
    assert face.call("describe_tool", {}).content == {"status": "error", "error": "unknown_tool",
                                                      "detail": "no tool named describe_tool"}
    assert not [e for e in opened.trace.events() if e.kind == "server_call"]


def test_the_agents_arguments_are_never_changed_and_a_key_goes_only_where_keys_are_kept(opened: Gateway) -> None:
    """The key is taken off a write's arguments only under a key condition, and never off the caller's dict; a
    read's key, and any key without the mechanism, reaches the server as an ordinary argument; the key is shown
    back as given while the record holds its text."""
    face, _ = _surface(opened, "GW-key")
    given = {"text": "a", "idempotency_key": 7}
    assert face.call("append", given).content == {"status": "ok", "result": {"text": "appended"},
                                                  "effect": {"idempotency_key": 7, "replayed": False}}
    assert given == {"text": "a", "idempotency_key": 7}
    assert face.call("append", {"text": "a", "idempotency_key": "7"}).content == {
        "status": "ok", "result": {"text": "appended"}, "effect": {"idempotency_key": "7", "replayed": True}}
    assert face.call("echo", {"text": "r", "idempotency_key": "k"}).content == {"status": "ok",
                                                                               "result": {"text": "r"}}
    status, _ = _surface(opened, "GW-status")
    assert status.call("append", {"text": "b", "idempotency_key": "k"}).content == {
        "status": "ok", "result": {"text": "appended"}, "invocation_id": "inv-4"}
    asked = [(e.data["inv"], e.data["args"], e.data["key"]) for e in opened.trace.events() if e.kind == "invocation"]
    assert asked == [("inv-1", {"text": "a"}, "7"), ("inv-2", {"text": "a"}, "7"),
                     ("inv-3", {"text": "r", "idempotency_key": "k"}, None),
                     ("inv-4", {"text": "b", "idempotency_key": "k"}, None)]
    assert [e.data["inv"] for e in opened.trace.events() if e.kind == "forwarded"] == ["inv-1", "inv-3", "inv-4"]
    assert (opened.resource.root / "notes.txt").read_text() == "a\nb\n"


def test_an_unstructured_condition_with_the_record_shows_interruptions_and_conflicts_as_text(tmp_path: Path) -> None:
    """Text results with the invocation record: `INTERRUPTED: <id>`; text results with keys: a reused key with other
    arguments is `ERROR key_conflict: ...`."""
    import dataclasses

    text_status = dataclasses.replace(load_conditions().resolve("GW-status"), structured=False)
    gw = Gateway(_world(tmp_path), Trace(),
                 GatewaySchedule(id="t", faults=(GatewayFault(kind="interruption", tool="append"),))).open()
    try:
        told = GatewayInterface(gw, text_status).call("append", {"text": "x"})
        assert (told.content, told.dropped) == ("INTERRUPTED: inv-1", False)
    finally:
        gw.close()
    text_key = dataclasses.replace(load_conditions().resolve("GW-key"), structured=False)
    keyed = tmp_path / "keyed"
    keyed.mkdir()
    gw = Gateway(_world(keyed), Trace(), keys=True).open()
    try:
        face = GatewayInterface(gw, text_key)
        assert face.call("append", {"text": "x", "idempotency_key": "k"}).content == 'OK: {"text":"appended"}'
        assert face.call("append", {"text": "y", "idempotency_key": "k"}).content == (
            "ERROR key_conflict: this idempotency key was used with another tool or other arguments")
    finally:
        gw.close()


def test_a_servers_structured_content_is_passed_on_beside_its_text(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that answers structuredContent: the agent gets both, under structured and text results alike."""
    monkeypatch.setenv("ECHO_STRUCTURED", "1")
    gw = Gateway(_world(tmp_path), Trace()).open()
    try:
        face = GatewayInterface(gw, load_conditions().resolve("GW-bare"))
        assert face.call("echo", {"text": "s"}).content == {"status": "ok", "result": {
            "text": "s", "structured": {"echoed": "s"}}}
        text = GatewayInterface(gw, load_conditions().resolve("I0"))
        assert text.call("echo", {"text": "t"}).content == 'OK: {"structured":{"echoed":"t"},"text":"t"}'
    finally:
        gw.close()


# -- a server's own listing where it leaves things out, search without a query, the Surface's counters ----------------
def _listing_world(tmp_path: Path, tools: list[dict[str, Any]]) -> Any:
    """The echo server listing `tools` (ECHO_TOOLS) under the usual overlay (echo a read, append a write)."""
    (tmp_path / "world.toml").write_text(
        f'kind = "mcp_stdio"\nid = "echoes"\n[server]\npackage = "echo"\nversion = "1"\n'
        f'command = ["{sys.executable}", "{ECHO}", "{tmp_path}"]\n'
        f'env = {{ ECHO_TOOLS = {json.dumps(json.dumps(tools))} }}\n[probe]\nbuiltin = "folder"\n{OVERLAY}')
    return load_external(tmp_path)


ECHO_TOOL = {"name": "echo", "description": "Echo the text back.", "inputSchema": ECHO_SCHEMA}
APPEND_TOOL = {"name": "append", "description": "Append the text to notes.txt.", "inputSchema": APPEND_SCHEMA}
# seven tools, the last two found only by a query that names them ("none", "xxxx"): the top five of an empty query
# are the first five as listed
SEVEN = [ECHO_TOOL, APPEND_TOOL,
         {"name": "refuse", "description": "Refuse, with isError.", "inputSchema": {"type": "object"}},
         {"name": "list_notes", "description": "List the notes.", "inputSchema": {"type": "object"}},
         {"name": "count_notes", "description": "Count the notes.", "inputSchema": {"type": "object"}},
         {"name": "clear_notes", "description": "Clear the notes, leaving none.", "inputSchema": {"type": "object"}},
         {"name": "mask_notes", "description": "Mask each note as xxxx.", "inputSchema": {"type": "object"}}]


def test_a_tool_listed_without_schema_or_description_is_shown_with_an_empty_object_schema(tmp_path: Path) -> None:
    """MCP lets a server leave out a tool's description and (in practice) its inputSchema: the agent is shown an
    object schema with no properties and an empty description, never a made-up text; a key condition adds only the
    key and its sentence (the tool is omitted from the overlay: a write)."""
    gw = Gateway(_listing_world(tmp_path, [ECHO_TOOL, APPEND_TOOL, {"name": "ping"}]), Trace(), keys=True).open()
    try:
        _, bare = _surface(gw, "GW-bare")
        assert bare[2] == {"name": "ping", "description": "", "parameters": {"type": "object", "properties": {}}}
        _, keyed = _surface(gw, "GW-key")
        assert keyed[2] == {"name": "ping", "description": KEY_SENTENCE,
                            "parameters": {"type": "object", "properties": {"idempotency_key": KEY_PROPERTY}}}
        assert gw.listed[2] == {"name": "ping"}  # the server's own listing is not changed
    finally:
        gw.close()


def test_search_shows_the_top_five_and_a_missing_query_is_the_empty_one(tmp_path: Path) -> None:
    """Of seven tools, search_tools shows five cards: for no query the first five as listed (the empty text scores
    every card alike; no word such as "none" is searched for); a query's event names the query as asked."""
    from aft_bench.interface.tokens import count_tokens

    gw = Gateway(_listing_world(tmp_path, SEVEN), Trace()).open()
    try:
        face, _ = _surface(gw, "GW-selective")
        cards = {t["name"]: f"{t['name']}: {t['description']}" for t in SEVEN}
        first_five = [{"name": n, "card": cards[n]} for n in ("echo", "append", "refuse", "list_notes", "count_notes")]
        assert face.call("search_tools", {}).content == {"status": "ok", "result": {"tools": first_five}}
        found = face.call("search_tools", {"query": "clear the notes"}).content["result"]["tools"]
        assert [t["name"] for t in found] == ["clear_notes", "list_notes", "count_notes", "append", "echo"]
        events = [e.data for e in gw.trace.events() if e.kind == "discovered"]
        assert events == [
            {"query": None, "tools": [t["name"] for t in first_five],
             "tokens": count_tokens(canonical_json(first_five))},
            {"query": "clear the notes", "tools": [t["name"] for t in found],
             "tokens": count_tokens(canonical_json(found))}]
    finally:
        gw.close()


def test_the_gateway_surface_runs_no_tool_programs_so_a_virtual_clock_charges_none(opened: Gateway) -> None:
    """The Surface's programs_run is 0 from the start and stays 0 (the gateway offers no tool programs): the loop
    under a network profile charges decisions and round trips only, never a program's build."""
    from aft_bench.agents.protocol import Call, End, Usage
    from aft_bench.episode.clock import VirtualClock
    from aft_bench.episode.loop import play
    from aft_bench.tasks.task import Brief

    class TwoCalls:
        def __init__(self) -> None:
            self.left = [Call("echo", {"text": "a"}), Call("append", {"text": "b"})]

        async def start(self, brief: Any, surface: Any) -> None:
            pass

        async def restart(self, surface: Any) -> None:
            pass

        async def act(self, observation: Any) -> Any:
            return self.left.pop(0) if self.left else End("finish", "success")

        def usage(self) -> Usage:
            return Usage()

        def take_records(self) -> list[dict[str, Any]]:
            return []

    face = GatewayInterface(opened, load_conditions().resolve("GW-bare"))
    assert face.programs_run == 0
    clock = VirtualClock({"rtt_ms": 10.0, "decision_ms": 100.0, "build_ms": 1000.0}, "seed")
    played = asyncio.run(play(TwoCalls(), face, Brief("t1", "Echo, then append.", {}), 5, clock))
    assert (played.tool_calls, played.turns, played.clock_ms, face.programs_run) == (2, 3, 320.0, 0)
