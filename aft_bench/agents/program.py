"""The `program` agent: the task's plan as one tool program (`run_program`), as stepwise calls, or chosen per
episode by ToolPro's consolidation policy. ToolPro's ablation: `step` is its stepwise baseline (MWS: every
decision is made with the whole tool context), `skeleton` its ToolPro-step (the call skeleton is derived once
from the whole context, then each step only instantiates the next call from its tool's schema), `program` its
ToolPro-prog and `policy` ToolPro itself.

In program mode it submits the task's reference program where the task has one (calls that depend on what
earlier reads return: bindings, loops, branches); otherwise each plan step becomes `CALL(tool, arguments, effect)` (READ for read-only steps, WRITE otherwise), with an
idempotency key where the tool takes one. With `fail_after = k` its first program raises after the k-th
write (the repair workload: a program that fails after a completed write); it then submits the repaired
program, within its attempt budget. It claims success only when a program completed. In step mode it makes
the plan's calls one by one (with the same keys) and claims success when every call succeeded. In policy mode
it predicts the saving of one program over N stepwise calls, dT = (N - 1)(RTT + DEC) - BUILD, from the profile
it is given (`rtt_ms`, `decision_ms`, `build_ms`) and the N calls of its plan, and runs a program only when
dT > 0. In profile mode it is ToolPro's profile-driven policy within one episode: with a warm start (`profile`, a
file of moving averages that `aft-bench profile` measured from earlier runs) it decides before the first call;
with a cold start it makes its first `cold_steps` calls stepwise, measures RTT + DEC per step on the virtual clock
its observations carry, and runs the rest of the plan as one program only when dT > 0 for the calls left, with
`build_ms` as its prior for BUILD. It records its decision and estimates (`policy_decision`), and after a program
ran the BUILD it measured (`policy_measured`), which the next profile averages. The profile is an input hashed
into the run key (its values are in the agent spec), so one work unit still fully determines one attempt.

An agent without a model sends no bytes to one; what a model would be sent is counted instead: by the loop, the
whole surface's schemas per decision (`step`, `program`), or by this agent in `skeleton` mode (the surface's
schemas once, then each step's tool schema), reported as `Usage.model_bytes`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_serializer, model_validator

from aft_bench.agents.protocol import Action, Call, End, Usage
from aft_bench.common.canonical import canonical_json
from aft_bench.common.errors import HarnessError
from aft_bench.interface.tools import Observation, ToolSpec, described_schema
from aft_bench.tasks.task import Brief, Script


class Profile(BaseModel):
    """What earlier runs measured in one deployment (world, network profile) for one model: the moving averages
    of a warm start."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    world: str
    model: str
    network: str | None = Field(description="the network profile the runs were made under (canonical JSON)")
    step_ms: float = Field(ge=0, le=3.6e6, description="RTT + DEC per stepwise call")
    build_ms: float | None = Field(ge=0, le=3.6e6, description="BUILD of one program (null: no program ran there)")
    runs: int = Field(ge=1, description="runs the averages were taken over")


class ProfileFile(BaseModel):
    """A profile file's entries and its SHA-256 (so the run key changes with the file)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    entries: tuple[Profile, ...] = Field(min_length=1)

    def entry(self, world: str, network: str | None) -> Profile | None:
        """The entry measured in this deployment, by the program agent (model `none`)."""
        return next((e for e in self.entries if (e.world, e.model, e.network) == (world, "none", network)), None)


class Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)  # no NaN or infinite setting
    mode: Literal["program", "step", "skeleton", "policy", "profile"] = Field(
        default="program", description="always a program, always stepwise calls (with the whole tool context, or "
        "skeleton-guided: each step from its own tool's schema), ToolPro's consolidation policy on a declared "
        "profile, or on the profile it measures (cold start) or was given (warm start)")
    fail_after: int = Field(default=0, ge=0, description="first program fails after this many writes (0: never)")
    max_attempts: int = Field(default=3, ge=1, le=10, description="programs submitted before it gives up")
    rtt_ms: float | None = Field(default=None, ge=0, le=3.6e6, description="policy profile: client-server round trip")
    decision_ms: float | None = Field(default=None, ge=0, le=3.6e6, description="policy profile: one agent decision")
    build_ms: float | None = Field(default=None, ge=0, le=3.6e6, description="policy profile: building one program "
                                   "(profile mode: the cold start's prior)")
    cold_steps: int = Field(default=2, ge=1, le=100, description="profile mode, cold start: stepwise calls measured "
                            "before deciding")
    profile: ProfileFile | None = Field(default=None, description="profile mode: a warm start, read from the file "
                                        "`aft-bench profile` wrote (a path relative to the config); each run "
                                        "reads the entry measured in its own world and network")

    @model_serializer(mode="wrap")
    def _profile_fields_in_profile_mode(self, handler: Any) -> dict[str, Any]:
        """The spec (and so the run key) of every other mode stays what it was before profile mode existed."""
        out = handler(self)
        if self.mode != "profile":
            out.pop("cold_steps", None)
            out.pop("profile", None)
        return out

    @model_validator(mode="before")
    @classmethod
    def _read_profile(cls, data: Any, info: ValidationInfo) -> Any:
        """`profile = "P.json"`: the file's entries and its hash, kept in the spec (the run key)."""
        if isinstance(data, dict) and isinstance(data.get("profile"), str):
            base = Path((info.context or {}).get("base", "."))
            data = {**data, "profile": read_profile(base / data["profile"])}
        return data

    @model_validator(mode="after")
    def _profile_with_policy(self) -> Params:
        given = [x is not None for x in (self.rtt_ms, self.decision_ms, self.build_ms)]
        if self.mode == "policy" and not all(given):
            raise ValueError("mode = \"policy\" needs its profile: rtt_ms, decision_ms and build_ms")
        if self.mode == "profile":
            if self.rtt_ms is not None or self.decision_ms is not None:
                raise ValueError("mode = \"profile\" measures RTT and DEC itself: give build_ms (its cold-start "
                                 "prior) or a profile")
            if self.build_ms is None and self.profile is None:
                raise ValueError("mode = \"profile\" needs build_ms (a cold start's prior) or profile (a warm "
                                 "start; with build_ms, its prior where the profile measured no BUILD)")
        elif self.mode != "policy" and any(given):
            raise ValueError("rtt_ms, decision_ms and build_ms are the policy's profile: give them with mode = \"policy\"")
        if self.profile is not None and self.mode != "profile":
            raise ValueError("a profile is a warm start of mode = \"profile\"")
        if "cold_steps" in self.model_fields_set and self.mode != "profile":
            raise ValueError("cold_steps is the cold start of mode = \"profile\"")
        return self


PROFILE_VERSION = 1  # of the file `aft-bench profile` writes


def read_profile(path: Path) -> dict[str, Any]:
    """A profile file's entries with the file's SHA-256."""
    try:
        raw = path.read_bytes()
        doc = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise ValueError(f"profile {str(path)!r}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != PROFILE_VERSION or not isinstance(doc.get("profiles"), list):
        raise ValueError(f"profile {str(path)!r}: not a profile file of version {PROFILE_VERSION} "
                         "(write one with `aft-bench profile`)")
    return {"sha256": hashlib.sha256(raw).hexdigest(), "entries": doc["profiles"]}


def deployment_problem(params: Params, world: str, network: str | None, clocked: bool) -> str | None:
    """Why this agent cannot run in this deployment: profile mode without a virtual clock to measure, or a warm
    start with no profile entry measured there."""
    if params.mode == "profile" and not clocked:
        return 'mode = "profile" measures the virtual clock: give the experiment a network profile'
    if params.profile is None:
        return None
    if network is None:
        return ("a warm start reads the profile measured under its own network: give the networks as "
                "[[experiment.network]] (a list, even of one), which each run records")
    entry = params.profile.entry(world, network)
    if entry is None:
        return (f"the profile has no entry for world {world!r} under network {network or 'none'} "
                f"(it has {sorted({(e.world, e.network or 'none') for e in params.profile.entries})})")
    if entry.build_ms is None and params.build_ms is None:
        return (f"the profile measured no BUILD for world {world!r} under network {network or 'none'} (no program "
                "ran there): give build_ms, the prior it then decides with")
    return None


def program_saves_ms(calls: int, rtt_ms: float, decision_ms: float, build_ms: float) -> float:
    """ToolPro's dT of consolidating `calls` stepwise calls into one program (positive: the program is faster)."""
    return (calls - 1) * (rtt_ms + decision_ms) - build_ms


def _bytes(value: Any) -> int:
    """UTF-8 bytes of a value's canonical JSON (as the interface measures the schemas it shows)."""
    return len(canonical_json(value).encode("utf-8"))


def program_result(content: Any) -> tuple[str, str, str]:
    """(status, error code, detail) of a run_program result, structured or text."""
    if isinstance(content, dict):
        return str(content.get("status")), str(content.get("error", "")), str(content.get("detail", ""))
    head, _, detail = str(content).partition(":")
    if head == "OK":
        return "ok", "", ""
    if head.startswith("ERROR"):
        return "error", head.removeprefix("ERROR").strip(), detail.strip()
    return "timeout", "", detail.strip()


def _status(obs: Observation | None) -> tuple[str, str]:
    """(status, error code) of a run_program result, structured or text."""
    if obs is None:
        return "none", ""
    return program_result(obs.content)[:2]


# Prepended to every program: a write result that is not a success (an error, a lost response) raises.
CHECK = """def check(result, tool):
    ok = result.get("status") == "ok" if isinstance(result, dict) else str(result).startswith("OK")
    if not ok:
        raise RuntimeError(tool + " did not succeed: " + str(result)[:80])"""


class ProgramAgent:
    """Submits the plan as a program; resubmits it repaired after a failure."""

    def __init__(self, params: Params, script: Script, deployment: tuple[str, str | None] = ("", None)) -> None:
        self.params = params
        self.plan = script.plan
        self.reference = script.program  # the task's own program where its calls depend on what reads return
        self.calls = [(i, step) for i, step in enumerate(script.plan) if step.call is not None]
        self.mode = params.mode
        self._records: list[dict[str, Any]] = []
        self._first_call = 0  # the plan's first call a program runs (after a cold start's stepwise calls)
        self._step_ms: float | None = None  # the policy's RTT + DEC per step, once it decided
        # profile mode: the virtual clock at the last observation, at the first measured step's call and at the
        # last program's submission (RTT + DEC per step and BUILD are differences of these)
        self._clock = self._steps_from = self._submitted = 0.0
        self.next_step = 0
        self.failed_steps = 0
        if params.mode == "policy":
            assert params.rtt_ms is not None and params.decision_ms is not None and params.build_ms is not None
            saves = program_saves_ms(len(self.calls), params.rtt_ms, params.decision_ms, params.build_ms)
            self.mode = "program" if saves > 0 else "step"  # a function of the spec alone: nothing to record
        self._warm = params.profile.entry(*deployment) if params.profile is not None else None
        if params.mode == "profile" and params.profile is not None and self._warm is None:
            raise HarnessError(deployment_problem(params, *deployment, True) or "no profile entry")
        self._describing: str | None = None
        self._described: set[str] = set()
        self.attempts = 0
        self.brief: Brief | None = None
        self.schemas: dict[str, dict[str, Any]] = {}
        self.specs: dict[str, ToolSpec] = {}
        self._usage = Usage()
        self._skeleton = False  # skeleton mode: derived (the whole context sent once) since the last (re)start

    async def start(self, brief: Brief, surface: Sequence[ToolSpec]) -> None:
        self.brief = brief
        await self.restart(surface)
        if self._warm is not None:  # a warm start decides before its first call, on the surface it is shown
            build = self._warm.build_ms if self._warm.build_ms is not None else self.params.build_ms
            assert build is not None  # refused at load otherwise (deployment_problem)
            self._decide("warm", self._warm.step_ms, build)

    async def restart(self, surface: Sequence[ToolSpec]) -> None:
        self.schemas = {t.name: t.parameters for t in surface}
        self.specs = {t.name: t for t in surface}
        self._surface_bytes = _bytes([t.schema() for t in surface])
        self._skeleton = False  # a process that lost its state derives the skeleton again

    def usage(self) -> Usage:
        return self._usage

    def take_records(self) -> list[dict[str, Any]]:
        out, self._records = self._records, []
        return out

    def _decide(self, start: str, step_ms: float, build_ms: float) -> None:
        """ToolPro's rule on the calls left: one program for them only when dT = (N - 1) x step - BUILD > 0
        (and, after a cold start, only when every measured step succeeded)."""
        calls = len(self.calls) - self.next_step
        saves = (calls - 1) * step_ms - build_ms
        offered = "run_program" in self.schemas  # no program where the interface offers none: stepwise on
        self.mode = "program" if saves > 0 and not self.failed_steps and offered else "step"
        self._first_call, self._step_ms = self.next_step, step_ms
        self._records.append({"kind": "policy_decision", "start": start, "chose": self.mode, "calls": calls,
                              "step_ms": round(step_ms, 6), "build_ms": round(build_ms, 6),
                              "saves_ms": round(saves, 6)})

    def source(self, fail_after: int) -> str:
        """The task's reference program, or the plan as a program (raising after `fail_after` writes when it is
        > 0); after a cold start's stepwise calls, the plan's calls left."""
        assert self.brief is not None
        if self.reference is not None and not self._first_call:
            return CHECK + "\n" + self.reference
        lines, writes = [CHECK], 0
        for i, step in self.calls[self._first_call:]:
            assert step.call is not None
            args = self._args(i, step.call, step.args)
            effect = "READ" if step.read else "WRITE"
            lines.append(f"r{i} = CALL({json.dumps(step.call)}, {args!r}, {json.dumps(effect)})")
            if effect == "WRITE":  # a write whose result is not a success stops the program (then: a repair)
                lines.append(f'check(r{i}, "{step.call}")')
            writes += effect == "WRITE"
            if fail_after and writes == fail_after:
                lines.append(f'raise RuntimeError("the program failed after write {writes}")')
        lines.append('"done"')
        return "\n".join(lines)

    def _args(self, i: int, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """A step's arguments, with an idempotency key (task id + step index) where the tool takes one."""
        assert self.brief is not None
        out = dict(args)
        if "idempotency_key" in self.schemas.get(tool, {}).get("properties", {}):
            out["idempotency_key"] = f"{self.brief.task_id}-{i}"
        return out

    async def act(self, observation: Observation | None) -> Action:
        if observation is not None and observation.clock_ms is not None:
            self._clock = observation.clock_ms
        if self._describing is not None and observation is not None:
            schema = described_schema(observation)
            if schema is not None:
                self.schemas[schema["name"]] = schema["parameters"]
            self._describing, observation = None, None
        missing = [s.call for _, s in self.calls if s.call is not None and s.call not in self.schemas]
        if missing and "describe_tool" in self.schemas and missing[0] not in self._described:
            self._describing = missing[0]  # selective discovery: load each plan tool's schema first
            self._described.add(missing[0])
            return Call("describe_tool", {"name": missing[0]})
        if self.mode == "skeleton":
            action = self._step(observation)
            sent = 0 if self._skeleton else self._surface_bytes  # the skeleton: the whole context, once
            self._skeleton = True
            if isinstance(action, Call):
                spec = self.specs.get(action.tool)
                sent += _bytes(spec.schema() if spec else {"name": action.tool})  # instantiate: its schema only
            # at least one byte: a decision with nothing new to send (the end) is still counted by this agent,
            # not by the loop as the whole surface sent again
            self._usage = replace(self._usage, model_bytes=self._usage.model_bytes + max(sent, 1))
            return action
        if self.mode == "profile":  # a cold start (no profile): measure the first steps, then decide for the rest
            if observation is None or self.next_step < min(self.params.cold_steps, len(self.calls)):
                return self._step(observation)
            if observation.clock_ms is None:
                raise HarnessError('mode = "profile" measures the virtual clock: give the experiment a network')
            if _status(observation)[0] != "ok":
                self.failed_steps += 1
            assert self.params.build_ms is not None
            self._decide("cold", (self._clock - self._steps_from) / max(self.next_step, 1), self.params.build_ms)
            observation = None  # that step's result is counted: act afresh
        if self.mode == "step":
            return self._step(observation)
        if "run_program" not in self.schemas:
            return End("escalate", "unknown")  # this interface offers no programs
        status, code = _status(observation)
        if (self.params.mode == "profile" and observation is not None and observation.clock_ms is not None
                and code != "program_rejected"):
            # what a program that ran cost beyond the call itself (one decision and one round trip): its BUILD
            assert self._step_ms is not None
            built = self._clock - self._submitted - self._step_ms
            self._records.append({"kind": "policy_measured", "build_ms": round(built, 6)})
        if observation is not None and status == "ok":
            return End("finish", "success")
        if self.attempts >= self.params.max_attempts or (observation is not None and status != "error"):
            return End("finish", "failure")
        self.attempts += 1
        fail = self.params.fail_after if self.attempts == 1 else 0
        self._submitted = self._clock
        return Call("run_program", {"source": self.source(fail)})

    def _step(self, observation: Observation | None) -> Action:
        """The plan's next call, or the end: success only when every call succeeded."""
        if observation is not None and _status(observation)[0] != "ok":
            self.failed_steps += 1
        if self.next_step >= len(self.calls):
            return End("finish", "failure" if self.failed_steps else "success")
        i, step = self.calls[self.next_step]
        if self.next_step == 0:
            self._steps_from = self._clock  # after any schemas it loaded: those calls are not steps
        self.next_step += 1
        assert step.call is not None
        return Call(step.call, self._args(i, step.call, step.args))
