"""The paired comparisons as data (treatment, control, workload, endpoint), from the shipped file, a
`comparisons.toml` beside a config's own worlds, or the config itself; and the families an experiment's analysis
adjusts them in. Which comparisons are primary is the experiment's to say (`[experiment.families]`), not the
comparison's."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aft_bench.common.datafile import read_toml, validate
from aft_bench.common.errors import FieldProblem, InputError
from aft_bench.common.paths import CONFIGS

COMPARISONS_PATH = CONFIGS / "comparisons.toml"


class Comparison(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_family(cls, data: Any) -> Any:
        if isinstance(data, dict) and "family" in data:
            raise FieldProblem("family", data["family"], "a comparison's family is the experiment's to declare: list "
                               "it under [experiment.families] in the config")
        return data

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    treatment: str
    control: str
    workload: str
    endpoint: str
    direction: Literal["higher", "lower"]
    test: Literal["two_sided", "noninferiority"]
    margin: float | None = None
    # An agent contrast (e.g. ToolPro's policy vs stepwise on one condition): the agent-spec parameters each arm's
    # runs must have; pairs then match on everything but the agent spec.
    treatment_agent: dict[str, Any] | None = None
    control_agent: dict[str, Any] | None = None
    # Met only together with another comparison of the file (the paper's pairing for discovery: fewer context
    # tokens *while* recall stays non-inferior), so an agent that does nothing cannot meet it alone.
    jointly_with: str | None = None

    @model_validator(mode="after")
    def _arms_differ(self) -> Comparison:
        if (self.treatment_agent is None) != (self.control_agent is None):
            raise ValueError("treatment_agent and control_agent are given together or not at all")
        if self.treatment == self.control and self.treatment_agent == self.control_agent:
            raise ValueError("treatment and control are the same arm")
        return self

    @property
    def agent_contrast(self) -> bool:
        return self.treatment_agent is not None

    @property
    def sign(self) -> int:
        """+1 if higher is better, -1 if lower is better: utility = sign * (treatment - control)."""
        return 1 if self.direction == "higher" else -1


class ComparisonFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    comparisons: tuple[Comparison, ...] = Field(min_length=1)


@lru_cache(maxsize=16)
def load_comparisons(path: Path = COMPARISONS_PATH) -> tuple[Comparison, ...]:
    """One comparisons file, each id once and each `jointly_with` another comparison of the file."""
    found = validate(ComparisonFile, read_toml(path), path).comparisons
    return joined(found, [(path, f"comparisons.{i}") for i in range(len(found))])


def joined(comps: tuple[Comparison, ...], where: list[tuple[Path, str]]) -> tuple[Comparison, ...]:
    """`comps` (each from the file and field in `where`) as one set: an id defined twice, or a `jointly_with`
    naming no other comparison of the set, is an InputError naming the second definition."""
    seen: dict[str, tuple[Path, str]] = {}
    for c, (path, field) in zip(comps, where):
        if c.id in seen:
            first = seen[c.id]
            raise InputError(path, f"{field}.id", c.id, f"already defined at {first[0]} ({first[1]})")
        seen[c.id] = (path, field)
    for c, (path, field) in zip(comps, where):
        if c.jointly_with is not None and (c.jointly_with not in seen or c.jointly_with == c.id):
            raise InputError(path, f"{field}.jointly_with", c.jointly_with, "not another comparison defined")
    return comps


class Family(BaseModel):
    """Comparisons analysed together: Holm across them (`adjust = "holm"`), or each with its unadjusted p
    (`"none"`: outside any family-wise correction, as the paper's secondary comparison)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _a_list_is_holm(cls, data: Any) -> Any:
        return {"comparisons": data} if isinstance(data, list) else data

    name: str = Field(default="", pattern=r"^$|^[A-Za-z0-9_.-]+$")
    comparisons: tuple[str, ...] = Field(min_length=1)
    adjust: Literal["holm", "none"] = "holm"


DEFAULT_FAMILY = "primary"


def families(declared: dict[str, Family], chosen: tuple[str, ...]) -> tuple[Family, ...]:
    """The experiment's families, named and in the config's order: as declared (each chosen comparison in exactly
    one), or by default all of its comparisons in one Holm family. A problem is a FieldProblem naming it."""
    if not declared:
        return (Family(name=DEFAULT_FAMILY, comparisons=chosen),) if chosen else ()
    where: dict[str, str] = {}
    for name, fam in declared.items():
        for cid in fam.comparisons:
            if cid not in chosen:
                raise FieldProblem(f"families.{name}", cid, "not one of the experiment's comparisons")
            if cid in where:
                raise FieldProblem(f"families.{name}", cid, f"already in family {where[cid]!r}")
            where[cid] = name
    left = [c for c in chosen if c not in where]
    if left:
        raise FieldProblem("families", left, "every comparison of the experiment belongs to one family")
    return tuple(fam.model_copy(update={"name": name}) for name, fam in declared.items())
