"""Tasks tau = (spec, s0, phi, alpha, psi, budget) as data, split by audience.

A task file is one flat table per task; in code a `Task` hands out three separate objects: the `Brief` an
agent is shown (spec text and inputs), the `Script` a scripted controller may follow (its plan, the oracle
steps), and the `Criteria` only the judge reads (phi, alpha, the operations the task targets). A Brief holds
plain values only, so nothing an agent receives can reach the criteria or the script.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aft_bench.common.canonical import digest
from aft_bench.common.datafile import read_toml, validate
from aft_bench.common.errors import InputError
from aft_bench.world.external import ExternalWorld
from aft_bench.world.manifest import World


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Clause(_Strict):
    """One clause of a postcondition: a record field equals a value, or a count of matching records."""

    record: str | None = None
    field: str | None = None
    equals: Any = None
    collection: str | None = None
    where: dict[str, Any] = Field(default_factory=dict)
    count: int | None = Field(default=None, ge=0)
    at_least: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one_form(self) -> Clause:
        field_form = self.record is not None and self.field is not None
        count_form = self.collection is not None and (self.count is not None) != (self.at_least is not None)
        if field_form == count_form:
            raise ValueError("a condition is either {record, field, equals} or {collection, where, count|at_least}")
        return self

    def holds(self, state: dict[str, Any]) -> bool:
        records = state["records"]
        if self.record is not None:
            coll, key = self.record.split("/", 1)
            rec = records.get(coll, {}).get(key)
            return rec is not None and rec.get(self.field) == self.equals
        n = sum(
            1 for r in records.get(self.collection, {}).values() if all(r.get(f) == v for f, v in self.where.items())
        )
        return n == self.count if self.count is not None else n >= (self.at_least or 0)


class AbortTrigger(_Strict):
    """A world event after which the task policy requires the target write NOT to happen."""

    event: Literal["concurrent_write", "permission_revoked"]
    ref: str | None = None
    permission: str | None = None


class Policy(_Strict):
    """alpha: acceptance. By default the goal must hold; after an abort trigger, non-action is required."""

    non_action_required: bool = False
    abort_if: tuple[AbortTrigger, ...] = ()


class Step(_Strict):
    """One scripted action: a call, a transport retransmission, a resume, a status or verify query, or the end."""

    call: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    intent: str = "task"
    principal: str = "agent"
    key: str | None = None
    expect_version: int | None = None
    authority: bool = False
    retransmit: bool = False
    resume: str | None = None
    status: str | None = None
    verify: str | None = None
    end: Literal["finish", "abort", "refuse", "escalate"] | None = None
    claim: Literal["success", "failure", "unknown"] = "unknown"

    @model_validator(mode="after")
    def _one_action(self) -> Step:
        chosen = [self.call, self.retransmit or None, self.resume, self.status, self.verify, self.end]
        if sum(x is not None for x in chosen) != 1:
            raise ValueError("a step has exactly one of call, retransmit, resume, status, verify, end")
        return self


class PlanStep(_Strict):
    """One step of a task's intended plan, independent of the interface: a known operation (`call`) or a
    capability to find (`find`, a search query), with business arguments; `read` marks a read-only step."""

    call: str | None = None
    find: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    read: bool = False

    @model_validator(mode="after")
    def _one(self) -> PlanStep:
        if (self.call is None) == (self.find is None):
            raise ValueError("a plan step has exactly one of call, find")
        return self


@dataclass(frozen=True)
class Brief:
    """The task as an agent sees it: its id, the natural-language spec and any structured inputs."""

    task_id: str
    spec: str
    inputs: Mapping[str, Any]


@dataclass(frozen=True)
class Script:
    """What a scripted controller may follow: the interface-independent plan, the oracle call sequence, and
    for tasks whose calls depend on what earlier reads return, a reference tool program."""

    plan: tuple[PlanStep, ...]
    oracle: tuple[Step, ...]
    program: str | None = None


class Criteria(_Strict):
    """What only the judge reads: phi (goal), alpha (policy) and the operations the task targets or allows."""

    goal: tuple[Clause, ...]
    policy: Policy
    target_ops: tuple[str, ...]
    allowed_ops: tuple[str, ...]
    required_capabilities: tuple[str, ...]

    def phi(self, state: dict[str, Any]) -> bool:
        """The requested postcondition on a backend state."""
        return all(c.holds(state) for c in self.goal)

    @property
    def capabilities(self) -> tuple[str, ...]:
        return self.required_capabilities or self.target_ops


class Task(_Strict):
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    world: str
    spec: str
    inputs: dict[str, Any] = Field(default_factory=dict)
    state: dict[str, Any] = Field(default_factory=dict)
    goal: tuple[Clause, ...] = Field(min_length=1)
    policy: Policy = Policy()
    target_ops: tuple[str, ...] = Field(min_length=1)
    allowed_ops: tuple[str, ...] = ()
    required_capabilities: tuple[str, ...] = ()
    budget: int = Field(default=12, ge=1)
    oracle: tuple[Step, ...] = ()
    plan: tuple[PlanStep, ...] = ()
    variants: tuple[str, ...] = ()
    program: str | None = None  # a reference tool program (runtime binding, loops, branches): `run_program` source

    @cached_property
    def hash(self) -> str:
        return digest(self.model_dump(mode="json", exclude={"program"} if self.program is None else None))

    @cached_property
    def brief(self) -> Brief:
        """The agent's view: detached copies of plain values, no reference back to this task."""
        return Brief(self.id, self.spec, MappingProxyType(copy.deepcopy(self.inputs)))

    @cached_property
    def script(self) -> Script:
        return Script(self.plan, self.oracle, self.program)

    @cached_property
    def criteria(self) -> Criteria:
        return Criteria(goal=self.goal, policy=self.policy, target_ops=self.target_ops,
                        allowed_ops=self.allowed_ops, required_capabilities=self.required_capabilities)


class TaskFile(_Strict):
    tasks: tuple[Task, ...] = Field(min_length=1)


def load_tasks(path: str | Path, world: World) -> tuple[Task, ...]:
    """Load a task file and check every operation and record it names exists in `world`."""
    p = Path(path)
    tasks = validate(TaskFile, read_toml(p), p).tasks
    check_tasks(tasks, world, p)
    return tasks


def _check_ids(tasks: tuple[Task, ...], world_id: str, p: Path) -> None:
    """Task ids unique, and every task of this world."""
    seen: set[str] = set()
    for i, t in enumerate(tasks):
        if t.id in seen:
            raise InputError(p, f"tasks.{i}.id", t.id, "duplicate task id")
        seen.add(t.id)
        if t.world != world_id:
            raise InputError(p, f"tasks.{i}.world", t.world, f"these tasks belong to world '{world_id}'")


def check_external_tasks(tasks: tuple[Task, ...], world: ExternalWorld, p: Path) -> None:
    """Tasks on an external world: ids unique, the world's id, every tool they name in its overlay, and no state
    patch (an external world's s0 is its fixture's)."""
    _check_ids(tasks, world.id, p)
    for i, t in enumerate(tasks):
        where = f"tasks.{i}"
        names = [(f, n) for f in ("target_ops", "allowed_ops", "required_capabilities") for n in getattr(t, f)]
        names += [(f"plan.{j}.call", s.call) for j, s in enumerate(t.plan) if s.call is not None]
        for fld, name in names:
            if name not in world.tools:
                raise InputError(p, f"{where}.{fld}", name, f"world '{world.id}' has no such tool")
        if t.state:
            raise InputError(p, f"{where}.state", sorted(t.state), "an external world's s0 is its fixture; "
                             "tasks cannot patch it")


def check_tasks(tasks: tuple[Task, ...], world: World, p: Path) -> None:
    """Task ids unique; every operation a task names exists in `world`; state overrides fit it."""
    ops = world.operations
    _check_ids(tasks, world.id, p)
    for i, t in enumerate(tasks):
        where = f"tasks.{i}"
        for fld in ("target_ops", "allowed_ops", "required_capabilities"):
            for name in getattr(t, fld):
                if name not in ops:
                    raise InputError(p, f"{where}.{fld}", name, "unknown operation")
        for j, step in enumerate(t.oracle):
            for name in (step.call, step.verify):
                if name is not None and name not in ops:
                    raise InputError(p, f"{where}.oracle.{j}", name, "unknown operation")
        for j, pstep in enumerate(t.plan):
            if pstep.call is not None and pstep.call not in ops:
                raise InputError(p, f"{where}.plan.{j}.call", pstep.call, "unknown operation")
        for coll, recs in (t.state.get("records") or {}).items():
            for key in recs if isinstance(recs, dict) else ():
                if "/" in key or not key:
                    raise InputError(p, f"{where}.state.records.{coll}", key, "a record key is non-empty and has "
                                     "no '/' (a record's reference is `collection/key`)")
        try:
            world.initial_state(t.state)
        except KeyError as exc:
            raise InputError(p, f"{where}.state", exc.args[0], "unknown collection") from None
