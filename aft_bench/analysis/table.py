"""The results table as the analysis may use it: read safely and checked against the declared row model
(columns, types, no NaN where a value is required, one row per run and per tuple) before anything reaches a
statistic. Every problem names the column and the runs."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from aft_bench.common.errors import InputError
from aft_bench.common.files import read_json
from aft_bench.common.memory import ensure_arrow_room
from aft_bench.episode.row import LATE_COLUMNS, SCHEMA

KEY_COLUMNS = [c.name for c in SCHEMA.values() if c.group == "key" and c.name != "run_id"]


@dataclass(frozen=True)
class Problem:
    column: str
    run_ids: tuple[str, ...]
    problem: str

    def __str__(self) -> str:
        shown = ", ".join(self.run_ids[:3]) + (f" and {len(self.run_ids) - 3} more" if len(self.run_ids) > 3 else "")
        return f"column '{self.column}': {self.problem}" + (f" (runs {shown})" if shown else "")


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_float(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)) \
        and math.isfinite(float(v))


def _is_json(v: Any) -> bool:
    if not isinstance(v, str):
        return False
    try:
        json.loads(v)
    except ValueError:
        return False
    return True


CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "int": (_is_int, "an integer"),
    "float": (_is_float, "a finite number"),
    "bool": (lambda v: isinstance(v, (bool, np.bool_)), "true or false"),
    "json": (_is_json, "a JSON text"),
}


def _null(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def bad_rows(values: pd.Series, base: str, nullable: bool) -> list[int]:
    """Positions of the values that break a column's type (`base`, null allowed or not): read off the dtype where
    the dtype decides (a numpy integer or boolean column holds no null and nothing else), else value by value."""
    by_dtype = _bad_by_dtype(values, base, nullable)
    if by_dtype is not None:
        return by_dtype
    ok = CHECKS[base][0]
    verdicts: dict[tuple[type, Any], bool] = {}  # a column repeats its values (JSON texts above all): judge each once
    out = []
    for i, v in enumerate(values.tolist()):
        key = (type(v), v)
        try:
            good = verdicts[key]
        except KeyError:
            good = verdicts[key] = (nullable and _null(v)) or (not _null(v) and ok(v))
        except TypeError:  # an unhashable value (a list in an object column)
            good = (nullable and _null(v)) or (not _null(v) and ok(v))
        if not good:
            out.append(i)
    return out


def _bad_by_dtype(values: pd.Series, base: str, nullable: bool) -> list[int] | None:
    """`bad_rows` where the column's dtype alone decides, None where each value must be looked at."""
    dt = values.dtype
    if isinstance(dt, np.dtype):
        if dt.kind == "b":
            return [] if base == "bool" else None
        if dt.kind in "iu":
            return [] if base in ("int", "float") else None
        if dt.kind == "f" and base == "float":
            a = values.to_numpy()
            broken = np.isinf(a) if nullable else ~np.isfinite(a)  # a NaN is the null
            return np.flatnonzero(broken).tolist()
        return None
    masked = dt.kind in "iu" and base in ("int", "float") or dt.kind == "b" and base == "bool"
    if masked or isinstance(dt, pd.StringDtype) and base == "str":  # values of the kind, or a null
        return [] if nullable else np.flatnonzero(values.isna().to_numpy()).tolist()
    return None


def problems(df: pd.DataFrame) -> list[Problem]:
    """Every way `df` departs from the row model: missing or extra columns, wrongly typed or missing values
    (NaN included), duplicate run ids and duplicate run tuples."""
    out: list[Problem] = []
    missing = [c for c in SCHEMA if c not in df.columns]
    extra = [c for c in df.columns if c not in SCHEMA]
    out += [Problem(c, (), "missing from the table") for c in missing]
    out += [Problem(str(c), (), "not a column of the row model") for c in extra]
    ids = df["run_id"].astype(str).tolist() if "run_id" in df.columns else [str(i) for i in range(len(df))]
    for name, col in SCHEMA.items():
        if name not in df.columns:
            continue
        base, nullable = col.type.rstrip("?"), col.type.endswith("?")
        what = CHECKS[base][1]
        bad = [ids[i] for i in bad_rows(df[name], base, nullable)]
        if bad:
            out.append(Problem(name, tuple(bad), f"must be {what}{' or null' if nullable else ''}"))
    if "run_id" in df.columns:
        dup = df["run_id"][df["run_id"].duplicated(keep=False)]
        if len(dup):
            out.append(Problem("run_id", tuple(sorted(set(map(str, dup)))), "the same run id on several rows"))
    keys = [k for k in KEY_COLUMNS if k in df.columns]
    if keys and not missing:
        twice = df[df.duplicated(subset=keys, keep=False)]
        if len(twice):
            out.append(Problem("(run tuple)", tuple(map(str, twice["run_id"])), "the same run tuple on several rows"))
    return out


def with_late_columns(df: pd.DataFrame) -> pd.DataFrame:
    """A table written before a late column existed, with it at its stated value (in the row model's order)."""
    missing = [c for c in LATE_COLUMNS if c not in df.columns]
    if not missing:
        return df
    df = df.assign(**{c: pd.Series([LATE_COLUMNS[c]] * len(df), index=df.index, dtype=object) for c in missing})
    return df[[c for c in SCHEMA if c in df.columns] + [c for c in df.columns if c not in SCHEMA]]


def read_results(directory: Path) -> pd.DataFrame:
    """`DIR/results.parquet`, checked against the row model; any problem is an InputError naming it."""
    if not directory.is_dir():
        raise InputError(directory, "<dir>", str(directory), "no such results folder")
    path = directory / "results.parquet"
    if not path.exists():
        raise InputError(path, "<file>", str(path), "no results here (run `aft-bench run` first)")
    ensure_arrow_room(f"reading {path}")  # under `ulimit -v`: MemoryError, not a reader that waits forever
    try:
        df = with_late_columns(pd.read_parquet(path))
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise InputError(path, "<file>", str(path), f"not a readable parquet table ({_short(exc)})") from None
    found = problems(df)
    if found:
        more = f"; and {len(found) - 1} more problem(s)" if len(found) > 1 else ""
        raise InputError(path, found[0].column, found[0].run_ids[:3],
                         f"{found[0].problem}{more} (edited or not made by aft-bench?)")
    return df


def results_sha256(directory: Path) -> str:
    return hashlib.sha256((directory / "results.parquet").read_bytes()).hexdigest()


def read_analysis(directory: Path, stale_ok: bool = False) -> tuple[dict[str, Any], bool, pd.DataFrame]:
    """`DIR/analysis/meta.json` after checking that the analysis was made from the current results
    (refused otherwise unless `stale_ok`); returns the meta, whether it is stale, and the results (checked)."""
    results = read_results(directory)
    meta_path = directory / "analysis" / "meta.json"
    if not meta_path.exists():
        raise InputError(directory / "analysis", "<dir>", str(directory / "analysis"),
                         "no analysis here (run `aft-bench analyze` first)")
    meta = read_json(meta_path, "analysis meta.json")
    if not isinstance(meta, dict) or "input_sha256" not in meta:
        raise InputError(meta_path, "input_sha256", "<missing>", "not an aft-bench analysis meta.json")
    stale = meta["input_sha256"] != results_sha256(directory)
    if stale and not stale_ok:
        raise InputError(meta_path, "input_sha256", str(meta["input_sha256"])[:12],
                         "the analysis was made from other results than results.parquet holds now; run "
                         "`aft-bench analyze` again (or pass --stale-ok)")
    return meta, stale, results


def read_table(directory: Path, name: str) -> list[dict[str, Any]]:
    """One analysis table (`primary`, `secondary`, ...) as a list of rows."""
    path = directory / "analysis" / f"{name}.json"
    data = read_json(path, f"analysis table {name}.json")
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise InputError(path, "<root>", type(data).__name__, "not an aft-bench analysis table (a list of rows)")
    return data


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) < 120 else text[:117] + "..."
