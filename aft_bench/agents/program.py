"""The `program` agent: writes the task's plan as one tool program (`run_program`) instead of stepwise calls.

Each plan step becomes `CALL(tool, arguments, effect)` (READ for read-only steps, WRITE otherwise), with an
idempotency key where the tool takes one. With `fail_after = k` its first program raises after the k-th
write (the repair workload: a program that fails after a completed write); it then submits the repaired
program, within its attempt budget. It claims success only when a program completed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from aft_bench.agents.protocol import Action, Call, End, Usage
from aft_bench.interface.tools import Observation, ToolSpec
from aft_bench.tasks.task import Brief, Script


class Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    fail_after: int = Field(default=0, ge=0, description="first program fails after this many writes (0: never)")
    max_attempts: int = Field(default=3, ge=1, le=10, description="programs submitted before it gives up")


def _status(obs: Observation | None) -> tuple[str, str]:
    """(status, error code) of a run_program result, structured or text."""
    if obs is None:
        return "none", ""
    c = obs.content
    if isinstance(c, dict):
        return str(c.get("status")), str(c.get("error", ""))
    head = str(c).split(":", 1)[0]
    if head == "OK":
        return "ok", ""
    return ("error", head.removeprefix("ERROR").strip()) if head.startswith("ERROR") else ("timeout", "")


class ProgramAgent:
    """Submits the plan as a program; resubmits it repaired after a failure."""

    def __init__(self, params: Params, script: Script) -> None:
        self.params = params
        self.plan = script.plan
        self.attempts = 0
        self.brief: Brief | None = None
        self.schemas: dict[str, dict[str, Any]] = {}

    async def start(self, brief: Brief, surface: Sequence[ToolSpec]) -> None:
        self.brief = brief
        self.schemas = {t.name: t.parameters for t in surface}

    async def restart(self, surface: Sequence[ToolSpec]) -> None:
        self.schemas = {t.name: t.parameters for t in surface}

    def usage(self) -> Usage:
        return Usage()

    def take_records(self) -> list[dict[str, Any]]:
        return []

    def source(self, fail_after: int) -> str:
        """The plan as a program (raising after `fail_after` writes when it is > 0)."""
        assert self.brief is not None
        lines, writes = [], 0
        for i, step in enumerate(self.plan):
            if step.call is None:
                continue
            args = dict(step.args)
            if "idempotency_key" in self.schemas.get(step.call, {}).get("properties", {}):
                args["idempotency_key"] = f"{self.brief.task_id}-{i}"
            effect = "READ" if step.read else "WRITE"
            lines.append(f"r{i} = CALL({json.dumps(step.call)}, {args!r}, {json.dumps(effect)})")
            writes += effect == "WRITE"
            if fail_after and writes == fail_after:
                lines.append(f'raise RuntimeError("the program failed after write {writes}")')
        lines.append('"done"')
        return "\n".join(lines)

    async def act(self, observation: Observation | None) -> Action:
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
