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
dT > 0. ToolPro keeps the profile as moving averages over recent runs with a stepwise cold start; here the
profile is a parameter, so one work unit still fully determines one attempt.

An agent without a model sends no bytes to one; what a model would be sent is counted instead: by the loop, the
whole surface's schemas per decision (`step`, `program`), or by this agent in `skeleton` mode (the surface's
schemas once, then each step's tool schema), reported as `Usage.model_bytes`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aft_bench.agents.protocol import Action, Call, End, Usage
from aft_bench.common.canonical import canonical_json
from aft_bench.interface.tools import Observation, ToolSpec, described_schema
from aft_bench.tasks.task import Brief, Script


class Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)  # no NaN or infinite setting
    mode: Literal["program", "step", "skeleton", "policy"] = Field(
        default="program", description="always a program, always stepwise calls (with the whole tool context, or "
        "skeleton-guided: each step from its own tool's schema), or ToolPro's consolidation policy")
    fail_after: int = Field(default=0, ge=0, description="first program fails after this many writes (0: never)")
    max_attempts: int = Field(default=3, ge=1, le=10, description="programs submitted before it gives up")
    rtt_ms: float | None = Field(default=None, ge=0, le=3.6e6, description="policy profile: client-server round trip")
    decision_ms: float | None = Field(default=None, ge=0, le=3.6e6, description="policy profile: one agent decision")
    build_ms: float | None = Field(default=None, ge=0, le=3.6e6, description="policy profile: building one program")

    @model_validator(mode="after")
    def _profile_with_policy(self) -> Params:
        given = [x is not None for x in (self.rtt_ms, self.decision_ms, self.build_ms)]
        if self.mode == "policy" and not all(given):
            raise ValueError("mode = \"policy\" needs its profile: rtt_ms, decision_ms and build_ms")
        if self.mode != "policy" and any(given):
            raise ValueError("rtt_ms, decision_ms and build_ms are the policy's profile: give them with mode = \"policy\"")
        return self


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

    def __init__(self, params: Params, script: Script) -> None:
        self.params = params
        self.plan = script.plan
        self.reference = script.program  # the task's own program where its calls depend on what reads return
        self.calls = [(i, step) for i, step in enumerate(script.plan) if step.call is not None]
        self.mode = params.mode
        if params.mode == "policy":
            assert params.rtt_ms is not None and params.decision_ms is not None and params.build_ms is not None
            saves = program_saves_ms(len(self.calls), params.rtt_ms, params.decision_ms, params.build_ms)
            self.mode = "program" if saves > 0 else "step"
        self.next_step = 0
        self.failed_steps = 0
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

    async def restart(self, surface: Sequence[ToolSpec]) -> None:
        self.schemas = {t.name: t.parameters for t in surface}
        self.specs = {t.name: t for t in surface}
        self._surface_bytes = _bytes([t.schema() for t in surface])
        self._skeleton = False  # a process that lost its state derives the skeleton again

    def usage(self) -> Usage:
        return self._usage

    def take_records(self) -> list[dict[str, Any]]:
        return []

    def source(self, fail_after: int) -> str:
        """The task's reference program, or the plan as a program (raising after `fail_after` writes when it is
        > 0)."""
        assert self.brief is not None
        if self.reference is not None:
            return CHECK + "\n" + self.reference
        lines, writes = [CHECK], 0
        for i, step in self.calls:
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
        if self.mode == "step":
            return self._step(observation)
        if "run_program" not in self.schemas:
            return End("escalate", "unknown")  # this interface offers no programs
        status, _code = _status(observation)
        if observation is not None and status == "ok":
            return End("finish", "success")
        if self.attempts >= self.params.max_attempts or (observation is not None and status != "error"):
            return End("finish", "failure")
        self.attempts += 1
        fail = self.params.fail_after if self.attempts == 1 else 0
        return Call("run_program", {"source": self.source(fail)})

    def _step(self, observation: Observation | None) -> Action:
        """The plan's next call, or the end: success only when every call succeeded."""
        if observation is not None and _status(observation)[0] != "ok":
            self.failed_steps += 1
        if self.next_step >= len(self.calls):
            return End("finish", "failure" if self.failed_steps else "success")
        i, step = self.calls[self.next_step]
        self.next_step += 1
        assert step.call is not None
        return Call(step.call, self._args(i, step.call, step.args))
