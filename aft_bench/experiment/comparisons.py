"""The paired comparisons (seven primary, one secondary) as data: treatment, control, workload, endpoint."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aft_bench.common.datafile import read_toml, validate
from aft_bench.common.paths import CONFIGS

COMPARISONS_PATH = CONFIGS / "comparisons.toml"


class Comparison(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    treatment: str
    control: str
    workload: str
    endpoint: str
    direction: Literal["higher", "lower"]
    test: Literal["two_sided", "noninferiority"]
    margin: float | None = None
    family: Literal["primary", "secondary"]
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

    @model_validator(mode="after")
    def _joint_partners_exist(self) -> ComparisonFile:
        ids = {c.id for c in self.comparisons}
        for c in self.comparisons:
            if c.jointly_with is not None and (c.jointly_with not in ids or c.jointly_with == c.id):
                raise ValueError(f"comparison {c.id}: jointly_with {c.jointly_with!r} is not another comparison "
                                 f"of this file")
        return self


@lru_cache(maxsize=4)
def load_comparisons(path: Path = COMPARISONS_PATH) -> tuple[Comparison, ...]:
    return validate(ComparisonFile, read_toml(path), path).comparisons
