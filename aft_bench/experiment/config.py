"""Experiment configs (TOML) and their expansion into the matrix of cells to run."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aft_bench.canonical import digest
from aft_bench.comparisons import Comparison, load_comparisons
from aft_bench.conditions import Conditions, load_conditions
from aft_bench.errors import FieldProblem, InputError
from aft_bench.manifest import read_toml, validate
from aft_bench.workloads import Workload, WorkloadSet, load_workloads

MAX_CELLS = 2_000_000


class Experiment(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _single_backend(cls, data: Any) -> Any:
        """`backend = "sqlite"` is shorthand for `backends = ["sqlite"]`."""
        if isinstance(data, dict) and "backend" in data:
            if "backends" in data:
                raise FieldProblem("backend", data["backend"], "give either backend or backends, not both")
            data = {**data, "backends": [data["backend"]]}
            del data["backend"]
        return data

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    workloads: tuple[str, ...] = ()  # empty: every workload the comparisons name
    comparisons: tuple[str, ...] = ()  # adds each comparison's treatment and control on its workload
    conditions: tuple[str, ...] = ()  # run on every listed workload (e.g. the ladder)
    seeds: tuple[int, ...] = Field(default=(0,), min_length=1, max_length=100_000)
    workload_seeds: dict[str, tuple[int, ...]] = Field(default_factory=dict)  # per-workload override
    repetitions: int = Field(default=1, ge=1, le=10_000)
    controllers: tuple[Literal["deterministic"], ...] = ("deterministic",)
    models: tuple[str, ...] = ("none",)
    backends: tuple[Literal["memory", "sqlite"], ...] = Field(default=("memory",), min_length=1)
    tasks_per_workload: int | None = Field(default=None, ge=1)
    catalog_sizes: tuple[int, ...] = ()


class ConfigFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    experiment: Experiment


@dataclass(frozen=True)
class Cell:
    """One run tuple e = (w, tau, I, M, C, omega, r) plus the backend and catalog size."""

    world: str
    backend: str
    workload: str
    task_id: str
    condition: str
    fault: str
    fault_seed: int
    catalog_size: int | None
    controller: str
    model: str
    rep: int

    @property
    def run_id(self) -> str:
        return digest(asdict(self))[:16]

    def key(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Plan:
    """A validated config and everything it resolves to."""

    path: Path
    experiment: Experiment
    workloads: WorkloadSet
    conditions: Conditions
    comparisons: tuple[Comparison, ...]
    cells: tuple[Cell, ...]
    config_hash: str
    worlds_dir: Path

    def resolved(self) -> dict[str, Any]:
        return self.experiment.model_dump(mode="json")


def load_plan(path: str | Path, worlds_dir: Path) -> Plan:
    """Read and validate a config and expand it; any error is an InputError naming file, field, value."""
    p = Path(path)
    exp = validate(ConfigFile, read_toml(p), p).experiment
    conditions = load_conditions()
    known = {c.id: c for c in load_comparisons()}
    chosen: list[Comparison] = []
    for i, cid in enumerate(exp.comparisons):
        if cid not in known:
            raise InputError(p, f"experiment.comparisons.{i}", cid, f"unknown comparison; known: {', '.join(known)}")
        chosen.append(known[cid])
    for i, name in enumerate(exp.conditions):
        conditions.resolve(name, p, f"experiment.conditions.{i}")
    workloads = load_workloads(worlds_dir)
    wids = list(exp.workloads) or list(dict.fromkeys(c.workload for c in chosen))
    if not wids:
        raise InputError(p, "experiment.workloads", [], "name workloads or comparisons")
    for i, wid in enumerate(wids):
        workloads.get(wid, p, f"experiment.workloads.{i}")
    for wid, seeds in exp.workload_seeds.items():
        workloads.get(wid, p, f"experiment.workload_seeds.{wid}")
        if not seeds:
            raise InputError(p, f"experiment.workload_seeds.{wid}", [], "needs at least one seed")
    cells: list[Cell] = []
    for wid in wids:
        wl = workloads.get(wid)
        conds = list(exp.conditions)
        for c in chosen:
            if c.workload == wid:
                conds += [c.treatment, c.control]
        conds = list(dict.fromkeys(conds))
        for name in conds:
            conditions.resolve(name, p, "experiment.conditions")
        cells += _expand(exp, wl, conds, p)
    if not cells:
        raise InputError(p, "experiment", exp.id, "the config expands to no runs")
    if len(cells) > MAX_CELLS:
        raise InputError(p, "experiment", len(cells), f"the matrix has more than {MAX_CELLS:,} runs")
    return Plan(p, exp, workloads, conditions, tuple(chosen), tuple(cells), digest(exp.model_dump(mode="json")),
                worlds_dir)


def _expand(exp: Experiment, wl: Workload, conds: list[str], p: Path) -> list[Cell]:
    sizes: tuple[int | None, ...] = wl.sizes()
    if exp.catalog_sizes and wl.info.catalog_sizes:
        bad = [s for s in exp.catalog_sizes if s not in wl.info.catalog_sizes]
        if bad:
            raise InputError(p, "experiment.catalog_sizes", bad[0], f"not one of {list(wl.info.catalog_sizes)}")
        sizes = tuple(exp.catalog_sizes)
    tasks = wl.tasks[: exp.tasks_per_workload] if exp.tasks_per_workload else wl.tasks
    seeds = exp.workload_seeds.get(wl.id, exp.seeds)
    return [
        Cell(wl.info.world, backend, wl.id, task.id, cond, variant.id, seed, size, ctrl, model, rep)
        for backend in exp.backends
        for task in tasks
        for variant in wl.variants_for(task)
        for size in sizes
        for seed in seeds
        for cond in conds
        for ctrl in exp.controllers
        for model in exp.models
        for rep in range(exp.repetitions)
    ]
