"""`aft-bench check DIR --expect FILE`: the CI regression gate over mechanism effects.

The expectations file lists bounds such as `"resume_recovery.utility_diff >= 0.9"` or
`"duplicate_effects.ci_low > 0"` over the comparisons of `DIR/analysis/` (primary and secondary).
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from aft_bench.analysis.table import read_analysis, read_table
from aft_bench.common.datafile import read_toml, validate
from aft_bench.common.errors import InputError

OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}
BOUND = re.compile(r"^\s*([a-z_]+)\.([a-z_]+)\s*(>=|<=|==|>|<)\s*(-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*$")


class Expectations(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    bounds: tuple[str, ...] = Field(min_length=1)

    @field_validator("bounds")
    @classmethod
    def _parse(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for b in v:
            if not BOUND.match(b):
                raise ValueError(f"not a bound of the form 'comparison.field >= number': {b!r}")
        return v


@dataclass(frozen=True)
class Result:
    bound: str
    measured: float | None
    ok: bool


def check(directory: Path, expect: Path, stale_ok: bool = False) -> list[Result]:
    """Evaluate every bound of `expect` on the analysis of `directory` (refused when that analysis was made
    from other results than the directory holds now, unless `stale_ok`)."""
    bounds = validate(Expectations, read_toml(expect), expect).bounds
    read_analysis(directory, stale_ok)  # refuses stale or broken results
    rows = [r for name in ("primary", "secondary") for r in read_table(directory, name)]
    return evaluate(rows, bounds, expect)


def evaluate(table: list[dict[str, Any]], bounds: tuple[str, ...], expect: Path) -> list[Result]:
    """Each bound of `expect` measured on the analysis rows `table` (primary and secondary)."""
    rows = {r.get("comparison"): r for r in table}
    out = []
    for i, b in enumerate(bounds):
        m = BOUND.match(b)
        assert m is not None
        comp, field, op, value = m.groups()
        if comp not in rows:
            raise InputError(expect, f"bounds.{i}", b, f"unknown comparison '{comp}'")
        if field not in rows[comp]:
            raise InputError(expect, f"bounds.{i}", b, f"unknown field '{field}'")
        measured = rows[comp][field]
        if isinstance(measured, bool) or not isinstance(measured, (int, float, type(None))):
            raise InputError(expect, f"bounds.{i}", b, f"field '{field}' is not a number ({measured!r})")
        ok = measured is not None and OPS[op](float(measured), float(value))
        out.append(Result(b, None if measured is None else float(measured), ok))
    return out
