"""Experiment configs (TOML) and their expansion into the matrix of cells to run."""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from aft_bench.agents.registry import DEFAULT_AGENT, AgentSpec, agent_spec
from aft_bench.common.canonical import canonical_json, digest
from aft_bench.common.datafile import read_toml, validate
from aft_bench.common.errors import FieldProblem, InputError
from aft_bench.common.paths import WORLDS
from aft_bench.experiment.comparisons import (
    COMPARISONS_PATH,
    Comparison,
    Family,
    families,
    joined,
    load_comparisons,
)
from aft_bench.interface.mechanisms import Conditions, load_conditions
from aft_bench.tasks.workloads import Workload, WorkloadSet, load_workloads

MAX_CELLS = 2_000_000


Seed = Annotated[int, Field(ge=0, le=2**63 - 1)]  # a seed is recorded in an int64 column


class Network(BaseModel):
    """ToolPro's simulated network and decision clock: per round trip, per agent decision, per program built."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    rtt_ms: float = Field(ge=0, le=3.6e6)  # an hour: beyond it a virtual clock means nothing
    decision_ms: float = Field(ge=0, le=3.6e6)
    build_ms: float = Field(ge=0, le=3.6e6)
    # each charge scaled by a lognormal draw of mean 1 and this coefficient of variation, seeded by the run's seed
    # and task (0: the exact count formula)
    jitter: float = Field(default=0.0, ge=0, le=10)

    @model_serializer(mode="wrap")
    def _jitter_only_when_set(self, handler: Any) -> dict[str, Any]:
        """A profile without jitter dumps (and hashes: config and run keys) as before jitter existed."""
        out = handler(self)
        if not self.jitter:
            out.pop("jitter", None)
        return out


class Experiment(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

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
    seeds: tuple[Seed, ...] = Field(default=(0,), min_length=1, max_length=100_000)
    workload_seeds: dict[str, tuple[Seed, ...]] = Field(default_factory=dict)  # per-workload override
    repetitions: int = Field(default=1, ge=1, le=10_000)
    agents: tuple[dict[str, Any], ...] = Field(default=(DEFAULT_AGENT,), min_length=1, max_length=1000)
    backends: tuple[Literal["memory", "sqlite"], ...] = Field(default=("memory",), min_length=1)
    tasks_per_workload: int | None = Field(default=None, ge=1)
    catalog_sizes: tuple[int, ...] = ()
    # folders (relative to the config) of the experiment's own worlds: their workloads/ run beside the shipped
    # ones, and a comparisons.toml there defines comparisons beside the shipped ones
    worlds: tuple[str, ...] = ()
    # how the analysis adjusts the comparisons: name -> ids (Holm across them) or {comparisons, adjust}; by
    # default all of the experiment's comparisons form one Holm family
    families: dict[str, Family] = Field(default_factory=dict)
    # puts every run on ToolPro's virtual clock (row column virtual_latency_s); a list of profiles is an axis of
    # the matrix (`[[experiment.network]]`: each cell runs under one, and its agents read that clock live)
    network: Network | tuple[Network, ...] | None = None
    # Spend ceilings: not part of the config's identity, so a raised ceiling resumes the same experiment.
    max_cost_usd: float | None = Field(default=None, ge=0)
    max_tokens_total: int | None = Field(default=None, ge=1)  # for models whose price litellm does not know

    @model_validator(mode="after")
    def _families_cover_the_comparisons(self) -> Experiment:
        families(self.families, self.comparisons)
        for i, folder in enumerate(self.worlds):
            if not folder or Path(folder).is_absolute():
                raise FieldProblem(f"worlds.{i}", folder, "a folder relative to the config")
        return self

    @model_validator(mode="after")
    def _network_axis(self) -> Experiment:
        """A list of network profiles is an axis: at least one, each once."""
        if isinstance(self.network, tuple):
            if not self.network:
                raise FieldProblem("network", [], "a list of network profiles needs at least one")
            dumps = [n.model_dump() for n in self.network]
            twice = next((d for i, d in enumerate(dumps) if d in dumps[:i]), None)
            if twice is not None:
                raise FieldProblem("network", twice, "this network profile is listed twice")
        return self


SPEND_FIELDS = {"max_cost_usd", "max_tokens_total"}
NEWER_FIELDS = ("worlds", "families")  # left out of the identity while unset: older configs keep their hashes


def _identity(exp: Experiment) -> dict[str, Any]:
    out = exp.model_dump(mode="json", exclude=SPEND_FIELDS)
    for name in NEWER_FIELDS:
        if not out[name]:
            del out[name]
    return out


class ConfigFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    experiment: Experiment
    comparisons: tuple[Comparison, ...] = ()  # the config's own [[comparisons]], beside the shipped ones


@dataclass(frozen=True)
class Cell:
    """One run tuple e = (w, tau, I, M, C, omega, r) plus the backend and catalog size; the agent (C and M)
    is its registry name and its full spec."""

    world: str
    backend: str
    workload: str
    task_id: str
    condition: str
    fault: str
    fault_seed: int
    catalog_size: int | None
    agent: str
    agent_spec: str
    model: str
    rep: int
    network: str | None = None  # the cell's network profile (canonical JSON) when the config sweeps networks

    @cached_property
    def run_id(self) -> str:
        return digest(self.key())[:16]

    def key(self) -> dict[str, Any]:
        """The tuple as a dict, in field order (every field is a str, int or None); `network` only when the
        config sweeps networks, so every run id made before the axis existed stays what it was."""
        key = {name: getattr(self, name) for name in _CELL_FIELDS}
        if key["network"] is None:
            del key["network"]
        return key


_CELL_FIELDS = tuple(f.name for f in fields(Cell))


@dataclass(frozen=True)
class Matrix:
    """A validated config and everything it resolves to: its workloads, conditions, comparisons, agents and
    the cells (run tuples) of its matrix."""

    path: Path
    experiment: Experiment
    workloads: WorkloadSet
    conditions: Conditions
    comparisons: tuple[Comparison, ...]
    agents: tuple[AgentSpec, ...]
    cells: tuple[Cell, ...]
    config_hash: str
    worlds_dir: Path
    families: tuple[Family, ...] = ()
    extra_worlds: tuple[Path, ...] = ()  # the experiment's own worlds folders, resolved

    def resolved(self) -> dict[str, Any]:
        """The experiment as it identifies the results (spend ceilings left out)."""
        return _identity(self.experiment)


def visible_comparisons(config: Path, own: tuple[Comparison, ...], extra_worlds: tuple[Path, ...]
                        ) -> tuple[Comparison, ...]:
    """Every comparison a config can name: the shipped file's, then each of its worlds folders'
    `comparisons.toml`, then its own `[[comparisons]]`; an id defined twice is an error naming both places."""
    comps: list[Comparison] = []
    where: list[tuple[Path, str]] = []
    for path in (COMPARISONS_PATH, *(d / "comparisons.toml" for d in extra_worlds)):
        if path == COMPARISONS_PATH or path.is_file():
            found = load_comparisons(path)
            comps += found
            where += [(path, f"comparisons.{i}") for i in range(len(found))]
    comps += own
    where += [(config, f"comparisons.{i}") for i in range(len(own))]
    return joined(tuple(comps), where)


def _extra_worlds(exp: Experiment, p: Path, base: Path, given: tuple[Path, ...] | None) -> tuple[Path, ...]:
    """The folders seen beside `base`: the config's own `worlds` (relative to it) with the shipped worlds too,
    whatever folder `base` is (run from the folder that holds your worlds, the shipped ones stay visible); each
    folder once."""
    if given is not None:
        return given
    out: list[Path] = [WORLDS.resolve()] if exp.worlds else []
    for i, rel in enumerate(exp.worlds):
        folder = (p.parent / rel).resolve()
        if not folder.is_dir():
            raise InputError(p, f"experiment.worlds.{i}", rel, f"no such folder ({folder})")
        out.append(folder)
    return tuple(dict.fromkeys(f for f in out if f != base.resolve()))


def load_matrix(path: str | Path, worlds_dir: Path, served: bool = False,
                extra_worlds: tuple[Path, ...] | None = None) -> Matrix:
    """Read and validate a config and expand it; any error is an InputError naming file, field, value.
    `served`: the config is played by `serve-matrix`, so an external MCP agent (`mcp`) may be listed.
    `extra_worlds`: where the config's own `worlds` folders are (a worker's copies), if not beside it."""
    p = Path(path)
    data = validate(ConfigFile, read_toml(p), p)
    exp = data.experiment
    extra = _extra_worlds(exp, p, worlds_dir, extra_worlds)
    agents = tuple(agent_spec(raw, p, f"experiment.agents.{i}") for i, raw in enumerate(exp.agents))
    for i, spec in enumerate(agents):
        if spec.kind.surface != "interface" and not (served and spec.kind.surface == "served"):
            raise InputError(p, f"experiment.agents.{i}.name", spec.name,
                             "this agent drives the raw pipeline (calibration only)" if spec.kind.surface == "raw"
                             else "this agent is an external MCP client: use `aft-bench serve`")
    if len(set(agents)) != len(agents):
        raise InputError(p, "experiment.agents", [a.json for a in agents], "the same agent spec is listed twice")
    conditions = load_conditions()
    known = {c.id: c for c in visible_comparisons(p, data.comparisons, (worlds_dir, *extra))}
    chosen: list[Comparison] = []
    for i, cid in enumerate(exp.comparisons):
        if cid not in known:
            raise InputError(p, f"experiment.comparisons.{i}", cid, f"unknown comparison; known: {', '.join(known)}")
        chosen.append(known[cid])
    for i, name in enumerate(exp.conditions):
        conditions.resolve(name, p, f"experiment.conditions.{i}")
    workloads = load_workloads(worlds_dir, extra)
    for i, c in enumerate(chosen):  # each comparison against what this run can see
        field = f"experiment.comparisons.{i}"
        workloads.get(c.workload, p, field)
        for arm in (c.treatment, c.control):
            conditions.resolve(arm, p, field)
        if exp.workloads and c.workload not in exp.workloads:
            raise InputError(p, field, c.id, f"its workload {c.workload} is not in experiment.workloads")
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
        cells += _expand(exp, wl, conds, agents, p)
    if not cells:
        raise InputError(p, "experiment", exp.id, "the config expands to no runs")
    for i, spec in enumerate(agents):  # an agent that reads what it measured in a deployment needs it measured
        check = spec.kind.deployment_problem
        if check is not None:
            params = spec.kind.params.model_validate(spec.params)
            for cell in cells:
                if cell.agent_spec == spec.json:
                    problem = check(params, cell.world, cell.network, exp.network is not None)
                    if problem is not None:
                        raise InputError(p, f"experiment.agents.{i}", spec.params.get("mode"), problem)
    if len(cells) > MAX_CELLS:
        raise InputError(p, "experiment", len(cells), f"the matrix has more than {MAX_CELLS:,} runs")
    identity = _identity(exp)
    read = [spec.params["profile"]["sha256"] for spec in agents if isinstance(spec.params.get("profile"), dict)]
    if read:  # the files agents read are part of the config (so of its lock and manifest); other hashes unchanged
        identity["agent_files"] = read
    shipped = [c.model_dump(mode="json") for c in load_comparisons()]
    own = [c.model_dump(mode="json") for c in chosen if c.model_dump(mode="json") not in shipped]
    if own:  # a comparison defined outside the shipped file is part of the config (other hashes unchanged)
        identity["comparison_definitions"] = own
    return Matrix(p, exp, workloads, conditions, tuple(chosen), agents, tuple(cells), digest(identity), worlds_dir,
                  families(exp.families, exp.comparisons), extra)


def _expand(exp: Experiment, wl: Workload, conds: list[str], agents: tuple[AgentSpec, ...], p: Path) -> list[Cell]:
    sizes: tuple[int | None, ...] = wl.sizes()
    if exp.catalog_sizes and wl.info.catalog_sizes:
        bad = [s for s in exp.catalog_sizes if s not in wl.info.catalog_sizes]
        if bad:
            raise InputError(p, "experiment.catalog_sizes", bad[0], f"not one of {list(wl.info.catalog_sizes)}")
        sizes = tuple(exp.catalog_sizes)
    tasks = wl.tasks[: exp.tasks_per_workload] if exp.tasks_per_workload else wl.tasks
    seeds = exp.workload_seeds.get(wl.id, exp.seeds)
    networks = [canonical_json(n.model_dump()) for n in exp.network] if isinstance(exp.network, tuple) else [None]
    return [
        Cell(wl.info.world, backend, wl.id, task.id, cond, variant.id, seed, size, agent.name, agent.json,
             agent.model, rep, network)
        for network in networks
        for backend in exp.backends
        for task in tasks
        for variant in wl.variants_for(task)
        for size in sizes
        for seed in seeds
        for cond in conds
        for agent in agents
        for rep in range(exp.repetitions)
    ]
