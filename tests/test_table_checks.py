"""The results table's type check reads most columns off their dtype (issue 28: the per-value check was a third of
`report`); on every dtype the table can hold it must find exactly the rows a value-by-value check finds."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from aft_bench.analysis.table import CHECKS, bad_rows

NAN, INF = float("nan"), float("inf")
COLUMNS = {
    "int64": pd.Series([0, 1, -5, 2 ** 62], dtype="int64"),
    "uint64": pd.Series([0, 2 ** 63], dtype="uint64"),
    "Int64 with NA": pd.Series([1, None, 3], dtype="Int64"),
    "Int64 full": pd.Series([1, 2], dtype="Int64"),
    "float64": pd.Series([0.5, NAN, INF, -INF, 1e300, -0.0], dtype="float64"),
    "float64 finite": pd.Series([0.5, 2.0], dtype="float64"),
    "Float64 with NA": pd.Series([0.5, None], dtype="Float64"),
    "bool": pd.Series([True, False], dtype="bool"),
    "boolean with NA": pd.Series([True, None], dtype="boolean"),
    "str": pd.Series(["a", None, '{"k": 1}', "[1", "null"], dtype="str"),
    "str full": pd.Series(["a", "b"], dtype="str"),
    "string[python]": pd.Series(["x", None], dtype="string"),
    "object mixed": pd.Series([1, 1.0, True, "1", None, NAN, [1], np.int64(2), np.bool_(True), INF], dtype=object),
    "object ints": pd.Series([1, 2, None], dtype=object),
    "object json": pd.Series(['{"a": 1}', '{"a": 1}', "nope", None, 3], dtype=object),
    "datetime": pd.Series(pd.to_datetime(["2026-12-01", None])),
    "category": pd.Series(["a", "b", None], dtype="category"),
}


def _reference(values: pd.Series, base: str, nullable: bool) -> list[int]:
    """Each value judged on its own, as the check did before it read dtypes."""
    ok = CHECKS[base][0]

    def null(v: object) -> bool:
        return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))

    return [i for i, v in enumerate(values.tolist()) if not ((nullable and null(v)) or (not null(v) and ok(v)))]


@pytest.mark.parametrize("nullable", [False, True])
@pytest.mark.parametrize("base", sorted(CHECKS))
@pytest.mark.parametrize("name", sorted(COLUMNS))
def test_dtype_check_finds_the_rows_a_value_check_finds(name: str, base: str, nullable: bool) -> None:
    values = COLUMNS[name]
    assert bad_rows(values, base, nullable) == _reference(values, base, nullable)


def test_the_check_finds_what_breaks_each_type() -> None:
    """Known positives and negatives, so the comparison above cannot pass with both sides finding nothing."""
    assert bad_rows(COLUMNS["float64"], "float", nullable=False) == [1, 2, 3]  # NaN, inf, -inf
    assert bad_rows(COLUMNS["float64"], "float", nullable=True) == [2, 3]  # a NaN is a null
    assert bad_rows(COLUMNS["float64 finite"], "float", nullable=False) == []
    assert bad_rows(COLUMNS["Int64 with NA"], "int", nullable=False) == [1]
    assert bad_rows(COLUMNS["Int64 with NA"], "int", nullable=True) == []
    assert bad_rows(COLUMNS["str"], "str", nullable=False) == [1]
    assert bad_rows(COLUMNS["str"], "json", nullable=True) == [0, 3]  # "a" and "[1" are no JSON texts
    assert bad_rows(COLUMNS["int64"], "bool", nullable=False) == [0, 1, 2, 3]
    assert bad_rows(COLUMNS["bool"], "int", nullable=False) == [0, 1]  # a boolean is no integer
    # a bool beside an equal int in an object column: judged by type, never by an earlier equal value
    assert bad_rows(pd.Series([1, True, 1.0], dtype=object), "int", nullable=False) == [1, 2]
