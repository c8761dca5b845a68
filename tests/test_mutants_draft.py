"""The world.toml draft `aft-bench init-world` writes from a server's tools/list (`world/draft.py`): the whole text
for a realistic tool list (annotated and bare tools, reads and writes, names TOML must quote, required arguments of
each JSON type), that it parses and loads as a world whose TODOs the live check refuses, each tool's effect and how
it was decided, the example templates, TOML's quoting of odd text, and the probe a server's command suggests.
Written for `make mutants`; no server is started."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

import pytest

from aft_bench.cli.scorecard import _placeholders
from aft_bench.cli.validate import validate_path
from aft_bench.common.errors import InputError
from aft_bench.world.draft import ProbeDraft, ToolDraft, _key, _str, _toml, draft, draft_tool, example, pick_probe
from aft_bench.world.external import FAILURE_PHRASES, load_external

ODD = 'say "hi"\n😀\x7f\u2028'  # a tool name with a quote, a newline, an emoji, DEL and a line separator
COMMAND = ["uvx", "mcp-server-sqlite", "--db-path", "{root}/notes.db"]
# a server's tools/list, in the server's order (not sorted), as a sqlite-like server might answer it
TOOLS: list[dict[str, Any]] = [
    {"name": "write_query", "description": "Run an INSERT, UPDATE or DELETE",
     "inputSchema": {"type": "object", "properties": {"query": {"type": "string", "default": "SELECT 1"}},
                     "required": ["query"]},
     "annotations": {"title": "Write Query", "readOnlyHint": False, "destructiveHint": True, "idempotentHint": False,
                     "openWorldHint": False}},
    {"name": "reset", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},  # measured: it lies
    {"name": "list_tables", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "getTodo", "inputSchema": {"type": "object", "properties": {"id": {"type": "integer"}},
                                        "required": ["id"]}},
    {"name": "create-record", "inputSchema": {"type": "object", "properties": {
        "table": {"type": "string", "enum": ["notes", "tags"]}, "count": {"type": "integer", "default": 3},
        "ratio": {"type": "number", "examples": [0.5]}, "ok": {"type": "boolean", "default": True},
        "tags": {"type": "array", "items": {"type": "string"}}, "fields": {"type": "object"},
        "Upper Key": {"type": "string"}, "nothing": {"type": "null"}, "untyped": {}},
        "required": ["table", "count", "ratio", "ok", "tags", "fields", "Upper Key", "nothing", "untyped",
                     "missing"]}},
    {"name": "ping", "inputSchema": {"type": "object"}},  # measured: a read
    {"name": "fetch_url", "inputSchema": {"type": "object", "properties": {"url": {"type": "string"}},
                                          "required": ["url"]},
     "annotations": {"readOnlyHint": True, "openWorldHint": True}},
    {"name": "get_lock", "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}},
                                         "required": ["key"]},
     "annotations": {"readOnlyHint": False, "idempotentHint": True, "destructiveHint": False}},
    {"name": "notes.v2"},  # no inputSchema at all
    {"name": ODD, "inputSchema": {"type": "object"}, "annotations": {"destructiveHint": False}},
]
MEASURED = {"ping": False, "reset": True, "ghost": True}  # a measured name the list lacks changes nothing

FAILURE_LINE = ('failure = ["error", "failed", "failure", "not found", "already exists", "does not exist", "no such", '
                '"cannot", "can\'t", "could not", "couldn\'t", "unable to", "invalid", "denied", "refused"]')
GOLDEN = "\n".join([
    "# Drafted by `aft-bench init-world` from a live server (it calls itself sqlite 0.1.0). Give each example real",
    "# arguments (or delete it), check each tool's overlay, then `aft-bench validate --live` this folder.",
    'kind = "mcp_stdio"',
    'id = "sqlite-notes"',
    'description = "mcp-server-sqlite as a world, drafted by init-world"',
    "# another writer's change to the folder, for stale-state faults: commands run in it",
    "foreign = []",
    "",
    "[server]",
    'package = "mcp-server-sqlite"  # read from the install',
    'version = "2025.4.25"',
    'command = ["uvx", "mcp-server-sqlite", "--db-path", "{root}/notes.db"]  # {root} is the episode\'s folder, '
    "{world} this world's",
    "",
    "[fixture]",
    "# the files and commands that prepare a fresh folder for each episode (none: it starts empty)",
    "files = {}",
    "commands = []",
    "",
    "[probe]",
    "# how the real state is read without the server: the command names a database file, {root}/notes.db",
    'builtin = "sqlite"',
    'path = "notes.db"',
    "",
    "[answers]",
    "# what this server's answers say when a call failed but isError is false (whole words, any case)",
    FAILURE_LINE,
    "",
    "[tools.create-record]",
    'effect = "write"',
    "idempotent = false",
    "destructive = true",
    "verified = false",
    'note = "assumed a write (no annotation): its example is measured by the scorecard; annotations: none"',
    'examples = [{ args = { table = "TODO", count = "TODO", ratio = "TODO", ok = "TODO", tags = ["TODO"], '
    'fields = { TODO = "TODO" }, "Upper Key" = "TODO", nothing = "TODO", untyped = "TODO", missing = "TODO" } }]'
    "  # TODO: a real call",
    "",
    "[tools.fetch_url]",
    'effect = "read"',
    "verified = false",
    'note = "declared: readOnlyHint=true; annotations: openWorldHint=true, readOnlyHint=true"',
    "",
    "[tools.getTodo]",
    'effect = "read"',
    "verified = false",
    'note = "guessed from its name (no annotation): give it an example to measure it; annotations: none"',
    "",
    "[tools.get_lock]",
    'effect = "write"',
    "idempotent = true",
    "destructive = false",
    "verified = false",
    'note = "declared: readOnlyHint=false; annotations: destructiveHint=false, idempotentHint=true, '
    'readOnlyHint=false"',
    'examples = [{ args = { key = "TODO" } }]  # TODO: a real call',
    "",
    "[tools.list_tables]",
    'effect = "read"',
    "verified = false",
    'note = "guessed from its name (no annotation): give it an example to measure it; annotations: none"',
    "",
    '[tools."notes.v2"]',
    'effect = "write"',
    "idempotent = false",
    "destructive = true",
    "verified = false",
    'note = "assumed a write (no annotation): its example is measured by the scorecard; annotations: none"',
    "examples = [{ args = {} }]  # TODO: a real call",
    "",
    "[tools.ping]",
    'effect = "read"',
    "verified = false",
    'note = "measured: its call with no arguments did not change the state; annotations: none"',
    "",
    "[tools.reset]",
    'effect = "write"',
    "idempotent = false",
    "destructive = true",
    "verified = false",
    'note = "measured: its call with no arguments changed the state; annotations: readOnlyHint=true"',
    "examples = [{ args = {} }]  # TODO: a real call",
    "",
    '[tools."say \\"hi\\"\\n😀\\u007f\\u2028"]',
    'effect = "write"',
    "idempotent = false",
    "destructive = false",
    "verified = false",
    'note = "assumed a write (no annotation): its example is measured by the scorecard; annotations: '
    'destructiveHint=false"',
    "examples = [{ args = {} }]  # TODO: a real call",
    "",
    "[tools.write_query]",
    'effect = "write"',
    "idempotent = false",
    "destructive = true",
    "verified = false",
    'note = "declared: readOnlyHint=false; annotations: destructiveHint=true, idempotentHint=false, '
    'openWorldHint=false, readOnlyHint=false"',
    'examples = [{ args = { query = "TODO" } }]  # TODO: a real call',
    "",
])


def _golden() -> str:
    return draft("sqlite-notes", COMMAND, TOOLS, {"name": "sqlite", "version": "0.1.0"},
                 ("mcp-server-sqlite", "2025.4.25"), pick_probe(COMMAND, "mcp-server-sqlite"), MEASURED)


def _write(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "w"
    folder.mkdir()
    (folder / "world.toml").write_text(text, encoding="utf-8")
    return folder


def test_the_whole_draft_for_a_realistic_tool_list() -> None:
    """A draft whose tables, effects, notes, quoting or examples drifted would mislead the person checking it."""
    assert _golden() == GOLDEN


def test_the_draft_parses_and_loads_as_a_world(tmp_path: Path) -> None:
    """A draft that is not valid TOML or not a valid world would stop `validate` on the very file init-world made."""
    data = tomllib.loads(GOLDEN)
    assert list(data["tools"]) == ["create-record", "fetch_url", "getTodo", "get_lock", "list_tables", "notes.v2",
                                   "ping", "reset", ODD, "write_query"]
    assert data["tools"]["create-record"]["examples"] == [{"args": {
        "table": "TODO", "count": "TODO", "ratio": "TODO", "ok": "TODO", "tags": ["TODO"], "fields": {"TODO": "TODO"},
        "Upper Key": "TODO", "nothing": "TODO", "untyped": "TODO", "missing": "TODO"}}]
    assert data["answers"]["failure"] == list(FAILURE_PHRASES)
    folder = _write(tmp_path, _golden())
    world = load_external(folder)
    assert world.id == "sqlite-notes" and world.kind == "mcp_stdio"
    assert (world.server.package, world.server.version, world.server.command) == (
        "mcp-server-sqlite", "2025.4.25", tuple(COMMAND))
    assert (world.probe.builtin, world.probe.path) == ("sqlite", "notes.db")
    assert world.writes() == ["create-record", "get_lock", "notes.v2", "reset", ODD, "write_query"]
    assert all(not t.verified for t in world.tools.values())
    assert validate_path(str(folder), tmp_path, live=False) == (
        f"ok  {folder}: external world: 'sqlite-notes', mcp-server-sqlite 2025.4.25, 10 tools (6 writing; the "
        "overlay is checked against the live server when an episode opens)")


def test_the_drafts_todo_examples_are_refused_by_the_live_check(tmp_path: Path) -> None:
    """A draft's TODO arguments sent to a live server would measure nothing: the scorecard must refuse them."""
    with pytest.raises(InputError) as caught:
        _placeholders(load_external(_write(tmp_path, _golden())), tmp_path / "w" / "world.toml")
    assert caught.value.field == "tools.create-record.examples.0.args"
    assert caught.value.problem == "still the draft's TODO: give the call real arguments, or delete the example"


def test_mcp_default_for_a_bare_tool_is_a_destructive_non_idempotent_write() -> None:
    """A tool with no annotations drafted harmless would let a destructive re-issue pass the scorecard unseen."""
    tool = {"name": "append", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                                              "required": ["text"]}}
    assert draft_tool(tool, None) == ToolDraft(
        "append", "write", "assumed a write (no annotation): its example is measured by the scorecard", {},
        {"text": "TODO"})
    data = tomllib.loads(draft("w", ["srv"], [tool], {}, None, pick_probe(["srv"]), {}))
    assert data["tools"]["append"] == {
        "effect": "write", "idempotent": False, "destructive": True, "verified": False,
        "note": "assumed a write (no annotation): its example is measured by the scorecard; annotations: none",
        "examples": [{"args": {"text": "TODO"}}]}


def test_without_an_install_nor_server_info_the_draft_says_todo_and_keeps_the_first_of_a_name(
        tmp_path: Path) -> None:
    """An unread install shown as read, or a name listed twice drafted as two tables, would be a broken draft."""
    listed = [{"name": "b", "inputSchema": {}, "annotations": {"readOnlyHint": True, "note": "first"}},
              {"name": "a", "inputSchema": {}},
              {"name": "b", "inputSchema": {}},
              {"name": "c", "inputSchema": {}, "annotations": {"title": "C"}}]
    text = draft("bare", ["node", "server.js"], listed, {}, None, pick_probe(["node", "server.js"]), {})
    assert text == "\n".join([
        "# Drafted by `aft-bench init-world` from a live server (it calls itself ? ?). Give each example real",
        "# arguments (or delete it), check each tool's overlay, then `aft-bench validate --live` this folder.",
        'kind = "mcp_stdio"',
        'id = "bare"',
        'description = "TODO as a world, drafted by init-world"',
        "# another writer's change to the folder, for stale-state faults: commands run in it",
        "foreign = []",
        "",
        "[server]",
        'package = "TODO"  # TODO: the install could not be read; name the package you install and its version',
        'version = "TODO"',
        'command = ["node", "server.js"]  # {root} is the episode\'s folder, {world} this world\'s',
        "",
        "[fixture]",
        "# the files and commands that prepare a fresh folder for each episode (none: it starts empty)",
        "files = {}",
        "commands = []",
        "",
        "[probe]",
        "# how the real state is read without the server: the server works in its folder",
        'builtin = "folder"',
        "",
        "[answers]",
        "# what this server's answers say when a call failed but isError is false (whole words, any case)",
        FAILURE_LINE,
        "",
        "[tools.a]",
        'effect = "write"',
        "idempotent = false",
        "destructive = true",
        "verified = false",
        'note = "assumed a write (no annotation): its example is measured by the scorecard; annotations: none"',
        "examples = [{ args = {} }]  # TODO: a real call",
        "",
        "[tools.b]",
        'effect = "read"',
        "verified = false",
        'note = "declared: readOnlyHint=true; annotations: readOnlyHint=true"',
        "",
        "[tools.c]",
        'effect = "write"',
        "idempotent = false",
        "destructive = true",
        "verified = false",
        'note = "assumed a write (no annotation): its example is measured by the scorecard; annotations: none"',
        "examples = [{ args = {} }]  # TODO: a real call",
        "",
    ])
    world = load_external(_write(tmp_path, text))
    assert (world.probe.builtin, world.probe.path) == ("folder", ".") and world.writes() == ["a", "c"]
    with pytest.raises(InputError) as caught:
        _placeholders(world, tmp_path / "w" / "world.toml")
    assert (caught.value.field, caught.value.value) == ("server.package", "TODO")


@pytest.mark.parametrize(("info", "said"), [
    ({"name": "sqlite", "version": "0.1.0"}, "sqlite 0.1.0"),
    ({"version": "2"}, "? 2"),
    ({"name": "srv"}, "srv ?"),
    ({"name": "evil\nname\r\n  here", "version": "1\t2"}, "evil name here 1 2"),
    ({"name": "n" * 300, "version": "9"}, "n" * 200),
])
def test_the_servers_own_name_is_one_comment_line(info: dict[str, Any], said: str) -> None:
    """A server's name with a newline would break the comment into a TOML line; a missing one would crash."""
    text = draft("w", ["srv"], [{"name": "ping"}], info, ("p", "1"), pick_probe(["srv"]), {})
    assert text.splitlines()[0] == (f"# Drafted by `aft-bench init-world` from a live server (it calls itself "
                                    f"{said}). Give each example real")
    assert tomllib.loads(text)["id"] == "w"


def test_a_lone_surrogate_in_a_name_is_drafted_as_a_question_mark(tmp_path: Path) -> None:
    """A name no file can hold (a lone surrogate, from JSON's \\udc80) would crash the draft while writing it."""
    text = draft("w", ["srv"], [{"name": "bad\udc80name", "annotations": {"readOnlyHint": True}}], {}, ("p", "1"),
                 pick_probe(["srv"]), {})
    assert '[tools."bad?name"]' in text.splitlines()
    assert list(load_external(_write(tmp_path, text)).tools) == ["bad?name"]
    assert _str("a\ud800b") == '"a?b"'


@pytest.mark.parametrize(("text", "toml"), [
    ("plain", '"plain"'),
    ("é 😀 ü", '"é 😀 ü"'),  # kept as they are: TOML refuses the surrogate pairs JSON would write
    ('q"b\\', '"q\\"b\\\\"'),
    ("a\x7fb", '"a\\u007fb"'),
    ("a\u2028b", '"a\\u2028b"'),
    ("tab\tnl\n", '"tab\\tnl\\n"'),
])
def test_str_is_a_toml_basic_string(text: str, toml: str) -> None:
    """A name quoted wrongly would make a draft TOML refuses, or read back as another name."""
    assert _str(text) == toml
    assert tomllib.loads(f"k = {toml}")["k"] == text


@pytest.mark.parametrize(("key", "toml"), [
    ("ping", "ping"), ("PING", "PING"), ("getTodo", "getTodo"), ("a-b_9", "a-b_9"),
    ("a.b", '"a.b"'), ("two words", '"two words"'), ("", '""'), ("é", '"é"'),
])
def test_key_is_bare_only_where_toml_allows(key: str, toml: str) -> None:
    """A dotted name left bare would be drafted as a nested table; a plain one quoted is noise."""
    assert _key(key) == toml
    assert list(tomllib.loads(f"{toml} = 1")) == [key]


def test_toml_inline_values() -> None:
    """A value written as JSON where TOML differs (booleans, empty tables, NaN) would make the draft unreadable."""
    assert _toml(True) == "true" and _toml(False) == "false"
    assert _toml({}) == "{}"
    assert _toml({"a b": {"c": [1, "x"]}, "k": ("t",)}) == '{ "a b" = { c = [1, "x"] }, k = ["t"] }'
    assert _toml(7) == "7" and _toml(2.5) == "2.5"
    assert _toml(float("inf")) == '"inf"' and _toml(float("-inf")) == '"-inf"'
    assert _toml(math.nan) == '"nan"'
    assert tomllib.loads(f"v = {_toml([float('inf'), {}, {'TODO': 'TODO'}])}")["v"] == ["inf", {}, {"TODO": "TODO"}]


@pytest.mark.parametrize(("schema", "args"), [
    ({"properties": {"xs": {"type": "array"}, "o": {"type": "object"}, "n": {"type": "number"}},
      "required": ["xs", "o", "n"]}, {"xs": ["TODO"], "o": {"TODO": "TODO"}, "n": "TODO"}),
    ({"properties": {"x": {"type": "string"}}}, {}),  # nothing required
    ({"properties": ["x"], "required": ["x"]}, {"x": "TODO"}),  # properties not an object
    ({"properties": {"x": None}, "required": ["x"]}, {"x": "TODO"}),
    ({"required": "x"}, {}),  # required not a list
    ({}, {}),
])
def test_example_places_a_todo_of_each_required_type(schema: dict[str, Any], args: dict[str, Any]) -> None:
    """A template missing a required argument, or crashing on an odd schema, would leave init-world without a draft."""
    assert example(schema) == args


@pytest.mark.parametrize(("tool", "measured", "expected"), [
    ({"name": "get_x", "inputSchema": {"required": ["a"]}}, True,
     ToolDraft("get_x", "write", "measured: its call with no arguments changed the state", {}, {"a": "TODO"})),
    ({"name": "delete_x", "annotations": {"readOnlyHint": False}}, False,
     ToolDraft("delete_x", "read", "measured: its call with no arguments did not change the state",
               {"readOnlyHint": False}, None)),
    ({"name": "get_x", "inputSchema": {"required": ["a"]}, "annotations": {"readOnlyHint": False}}, None,
     ToolDraft("get_x", "write", "declared: readOnlyHint=false", {"readOnlyHint": False}, {"a": "TODO"})),
    ({"name": "erase", "inputSchema": {"required": ["a"]}, "annotations": {"readOnlyHint": True}}, None,
     ToolDraft("erase", "read", "declared: readOnlyHint=true", {"readOnlyHint": True}, None)),
    ({"name": "erase", "annotations": {"readOnlyHint": 1}}, None,
     ToolDraft("erase", "read", "declared: readOnlyHint=true", {"readOnlyHint": 1}, None)),
    ({"name": "searchNotes", "inputSchema": {"required": ["q"]}}, None,
     ToolDraft("searchNotes", "read", "guessed from its name (no annotation): give it an example to measure it",
               {}, None)),
    ({"name": "erase", "inputSchema": "not a schema", "annotations": "not a dict"}, None,
     ToolDraft("erase", "write", "assumed a write (no annotation): its example is measured by the scorecard", {},
               {})),
    ({"name": "erase"}, None,
     ToolDraft("erase", "write", "assumed a write (no annotation): its example is measured by the scorecard", {},
               {})),
])
def test_draft_tool_effect_and_how_it_was_decided(tool: dict[str, Any], measured: bool | None,
                                                  expected: ToolDraft) -> None:
    """A measurement overridden by a name, or a declaration by a guess, would draft a write as a read or back."""
    assert draft_tool(tool, measured) == expected


@pytest.mark.parametrize(("command", "package", "probe"), [
    (["uvx", "mcp-server-sqlite", "--db-path", "{root}/data.db"], None,
     ProbeDraft("sqlite", "data.db", "the command names a database file, {root}/data.db")),
    (["srv", "--db={root}/sub/x.SQLite3"], None,
     ProbeDraft("sqlite", "sub/x.SQLite3", "the command names a database file, {root}/sub/x.SQLite3")),
    (["srv", "--DB={root}/x=y.db3"], None,  # an option of any case; '=' inside the value kept
     ProbeDraft("sqlite", "x=y.db3", "the command names a database file, {root}/x=y.db3")),
    (["srv", "{root}//Xdata.db/"], None,  # slashes around the path dropped, nothing else
     ProbeDraft("sqlite", "Xdata.db", "the command names a database file, {root}//Xdata.db/")),
    (["npx", "kg", "MEMORY_FILE_PATH={root}/memory.jsonl"], None,
     ProbeDraft("jsonl", "memory.jsonl", "the command names a JSON-lines file, {root}/memory.jsonl")),
    (["todo-txt-mcp", "{root}/todo.txt"], "todo-txt-mcp",
     ProbeDraft("folder", "todo.txt", "the command names one file, {root}/todo.txt")),
    (["srv", "{root}/", "{root}/{world}/x.db", "{root}/../up.db", "{root}/notes.txt"], None,
     ProbeDraft("folder", "notes.txt", "the command names one file, {root}/notes.txt")),  # the first usable one
    (["uvx", "mcp-server-git", "--repository", "{root}"], "mcp-server-git",
     ProbeDraft("git", ".", "mcp-server-git serves a git repository")),
    (["srv"], "Git-MCP", ProbeDraft("git", ".", "Git-MCP serves a git repository")),
])
def test_pick_probe_for_each_resource(command: list[str], package: str | None, probe: ProbeDraft) -> None:
    """A wrong probe reads the wrong state: every effect the scorecard measures would be wrong."""
    assert pick_probe(command, package) == probe


@pytest.mark.parametrize(("command", "package"), [
    (["srv", "/abs/data.db"], None),  # not in the episode's folder
    (["srv", "data.db"], None),
    (["srv", "{root}/{world}/x.db"], None),  # another placeholder: not a file in the folder
    (["srv", "{root}/../x.jsonl"], None),  # outside the folder
    (["srv", "{root}/", "{root}"], None),
    (["srv", "{root}/data"], None),  # a folder, not one file
    (["srv", "--db", "/tmp/{root}/x.db"], None),
    (["srv", "-x={root}"], None),
    (["gitlab-mcp"], "gitlab-mcp"),  # 'git' only as a whole part of the package's name
    (["srv"], "digit-server"),
    (["srv"], None),
])
def test_pick_probe_otherwise_reads_the_whole_folder(command: list[str], package: str | None) -> None:
    """A probe aimed at a file outside the folder, or at git for a non-git server, would read nothing real."""
    assert pick_probe(command, package) == ProbeDraft("folder", ".", "the server works in its folder")
