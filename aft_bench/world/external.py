"""External worlds: a real MCP server over stdio, its resource, and how its real state is read, as data.

`worlds/<name>/world.toml` with `kind = "mcp_stdio"` names the pinned server and its command, the fixture that
prepares a fresh resource (a folder) per episode, the probe that reads that resource's state without the server,
the foreign write that stands for another writer (stale state), and a person's effect overlay per tool. The
overlay is checked against the server's live `tools/list` (`check_tools`). Knows nothing of faults, interfaces
or agents.
"""

from __future__ import annotations

import functools
import json
import os
import re
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from aft_bench.common.canonical import digest
from aft_bench.common.datafile import read_toml, validate
from aft_bench.common.errors import FieldProblem, InputError
from aft_bench.common.paths import ROOT
from aft_bench.world import install

EXTERNAL_KINDS = ("mcp_stdio", "mcp_http")  # a real MCP server over stdio, or over streamable HTTP on 127.0.0.1
WORKSPACE = "/workspace"  # the resource folder as agents see it: the gateway maps it to the episode's real folder
SERVERS_ENV = "AFT_BENCH_SERVERS"  # where `make worlds` installed the pinned servers (default: .worlds/)
FORK_ENV = "AFT_BENCH_FORK"  # "0": start every server from nothing, even where its world declares [server.fork]


def servers_dir() -> Path:
    """Where the pinned servers are installed, as an absolute path (a relative `AFT_BENCH_SERVERS` is read from
    the folder the command was started in, once, not from each episode's folder)."""
    return Path(os.path.abspath(os.environ.get(SERVERS_ENV) or ROOT / ".worlds"))


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Fork(_Strict):
    """A Python server started by the forked launcher (world/launcher.py): its interpreter (`{servers}`,
    `{version}` expanded), the `module:function` its command runs, and the modules to import once before forking."""

    python: str
    entry: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    preload: tuple[str, ...] = ()


class Server(_Strict):
    """The pinned server: its package and version (recorded with every result), and how to start it. In
    `command`, `env` and `cwd`, `{root}` is the episode's resource folder and `{servers}` the installed servers."""

    package: str
    version: str
    command: tuple[str, ...] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    start_timeout_s: float = Field(default=60.0, gt=0, le=600)
    call_timeout_s: float = Field(default=30.0, gt=0, le=600)
    # a server with no stdio: its streamable-HTTP endpoint on 127.0.0.1, `{port}` a free port chosen per start
    # (also given to `command`); the lost response is then the gateway not delivering what the POST returned
    url: str | None = Field(default=None, pattern=r"^http://127\.0\.0\.1:")
    # a stdio Python server forked per episode from one pre-imported process instead of started from nothing
    # (the command's arguments become its sys.argv); the process is still new, its resource its own
    fork: Fork | None = None

    @model_validator(mode="after")
    def _fork_stdio(self) -> Server:
        if self.fork is not None and self.url is not None:
            raise FieldProblem("fork", self.fork.entry, "the forked launcher starts stdio servers, not HTTP ones")
        if self.url is not None:
            _loopback(self.url)
        for i, arg in enumerate(self.command):
            if "\0" in arg:
                raise FieldProblem(f"command.{i}", arg, "a NUL character cannot be passed to a program")
        _env_ok(self.env, "env")
        return self

    def launch(self, root: Path, folder: Path | None = None) -> tuple[str, str, tuple[str, ...]] | None:
        """The forked launcher to start this server with (its interpreter, entry, preloads), or None."""
        if self.fork is None or os.environ.get(FORK_ENV) == "0":
            return None
        return expand(self.fork.python, root, self.version, folder), self.fork.entry, self.fork.preload

    def argv(self, root: Path, port: int | None = None, folder: Path | None = None) -> list[str]:
        return [_port(expand(a, root, self.version, folder), port) for a in self.command]

    def environment(self, root: Path, port: int | None = None, folder: Path | None = None) -> dict[str, str]:
        return {k: _port(expand(v, root, self.version, folder), port) for k, v in self.env.items()}


def _loopback(url: str) -> None:
    """A server URL that can only reach 127.0.0.1: no user part (`http://127.0.0.1:1@elsewhere/` reaches elsewhere),
    the host exactly 127.0.0.1, a port that is a number or `{port}`."""
    from urllib.parse import urlsplit

    parts = urlsplit(url.replace("{port}", "1"))
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or "@" in parts.netloc or parts.hostname != "127.0.0.1" or port is None:
        raise FieldProblem("url", url, "the server's endpoint is http://127.0.0.1:PORT/... ({port}: a free one)")


def _env_ok(env: dict[str, str], field: str) -> None:
    """Environment variables a process can be given: a name without '=' or NUL, a value without NUL."""
    for k, v in env.items():
        if not k or "=" in k or "\0" in k or "\0" in v:
            raise FieldProblem(f"{field}.{k}", v, "an environment variable's name has no '=' or NUL, its value no NUL")


class Fixture(_Strict):
    """A fresh resource: files written (relative paths, text), then commands run in the folder, in order."""

    files: dict[str, str] = Field(default_factory=dict)
    commands: tuple[tuple[str, ...], ...] = ()
    env: dict[str, str] = Field(default_factory=dict)  # for the commands, and the server's environment too

    @model_validator(mode="after")
    def _inside(self) -> Fixture:
        for rel in self.files:
            p = Path(rel)
            if p.is_absolute() or ".." in p.parts or not rel:
                raise FieldProblem("files", rel, "a fixture file is a relative path inside the resource")
        names = {Path(rel).as_posix() for rel in self.files}
        for rel in self.files:
            for parent in Path(rel).parents:
                if parent.as_posix() in names:
                    raise FieldProblem(f"files.{rel}", rel, f"{parent.as_posix()!r} is a file here, so it cannot "
                                       "also be a folder")
        for i, cmd in enumerate(self.commands):
            if not cmd:
                raise FieldProblem(f"commands.{i}", "[]", "a command names a program")
            if any("\0" in a for a in cmd):
                raise FieldProblem(f"commands.{i}", list(cmd), "a NUL character cannot be passed to a program")
        _env_ok(self.env, "env")
        return self


PROBES = ("git", "folder", "sqlite", "jsonl", "jsonl_graph")  # the built-in readers (world/resource.py)


class Probe(_Strict):
    """How the real state is read without the server: a built-in reader, or a command printing JSON.

    `folder` walks a folder, or reads one fixed file (`path = "todo.txt"`); `sqlite` reads every table's rows of a
    database file; `jsonl` every line of a JSON-lines file (keyed by the field `key`, else `id`/`name`, else its
    content); `jsonl_graph` a knowledge-graph JSONL file; `git` a repository. `path` is inside the resource."""

    builtin: Literal["git", "folder", "sqlite", "jsonl", "jsonl_graph"] | None = None
    command: tuple[str, ...] | None = None
    path: str = "."  # what the built-in reads, relative to the resource (never outside it)
    key: str | None = None  # `jsonl`: the field that names a line's record
    timeout_s: float = Field(default=30.0, gt=0, le=600)

    @model_validator(mode="after")
    def _one(self) -> Probe:
        if (self.builtin is None) == (self.command is None):
            raise FieldProblem("probe", "", "a probe is exactly one of builtin, command")
        p = Path(self.path)
        if p.is_absolute() or ".." in p.parts or "{" in self.path:
            raise FieldProblem("path", self.path, "a probe reads inside the resource: a relative path without '..'")
        if self.builtin in ("sqlite", "jsonl", "jsonl_graph") and self.path in (".", ""):
            raise FieldProblem("path", self.path, f"the {self.builtin} probe reads one file: name it")
        return self


class Identity(_Strict):
    """What one effect of a tool leaves in a snapshot, so that whether it holds can be read and a second one
    counted. Arguments are named by dotted paths (`entities.*.name`: every item's name; `edits.0.newText`).

    * record form: a record of `collection` keyed by the argument `key_arg` (several paths: their values joined
      with `|`, item by item), whose fields equal the arguments `match` names (field -> path); a second new
      record for the same key is a duplicate;
    * text form: the text of `text_of` appears in field `field` of the record named by `record_arg`; a second
      appearance is a duplicate;
    * edit form: `field` of the record named by `record_arg` is its s0 value with each `replace_old` text
      replaced by its `replace_new` text, k times over: k is how often the edit was realized."""

    collection: str
    key_arg: str | tuple[str, ...] | None = None
    match: dict[str, str] = Field(default_factory=dict)
    text_of: str | None = None
    field: str | None = None
    record_arg: str | None = None
    replace_old: str | None = None
    replace_new: str | None = None

    @model_validator(mode="after")
    def _form(self) -> Identity:
        text = self.text_of is not None
        edit = self.replace_old is not None or self.replace_new is not None
        record = self.key_arg is not None or bool(self.match)
        if sum((text, edit, record)) != 1:
            raise FieldProblem("identity", self.collection, "an identity is one form: key_arg/match, text_of, or "
                               "replace_old/replace_new")
        if (text or edit) and (self.field is None or self.record_arg is None):
            raise FieldProblem("identity", self.collection, "text_of and replace_* need field and record_arg")
        if edit and (self.replace_old is None or self.replace_new is None):
            raise FieldProblem("identity", self.collection, "replace_old and replace_new go together")
        return self


class ExampleCall(_Strict):
    """One call of an example: a tool and its arguments (paths as the agent sees them, under /workspace)."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


BEFORE_REF = re.compile(r"^\{before\.(\d+)\.")  # `{before.N.field}`: a field of the N-th set-up call's answer


def _refs(value: Any) -> list[tuple[str, int]]:
    """Every `{before.N...}` placeholder in `value` (whole strings, at any depth), with its N."""
    if isinstance(value, str):
        m = BEFORE_REF.match(value)
        return [(value, int(m.group(1)))] if m else []
    if isinstance(value, dict):
        return [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


class Example(_Strict):
    """An example call of a tool for the scorecard: calls made first to set it up, then the call itself."""

    before: tuple[ExampleCall, ...] = ()
    args: dict[str, Any] = Field(default_factory=dict)
    note: str = ""

    @model_validator(mode="after")
    def _refs_name_earlier_calls(self) -> Example:
        """A placeholder names a set-up call made before it: the call itself may name any, set-up call j those
        before j."""
        for where, args, made in [("args", self.args, len(self.before))] + [
                (f"before.{j}.args", c.args, j) for j, c in enumerate(self.before)]:
            for text, n in _refs(args):
                if n >= made:
                    raise FieldProblem(where, text, f"names set-up call {n}, but {made} set-up call(s) come before "
                                       "it (numbered from 0)")
        return self


class ToolOverlay(_Strict):
    """A person's account of one tool: does it write, is a repeat harmless, is its effect irreversible, and
    what identifies one of its effects in the snapshot. `verified = false` marks a draft nobody checked."""

    effect: Literal["read", "write"]
    idempotent: bool = False
    destructive: bool = False
    identity: Identity | None = None
    verified: bool = True
    note: str = ""
    examples: tuple[Example, ...] = ()  # what `aft-bench scorecard` re-issues after a lost answer

    @property
    def is_write(self) -> bool:
        return self.effect == "write"


# what a server's answer says when a call failed, where it does not set `isError` (matched case-insensitively as
# whole words): the phrases servers seen here used ("Database error: ...", "Todo with ID '1' not found")
FAILURE_PHRASES = ("error", "failed", "failure", "not found", "already exists", "does not exist", "no such",
                   "cannot", "can't", "could not", "couldn't", "unable to", "invalid", "denied", "refused")


class Answers(_Strict):
    """How a client reads this server's answers: the phrases that report a failure (besides `isError`). A
    scorecard reads a re-issue's answer with them; episodes never do (their labels come from the state)."""

    failure: tuple[str, ...] = FAILURE_PHRASES

    @model_validator(mode="after")
    def _words(self) -> Answers:
        for i, phrase in enumerate(self.failure):
            if not phrase.strip():
                raise FieldProblem(f"failure.{i}", phrase, "a failure phrase has at least one character")
        return self


class ExternalWorld(_Strict):
    """An external MCP server as a world (`kind = "mcp_stdio"`)."""

    kind: Literal["mcp_stdio", "mcp_http"]
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")  # it names scratch folders and files
    description: str = ""
    server: Server
    fixture: Fixture = Fixture()
    probe: Probe
    foreign: tuple[tuple[str, ...], ...] = ()  # another writer's change to the resource (stale state), commands
    tools: dict[str, ToolOverlay] = Field(min_length=1)
    answers: Answers = Answers()
    _source: str | None = PrivateAttr(default=None)  # the file it was read from (for error messages only)

    @property
    def source(self) -> str:
        """The world file, as errors name it."""
        return self._source or f"worlds/{self.id}/world.toml"

    @property
    def folder(self) -> Path | None:
        """The folder the world file lies in (what `{world}` names), absolute; None for a world made in code."""
        return Path(os.path.abspath(self._source)).parent if self._source else None

    @model_validator(mode="after")
    def _transport(self) -> ExternalWorld:
        if (self.kind == "mcp_http") != (self.server.url is not None):
            raise FieldProblem("server.url", self.server.url or "", "an mcp_http world names its server's url "
                               "(http://127.0.0.1:{port}/...), an mcp_stdio world none")
        return self

    @cached_property
    def hash(self) -> str:
        """The world's identity in rows and traces. How its server process is launched (`server.fork`) is left out:
        a forked server plays exactly what one started from nothing plays (tests/test_external_git.py). How its
        answers are read (`answers`) is left out too: an episode's labels never read a server's words."""
        return digest(self.model_dump(mode="json", exclude={"server": {"fork"}, "answers": True}))

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> ExternalWorld:
        """A copy whose hash is its own: pydantic copies the instance's dict, a cached hash of the original with it
        (a world at another version, or with another server, would otherwise carry the original's hash)."""
        copy = super().model_copy(update=update, deep=deep)
        copy.__dict__.pop("hash", None)
        return copy

    def with_version(self, version: str) -> ExternalWorld:
        """The same world on another installed version of its server (`world@version`)."""
        copy = self.model_copy(update={"server": self.server.model_copy(update={"version": version})})
        copy._source = self._source
        return copy

    @property
    def operations(self) -> dict[str, ToolOverlay]:
        """The tools as the world's operations (the name tasks and fault schedules use)."""
        return self.tools

    def writes(self) -> list[str]:
        return sorted(n for n, t in self.tools.items() if t.is_write)


def is_external(path: str | Path) -> bool:
    """A world folder (or its world.toml) that declares an external server."""
    p = Path(path)
    p = p / "world.toml" if p.is_dir() else p
    try:
        return read_toml(p).get("kind") in EXTERNAL_KINDS
    except InputError:
        return False


def load_external(path: str | Path) -> ExternalWorld:
    p = Path(path)
    p = p / "world.toml" if p.is_dir() else p
    world = validate(ExternalWorld, read_toml(p), p)
    check_examples(world, p)
    world._source = str(p)
    return world


def check_examples(world: ExternalWorld, path: str | Path) -> None:
    """Every tool an example calls is one the overlay names."""
    for name, tool in world.tools.items():
        for i, ex in enumerate(tool.examples):
            for j, call in enumerate(ex.before):
                if call.tool not in world.tools:
                    raise InputError(path, f"tools.{name}.examples.{i}.before.{j}.tool", call.tool,
                                     f"world '{world.id}' has no such tool")


def check_tools(world: ExternalWorld, listed: list[dict[str, Any]], path: str | Path) -> None:
    """The overlay against the server's live tools/list: a tool the overlay names that the server lacks is one
    error naming the world and the tool (with the names it does list)."""
    live = {str(t.get("name")) for t in listed}
    for name in world.tools:
        if name not in live:
            raise InputError(path, f"tools.{name}", name, f"world '{world.id}': the server lists no such tool "
                             f"(it lists: {', '.join(sorted(live)) or 'nothing'})")


def _port(text: str, port: int | None) -> str:
    return text.replace("{port}", str(port)) if port is not None else text


@functools.lru_cache(maxsize=64)
def _servers_layout(package: str, version: str, servers: Path) -> str | None:
    """The version of `package` that `make worlds` installed under `servers`, read from the install itself: an npm
    package's package.json in `node/node_modules`, or the dist-info in the venv `<package>-<version>`."""
    npm = servers / "node" / "node_modules" / package / "package.json"
    if npm.is_file():
        try:
            return str(json.loads(npm.read_text(encoding="utf-8")).get("version"))
        except (OSError, ValueError):
            return None
    dist = re.sub(r"[-_.]+", "_", package).lower()
    for info in sorted((servers / f"{package}-{version}").glob(f"lib/python*/site-packages/{dist}-*.dist-info")):
        return info.name.removeprefix(f"{dist}-").removesuffix(".dist-info")
    return None


@functools.lru_cache(maxsize=64)
def _from_command(package: str, argv: tuple[str, ...]) -> str | None:
    return install.version_of(package, argv)


def installed_version(world: ExternalWorld) -> str | None:
    """The version of the world's server installed where its command starts it, read from the install (the
    `{servers}` layout, else the venv or node package the command's program or forked interpreter lies in);
    None where it cannot be read."""
    srv = world.server
    # the `{servers}` layout only where the command starts the server from there (a command naming its own
    # install, an atlas's cache folder, is read there, never at the layout's copy of another version)
    named = " ".join([*srv.command, *(srv.fork.python for _ in [0] if srv.fork is not None)])
    found = _servers_layout(srv.package, srv.version, servers_dir()) if "{servers}" in named else None
    if found is not None:
        return found
    nowhere = Path("/nonexistent-aft-root")  # {root} names data, never the program
    if srv.fork is not None:
        found = _from_command(srv.package, (expand(srv.fork.python, nowhere, srv.version, world.folder),))
    return found or _from_command(srv.package, tuple(srv.argv(nowhere, folder=world.folder)))


def check_installed(world: ExternalWorld) -> None:
    """Refuse a server whose installed package is not the version its world pins, wherever it is installed: a
    stale install would otherwise run another release under this one's name (mcp-server-git's git_commit changed
    between two)."""
    srv = world.server
    found = installed_version(world)
    if found is not None and found != srv.version:
        raise InputError(world.source, "server.version", srv.version, f"world '{world.id}': the installed "
                         f"{srv.package} is {found}, not the pinned {srv.version}")


def expand(text: str, root: Path, version: str = "", folder: Path | None = None) -> str:
    """`{root}`, `{servers}`, `{version}` (the server's) and `{world}` (the world's own folder, where a probe script
    or a server kept beside world.toml lies) in a command, environment value or path."""
    text = text.replace("{root}", str(root)).replace("{servers}", str(servers_dir())).replace("{version}", version)
    return text.replace("{world}", str(folder)) if folder is not None else text
