"""World manifests: records, their initial state s0, principals, and business operations as data."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aft_bench.common.canonical import Frozen, digest
from aft_bench.common.datafile import read_toml, validate
from aft_bench.common.errors import FieldProblem, InputError
from aft_bench.common.jsoncopy import deep_copy

EffectClass = Literal["read", "reversible", "compensatable", "irreversible"]
OpKind = Literal["read", "list", "create", "update", "update_many", "job"]
ArgType = Literal["str", "int", "float", "bool"]
WRITE_KINDS = frozenset({"create", "update", "update_many", "job"})
KEY_KINDS = frozenset({"read", "update", "job"})

VERSION = "_version"


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Arg(_Strict):
    """One argument of an operation; `business` args form the logical effect identity."""

    type: ArgType
    description: str = ""
    business: bool = True


class Operation(_Strict):
    """A business operation, built from one generic primitive (`kind`) over one collection."""

    description: str
    kind: OpKind
    effect: EffectClass
    collection: str
    permission: str
    args: dict[str, Arg] = Field(default_factory=dict)
    key: str | None = None
    where: dict[str, Any] = Field(default_factory=dict)
    set: dict[str, Any] = Field(default_factory=dict)
    work_units: int = Field(default=1, ge=1)
    work_units_field: str | None = None
    creates: str | None = None
    compensates: str | None = None
    key_prefix: str = Field(default="", pattern=r"^[A-Za-z0-9_.-]*$")  # refs are `collection/key`: no "/"

    @model_validator(mode="after")
    def _consistent(self) -> Operation:
        is_write = self.kind in WRITE_KINDS
        if is_write and self.effect == "read":
            raise FieldProblem("effect", self.effect, f"kind '{self.kind}' writes, so effect cannot be 'read'")
        if not is_write and self.effect != "read":
            raise FieldProblem("effect", self.effect, f"kind '{self.kind}' only reads, so effect must be 'read'")
        if self.kind in KEY_KINDS and self.key is None:
            raise FieldProblem("key", None, f"kind '{self.kind}' needs 'key' (the argument naming the target record)")
        if self.key is not None and self.key not in self.args:
            raise FieldProblem("key", self.key, "not a declared argument")
        if self.key is not None and self.args[self.key].type != "str":
            raise FieldProblem(f"args.{self.key}.type", self.args[self.key].type, "a key argument is a str (record keys are)")
        if self.kind == "job" and self.creates is None:
            raise FieldProblem("creates", None, "kind 'job' needs 'creates' (the collection receiving its artifact)")
        for part, template in (("where", self.where), ("set", self.set)):
            for name, val in template.items():
                if isinstance(val, str) and val.startswith("$") and val[1:] not in self.args:
                    raise FieldProblem(f"{part}.{name}", val, "refers to an undeclared argument")
        return self

    @property
    def is_write(self) -> bool:
        return self.kind in WRITE_KINDS


class Principal(_Strict):
    permissions: list[str] = Field(default_factory=list)


class WorldInfo(_Strict):
    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    description: str = ""


class WorldManifest(_Strict):
    world: WorldInfo
    collections: dict[str, dict[str, Any]] = Field(default_factory=dict)
    state: dict[str, dict[str, dict[str, Any]]] = Field(default_factory=dict)
    principals: dict[str, Principal]
    operations: dict[str, Operation]

    @model_validator(mode="after")
    def _references(self) -> WorldManifest:
        for coll, recs in self.state.items():
            if coll not in self.collections:
                raise FieldProblem(f"state.{coll}", coll, "collection is not declared in [collections]")
            for key in recs:
                if "/" in key or not key:
                    raise FieldProblem(f"state.{coll}.{key}", key, "a record key is non-empty and has no '/' "
                                       "(a record's reference is `collection/key`)")
        for name, op in self.operations.items():
            for fld in ("collection", "creates"):
                coll = getattr(op, fld)
                if coll is not None and coll not in self.collections:
                    raise FieldProblem(f"operations.{name}.{fld}", coll, "unknown collection")
            if op.compensates is not None and op.compensates not in self.operations:
                raise FieldProblem(f"operations.{name}.compensates", op.compensates, "unknown operation")
        return self


@dataclass(frozen=True)
class World:
    """A loaded, validated world: the manifest plus its source path and content hash."""

    path: Path
    manifest: WorldManifest

    @property
    def id(self) -> str:
        return self.manifest.world.id

    @property
    def operations(self) -> dict[str, Operation]:
        return self.manifest.operations

    @cached_property
    def hash(self) -> str:
        return digest(self.manifest.model_dump(mode="json"))

    def initial_state(self, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """s0 as a fresh plain dict: records (with versions), permissions, counters, ledger, idempotency table."""
        state = self._s0.thaw()
        if overrides:
            apply_overrides(state, overrides)
        return state

    @cached_property
    def _s0(self) -> Frozen:
        records: dict[str, dict[str, dict[str, Any]]] = {c: {} for c in self.manifest.collections}
        for coll, recs in self.manifest.state.items():
            for key, rec in recs.items():
                records[coll][key] = {**deep_copy(rec), VERSION: rec.get(VERSION, 1)}
        permissions = {p: sorted(set(v.permissions)) for p, v in self.manifest.principals.items()}
        state: dict[str, Any] = {
            "records": records,
            "permissions": permissions,
            "counters": {c: 0 for c in self.manifest.collections},
            "ledger": [],
            "idempotency": {},
        }
        return Frozen(state)


def apply_overrides(state: dict[str, Any], overrides: dict[str, Any]) -> None:
    """Patch s0 with a task's overrides: {"records": {coll: {key: fields}}, "permissions": {principal: [...]}}."""
    for coll, recs in overrides.get("records", {}).items():
        if coll not in state["records"]:
            raise KeyError(f"records.{coll}")
        for key, fields in recs.items():
            base = state["records"][coll].get(key, {VERSION: 1})
            state["records"][coll][key] = {**base, **deep_copy(fields)}
    for principal, perms in overrides.get("permissions", {}).items():
        state["permissions"][principal] = sorted(set(perms))


def load_world(path: str | Path) -> World:
    """Load and validate a world manifest (TOML); bad input raises InputError naming file, field, value."""
    p = Path(path)
    if p.is_dir():
        p = p / "world.toml"
    manifest = validate(WorldManifest, read_toml(p), p)
    return World(path=p, manifest=manifest)


def find_world(worlds_dir: Path, world_id: str) -> World:
    """Load `worlds/<id>/world.toml`; an unknown id lists the known ones. A world reference never leaves
    `worlds_dir` (no `..`, no absolute path, no symbolic link out)."""
    path = worlds_dir / world_id / "world.toml"
    if Path(world_id).is_absolute() or not path.resolve().is_relative_to(worlds_dir.resolve()):
        raise InputError(worlds_dir, "world", world_id, "a world reference must name a folder inside the worlds "
                         "directory")
    if not path.exists():
        known = sorted(d.name for d in worlds_dir.iterdir() if (d / "world.toml").exists())
        raise InputError(worlds_dir, "world", world_id, f"unknown world; known: {', '.join(known)}")
    return load_world(path)
