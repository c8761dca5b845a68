"""Interface conditions: named sets of mechanism settings (the ladder I0..I5 and I5-<mechanism> removals)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from aft_bench.common.canonical import digest
from aft_bench.common.datafile import read_toml, validate
from aft_bench.common.errors import InputError
from aft_bench.common.paths import CONFIGS

CONDITIONS_PATH = CONFIGS / "conditions.toml"


class MechanismModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    discovery: Literal["eager", "selective", "routed"]
    structured: bool
    observability: bool
    resume: bool
    durable: bool
    effects: Literal["legacy", "idempotent", "guarded"]
    verification: bool
    # MCP tool annotations (aft-bench serve): `auto` = truthful where effects are known, absent under legacy;
    # `misleading` = writes declared idempotent and non-destructive, whatever they are
    annotations: Literal["auto", "misleading"] = "auto"
    # tool programs (ToolPro): `run_program` with re-execution that emits every call again (`plain`) or
    # replays completed writes (`replay`)
    programs: Literal["off", "plain", "replay"] = "off"
    # guarded effects' commit checks: `enforced`, or `declared` = version preconditions and authority described
    # and accepted exactly as under `enforced` but never checked at the commit point (guards that are only words)
    enforcement: Literal["enforced", "declared"] = "enforced"


@dataclass(frozen=True)
class Mechanisms:
    """The mechanism settings of one interface condition."""

    discovery: str
    structured: bool
    observability: bool
    resume: bool
    durable: bool
    effects: str
    verification: bool
    annotations: str = "auto"
    programs: str = "off"
    enforcement: str = "enforced"

    @property
    def keys(self) -> bool:
        """Effect identity and idempotency keys are exposed (idempotent or guarded effects)."""
        return self.effects in ("idempotent", "guarded")

    @property
    def guards(self) -> bool:
        """Version preconditions and authority at the commit point are declared (guarded effects)."""
        return self.effects == "guarded"

    @property
    def checks_guards(self) -> bool:
        """The declared guards are checked at the commit point (not under `enforcement = "declared"`)."""
        return self.guards and self.enforcement == "enforced"

    def to_dict(self) -> dict[str, Any]:
        """The settings as a fresh dict in field order (`asdict`'s result; every field is a str or bool)."""
        return {name: getattr(self, name) for name in _FIELDS}


_FIELDS = tuple(f.name for f in fields(Mechanisms))


class Variant(BaseModel):
    """A named condition: a ladder condition with some settings changed (e.g. misleading annotations)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    base: str
    set: dict[str, Any]


class ConditionFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    ladder: dict[str, MechanismModel]
    removals: dict[str, dict[str, Any]]
    variants: dict[str, Variant] = {}


@dataclass(frozen=True)
class Conditions:
    """Every valid condition name and its resolved mechanisms."""

    table: dict[str, Mechanisms]
    hash: str

    def names(self) -> list[str]:
        return list(self.table)

    def resolve(self, name: str, path: str | Path = "<config>", field: str = "conditions") -> Mechanisms:
        if name not in self.table:
            raise InputError(path, field, name, f"unknown condition; valid: {', '.join(self.table)}")
        return self.table[name]


@lru_cache(maxsize=4)
def load_conditions(path: Path = CONDITIONS_PATH) -> Conditions:
    data = validate(ConditionFile, read_toml(path), path)
    table = {name: Mechanisms(**m.model_dump()) for name, m in data.ladder.items()}
    top = table.get("I5")
    if top is None:
        raise InputError(path, "ladder", sorted(table), "the ladder must define I5 (removals are taken from it)")
    for mech, change in data.removals.items():
        try:
            MechanismModel(**{**top.to_dict(), **change})
        except Exception:
            raise InputError(path, f"removals.{mech}", change, "not a valid mechanism setting") from None
        table[f"I5-{mech}"] = replace(top, **change)
    for name, v in data.variants.items():
        if v.base not in data.ladder:
            raise InputError(path, f"variants.{name}.base", v.base, f"not a ladder condition; known: {sorted(data.ladder)}")
        try:
            MechanismModel(**{**table[v.base].to_dict(), **v.set})
        except Exception:
            raise InputError(path, f"variants.{name}.set", v.set, "not a valid mechanism setting") from None
        table[name] = replace(table[v.base], **v.set)
    return Conditions(table, digest(data.model_dump(mode="json", exclude_defaults=True)))
