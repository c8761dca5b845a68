"""Workloads as data: a world, fault variants and tasks (the task clusters; 16 where a comparison draws inference), in `worlds/workloads/*.toml`."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from aft_bench.common.canonical import digest
from aft_bench.common.datafile import read_toml, validate
from aft_bench.common.errors import InputError
from aft_bench.runtime.faults import FaultSchedule, FaultSpec, check_schedule
from aft_bench.runtime.gateway import GatewayFault, GatewaySchedule
from aft_bench.tasks.task import Task, check_external_tasks, check_tasks
from aft_bench.world.catalog import all_tools, catalog_world, generate_catalog, load_vocab
from aft_bench.world.external import ExternalWorld, is_external, load_external
from aft_bench.world.manifest import World, find_world

CATALOG = "catalog"


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Variant(_Strict):
    """One fault realization family of a workload (e.g. false success vs false failure)."""

    id: str
    faults: tuple[FaultSpec, ...] = ()


class ExternalVariant(_Strict):
    """A fault variant of a workload on an external world: faults at the gateway."""

    id: str
    faults: tuple[GatewayFault, ...] = ()


class WorkloadInfo(_Strict):
    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    world: str
    description: str = ""
    catalog_sizes: tuple[int, ...] = ()


class WorkloadFile(_Strict):
    workload: WorkloadInfo
    variants: tuple[Variant, ...] = (Variant(id="none"),)
    tasks: tuple[Task, ...] = Field(min_length=1)


class ExternalWorkloadFile(_Strict):
    """A workload whose world is an external MCP server (`world = "git"`, or `"git@2025.11.25"` for another
    installed version of its server)."""

    workload: WorkloadInfo
    variants: tuple[ExternalVariant, ...] = (ExternalVariant(id="none"),)
    tasks: tuple[Task, ...] = Field(min_length=1)


@dataclass(frozen=True)
class Workload:
    path: Path
    info: WorkloadInfo
    variants: tuple[Variant, ...] | tuple[ExternalVariant, ...]
    tasks: tuple[Task, ...]
    hash: str
    external: ExternalWorld | None = None  # the world, when it is a real server behind the gateway
    _schedules: dict[tuple[str, tuple[str, ...]], tuple[Variant, FaultSchedule]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    @property
    def id(self) -> str:
        return self.info.id

    def gateway_schedule(self, variant: ExternalVariant, task: Task) -> GatewaySchedule:
        """An external workload's variant as the gateway's schedule, aimed at the task's first target tool."""
        return GatewaySchedule(id=f"{self.id}/{variant.id}", faults=variant.faults).bound(task.target_ops[0])

    def variants_for(self, task: Task) -> tuple[Variant, ...]:
        return tuple(v for v in self.variants if not task.variants or v.id in task.variants)

    def schedule(self, variant: Variant, task: Task) -> FaultSchedule:
        """The variant's faults, each aimed at the task's first target operation unless it names one (made once per
        variant and first target operation: a schedule is frozen, and its hash is computed once)."""
        key = (variant.id, task.target_ops[:1])
        made = self._schedules.get(key)
        if made is not None and (made[0] is variant or made[0] == variant):  # all a schedule is made of
            return made[1]
        faults = tuple(f if f.op is not None else f.model_copy(update={"op": task.target_ops[0]})
                       for f in variant.faults)
        schedule = FaultSchedule(id=f"{self.id}/{variant.id}", faults=faults)
        self._schedules[key] = (variant, schedule)
        return schedule

    def sizes(self) -> tuple[int | None, ...]:
        return self.info.catalog_sizes or (None,)


def external_world(worlds_dir: Path, ref: str) -> ExternalWorld | None:
    """The external world a reference names (`name` or `name@version`), or None for a built-in world."""
    name, _, version = ref.partition("@")
    folder = worlds_dir / name
    if not name or Path(name).is_absolute() or ".." in Path(name).parts or not is_external(folder):
        return None
    world = load_external(folder)
    return world.with_version(version) if version else world


def load_workload(path: Path, worlds_dir: Path) -> Workload:
    raw = read_toml(path)
    ref = (raw.get("workload") or {}).get("world") if isinstance(raw.get("workload"), dict) else None
    ext = external_world(worlds_dir, ref) if isinstance(ref, str) else None
    if ext is not None:
        edata = validate(ExternalWorkloadFile, raw, path)
        check_external_tasks(edata.tasks, ext, path)
        for i, ev in enumerate(edata.variants):
            for j, f in enumerate(ev.faults):
                if f.tool is not None and f.tool not in ext.tools:
                    raise InputError(path, f"variants.{i}.faults.{j}.tool", f.tool,
                                     f"world '{ext.id}' has no such tool; known: {', '.join(sorted(ext.tools))}")
        _check_variant_refs(edata.tasks, {v.id for v in edata.variants}, path)
        return Workload(path, edata.workload, edata.variants, edata.tasks, digest(edata.model_dump(mode="json")),
                        external=ext)
    data = validate(WorkloadFile, raw, path)
    if data.workload.world == CATALOG:
        vocab = load_vocab()
        world = catalog_world(tuple(all_tools(vocab).values()))
        for i, size in enumerate(data.workload.catalog_sizes):
            if size not in vocab.sizes:
                raise InputError(path, f"workload.catalog_sizes.{i}", size, f"not one of {list(vocab.sizes)}")
    else:
        world = find_world(worlds_dir, data.workload.world)
    check_tasks(data.tasks, world, path)
    for i, v in enumerate(data.variants):
        check_schedule(FaultSchedule(id=v.id, faults=v.faults), world.operations, path, f"variants.{i}.faults")
    _check_variant_refs(data.tasks, {v.id for v in data.variants}, path)
    return Workload(path, data.workload, data.variants, data.tasks, digest(data.model_dump(mode="json")))


def _check_variant_refs(tasks: tuple[Task, ...], ids: set[str], path: Path) -> None:
    for i, t in enumerate(tasks):
        for v in t.variants:
            if v not in ids:
                raise InputError(path, f"tasks.{i}.variants", v, f"unknown variant; known: {sorted(ids)}")


@dataclass(frozen=True)
class WorkloadSet:
    """Every workload under `worlds/workloads/`, by id."""

    dir: Path
    items: dict[str, Workload]

    def get(self, wid: str, path: str | Path = "<config>", field: str = "workloads") -> Workload:
        if wid not in self.items:
            raise InputError(path, field, wid, f"unknown workload; known: {', '.join(self.items)}")
        return self.items[wid]


def load_workloads(worlds_dir: Path, extra: tuple[Path, ...] = ()) -> WorkloadSet:
    """Every workload of `worlds_dir/workloads/` and then of each `extra` folder's (an experiment's own worlds),
    each resolving its world in its own folder; an id defined twice is an error naming both files."""
    items: dict[str, Workload] = {}
    for folder in (worlds_dir, *extra):
        for p in sorted((folder / "workloads").glob("*.toml")):
            w = load_workload(p, folder)
            if w.id in items:
                raise InputError(p, "workload.id", w.id, f"duplicate workload id (also {items[w.id].path})")
            items[w.id] = w
    return WorkloadSet(worlds_dir, items)


@lru_cache(maxsize=256)
def _catalog_world(size: int, seed: int, required: tuple[str, ...]) -> World:
    return catalog_world(generate_catalog(size, seed, required))


def world_for(workload: Workload, task: Task, size: int | None, seed: int) -> World:
    """The world a cell runs in: a generated catalog for discovery, else the workload's manifest world."""
    if workload.external is not None:
        raise TypeError(f"workload {workload.id} runs on an external world: use workload.external")
    if workload.info.world == CATALOG:
        return _catalog_world(size or min(load_vocab().sizes), seed, task.target_ops)
    return _named_world(workload.path.parent.parent, workload.info.world)


@lru_cache(maxsize=16)
def _named_world(worlds_dir: Path, world_id: str) -> World:
    return find_world(worlds_dir, world_id)
