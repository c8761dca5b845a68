"""Cost where decisions are made: the analysis's cost table (per condition and per comparison arm, pooled and per
model) equals an independent recomputation from results.parquet, and an unpriced model is unknown, never 0."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from aft_bench.cli.main import main

from conftest import ROOT

PRICED = (ROOT / "configs" / "llm_offline.toml").read_text().replace(
    'backoff_s = 0.05\n', 'backoff_s = 0.05\ninput_usd_per_mtok = 0.15\noutput_usd_per_mtok = 0.60\n'
    '\n[[experiment.agents]]\nname = "llm"\nmodel = "openai/fake-naive"\napi_base = "offline"\nconcurrency = 16\n'
    'input_usd_per_mtok = 0.15\noutput_usd_per_mtok = 0.60\n')


@pytest.fixture(scope="module")
def priced(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cost")
    cfg = d / "priced.toml"
    cfg.write_text(PRICED)
    out = d / "out"
    assert main(["run", str(cfg), "--out", str(out)]) == 0
    assert main(["analyze", str(out), "--resamples", "200", "--permutations", "200"]) == 0
    return out


def test_cost_per_completed_task_equals_a_recomputation_from_the_results(priced: Path) -> None:
    df = pd.read_parquet(priced / "results.parquet")
    rows = json.loads((priced / "analysis" / "cost.json").read_text())
    assert {r["model"] for r in rows} == {"pooled", "openai/fake-capability", "openai/fake-naive"}
    checked = 0
    for r in rows:
        if r["scope"] != "condition":
            continue
        runs = df[(df["workload"] == r["group"]) & (df["condition"] == r["condition"])]
        if r["model"] != "pooled":
            runs = runs[runs["model"] == r["model"]]
        done = int((runs["outcome"] == "completed").sum())
        assert (r["runs"], r["completed"], r["cost_known"]) == (len(runs), done, True)
        assert r["cost_per_run"] == pytest.approx(runs["cost_usd"].mean())
        assert r["model_calls_per_run"] == pytest.approx(runs["model_calls"].mean())
        assert r["prompt_tokens_per_run"] == pytest.approx(runs["prompt_tokens"].mean())
        if done:
            assert r["cost_per_completed"] == pytest.approx(runs["cost_usd"].sum() / done)
            assert r["ci_low"] <= r["cost_per_completed"] <= r["ci_high"]
        else:
            assert r["cost_per_completed"] is None
        checked += 1
    assert checked >= 20
    arm = next(r for r in rows if r["scope"] == "arm" and r["group"] == "duplicate_effects"
               and r["arm"] == "control" and r["model"] == "pooled")
    runs = df[(df["workload"] == "response_loss") & (df["condition"] == "I5-effects")]
    assert arm["runs"] == len(runs) and arm["cost_per_run"] == pytest.approx(runs["cost_usd"].mean())
    assert main(["report", str(priced)]) == 0
    assert all("unknown" not in line for line in _cost_rows(priced)) and len(_cost_rows(priced)) == len(rows)


def _cost_rows(out: Path) -> list[str]:
    """The table rows of the report's Cost section."""
    section = (out / "report" / "report.md").read_text().split("## Cost")[1].split("\n## ")[0]
    return [ln for ln in section.splitlines() if ln.startswith(("| condition", "| arm"))]


def test_an_unpriced_model_s_cost_is_unknown_never_zero(tmp_path: Path) -> None:
    out = tmp_path / "o"
    assert main(["run", str(ROOT / "configs" / "llm_offline.toml"), "--out", str(out)]) == 0
    assert main(["analyze", str(out), "--resamples", "50", "--permutations", "50"]) == 0
    rows = json.loads((out / "analysis" / "cost.json").read_text())
    assert rows and all(r["cost_known"] is False and r["cost_per_run"] is None and r["cost_per_completed"] is None
                        for r in rows)
    assert all(r["prompt_tokens_per_run"] > 0 for r in rows)  # tokens are known, cost is not
    assert main(["report", str(out)]) == 0
    shown = _cost_rows(out)
    assert len(shown) == len(rows) and all(ln.count("| unknown ") == 3 for ln in shown)


def test_deterministic_results_have_no_cost_table(smoke_results: Path) -> None:
    assert json.loads((smoke_results / "analysis" / "cost.json").read_text()) == []
