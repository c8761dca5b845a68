"""The router (Tool Forge) as an interface mechanism, `discovery = "routed"`: the agent sees only meta-tools,
resolves an intent-scoped session of at most k tools inside its profile, loads full schemas only for those, and
calls through the router, which refuses (and traces) any call outside the session or the profile before it
reaches the pipeline. Profiles are data (`worlds/catalog/profiles.toml`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from aft_bench.common.datafile import read_toml, validate
from aft_bench.common.paths import WORLDS
from aft_bench.interface.ranking import RANKERS, Candidate, ranked, top_tools
from aft_bench.interface.tools import ToolSpec

PROFILES_PATH = WORLDS / "catalog" / "profiles.toml"
SESSION_MAX = 3  # k: the most tools one session holds
ROUTER_RANKER = "rerank"
EFFECTS = ("read", "reversible", "compensatable", "irreversible")  # "unknown" (unreviewed) is never allowed
LIFECYCLE = ("pending", "approved", "blocked", "pinned")


class Profile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    description: str = ""
    tools: tuple[str, ...] | None = None
    families: tuple[str, ...] | None = None
    effects: tuple[str, ...] = EFFECTS
    lifecycle: tuple[str, ...] = ("approved", "pinned")

    def refuses(self, c: Candidate, effect: str, state: str) -> str | None:
        """Why this profile does not permit the tool, or None."""
        if state not in self.lifecycle:
            return f"its lifecycle state is {state}"
        if self.tools is not None and c.name not in self.tools:
            return "it is not on the profile's list"
        if self.families is not None and c.resource not in self.families:
            return f"its family {c.resource} is not in the profile"
        if effect not in self.effects:
            return f"its effect class {effect} is not allowed"
        return None


class ProfileFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    profiles: dict[str, Profile] = Field(min_length=1)


@lru_cache(maxsize=8)
def load_profiles(path: Path = PROFILES_PATH) -> dict[str, Profile]:
    from aft_bench.common.errors import InputError

    data = validate(ProfileFile, read_toml(path), path)
    for name, p in data.profiles.items():
        for f, allowed in (("effects", EFFECTS), ("lifecycle", LIFECYCLE)):
            bad = [v for v in getattr(p, f) if v not in allowed]
            if bad:
                raise InputError(path, f"profiles.{name}.{f}", bad[0], f"not one of {', '.join(allowed)}")
    return data.profiles


def meta_tools(search_k: int) -> list[ToolSpec]:
    """The stable router surface: the only tools a routed agent sees at the start."""
    def obj(props: dict, required: list[str]) -> dict:
        return {"type": "object", "properties": props, "required": required}

    s = {"type": "string"}
    return [
        ToolSpec("search_tools", f"Search the permitted catalog; returns the top {search_k} compact cards.",
                 obj({"query": {**s, "description": "What you want to do."}}, ["query"]), "discovery"),
        ToolSpec("resolve_tools", f"Resolve a session for a task: at most k (<= {SESSION_MAX}) tools, as cards. Only "
                 "tools in the session can be described and called.",
                 obj({"task": {**s, "description": "The task in your words."},
                      "k": {"type": "integer", "description": f"Most tools wanted (1-{SESSION_MAX})."}}, ["task"]),
                 "discovery"),
        ToolSpec("describe_tool", "Full schema of a tool in the session.",
                 obj({"name": {**s, "description": "Tool name."}}, ["name"]), "discovery"),
        ToolSpec("call_tool", "Call a tool of the session with its arguments.",
                 obj({"name": {**s, "description": "Tool name."},
                      "arguments": {"type": "object", "description": "The tool's arguments."}}, ["name", "arguments"]),
                 "discovery"),
        ToolSpec("list_profiles", "The profiles this router knows and the one in force.", obj({}, []), "discovery"),
    ]


@dataclass
class Router:
    """One episode's router over the business tools: the profile in force, governance states, the session."""

    candidates: Sequence[Candidate]
    effects: Mapping[str, str]
    profile_name: str = "default"
    states: Mapping[str, str] = field(default_factory=dict)  # tool -> lifecycle state; absent = approved
    ranker: str = ROUTER_RANKER
    session: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.ranker not in RANKERS:
            raise ValueError(f"unknown ranker {self.ranker!r}; known: {', '.join(RANKERS)}")
        profiles = load_profiles()
        if self.profile_name not in profiles:
            raise KeyError(f"unknown profile {self.profile_name!r}; known: {', '.join(profiles)}")
        self.profile = profiles[self.profile_name]
        self._by_name = {c.name: c for c in self.candidates}
        self.permitted = [c for c in self.candidates if self.refusal(c.name) is None]

    def refusal(self, name: str) -> str | None:
        """Why the profile does not permit `name`, or None."""
        c = self._by_name.get(name)
        if c is None:
            return "no such tool"
        return self.profile.refuses(c, self.effects.get(name, "read"), self.states.get(name, "approved"))

    def search(self, query: str, k: int) -> list[Candidate]:
        return ranked(query, self.permitted, self.ranker, k)

    def resolve(self, task: str, k: int) -> list[str]:
        """A new session for `task`: its best permitted tools, at most min(k, SESSION_MAX)."""
        self.session = top_tools(task, self.permitted, self.ranker, max(1, min(k, SESSION_MAX))) if self.permitted else []
        return list(self.session)

    def gate(self, name: str) -> str | None:
        """Why a describe or call of `name` is refused (outside the profile or the session), or None."""
        why = self.refusal(name)
        if why is not None:
            return f"outside the profile {self.profile_name}: {why}"
        if name not in self.session:
            return "outside the session: resolve_tools for a task that needs it first"
        return None
