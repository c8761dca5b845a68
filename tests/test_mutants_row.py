"""The result row (`episode/row.py`): which judge label lands in which column, the usage and virtual-clock
columns, the row model's type checks (each kind of value accepted and refused, with the problem named), late
columns and the parquet writer. Written for `make mutants`; no episode is run."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from aft_bench.episode import row as rowmod
from aft_bench.episode.row import (
    INT64,
    LATE_COLUMNS,
    SCHEMA,
    Column,
    _value_problem,
    episode_row,
    label_columns,
    row_problems,
    virtual_clock_s,
    with_late_columns,
    write_parquet,
)

# every label a distinct value, so a label written into the wrong column shows
LABELS = {"fault_fired": True, "outcome": "unsafely_committed", "y_goal": True, "y_correct": False, "recovered": None,
              "duplicate_effects": 2, "unsafe_commits": 3, "unauthorized_effects": 4, "stale_writes": 5, "unintended_effects": 6,
              "residual_effects": 7, "terminal_action": "finish", "terminal_claim": "success", "claim_correct": False,
              "incorrect_claim": True, "context_tokens": 811, "capability_recall": 0.75, "tool_calls": 9, "mode": "program",
              "program_attempts": 10, "replayed_writes": 11, "fallbacks": 12, "policy_start": "cold",
              "policy_step_ms": 18.5, "policy_build_ms": 19.5, "measured_build_ms": 20.5}
USAGE = {"model_calls": 13, "prompt_tokens": 14, "completion_tokens": 15, "cost_usd": 0.125, "retries": 1,
             "invalid_tool_calls": 17, "latency_s": 1.23456789, "retry_wait_s": 2.5000004}


def result(labels: dict[str, Any] | None = None, **usage: Any) -> SimpleNamespace:
    clock_ms = usage.pop("clock_ms", None)  # the live virtual clock's reading, where the episode kept one
    played = SimpleNamespace(turns=20, tool_calls=21, traffic_bytes=1000, model_bytes=234,
                             usage=SimpleNamespace(**{**USAGE, **usage}), clock_ms=clock_ms)
    return SimpleNamespace(played=played, labels=SimpleNamespace(**{**LABELS, **(labels or {})}), trace_head="h" * 8)


KEY = {"world": "payments", "backend": "memory", "workload": "wl", "task_id": "t", "condition": "I5", "fault": "none",
       "fault_seed": 0, "catalog_size": None, "agent": "llm", "agent_spec": "{}", "model": "m", "rep": 0}
HASHES = {"world_hash": "w", "task_hash": "t", "schedule_hash": "s", "config_hash": "c"}
SESSION = {"lock_hash": None, "code_version": "v", "session": 1}


def test_each_label_lands_in_its_column() -> None:
    cols = label_columns(SimpleNamespace(**LABELS))  # type: ignore[arg-type]
    expected = {k: v for k, v in LABELS.items() if k != "capability_recall"}
    expected["recall"] = 0.75
    expected["incorrect_claim"] = 1
    assert cols == expected
    assert type(cols["incorrect_claim"]) is int
    assert label_columns(SimpleNamespace(**{**LABELS, "incorrect_claim": False}))["incorrect_claim"] == 0  # type: ignore[arg-type]


def test_the_episode_row() -> None:
    row = episode_row(KEY, "rid", {"b": 1, "a": [2]}, result(), 3.14159265, HASHES)  # type: ignore[arg-type]
    assert row_problems({**row, **SESSION}) == []
    assert {k: row[k] for k in KEY} == KEY and row["run_id"] == "rid"
    assert row["mechanisms"] == '{"a":[2],"b":1}'
    assert row["outcome"] == "unsafely_committed" and row["recall"] == 0.75 and row["fallbacks"] == 12
    assert (row["model_turns"], row["round_trips"], row["traffic_bytes"], row["model_bytes"]) == (20, 21, 1234, 234)
    assert (row["model_calls"], row["prompt_tokens"], row["completion_tokens"], row["cost_usd"], row["retries"],
            row["invalid_tool_calls"]) == (13, 14, 15, 0.125, 1, 17)
    assert row["latency_s"] == 1.234568 and row["wall_s"] == 3.141593
    assert row["trace_head"] == "hhhhhhhh" and row["client"] is None and row["virtual_latency_s"] is None
    assert {k: row[k] for k in HASHES} == HASHES
    if "retry_wait_s" in SCHEMA:
        assert row["retry_wait_s"] == 2.5
    unpriced = episode_row(KEY, "rid", {}, result(cost_usd=None), 0.0, HASHES)  # type: ignore[arg-type]
    assert unpriced["cost_usd"] is None and unpriced["mechanisms"] == "{}"


def test_the_row_carries_the_cell_s_network_when_the_config_sweeps_networks() -> None:
    net = '{"build_ms":1.0,"decision_ms":2.0,"rtt_ms":3.0}'
    assert episode_row({**KEY, "network": net}, "rid", {}, result(), 0.0, HASHES)["network"] == net  # type: ignore[arg-type]
    assert episode_row(KEY, "rid", {}, result(), 0.0, HASHES)["network"] is None  # type: ignore[arg-type]


def test_the_virtual_clock() -> None:
    assert virtual_clock_s(2, 3, 4, rtt_ms=10.0, decision_ms=100.0, build_ms=1000.0) == pytest.approx(4.23)
    assert virtual_clock_s(1, 0, 0, rtt_ms=7.0, decision_ms=0.0, build_ms=0.0) == 0.0
    col = virtual_clock_s(pd.Series([1, 2]), pd.Series([0, 1]), pd.Series([0, 0]), 10.0, 100.0, 1000.0)
    assert list(col) == pytest.approx([0.1, 0.21])
    net = {"rtt_ms": 10.0, "decision_ms": 100.0, "build_ms": 1000.0}
    row = episode_row(KEY, "rid", {}, result(), 0.0, HASHES, net)  # type: ignore[arg-type]
    # 20 decisions x 100 ms + 21 round trips x 10 ms + 10 programs x 1000 ms
    assert row["virtual_latency_s"] == pytest.approx(12.21)
    tiny = {"rtt_ms": 0.0001, "decision_ms": 0.0, "build_ms": 0.0}  # 21 round trips x 0.1 us: kept to the us
    assert episode_row(KEY, "rid", {}, result(), 0.0, HASHES, tiny)["virtual_latency_s"] == 2e-06  # type: ignore[arg-type]
    odd = {"rtt_ms": 1 / 3, "decision_ms": 0.0, "build_ms": 0.0}
    assert episode_row(KEY, "rid", {}, result(), 0.0, HASHES, odd)["virtual_latency_s"] == 0.007  # type: ignore[arg-type]
    # the live clock's reading, where the episode kept one (a jittered clock is not the count formula)
    live = episode_row(KEY, "rid", {}, result(clock_ms=4321.1234567), 0.0, HASHES, net)  # type: ignore[arg-type]
    assert live["virtual_latency_s"] == 4.321123


@pytest.mark.parametrize("type_, value, problem", [
    ("str", "x", None), ("str", 1, "1 is not a string"), ("str", None, "null where a value is required"),
    ("json", "{}", None), ("json", {}, "{} is not a string"),
    ("str?", None, None), ("int?", None, None), ("bool?", None, None), ("float?", None, None),
    ("bool", True, None), ("bool", False, None), ("bool", 1, "1 is not true or false"),
    ("bool", None, "null where a value is required"),
    ("int", 0, None), ("int", -5, None), ("int", True, "True is not an integer"), ("int", 1.0, "1.0 is not an integer"),
    ("int", "1", "'1' is not an integer"),
    ("int", INT64[1], None), ("int", INT64[0], None),
    ("int", INT64[1] + 1, f"{INT64[1] + 1} does not fit in 64 bits"),
    ("int", INT64[0] - 1, f"{INT64[0] - 1} does not fit in 64 bits"),
    ("int?", 3, None), ("int?", 2**64, f"{2**64} does not fit in 64 bits"),
    ("float", 0.5, None), ("float", 3, None), ("float", -1e299, None), ("float", 1e299, None),
    ("float", 1e300, "1e+300 is not a finite number"), ("float", -1e300, "-1e+300 is not a finite number"),
    ("float", math.inf, "inf is not a finite number"), ("float", math.nan, "nan is not a finite number"),
    ("float", True, "True is not a number"), ("float", "1", "'1' is not a number"),
    ("float?", 2.0, None), ("float?", math.inf, "inf is not a finite number"),
])
def test_value_checks(type_: str, value: Any, problem: str | None) -> None:
    assert _value_problem(Column("c", type_, "label", "m"), value) == problem


def full_row() -> dict[str, Any]:
    row = episode_row(KEY, "rid", {}, result(), 0.0, HASHES)  # type: ignore[arg-type]
    return {**row, **SESSION}


def test_row_problems_name_each_column() -> None:
    assert row_problems(full_row()) == []
    bad = {**full_row(), "y_goal": 1, "rep": 1.5, "extra": 0}
    del bad["outcome"]
    assert row_problems(bad) == ["column 'outcome' is missing", "'extra' is not a column of the row model",
                                 "column 'rep': 1.5 is not an integer", "column 'y_goal': 1 is not true or false"]
    nulls = {**full_row(), "catalog_size": 7, "terminal_claim": None, "recall": None}
    assert row_problems(nulls) == ["column 'recall': null where a value is required"]


def test_late_columns_read_at_their_stated_value() -> None:
    old = {k: v for k, v in full_row().items() if k not in LATE_COLUMNS}
    assert with_late_columns(old) == {**old, **LATE_COLUMNS}
    assert row_problems(with_late_columns(old)) == []
    current = {**full_row(), "client": "c/1"}
    assert with_late_columns(current) is current
    assert with_late_columns({"client": "x"})["client"] == "x"


def test_parquet_keeps_order_types_and_replaces_atomically(tmp_path: Path) -> None:
    rows = [full_row(), {**full_row(), "run_id": "r2", "catalog_size": 40, "rep": 1}]
    path = tmp_path / "results.parquet"
    path.write_text("old")
    write_parquet(rows, path)
    df = pd.read_parquet(path)
    assert list(df.columns) == list(SCHEMA)
    assert str(df["catalog_size"].dtype) == "Int64" and df["catalog_size"].isna().tolist() == [True, False]
    assert int(df["catalog_size"].iloc[1]) == 40 and str(df["rep"].dtype) == "int64"
    assert list(tmp_path.iterdir()) == [path]
    import pyarrow.parquet as pq

    assert pq.read_schema(path).names == list(SCHEMA)  # no index column for readers other than pandas
    assert df.to_dict("records")[1]["run_id"] == "r2"
    write_parquet([], path)
    assert len(pd.read_parquet(path)) == 0 and list(pd.read_parquet(path).columns) == list(SCHEMA)


def test_the_writer_fsyncs_the_temp_file_before_replacing(tmp_path: Path, monkeypatch) -> None:
    seen: list[tuple[str, Any]] = []
    real_fsync, real_replace = rowmod.os.fsync, rowmod.os.replace
    monkeypatch.setattr(rowmod.os, "fsync", lambda fd: (seen.append(("fsync", fd)), real_fsync(fd))[1])
    monkeypatch.setattr(rowmod.os, "replace", lambda a, b: (seen.append(("replace", (Path(a).name, Path(b).name))),
                                                             real_replace(a, b))[1])
    write_parquet([full_row()], tmp_path / "r.parquet")
    assert [s[0] for s in seen] == ["fsync", "replace"] and seen[1][1] == ("r.parquet.tmp", "r.parquet")


class _Str(str):
    pass


class _Int(int):
    pass


ODD_VALUES = [True, False, 0, -5, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 0.5, 1e299, 1e300, -1e300, math.inf,
              -math.inf, math.nan, "x", "", _Str("s"), _Int(3), None, {}, [], 1.0]


@pytest.mark.parametrize("type_", ["bool", "int", "float", "str", "json"])
def test_row_check_by_exact_type_accepts_only_what_the_value_check_accepts(type_: str) -> None:
    """The journal's fast path (issue 28) accepts by exact type; every other value goes to `_value_problem`."""
    for nullable in ("", "?"):
        col = Column("c", type_ + nullable, "label", "m")
        for value in ODD_VALUES:
            accepted = (value is None and bool(nullable)) or rowmod._ACCEPTS[type_](value)
            assert not accepted or _value_problem(col, value) is None, (type_ + nullable, value)
    # and each fast check accepts the common value of its type (else the journal would judge every value twice)
    assert all(rowmod._ACCEPTS[t](v) for t, v in [("bool", True), ("int", 3), ("float", 0.5), ("str", "x"),
                                                         ("json", "{}")])


def test_row_problems_equal_the_value_checks_on_odd_values() -> None:
    for name in ("rep", "y_goal", "recall", "outcome", "catalog_size", "virtual_latency_s"):
        for value in ODD_VALUES:
            expected = _value_problem(SCHEMA[name], value)
            assert row_problems({**full_row(), name: value}) == ([] if expected is None else
                                                                  [f"column '{name}': {expected}"])
