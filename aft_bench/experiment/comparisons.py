"""The paired comparisons (seven primary, one secondary) as data: treatment, control, workload, endpoint."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

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

    @property
    def sign(self) -> int:
        """+1 if higher is better, -1 if lower is better: utility = sign * (treatment - control)."""
        return 1 if self.direction == "higher" else -1


class ComparisonFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    comparisons: tuple[Comparison, ...] = Field(min_length=1)


@lru_cache(maxsize=4)
def load_comparisons(path: Path = COMPARISONS_PATH) -> tuple[Comparison, ...]:
    return validate(ComparisonFile, read_toml(path), path).comparisons
