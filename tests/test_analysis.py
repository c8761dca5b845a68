"""`aft-bench analyze` and `report`: outputs, reproducibility, pairing errors, missing comparisons."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from aft_bench.analysis.analyze import PRIMARY_COLUMNS
from aft_bench.cli.main import main
from aft_bench.experiment.comparisons import load_comparisons
from aft_bench.experiment.config import load_matrix
from aft_bench.experiment.runner import run_matrix

from conftest import ROOT, WORLDS

PRIMARY_ORDER = ["discovery_context", "discovery_recall", "resume_recovery", "durable_recovery",
                 "duplicate_effects", "unsafe_commits", "terminal_verification"]


@pytest.fixture(scope="module")
def smoke_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("smoke") / "run"
    run_matrix(load_matrix(ROOT / "configs" / "smoke.toml", WORLDS), out, workers=1)
    return out


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("analysis", "report", "traces"))
    return dst


def test_analyze_writes_every_table(smoke_dir: Path, capsys) -> None:
    assert main(["analyze", str(smoke_dir)]) == 0
    printed = capsys.readouterr().out
    assert "discovery_context" in printed and "p Holm" in printed
    a = smoke_dir / "analysis"
    for name in ("primary", "secondary", "per_model", "lomo"):
        assert (a / f"{name}.csv").exists() and (a / f"{name}.json").exists()
    primary = pd.read_csv(a / "primary.csv")
    assert list(primary.columns) == PRIMARY_COLUMNS
    assert list(primary["comparison"]) == PRIMARY_ORDER
    # only the config's comparisons, in its families: the paper's seven under Holm, its secondary one unadjusted
    assert pd.read_csv(a / "secondary.csv")["comparison"].tolist() == ["partial_verification"]
    table = pd.read_csv(a / "comparisons.csv")
    assert table["comparison"].tolist() == [*PRIMARY_ORDER, "partial_verification"]
    assert table["family"].tolist() == ["primary"] * 7 + ["secondary"] and table["adjust"].tolist()[-1] == "none"
    meta = json.loads((a / "meta.json").read_text())
    assert (meta["seed"], meta["resamples"], meta["permutations"]) == (0, 2000, 10_000)


def test_pairs_file_lets_anyone_recompute(smoke_dir: Path) -> None:
    main(["analyze", str(smoke_dir)])
    pairs = pd.read_parquet(smoke_dir / "analysis" / "pairs.parquet")
    primary = pd.read_csv(smoke_dir / "analysis" / "primary.csv").set_index("comparison")
    for cid, group in pairs.groupby("comparison"):
        if cid in primary.index:
            assert len(group) == primary.loc[cid, "pairs"]
            assert group["utility_diff"].mean() == pytest.approx(primary.loc[cid, "utility_diff"], rel=1e-9)
    assert {"run_id_treatment", "run_id_control", "task_id", "model", "utility_diff"} <= set(pairs.columns)


def test_holm_adjustment_of_the_written_p_values(smoke_dir: Path) -> None:
    main(["analyze", str(smoke_dir)])
    primary = pd.read_csv(smoke_dir / "analysis" / "primary.csv")
    expect = multipletests(primary["p_raw"].to_numpy(), method="holm")[1]
    assert np.allclose(primary["p_adjusted"], expect, rtol=1e-8)


def test_same_results_and_seed_give_byte_identical_primary(smoke_dir: Path) -> None:
    main(["analyze", str(smoke_dir), "--seed", "3"])
    first = (smoke_dir / "analysis" / "primary.csv").read_bytes()
    main(["analyze", str(smoke_dir), "--seed", "3"])
    assert (smoke_dir / "analysis" / "primary.csv").read_bytes() == first


def test_missing_column_is_bad_input_and_writes_nothing(smoke_dir: Path, tmp_path: Path, capsys) -> None:
    d = _copy(smoke_dir, tmp_path / "r")
    df = pd.read_parquet(d / "results.parquet").drop(columns=["duplicate_effects"])
    df.to_parquet(d / "results.parquet")
    assert main(["analyze", str(d)]) == 2
    err = capsys.readouterr().err
    assert "duplicate_effects" in err and "missing from the table" in err
    assert not (d / "analysis").exists() and not list(d.glob(".analysis-*"))


def test_unmatched_pair_is_bad_input_naming_comparison_and_keys(smoke_dir: Path, tmp_path: Path, capsys) -> None:
    d = _copy(smoke_dir, tmp_path / "r")
    df = pd.read_parquet(d / "results.parquet")
    victim = df[(df.workload == "interruption") & (df.condition == "I5-resume")].index[0]
    task = df.loc[victim, "task_id"]
    df.drop(index=victim).to_parquet(d / "results.parquet")
    assert main(["analyze", str(d)]) == 2
    err = capsys.readouterr().err
    assert "resume_recovery" in err and task in err and "I5-resume" in err
    assert not (d / "analysis").exists()


def test_failed_reanalysis_keeps_the_previous_analysis(smoke_dir: Path, tmp_path: Path) -> None:
    d = _copy(smoke_dir, tmp_path / "r")
    assert main(["analyze", str(d)]) == 0
    before = (d / "analysis" / "primary.csv").read_bytes()
    pd.read_parquet(d / "results.parquet").drop(columns=["recovered"]).to_parquet(d / "results.parquet")
    assert main(["analyze", str(d)]) == 2
    assert (d / "analysis" / "primary.csv").read_bytes() == before


def test_empty_comparison_is_missing_not_zero(smoke_dir: Path, tmp_path: Path) -> None:
    d = _copy(smoke_dir, tmp_path / "r")
    df = pd.read_parquet(d / "results.parquet")
    df[df.workload != "state_loss"].to_parquet(d / "results.parquet")
    assert main(["analyze", str(d)]) == 0
    row = json.loads((d / "analysis" / "primary.json").read_text())
    durable = next(r for r in row if r["comparison"] == "durable_recovery")
    assert durable["pairs"] == 0 and durable["utility_diff"] is None and durable["p_adjusted"] is None
    others = [r for r in row if r["comparison"] != "durable_recovery"]
    assert all(r["p_adjusted"] is not None for r in others)


def test_an_arm_never_run_leaves_its_comparison_without_pairs(smoke_dir: Path, tmp_path: Path) -> None:
    """A config that runs I5 on a workload without I5-resume (another experiment's arm) analyses: the comparison
    is not run (no pairs), while a partly missing arm stays an error (the test above)."""
    d = _copy(smoke_dir, tmp_path / "r")
    df = pd.read_parquet(d / "results.parquet")
    df[~((df.workload == "interruption") & (df.condition == "I5-resume"))].to_parquet(d / "results.parquet")
    assert main(["analyze", str(d)]) == 0
    row = next(r for r in json.loads((d / "analysis" / "primary.json").read_text())
               if r["comparison"] == "resume_recovery")
    assert row["pairs"] == 0 and row["p_adjusted"] is None


def test_zero_event_endpoints_carry_a_clopper_pearson_bound(smoke_dir: Path) -> None:
    main(["analyze", str(smoke_dir)])
    rows = json.loads((smoke_dir / "analysis" / "primary.json").read_text())
    unsafe = next(r for r in rows if r["comparison"] == "unsafe_commits")
    assert unsafe["treatment_runs_with_event"] == 0 and 0 < unsafe["treatment_rate_upper95"] < 1


def test_per_model_and_lomo_with_several_models(smoke_dir: Path, tmp_path: Path) -> None:
    d = _copy(smoke_dir, tmp_path / "r")
    df = pd.read_parquet(d / "results.parquet")
    frames = []
    for m in ("model-a", "model-b", "model-c"):
        f = df.copy()
        f["model"] = m
        f["run_id"] = f["run_id"] + "-" + m
        frames.append(f)
    pd.concat(frames).to_parquet(d / "results.parquet")
    assert main(["analyze", str(d)]) == 0
    per_model = pd.read_csv(d / "analysis" / "per_model.csv")
    lomo = pd.read_csv(d / "analysis" / "lomo.csv")
    assert set(per_model["model"]) == {"model-a", "model-b", "model-c"}
    assert set(lomo["left_out"]) == {"model-a", "model-b", "model-c"}
    assert per_model["p_bh"].notna().all()
    assert np.allclose(per_model["interaction"].fillna(0), 0)  # identical models: no interaction
    assert main(["report", str(d)]) == 0
    assert (d / "report" / "fig4_model_heterogeneity.png").exists()


def test_report_has_table3_reference_column_and_figures(smoke_dir: Path, capsys) -> None:
    main(["analyze", str(smoke_dir)])
    assert main(["report", str(smoke_dir)]) == 0
    md = (smoke_dir / "report" / "report.md").read_text()
    html = (smoke_dir / "report" / "report.html").read_text()
    assert "Table 3" in md and "paper (reference)" in md and "paper (reference)" in html
    assert (smoke_dir / "report" / "fig2_primary_effects.png").stat().st_size > 1000
    assert "no SQLite-backend runs" in md  # Fig. 3 waits for a SQLite run
    measured = pd.read_csv(smoke_dir / "analysis" / "primary.csv")
    for cid, diff in zip(measured["comparison"], measured["utility_diff"]):
        assert cid in md


def test_report_without_analysis_is_bad_input(smoke_dir: Path, tmp_path: Path, capsys) -> None:
    d = _copy(smoke_dir, tmp_path / "r")
    shutil.rmtree(d / "analysis", ignore_errors=True)
    assert main(["report", str(d)]) == 2
    assert "aft-bench analyze" in capsys.readouterr().err
    assert not (d / "report").exists()


def test_comparisons_are_in_the_papers_order() -> None:
    from aft_bench.experiment.config import load_matrix

    fams = load_matrix(ROOT / "configs" / "paper_deterministic.toml", WORLDS).families
    assert [(f.name, f.adjust) for f in fams] == [("primary", "holm"), ("secondary", "none")]
    assert list(fams[0].comparisons) == PRIMARY_ORDER and list(fams[1].comparisons) == ["partial_verification"]
    assert [c.id for c in load_comparisons()][:8] == [*PRIMARY_ORDER, "partial_verification"]
