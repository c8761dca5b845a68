"""The scripted calibration driver: plays a fixed step sequence (a calibration case or a task's oracle) over the
raw pipeline surface. It decides nothing; a script is not process-local state, so after a restart it goes on
where it was."""

from __future__ import annotations

from typing import Any, Sequence

from aft_bench.agents.protocol import Action, Call, End, Usage
from aft_bench.interface.tools import Observation, ToolSpec
from aft_bench.tasks.task import Brief, Step


class ScriptedAgent:
    def __init__(self, steps: Sequence[Step]) -> None:
        self.steps = tuple(steps)
        self._next = 0
        self._last_inv: str | None = None
        self._pending: Step | None = None

    async def start(self, brief: Brief, surface: Sequence[ToolSpec]) -> None:
        self._next, self._last_inv, self._pending = 0, None, None

    async def restart(self, surface: Sequence[ToolSpec]) -> None:
        """Nothing to lose: the script goes on with its next step."""

    def usage(self) -> Usage:
        return Usage()

    def take_records(self) -> list[dict[str, Any]]:
        return []

    async def act(self, observation: Observation | None) -> Action:
        self._remember(observation)
        if self._next >= len(self.steps):
            return End("none", None)
        step = self.steps[self._next]
        self._next += 1
        self._pending = step
        if step.end is not None:
            return End(step.end, step.claim)
        return _call(step, self._last_inv)

    def _remember(self, observation: Observation | None) -> None:
        """The invocation id a call or retransmission was given is what a later `last` refers to."""
        step, self._pending = self._pending, None
        if step is None or observation is None or not (step.call is not None or step.retransmit):
            return
        inv = observation.content.get("invocation") if isinstance(observation.content, dict) else None
        if inv is not None:
            self._last_inv = inv


def _call(step: Step, last_inv: str | None) -> Call:
    if step.call is not None:
        extra: dict[str, Any] = {"_principal": step.principal, "_intent": step.intent, "_key": step.key,
                                 "_expect_version": step.expect_version, "_authority": step.authority}
        return Call(step.call, {**step.args, **extra})
    if step.retransmit:
        return Call("retransmit", {})
    if step.resume is not None:
        return Call("resume_invocation", {"invocation_id": _inv(step.resume, last_inv)})
    if step.status is not None:
        return Call("get_invocation_status", {"invocation_id": _inv(step.status, last_inv)})
    return Call("verify_effect", {"tool": step.verify, "arguments": dict(step.args)})


def _inv(ref: str, last: str | None) -> str:
    """Resolve "last" to the most recent invocation id; with none yet, an id the runtime cannot know."""
    return (last or "inv-none") if ref == "last" else ref
