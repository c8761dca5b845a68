"""An experiment's analysis plan as its results record it: the comparisons its config named and the families
they are adjusted in (the manifest's `comparisons` and `families`). Results that name none (served episodes of
no config) are planned over the shipped comparisons whose two arms ran, in one Holm family, and say so."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from aft_bench.experiment.comparisons import DEFAULT_FAMILY, Comparison, Family, load_comparisons


@dataclass(frozen=True)
class Plan:
    comparisons: tuple[Comparison, ...]
    families: tuple[Family, ...]
    note: str | None = None  # how the plan was found, when the results did not record one


def _comparison(raw: Any) -> Comparison | None:
    if not isinstance(raw, dict):
        return None
    try:  # a manifest made before families moved to the config records each comparison's own
        return Comparison.model_validate({k: v for k, v in raw.items() if k != "family"})
    except ValueError:
        return None


def plan_of(manifest: dict[str, Any], results: pd.DataFrame | None = None) -> Plan:
    """The plan `manifest` records; `results` picks the comparisons of results that record none."""
    raw = manifest.get("comparisons") if isinstance(manifest, dict) else None
    comps = tuple(c for c in map(_comparison, raw) if c is not None) if isinstance(raw, list) else ()
    if comps and len(comps) == len(raw):  # type: ignore[arg-type]
        ids = [c.id for c in comps]
        fams = manifest.get("families")
        if isinstance(fams, list) and fams:
            try:
                declared = tuple(Family.model_validate(f) for f in fams)
            except ValueError:
                declared = ()
            if declared and sorted(c for f in declared for c in f.comparisons) == sorted(ids):
                return Plan(comps, declared)
        old = {c["id"]: c.get("family") for c in raw if isinstance(c, dict)}  # type: ignore[union-attr]
        if any(old.values()):  # recorded before families were the config's: each comparison's own
            return Plan(comps, _by_old_family(ids, old))
        return Plan(comps, (Family(name=DEFAULT_FAMILY, comparisons=tuple(ids)),))
    shipped = load_comparisons()
    if results is not None and {"workload", "condition"} <= set(results.columns):
        ran = set(zip(results["workload"], results["condition"]))
        shipped = tuple(c for c in shipped if (c.workload, c.treatment) in ran and (c.workload, c.control) in ran)
    fams = (Family(name=DEFAULT_FAMILY, comparisons=tuple(c.id for c in shipped)),) if shipped else ()
    return Plan(shipped, fams, "these results name no comparisons (served episodes of no config): the shipped "
                               "comparisons whose two arms ran, in one Holm family")


def _by_old_family(ids: list[str], old: dict[str, Any]) -> tuple[Family, ...]:
    primary = tuple(i for i in ids if old.get(i) != "secondary")
    secondary = tuple(i for i in ids if old.get(i) == "secondary")
    return tuple(f for f in (Family(name="primary", comparisons=primary) if primary else None,
                             Family(name="secondary", comparisons=secondary, adjust="none") if secondary else None)
                 if f is not None)
