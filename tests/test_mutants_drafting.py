"""What `aft-bench init-world` and the atlas share before any example exists (issue 49, `scorecard/drafting.py`,
`scorecard/effects.py`, `scorecard/schemas.py`), called in-process so mutmut links their mutants to these tests:
a small standard-library MCP server written under tmp_path (it tells in its serverInfo the folder it was started
in, its arguments, its environment and what lies beside it) is listed once in an empty scratch folder or in the
folder a caller prepared, with `{root}`, `{world}` and `{version}` expanded, within its timeout, its last words
kept when it fails; each tool that needs no arguments is measured on a fresh server and folder (an empty store
made at first use is no write; a refused, crashing, argument-needing or undescribed tool is left unmeasured; at
most 40 measured, none of a list over 500); a draft is the whole `Drafted` and `world.toml`, the package read from
the install picks the probe, and a draft that fails leaves nothing it made (and every folder it did not make). An
example call's arguments against the server's schema: the exact refusal text, a placeholder standing for a value
of its property's type, regular expressions left out, and a schema that cannot be checked said so. The shipped
memory world is listed and measured as the atlas does. Written for `make mutants`."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from aft_bench.common.errors import InputError, OutputError
from aft_bench.common.scratch import scratch_dir
from aft_bench.scorecard.drafting import WORLD_FILE, Drafted, NothingToDraft, draft_folder, list_tools
from aft_bench.scorecard.effects import measure_effects, wrote
from aft_bench.scorecard.schemas import refusal, unplaced, without_patterns
from aft_bench.world.draft import ProbeDraft, draft
from aft_bench.world.external import load_external
from aft_bench.world.mcp_stdio import ServerFailed
from aft_bench.world.resource import Resource

ROOT = Path(__file__).resolve().parents[1]

# The server: what it was started with in its serverInfo; each tool works on files in its folder.
SERVER = r'''
import json, os, shutil, sys, time

REPORT = os.environ.get("DRAFT_REPORT")  # a file outside its folder: a line for each start and each call


def report(*words):
    if REPORT:
        with open(REPORT, "a") as fh:
            fh.write(" ".join(words) + "\n")


def tool(name, *required):
    return {"name": name, "inputSchema": {"type": "object", "properties": {p: {"type": "string"} for p in required},
            "required": list(required)}}


TOOLS = [
    tool("refuse"),  # answers isError
    tool("crash"),  # its server exits before it answers
    tool("needs", "name"),  # needs a name; called without one it writes default.txt all the same
    tool("stranger"),  # writes stranger.txt; the world's overlay does not describe it
    tool("look"),  # changes nothing
    tool("touch"),  # makes an empty todo.txt (a store made at first use)
    tool("note"),  # writes note.txt
    tool("pair"),  # makes an empty a.txt and a b.txt with text
    tool("erase"),  # removes seed.txt
    tool("edit"),  # changes seed.txt
    tool("vandal"),  # removes the folder its --world= argument names
]
if os.environ.get("DRAFT_TOOLS"):  # the tool list given whole
    TOOLS = json.loads(os.environ["DRAFT_TOOLS"])
if os.environ.get("DRAFT_NAMES"):  # as many tools as named, none needing arguments, none changing anything
    TOOLS = [tool(n) for n in json.loads(os.environ["DRAFT_NAMES"])]


def write(name, text):
    with open(name, "w") as fh:
        fh.write(text)


def call(name, a):
    if name == "refuse":
        return "refused", True
    if name == "crash":
        os._exit(5)
    if name == "needs":
        write(a.get("name", "default.txt"), "x")
    elif name == "stranger":
        write("stranger.txt", "s")
    elif name == "touch":
        open("todo.txt", "a").close()
    elif name == "note":
        write("note.txt", "hi")
    elif name == "pair":
        write("a.txt", "")
        write("b.txt", "b")
    elif name == "erase":
        os.remove("seed.txt")
    elif name == "edit":
        write("seed.txt", "edited")
    elif name == "vandal":
        shutil.rmtree([w for w in sys.argv if w.startswith("--world=")][0].removeprefix("--world="))
    return "done", False


if os.environ.get("DRAFT_EXIT"):
    sys.stderr.write("starting\nusage: drafter needs its folder\n")
    sys.stderr.flush()
    sys.exit(3)

report("start", os.getcwd())
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    m = msg.get("method")
    if m == "initialize":
        result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {
            "name": "drafter", "version": "2.0", "cwd": os.getcwd(), "argv": sys.argv[1:],
            "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("DRAFT_SAY_")},
            "beside": sorted(os.listdir("..")), "here": sorted(os.listdir("."))}}
    elif m == "tools/list":
        time.sleep(float(os.environ.get("DRAFT_LIST_SLEEP") or 0))  # initializes, then hangs
        result = {"tools": TOOLS}
    else:
        name = msg["params"]["name"]
        report("call", name)
        text, err = call(name, msg["params"].get("arguments") or {})
        result = {"content": [{"type": "text", "text": text}], "isError": err}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
'''


def _tool(name: str, *required: str) -> dict[str, Any]:
    """A tool as the server lists it."""
    return {"name": name, "inputSchema": {"type": "object", "properties": {p: {"type": "string"} for p in required},
            "required": list(required)}}


LISTED = [_tool("refuse"), _tool("crash"), _tool("needs", "name"), _tool("stranger"), _tool("look"), _tool("touch"),
          _tool("note"), _tool("pair"), _tool("erase"), _tool("edit"), _tool("vandal")]


def _server(tmp_path: Path) -> Path:
    script = tmp_path / "srv.py"
    script.write_text(SERVER)
    return script


def _command(script: Path, *args: str) -> list[str]:
    return [sys.executable, "-S", "-I", str(script), *args]  # -S -I: it starts faster


def _world(tmp_path: Path, tools: list[str], env: dict[str, str] | None = None) -> Any:
    """A world over the server, its folder holding seed.txt, its overlay describing `tools` (each may write)."""
    folder = tmp_path / "world"
    folder.mkdir()
    env = {"DRAFT_REPORT": str(tmp_path / "report.txt"), **(env or {})}
    overlay = "".join(f'[tools.{t}]\neffect = "write"\n' for t in tools)
    (folder / WORLD_FILE).write_text(
        f'kind = "mcp_stdio"\nid = "drafter"\n[server]\npackage = "drafter"\nversion = "2.0"\n'
        f'command = {json.dumps(_command(_server(tmp_path)))}\nenv = {_inline(env)}\n'
        f'[fixture]\nfiles = {{ "seed.txt" = "seed" }}\n[probe]\nbuiltin = "folder"\n{overlay}')
    return load_external(folder)


def _inline(env: dict[str, str]) -> str:
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }"


def _report(tmp_path: Path) -> list[str]:
    path = tmp_path / "report.txt"
    return path.read_text().splitlines() if path.exists() else []


def _calls(tmp_path: Path) -> list[str]:
    return [line.removeprefix("call ") for line in _report(tmp_path) if line.startswith("call ")]


def _started_in(tmp_path: Path) -> list[Path]:
    return [Path(line.removeprefix("start ")) for line in _report(tmp_path) if line.startswith("start ")]


@pytest.fixture(autouse=True)
def _only_our_folders(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A safety net, not a stand-in: shutil.rmtree removes only what lies inside this test's tmp_path or the
    scratch folders (a mutant of the draft's clean-up that picked `/` would otherwise empty the machine)."""
    real = shutil.rmtree
    allowed = [tmp_path.resolve(), (Path(os.path.realpath(scratch_dir()))).parent]

    def rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
        p = Path(os.path.realpath(path))
        if not any(p != a and p.is_relative_to(a) for a in allowed):
            raise AssertionError(f"refused to remove {p}")
        real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)


# -- list_tools: one start, with what a caller gives ---------------------------------------------------------------
def test_the_server_is_listed_once_in_an_empty_scratch_folder_with_root_world_and_version_expanded(
        tmp_path: Path) -> None:
    """`{root}` is the empty folder made for the listing (in a scratch folder beside the server's log, removed
    after), `{world}` the folder named, `{version}` empty, in the command and the environment alike."""
    script = _server(tmp_path)
    folder = tmp_path / "drafted"
    env = {"DRAFT_SAY_HOME": "{root}/home", "DRAFT_SAY_WORLD": "{world}", "DRAFT_SAY_V": "v{version}."}
    listed, info = list_tools(_command(script, "{root}/db.sqlite", "--world={world}", "--v={version}"), folder, 30.0,
                              env)
    assert listed == LISTED
    cwd = Path(info["cwd"])
    assert (cwd.name, cwd.parent.name[:9], cwd.parent.parent) == ("root", "aft-init-", scratch_dir())
    assert info == {"name": "drafter", "version": "2.0", "cwd": str(cwd),
                    "argv": [f"{cwd}/db.sqlite", f"--world={folder}", "--v="],
                    "env": {"DRAFT_SAY_HOME": f"{cwd}/home", "DRAFT_SAY_V": "v.", "DRAFT_SAY_WORLD": str(folder)},
                    "beside": ["root", "server.log"], "here": []}
    assert not cwd.parent.exists()  # the scratch folder is gone with the server's log
    assert not folder.exists()  # the folder `{world}` names is only named


def test_without_an_environment_the_server_gets_none_of_its_own(tmp_path: Path) -> None:
    listed, info = list_tools(_command(_server(tmp_path)), tmp_path, 30.0)
    assert (listed, info["env"], info["argv"], info["here"]) == (LISTED, {}, [], [])


def test_a_folder_the_caller_prepared_is_the_servers_root(tmp_path: Path) -> None:
    """The atlas lists in the folder its fixture prepared: the server starts there, `{root}` names it, and no
    other folder is made in it."""
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    (prepared / "fixture.txt").write_text("ready")
    script = _server(tmp_path)
    listed, info = list_tools(_command(script, "{root}"), tmp_path / "w", 30.0, {"DRAFT_SAY_ROOT": "{root}"},
                              root=prepared)
    assert listed == LISTED
    assert info == {"name": "drafter", "version": "2.0", "cwd": str(prepared), "argv": [str(prepared)],
                    "env": {"DRAFT_SAY_ROOT": str(prepared)}, "beside": ["prepared", "srv.py"],
                    "here": ["fixture.txt"]}
    assert sorted(os.listdir(prepared)) == ["fixture.txt"] and (prepared / "fixture.txt").read_text() == "ready"


def test_a_server_that_fails_to_start_says_its_last_words(tmp_path: Path) -> None:
    with pytest.raises(ServerFailed) as err:
        list_tools(_command(_server(tmp_path)), tmp_path, 30.0, {"DRAFT_EXIT": "1"})
    assert str(err.value) == ("the server exited (status 3) before it answered initialize; its last words: usage: "
                              "drafter needs its folder")


def test_a_server_that_does_not_list_within_the_timeout_fails(tmp_path: Path) -> None:
    """The caller's timeout, not a default: the server initializes (or is slow to), then never lists."""
    with pytest.raises(ServerFailed) as err:
        list_tools(_command(_server(tmp_path)), tmp_path, 1.5, {"DRAFT_LIST_SLEEP": "120"})
    assert re.fullmatch(r"no answer to (initialize|tools/list) within 1\.5 s", str(err.value)), str(err.value)


def test_the_tools_are_the_servers_own_listing(tmp_path: Path) -> None:
    """Whatever else a tool holds is kept, in the server's order; a server listing none lists nothing."""
    tools = [{"name": "b", "description": "second", "annotations": {"readOnlyHint": True}}, _tool("a", "x")]
    listed, _ = list_tools(_command(_server(tmp_path)), tmp_path, 30.0, {"DRAFT_TOOLS": json.dumps(tools)})
    assert listed == tools
    none, info = list_tools(_command(_server(tmp_path)), tmp_path, 30.0, {"DRAFT_TOOLS": "[]"})
    assert (none, info["name"]) == ([], "drafter")


# -- measure_effects: each tool that needs no arguments, on a fresh server and folder -------------------------------
def test_each_tool_without_arguments_is_measured_on_a_fresh_server(tmp_path: Path) -> None:
    """Refused (isError), crashing, needing an argument, or not in the world: unmeasured (and the tools after
    each still measured). An empty store made at first use is no write; a removal, a change, a file with text are.
    Each call has a server and folder of its own, removed after."""
    world = _world(tmp_path, [t["name"] for t in LISTED[:-1] if t["name"] != "stranger"])
    measured = measure_effects(world, LISTED[:-1])
    assert measured == {"look": False, "touch": False, "note": True, "pair": True, "erase": True, "edit": True}
    assert list(measured) == ["look", "touch", "note", "pair", "erase", "edit"]
    assert _calls(tmp_path) == ["refuse", "crash", "look", "touch", "note", "pair", "erase", "edit"]
    started = _started_in(tmp_path)
    assert len(started) == 8 and len(set(started)) == 8  # a fresh folder for each
    assert [p for p in started if p.exists()] == []  # each server stopped and its folder removed


def test_a_tool_listed_without_a_schema_object_needs_no_arguments(tmp_path: Path) -> None:
    world = _world(tmp_path, ["look", "note", "needs"])
    listed = [{"name": "look"}, {"name": "note", "inputSchema": "not a schema"},
              {"name": "needs", "inputSchema": {"type": "object", "required": []}}]
    assert measure_effects(world, listed) == {"look": False, "note": True, "needs": True}
    assert _calls(tmp_path) == ["look", "note", "needs"]


def test_at_most_40_tools_are_measured(tmp_path: Path) -> None:
    names = [f"t{i:02d}" for i in range(41)]
    world = _world(tmp_path, names, {"DRAFT_NAMES": json.dumps(names)})
    measured = measure_effects(world, [_tool(n) for n in names])
    assert measured == {n: False for n in names[:40]}
    assert _calls(tmp_path) == names[:40]


def test_a_list_of_500_is_measured_and_one_of_501_is_not(tmp_path: Path) -> None:
    world = _world(tmp_path, ["look"])
    listed = [_tool("look")] + [_tool(f"x{i}") for i in range(499)]  # the rest: no tool of the world
    assert measure_effects(world, listed) == {"look": False}
    assert _calls(tmp_path) == ["look"]
    assert measure_effects(world, [*listed, _tool("x499")]) == {}
    assert _calls(tmp_path) == ["look"]  # no server started for it
    assert len(_started_in(tmp_path)) == 1


def _files(**recs: dict[str, Any]) -> dict[str, Any]:
    return {"records": {"files": recs}}


EMPTY = {"sha256": "e3b0", "size": 0, "text": ""}
HI = {"sha256": "8f43", "size": 2, "text": "hi"}


@pytest.mark.parametrize(("s0", "s1", "changed"), [
    (_files(), _files(), False),
    (_files(a=HI), _files(a=HI), False),
    (_files(), _files(a=EMPTY), False),  # an empty store made at first use
    (_files(), _files(a=EMPTY, b=EMPTY), False),
    (_files(), _files(a=HI), True),
    (_files(), _files(a=EMPTY, b=HI), True),  # one empty, one with text: it wrote
    (_files(), _files(a={"sha256": "x", "size": 1}), True),
    (_files(), _files(a={"id": 1}), True),  # a record with no size (a table's row): written
    (_files(a=HI), _files(), True),  # removed
    (_files(a=EMPTY), _files(), True),
    (_files(a=HI), _files(a=EMPTY), True),  # changed
    (_files(a=EMPTY), _files(a=EMPTY, b=EMPTY), False),
    ({"records": {"a": {}, "b": {"k": HI}}}, {"records": {"a": {"n": EMPTY}, "b": {"k": EMPTY}}}, True),
    ({"records": {"a": {}, "b": {}}}, {"records": {"a": {"n": EMPTY}, "b": {"m": HI}}}, True),
    ({"records": {"a": {}, "b": {}}}, {"records": {"a": {"n": EMPTY}, "b": {"m": EMPTY}}}, False),
])
def test_wrote_is_any_change_beyond_an_empty_store(s0: dict[str, Any], s1: dict[str, Any], changed: bool) -> None:
    assert wrote(s0, s1) is changed


# -- draft_folder: the whole draft, and nothing left of a failed one ----------------------------------------------
def test_the_whole_draft_of_a_live_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The folder and the ones above it made; the tools listed, measured where they need no arguments, drafted
    into world.toml; a script in no install: package unknown, the whole folder probed."""
    tools = [_tool("note"), _tool("look"), _tool("needs", "name")]
    monkeypatch.setenv("DRAFT_TOOLS", json.dumps(tools))
    target = tmp_path / "out" / "deep" / "w"
    command = _command(_server(tmp_path), "--world={world}")
    d = draft_folder("drafted", command, target, 30.0)
    probe = ProbeDraft("folder", ".", "the server works in its folder")
    measured = {"note": True, "look": False}
    assert d == Drafted(target / WORLD_FILE, tools, d.info, None, probe, measured)
    assert list(d.measured) == ["note", "look"]
    assert {k: v for k, v in d.info.items() if k != "cwd"} == {
        "name": "drafter", "version": "2.0", "argv": [f"--world={target}"], "env": {}, "beside": ["root", "server.log"],
        "here": []}
    assert (target / WORLD_FILE).read_text() == draft("drafted", command, tools, d.info, None, probe, measured)
    data = tomllib.loads((target / WORLD_FILE).read_text())
    assert {n: t["effect"] for n, t in data["tools"].items()} == {"look": "read", "needs": "write", "note": "write"}
    assert sorted(os.listdir(target)) == [WORLD_FILE]


def test_a_draft_into_a_folder_that_exists_keeps_what_is_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    monkeypatch.setenv("DRAFT_TOOLS", json.dumps([_tool("look")]))
    target = tmp_path / "w"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    d = draft_folder("drafted", _command(_server(tmp_path)), target, 30.0)
    assert (d.path, d.measured, d.installed) == (target / WORLD_FILE, {"look": False}, None)
    assert sorted(os.listdir(target)) == ["keep.txt", WORLD_FILE]


def test_a_server_listing_no_tools_drafts_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRAFT_TOOLS", "[]")
    with pytest.raises(NothingToDraft) as err:
        draft_folder("drafted", _command(_server(tmp_path)), tmp_path / "out" / "w", 30.0)
    assert str(err.value) == "the server lists no tools: there is nothing to draft"
    assert sorted(os.listdir(tmp_path)) == ["srv.py"]


def test_a_failed_draft_removes_every_folder_it_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A world that will not load (its id is no id) fails after the folders were made: all of them go, the
    folder they were made in stays."""
    monkeypatch.setenv("DRAFT_TOOLS", json.dumps([_tool("look")]))
    with pytest.raises(InputError) as err:
        draft_folder("no id", _command(_server(tmp_path)), tmp_path / "out" / "deep" / "w", 30.0)
    assert err.value.field == "id"
    assert sorted(os.listdir(tmp_path)) == ["srv.py"]


def test_a_failed_draft_into_a_folder_that_exists_removes_only_world_toml(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRAFT_TOOLS", json.dumps([_tool("look")]))
    target = tmp_path / "w"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(InputError):
        draft_folder("no id", _command(_server(tmp_path)), target, 30.0)
    assert sorted(os.listdir(target)) == ["keep.txt"]


def test_a_draft_that_cannot_be_written_says_so_and_keeps_the_folder(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """world.toml never written (its temp file's name is taken by a folder): the write's own error, the folder's
    contents as they were."""
    monkeypatch.setenv("DRAFT_TOOLS", json.dumps([_tool("look")]))
    target = tmp_path / "w"
    (target / "world.toml.tmp").mkdir(parents=True)
    with pytest.raises(OutputError) as err:
        draft_folder("drafted", _command(_server(tmp_path)), target, 30.0)
    assert str(err.value) == (f"cannot write {target / WORLD_FILE}: Is a directory; results recorded earlier are "
                              "intact")
    assert sorted(os.listdir(target)) == ["world.toml.tmp"]


def test_a_draft_whose_folder_a_server_removed_says_the_writes_error(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool measured with no arguments removed the world's folder: the draft fails with the write's error (the
    clean-up of a folder already gone is no second error) and nothing is left."""
    monkeypatch.setenv("DRAFT_TOOLS", json.dumps([_tool("vandal")]))
    target = tmp_path / "w"
    with pytest.raises(OutputError) as err:
        draft_folder("drafted", _command(_server(tmp_path), "--world={world}"), target, 30.0)
    assert str(err.value) == (f"cannot write {target / WORLD_FILE}: No such file or directory; results recorded "
                              "earlier are intact")
    assert sorted(os.listdir(tmp_path)) == ["srv.py"]


def test_the_package_read_from_the_install_picks_the_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server kept in the world's folder as a node package: `{world}` is the folder, `{version}` empty, and the
    package.json above the script names the package and version; a git server's package picks the git probe. No
    tool needs no arguments, so none is measured."""
    tools = [_tool("git_add", "path")]
    monkeypatch.setenv("DRAFT_TOOLS", json.dumps(tools))
    target = tmp_path / "w"
    pkg = target / "node_modules" / "mcp-git-drafted"
    pkg.mkdir(parents=True)
    (pkg / "package.json").write_text(json.dumps({"name": "mcp-git-drafted", "version": "4.5.6"}))
    (pkg / "server.py").write_text(SERVER)
    command = [sys.executable, "-S", "-I", "{world}/node_modules/mcp-git-drafted/server{version}.py", "{root}/repo"]
    d = draft_folder("gitty", command, target, 30.0)
    probe = ProbeDraft("git", ".", "mcp-git-drafted serves a git repository")
    assert d == Drafted(target / WORLD_FILE, tools, d.info, ("mcp-git-drafted", "4.5.6"), probe, {})
    assert d.info["argv"] == [f"{d.info['cwd']}/repo"]  # started: the script's path expanded too
    assert (target / WORLD_FILE).read_text() == draft("gitty", command, tools, d.info, ("mcp-git-drafted", "4.5.6"),
                                                      probe, {})


def test_root_names_no_folder_when_the_install_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`{root}` does not exist yet when the package is read, so a `{root}/...` argument is no program: it never
    names a folder relative to where init-world runs (one called `None`, what an unset root would give, inside a
    node project), and the package stays unknown."""
    monkeypatch.setenv("DRAFT_TOOLS", json.dumps([_tool("put", "text")]))
    here = tmp_path / "project"
    (here / "None" / "data").mkdir(parents=True)
    (here / "package.json").write_text(json.dumps({"name": "someone-elses", "version": "0.1.0"}))
    (here / "None" / "package.json").write_text(json.dumps({"name": "planted", "version": "6.6.6"}))
    monkeypatch.chdir(here)
    d = draft_folder("rooted", _command(_server(tmp_path), "{root}/data"), tmp_path / "w", 30.0)
    assert (d.installed, d.probe, d.measured) == (None, ProbeDraft("folder", ".", "the server works in its folder"),
                                                  {})
    assert d.info["argv"] == [f"{d.info['cwd']}/data"]


# -- the shipped memory world, as the atlas lists and measures it -------------------------------------------------
def test_the_memory_world_listed_in_its_prepared_folder_and_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AFT_BENCH_SERVERS", os.environ.get("AFT_BENCH_SERVERS") or str(ROOT / ".worlds"))
    world = load_external(ROOT / "worlds" / "memory")
    res = Resource(world).make()
    try:
        listed, info = list_tools(list(world.server.command), world.folder, 60.0, {**res.env(), **world.server.env},
                                  root=res.root)
    finally:
        res.remove()
    assert sorted(t["name"] for t in listed) == sorted(world.tools)
    assert info["name"] == "memory-server"
    assert measure_effects(world, listed) == {"read_graph": False}


# -- schemas: an example call's arguments against the server's input schema ----------------------------------------
NOTE = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["name"]}


@pytest.mark.parametrize(("args", "schema", "said"), [
    ({"name": "a.txt"}, NOTE, None),
    ({"name": "a.txt", "n": 2}, NOTE, None),
    ({}, NOTE, "refuses it: 'name' is a required property"),
    ({"name": 5}, NOTE, "refuses it: 5 is not of type 'string'"),
    ({"name": "a", "n": "2"}, NOTE, "refuses it: '2' is not of type 'integer'"),
    ({"name": "{before.0.path}", "n": "{before.1.count}"}, NOTE, None),  # a placeholder: a value of its type
    ({"name": "a", "n": "{before.x}"}, NOTE, "refuses it: '{before.x}' is not of type 'integer'"),  # none
    ({"name": "a", "n": "{before.0.n}x"}, NOTE, "refuses it: '{before.0.n}x' is not of type 'integer'"),
    ({"name": "a", "n": "{before.0.id}"}, {**NOTE, "properties": {"name": {"type": "string"}, "n": {"enum": [1]}}},
     "refuses it: '{before.0.id}' is not one of [1]"),  # untyped: the placeholder itself is checked
    ([1], NOTE, "refuses it: [1] is not of type 'object'"),
    ("text", {"type": "string"}, None),
    ({"name": "a b"}, {**NOTE, "properties": {"name": {"type": "string", "pattern": "^\\S+$"}}}, None),
    ({"name": "a", "xa": "1"}, {**NOTE, "patternProperties": {"^x": {"type": "integer"}}}, None),
    ({"name": "a", "xa": 1}, {**NOTE, "patternProperties": {"^x": {"type": "integer"}},
                              "additionalProperties": False},
     "refuses it: Additional properties are not allowed ('xa' was unexpected)"),
    ({}, [], "cannot be checked against (its input schema is a list, not an object)"),
    ({}, "object", "cannot be checked against (its input schema is a str, not an object)"),
    ({}, None, "cannot be checked against (its input schema is a NoneType, not an object)"),
    ({}, {"type": 5}, "cannot be checked against (SchemaError)"),
    ({}, {"$ref": "#"}, "cannot be checked against (RecursionError)"),
    ({}, {"$ref": "#/definitions/nowhere"}, "cannot be checked against (_WrappedReferencingError)"),
    ({}, {}, None),
])
def test_refusal_says_why_or_none(args: Any, schema: Any, said: str | None) -> None:
    assert refusal(args, schema) == said


ALL_TYPES = {"properties": {"s": {"type": "string"}, "i": {"type": "integer"}, "f": {"type": "number"},
                            "b": {"type": "boolean"}, "a": {"type": "array"}, "o": {"type": "object"},
                            "z": {"type": "null"}, "u": {}, "nn": None, "plain": {"type": "integer"}}}


@pytest.mark.parametrize(("args", "schema", "out"), [
    ({"s": "{before.0.a}", "i": "{before.0.b}", "f": "{before.1.c.d}", "b": "{before.0.e}", "a": "{before.0.f}",
      "o": "{before.0.g}", "z": "{before.0.h}", "u": "{before.0.i}", "nn": "{before.0.j}", "gone": "{before.0.k}",
      "plain": "hello", "k": 5},
     ALL_TYPES,
     {"s": "TODO", "i": 1, "f": 1, "b": False, "a": [], "o": {}, "z": "{before.0.h}", "u": "{before.0.i}",
      "nn": "{before.0.j}", "gone": "{before.0.k}", "plain": "hello", "k": 5}),
    ({"i": "{before.0.b}", "x": 2}, None, {"i": "{before.0.b}", "x": 2}),
    ({"i": "{before.0.b}"}, "object", {"i": "{before.0.b}"}),
    ({"i": "{before.0.b}"}, {}, {"i": "{before.0.b}"}),
    ({"i": "{before.0.b}"}, {"properties": None}, {"i": "{before.0.b}"}),
    ([{"i": "{before.0.b}"}], ALL_TYPES, [{"i": "{before.0.b}"}]),
    ("{before.0.b}", ALL_TYPES, "{before.0.b}"),
])
def test_unplaced_stands_a_value_of_its_type_for_each_placeholder(args: Any, schema: Any, out: Any) -> None:
    assert unplaced(args, schema) == out


def test_without_patterns_leaves_out_every_regular_expression() -> None:
    schema = {"type": "object", "pattern": "^a", "patternProperties": {"^x": {}}, "properties": {
        "name": {"type": "string", "pattern": "(a+)+$", "minLength": 1},
        "tags": {"type": "array", "items": [{"pattern": "^t"}, {"type": "string"}, 3]},
        "pattern": {"type": "string"}},  # a property named "pattern" is one too: its key goes
        "anyOf": [{"pattern": "^b"}, "x"], "required": ["name"]}
    assert without_patterns(schema) == {"type": "object", "properties": {
        "name": {"type": "string", "minLength": 1}, "tags": {"type": "array", "items": [{}, {"type": "string"}, 3]}},
        "anyOf": [{}, "x"], "required": ["name"]}
    assert (without_patterns("^a"), without_patterns(None), without_patterns([])) == ("^a", None, [])
