"""The atlas file (`ATLAS.toml`): which servers, from which registry, which releases, how each starts, how its
state is read, and the example calls that measure its writing tools. Adding a server is one `[[servers]]` entry."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aft_bench.common.datafile import read_toml, validate
from aft_bench.common.errors import FieldProblem, InputError
from aft_bench.world.external import Answers, Example, Fixture, Probe, _env_ok, load_external

REGISTRIES = ("pypi", "npm")
INSTALL = "{install}"  # in an entry's command: the folder the release is installed in (a venv, an npm prefix)
# a release as it may name a folder and reach pip or npm: no path separator, no space, no leading option dash
RELEASE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]{0,63}")


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Claim(_Strict):
    """What a server's own documentation says of a tool, checked against the measurement."""

    idempotent: bool
    source: str = Field(min_length=1, max_length=500)  # where it says so: a URL, or its words quoted


class Entry(_Strict):
    """One server of the atlas: a package of a registry, the releases to measure (listed, or every release since
    one, resolved once into the lock), its command (`{install}`, `{root}`), and what a person must say that a
    live server cannot: how its state is read, and example calls for its tools that need arguments."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")  # names the server's folders and its world
    registry: Literal["pypi", "npm"]
    package: str = Field(min_length=1, max_length=214)
    releases: tuple[str, ...] = ()
    since: str | None = None  # every release published since this one (itself included)
    last: int | None = Field(default=None, ge=1, le=100)  # of those, only the newest N
    command: tuple[str, ...] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    world: str | None = None  # a world folder (relative to the atlas file) whose overlay, probe and examples are used
    probe: Probe | None = None  # None: the world's, else picked from the command as init-world picks it
    fixture: Fixture = Fixture()
    answers: Answers = Answers()
    examples: dict[str, tuple[Example, ...]] = Field(default_factory=dict)  # tool -> its example calls
    scripts: bool = False  # npm: let the package's install scripts run (a native module built on install)
    claims: dict[str, Claim] = Field(default_factory=dict)  # tool -> what the server's docs claim of it
    pins: tuple[str, ...] = ()  # installed beside it, as pip or npm names them ("mcp<2"): what its release forgot
    note: str = ""

    @model_validator(mode="after")
    def _which_releases(self) -> Entry:
        if bool(self.releases) == (self.since is not None):
            raise FieldProblem("releases", list(self.releases), "name the releases, or `since` one (not both)")
        if self.last is not None and self.since is None:
            raise FieldProblem("last", self.last, "`last` keeps the newest N of the releases `since` resolves")
        if len(set(self.releases)) != len(self.releases):
            raise FieldProblem("releases", list(self.releases), "a release is named twice")
        for i, r in enumerate((*self.releases, *(() if self.since is None else (self.since,)))):
            if not RELEASE.fullmatch(r):
                raise FieldProblem(f"releases.{i}" if i < len(self.releases) else "since", r,
                                   "a release is a version string (letters, digits, '.', '-', '+', '!', '_')")
        if set(self.name) == {"."}:
            raise FieldProblem("name", self.name, "a server's name names its folders: not only dots")
        _env_ok(self.env, "env")
        if not any(INSTALL in a for a in self.command):
            raise FieldProblem("command", list(self.command), "the command starts the installed release: name "
                               "its folder as {install} (e.g. {install}/bin/NAME)")
        if self.registry == "pypi" and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", self.package):
            raise FieldProblem("package", self.package, "not a PyPI project name")
        if self.registry == "npm" and not re.fullmatch(r"(@[a-z0-9][\w.-]*/)?[a-z0-9][\w.-]*", self.package):
            raise FieldProblem("package", self.package, "not an npm package name")
        for i, pin in enumerate(self.pins):
            if not re.fullmatch(r"[A-Za-z0-9@][A-Za-z0-9@/._<>=!~,*^+-]{0,199}", pin):
                raise FieldProblem(f"pins.{i}", pin, "a requirement as pip or npm names it (\"mcp<2\", "
                                   "\"zod@3\"), never an option")
        if self.scripts and self.registry != "npm":
            raise FieldProblem("scripts", True, "install scripts are an npm setting (PyPI releases install wheels)")
        return self


class Atlas(_Strict):
    """The atlas: its id and its servers (each name once)."""

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    description: str = ""
    servers: tuple[Entry, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _names_once(self) -> Atlas:
        seen: set[str] = set()
        for i, e in enumerate(self.servers):
            if e.name in seen:
                raise FieldProblem(f"servers.{i}.name", e.name, "two servers have this name")
            seen.add(e.name)
        return self

    def entry(self, name: str) -> Entry:
        return next(e for e in self.servers if e.name == name)


def load_atlas(path: Path) -> Atlas:
    """An atlas file, every problem an InputError naming the file, field and value."""
    data: dict[str, Any] = read_toml(path)
    head = data.pop("atlas", None)
    if not isinstance(head, dict):
        raise InputError(path, "atlas", "<missing>", "an atlas file begins with an [atlas] table (its id)")
    atlas = validate(Atlas, {**head, **data}, path)
    servers = []
    for i, e in enumerate(atlas.servers):  # a world folder is named relative to the atlas file, and must be one
        if e.world is not None:
            w = (path.parent / e.world).resolve()
            if not (w / "world.toml").is_file():
                raise InputError(path, f"servers.{i}.world", e.world, "no world.toml in that folder")
            load_external(w)  # a world file with a problem is one line naming it, before anything runs
            e = e.model_copy(update={"world": str(w)})
        servers.append(e)
    return atlas.model_copy(update={"servers": tuple(servers)})
