"""Fault schedules as data: which fault acts at which stage boundary of which invocation, realized from a seed.

A schedule names faults by kind and target operation; `realize(schedule, seed)` fixes every random choice
(occurrence, work unit, parts) so the same seed gives the same faults. `Injector` tracks each planned
fault through planned -> armed -> fired; the pipeline performs the fault's action on the world.
"""

from __future__ import annotations

from functools import cached_property

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aft_bench.common.canonical import digest
from aft_bench.common.datafile import read_toml, validate
from aft_bench.common.errors import FieldProblem, InputError
from aft_bench.runtime.stages import Stage

FaultKind = Literal[
    "transient_interruption",
    "state_loss",
    "response_loss",
    "stale_state",
    "permission_drift",
    "false_success",
    "false_failure",
    "partial_completion",
]

# The boundary (after this stage) at which each fault kind acts; first entry is the default.
FAULT_STAGES: dict[str, tuple[Stage, ...]] = {
    "permission_drift": (Stage.REQUEST_ACCEPTED,),
    "stale_state": (Stage.BACKEND_STARTED,),
    "transient_interruption": (Stage.BACKEND_STARTED,),
    "state_loss": (Stage.BACKEND_STARTED,),
    "false_success": (Stage.EFFECT_COMMITTED,),
    "partial_completion": (Stage.EFFECT_COMMITTED,),
    "response_loss": (Stage.RESPONSE_GENERATED,),
    "false_failure": (Stage.RESPONSE_GENERATED,),
}
UNIT_FAULTS = frozenset({"transient_interruption", "state_loss"})

IntOrRange = int | tuple[int, int]


class FaultSpec(BaseModel):
    """One fault of a schedule, as written in data. Ranges `[lo, hi]` are drawn from the seed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: FaultKind
    op: str | None = None  # None in a workload variant: the task's first target operation
    stage: Stage | None = None
    occurrence: IntOrRange = 1
    unit: IntOrRange = 1
    parts: IntOrRange = 1
    fields: dict[str, Any] = Field(default_factory=dict)
    permission: str | None = None

    @field_validator("occurrence", "unit", "parts")
    @classmethod
    def _positive(cls, v: IntOrRange) -> IntOrRange:
        lo, hi = (v, v) if isinstance(v, int) else v
        if lo < 1 or hi < lo:
            raise ValueError("must be an integer >= 1 or a range [lo, hi] with 1 <= lo <= hi")
        return v

    @model_validator(mode="after")
    def _stage_allowed(self) -> FaultSpec:
        if self.stage is not None and self.stage not in FAULT_STAGES[self.kind]:
            allowed = ", ".join(FAULT_STAGES[self.kind])
            raise FieldProblem("stage", str(self.stage), f"{self.kind} acts only at {allowed}")
        return self


class FaultSchedule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    description: str = ""
    faults: tuple[FaultSpec, ...] = ()

    @cached_property
    def hash(self) -> str:  # the model is frozen: computed once per schedule
        return digest(self.model_dump(mode="json"))


NO_FAULTS = FaultSchedule(id="none")


def require_ops(schedule: FaultSchedule, path: str | Path, prefix: str = "faults") -> None:
    """A standalone schedule must name the operation each fault targets."""
    for i, f in enumerate(schedule.faults):
        if f.op is None:
            raise InputError(path, f"{prefix}.{i}.op", "<missing>", "Field required")


def check_schedule(schedule: FaultSchedule, operations: Iterable[str], path: str | Path, prefix: str = "faults") -> None:
    """A fault naming an operation the world lacks could never fire: reject it as bad input."""
    known = set(operations)
    for i, f in enumerate(schedule.faults):
        if f.op is not None and f.op not in known:
            raise InputError(path, f"{prefix}.{i}.op", f.op, f"unknown operation; known: {', '.join(sorted(known))}")


def load_schedule(path: str | Path) -> FaultSchedule:
    """Load a fault schedule TOML; bad input raises InputError naming file, field and value."""
    p = Path(path)
    schedule = validate(FaultSchedule, read_toml(p), p)
    require_ops(schedule, p)
    return schedule


@dataclass(frozen=True)
class PlannedFault:
    """A fault with every random choice fixed: it targets the `occurrence`-th well-formed invocation of `op` (one
    the backend resolved: a call with invalid arguments or an unknown record arms nothing)."""

    index: int
    kind: str
    stage: Stage
    op: str
    occurrence: int
    unit: int
    parts: int
    fields: dict[str, Any] = field(default_factory=dict)
    permission: str | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "fault": self.index, "kind": self.kind, "stage": str(self.stage), "op": self.op,
            "occurrence": self.occurrence, "unit": self.unit, "parts": self.parts,
            "fields": self.fields, "permission": self.permission,
        }


def realize(schedule: FaultSchedule, seed: int) -> tuple[PlannedFault, ...]:
    """Fix every ranged choice of the schedule from `seed` (string-seeded RNG: stable across platforms)."""
    rng = random.Random(f"{schedule.hash}:{seed}")

    def draw(v: IntOrRange) -> int:
        return v if isinstance(v, int) else rng.randint(v[0], v[1])

    missing = [i for i, f in enumerate(schedule.faults) if f.op is None]
    if missing:
        raise ValueError(f"schedule {schedule.id}: faults {missing} name no operation")
    return tuple(
        PlannedFault(
            index=i,
            kind=f.kind,
            stage=f.stage or FAULT_STAGES[f.kind][0],
            op=f.op or "",
            occurrence=draw(f.occurrence),
            unit=draw(f.unit),
            parts=draw(f.parts),
            fields=dict(f.fields),
            permission=f.permission,
        )
        for i, f in enumerate(schedule.faults)
    )


class Injector:
    """Tracks planned faults through armed and fired; decides which fault acts at a given boundary."""

    def __init__(self, planned: tuple[PlannedFault, ...]) -> None:
        self.planned = planned
        self._seen: dict[str, int] = {}
        self.armed: dict[int, str] = {}  # fault index -> invocation id
        self.fired: set[int] = set()

    def on_new_invocation(self, op: str, inv: str) -> list[PlannedFault]:
        """Count a new invocation of `op`; returns the faults this invocation arms."""
        self._seen[op] = self._seen.get(op, 0) + 1
        newly = [f for f in self.planned if f.op == op and f.occurrence == self._seen[op]]
        for f in newly:
            self.armed[f.index] = inv
        return newly

    def due(self, stage: Stage, inv: str, unit: int | None = None, last_unit: int | None = None) -> list[PlannedFault]:
        """Armed, unfired faults for `inv` that act at this boundary (and, for unit faults, this work unit).

        A unit fault whose unit exceeds the operation's work units acts after the last unit.
        """
        out = []
        for f in self.planned:
            if f.index in self.fired or self.armed.get(f.index) != inv or f.stage != stage:
                continue
            if f.kind in UNIT_FAULTS and stage == Stage.BACKEND_STARTED:
                if unit is None or unit != min(f.unit, last_unit or f.unit):
                    continue
            out.append(f)
        return out

    def fire(self, fault: PlannedFault) -> None:
        self.fired.add(fault.index)
