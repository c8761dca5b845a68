"""Detector calibration: every detector must fire on its known-positive case and stay silent on its
known-negative one, so an apparent zero rate can never come from a detector that never activates.

Cases are data (`worlds/calibration/cases.toml`): a task, a fault schedule, and a scripted call sequence.
Also the two sanity baselines: a do-nothing agent and the tasks' scripted oracle agents.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aft_bench.common.datafile import read_toml, validate
from aft_bench.common.errors import FieldProblem
from aft_bench.episode.episode import EpisodeResult, run_scripted
from aft_bench.judge.detectors import DETECTORS
from aft_bench.runtime.faults import FaultSchedule, FaultSpec, check_schedule, require_ops
from aft_bench.tasks.task import Step
from aft_bench.tasks.worldset import WorldSet


class Case(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    detector: str
    positive: bool
    task: str = Field(pattern=r"^[a-z0-9_]+/[A-Za-z0-9_.-]+$")
    faults: tuple[FaultSpec, ...] = ()
    seed: int = 0
    durable_state: bool = False
    steps: tuple[Step, ...]
    note: str = ""

    @model_validator(mode="after")
    def _known(self) -> Case:
        if self.detector not in DETECTORS:
            raise FieldProblem("detector", self.detector, f"unknown detector; known: {', '.join(DETECTORS)}")
        return self


class CaseFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    cases: tuple[Case, ...]


@dataclass(frozen=True)
class CaseResult:
    case: Case
    fired: bool
    run: EpisodeResult

    @property
    def ok(self) -> bool:
        return self.fired == self.case.positive


@dataclass(frozen=True)
class DetectorRow:
    detector: str
    positive_fired: bool | None
    negative_silent: bool | None

    @property
    def ok(self) -> bool:
        return bool(self.positive_fired) and bool(self.negative_silent)


def load_cases(path: Path) -> tuple[Case, ...]:
    return validate(CaseFile, read_toml(path), path).cases


def run_cases(catalog: WorldSet, path: Path) -> list[CaseResult]:
    out = []
    for i, case in enumerate(load_cases(path)):
        world, task = catalog.task(case.task, path, f"cases.{i}.task")
        schedule = FaultSchedule(id=f"calibration-{i}", faults=case.faults)
        require_ops(schedule, path, f"cases.{i}.faults")
        check_schedule(schedule, world.operations, path, f"cases.{i}.faults")
        run = run_scripted(world, task, case.steps, schedule, case.seed, durable_state=case.durable_state)
        out.append(CaseResult(case, DETECTORS[case.detector](run.labels), run))
    return out


def detector_table(results: list[CaseResult]) -> list[DetectorRow]:
    """One row per detector: did every positive case fire, did every negative case stay silent."""
    rows = []
    for name in DETECTORS:
        pos = [r.fired for r in results if r.case.detector == name and r.case.positive]
        neg = [not r.fired for r in results if r.case.detector == name and not r.case.positive]
        rows.append(DetectorRow(name, all(pos) if pos else None, all(neg) if neg else None))
    return rows


@dataclass(frozen=True)
class BaselineRow:
    task: str
    needs_write: bool
    nothing_outcome: str
    oracle_outcome: str
    oracle_correct: bool

    @property
    def ok(self) -> bool:
        nothing_ok = not self.needs_write or self.nothing_outcome != "completed"
        return nothing_ok and self.oracle_correct


def baselines(catalog: WorldSet) -> list[BaselineRow]:
    """Do-nothing agent (ends at once, claims nothing) and each task's scripted oracle, fault-free."""
    rows = []
    nothing = (Step(end="finish", claim="unknown"),)
    for wid in catalog.world_ids():
        world = catalog.world(wid)
        for task in catalog.tasks(wid):
            needs_write = not task.criteria.phi(world.initial_state(task.state))
            idle = run_scripted(world, task, nothing).labels
            oracle = run_scripted(world, task, task.script.oracle).labels
            rows.append(BaselineRow(f"{wid}/{task.id}", needs_write, idle.outcome, oracle.outcome, oracle.y_correct))
    return rows
