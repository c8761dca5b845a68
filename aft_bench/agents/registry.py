"""Agent kinds by name: what a config's `[[experiment.agents]]` table selects and `aft-bench list agents` shows.

An agent spec is a kind's name plus its validated parameters (defaults filled in); its canonical JSON is part
of every run's key, so two configurations of the same agent never share a run id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from aft_bench.agents import deterministic, llm, mcp_client, program
from aft_bench.agents.protocol import Agent
from aft_bench.agents.scripted import ScriptedAgent
from aft_bench.common.canonical import canonical_json
from aft_bench.common.errors import InputError
from aft_bench.tasks.task import Script


class NoParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True)
class AgentKind:
    name: str
    description: str
    params: type[BaseModel]
    make: Callable[..., Agent]  # (params, script), and the deployment when `deployed`
    surface: Literal["interface", "raw", "served"]  # raw: calibration only; served: `aft-bench serve` only
    concurrent: bool = False  # waits on the network: episodes run concurrently on one event loop
    preflight: Callable[[Any], str | None] | None = None  # before a run: what would make it fail at once
    # told its deployment (world id, network profile JSON or None) when built: only to choose what it measured
    # there before (a warm start's profile), never the task's criteria or faults
    deployed: bool = False
    deployment_problem: Callable[[Any, str, str | None, bool], str | None] | None = None  # checked per cell at load


def _llm_preflight(params: llm.Params) -> str | None:
    """The llm agent's own preflight, then the embedded offline model's: it answers only the model names of its
    policies (`fake-<policy>`), so any other name would fail every tuple at its first call."""
    problem = llm.preflight(params)
    if problem is None and params.api_base == llm.OFFLINE:
        from aft_bench.agents.fake_llm import POLICIES, policy_of

        if policy_of(params.model) not in POLICIES:
            return (f"the offline model (api_base 'offline') has no policy {policy_of(params.model)!r} for model "
                    f"{params.model!r}; known policies: {', '.join(POLICIES)} (model 'openai/fake-<policy>')")
    return problem


AGENTS: dict[str, AgentKind] = {
    "deterministic": AgentKind(
        "deterministic", "capability-aware controller: follows the task's plan with what the surface exposes",
        deterministic.Params, deterministic.DeterministicAgent, "interface"),
    "scripted": AgentKind(
        "scripted", "plays the task's oracle steps over the raw pipeline (calibration baselines only)",
        NoParams, lambda _params, script: ScriptedAgent(script.oracle), "raw"),
    "program": AgentKind(
        "program", "writes the task's plan as one tool program (run_program); resubmits it repaired after a failure",
        program.Params, program.ProgramAgent, "interface", deployed=True,
        deployment_problem=program.deployment_problem),
    "mcp": AgentKind(
        "mcp", "an external MCP client (aft-bench serve): its tool calls are the actions", mcp_client.Params,
        lambda params, _script: mcp_client.McpAgent(params), "served"),
    "llm": AgentKind(
        "llm", "a litellm model: tools as function schemas, report_outcome ends the episode",
        llm.Params, lambda params, _script: llm.LLMAgent(params), "interface", concurrent=True,
        preflight=_llm_preflight),
}


@dataclass(frozen=True)
class AgentSpec:
    """A kind's name and its validated parameters; `json` is canonical and goes into the run key."""

    name: str
    params_json: str

    @classmethod
    def parse(cls, spec_json: str) -> AgentSpec:
        """The spec from its canonical JSON (as stored in a cell and a result row)."""
        data = dict(json.loads(spec_json))
        name = data.pop("name")
        return cls(name, canonical_json(data))

    @cached_property
    def params(self) -> dict[str, Any]:
        return dict(json.loads(self.params_json))

    @property
    def json(self) -> str:
        return canonical_json({"name": self.name, **self.params})

    @property
    def model(self) -> str:
        """The model the agent uses (`none` for agents without one)."""
        return str(self.params.get("model", "none"))

    @property
    def kind(self) -> AgentKind:
        return AGENTS[self.name]


DEFAULT_AGENT = {"name": "deterministic"}


def agent_spec(raw: dict[str, Any], path: str | Path = "<config>", field: str = "agents") -> AgentSpec:
    """Validate one `[[experiment.agents]]` table; an unknown agent or parameter is an InputError naming it."""
    if not isinstance(raw, dict) or "name" not in raw:
        raise InputError(path, field, raw, "an agent table needs `name`")
    name = raw["name"]
    if not isinstance(name, str) or name not in AGENTS:
        raise InputError(path, f"{field}.name", name, f"unknown agent; known: {', '.join(AGENTS)}")
    kind = AGENTS[name]
    try:
        params = kind.params.model_validate({k: v for k, v in raw.items() if k != "name"},
                                            context={"base": Path(path).parent})  # files named relative to it
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        value = "<missing>" if err["type"] == "missing" else err.get("input")
        raise InputError(path, f"{field}.{loc}", value, f"agent '{name}': {err['msg']}") from None
    return AgentSpec(name, canonical_json(params.model_dump(mode="json")))


def preflight(spec: AgentSpec, path: str | Path = "<config>", field: str = "agents") -> None:
    """Refuse, before anything runs, an agent that would fail on its first step (unknown model, unset key)."""
    kind = spec.kind
    if kind.preflight is not None:
        problem = kind.preflight(kind.params.model_validate(spec.params))
        if problem is not None:
            raise InputError(path, field, spec.json, problem)


def build_agent(spec: AgentSpec, script: Script, deployment: tuple[str, str | None] = ("", None)) -> Agent:
    """A fresh agent for one episode; `deployment` (world id, network JSON) for the kinds that choose by it."""
    kind = spec.kind
    params = kind.params.model_validate(spec.params)
    return kind.make(params, script, deployment) if kind.deployed else kind.make(params, script)


def describe() -> list[dict[str, Any]]:
    """Every agent kind with its parameters (name, type, default, meaning), for `aft-bench list agents`."""
    out = []
    for kind in AGENTS.values():
        params = [{"name": n, "type": getattr(f.annotation, "__name__", str(f.annotation)),
                   "default": "(required)" if f.is_required() else f.default, "description": f.description or ""}
                  for n, f in kind.params.model_fields.items()]
        out.append({"name": kind.name, "surface": kind.surface, "description": kind.description, "params": params})
    return out
