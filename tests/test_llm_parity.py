"""The LLM path equals the deterministic one where it should: the `llm` agent driven by the offline model's
capability-aware policy (litellm, real HTTP) gives the deterministic agent's labels, tuple for tuple, on the same
matrix (configs/smoke.toml and configs/llm_offline.toml differ only in the agent). A change to either path that
makes them drift fails here."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from aft_bench.episode.row import SCHEMA
from aft_bench.experiment.config import load_matrix
from aft_bench.experiment.runner import run_matrix

from conftest import ROOT, WORLDS

TUPLE = ["world", "backend", "workload", "task_id", "condition", "fault", "fault_seed", "catalog_size", "rep"]
LABELS = [c for c, col in SCHEMA.items() if col.group == "label"]


def _plain(v: object) -> object:
    return None if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) else v


def test_the_offline_llm_agent_reproduces_the_deterministic_agents_labels(smoke_results: Path, tmp_path: Path) -> None:
    deterministic = pd.read_parquet(smoke_results / "results.parquet")
    run_matrix(load_matrix(ROOT / "configs" / "llm_offline.toml", WORLDS), tmp_path / "llm")
    llm = pd.read_parquet(tmp_path / "llm" / "results.parquet")
    assert set(llm["agent"]) == {"llm"} and set(deterministic["agent"]) == {"deterministic"}
    both = deterministic.merge(llm, on=TUPLE, suffixes=("_det", "_llm"), validate="one_to_one")
    assert len(both) == len(deterministic) == len(llm) == 36
    differ = {(r["workload"], r["task_id"], r["condition"], c): (_plain(r[f"{c}_det"]), _plain(r[f"{c}_llm"]))
              for r in both.to_dict("records") for c in LABELS if _plain(r[f"{c}_det"]) != _plain(r[f"{c}_llm"])}
    assert differ == {}
    assert (llm["model_calls"] > 0).all()  # and the model really was asked, every run
