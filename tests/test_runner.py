"""Runs that survive anything: resume after kills at every crash point, single-runner lock, config
mismatch refusal, failures kept apart from results, full disk, freeze, audit and the CI gate."""

from __future__ import annotations

import fcntl
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from aft_bench.cli.main import main
from aft_bench.experiment.journal import read_rows
from aft_bench.world.backend import Backend

from conftest import ROOT, WORLDS

SMOKE = ROOT / "configs" / "smoke.toml"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _aft(*args: str, kill_at: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(ENV)
    if kill_at:
        env["AFT_BENCH_KILL_AT"] = kill_at
    return subprocess.run([sys.executable, "-m", "aft_bench.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """An uninterrupted run of the smoke matrix, analyzed."""
    out = tmp_path_factory.mktemp("ref") / "out"
    assert _aft("run", str(SMOKE), "--out", str(out), "--workers", "1").returncode == 0
    assert main(["analyze", str(out)]) == 0
    return out


# Ten crash points, each reached with work left to do (the smoke matrix has 36 runs).
KILLS = ["after_row:3", "mid_row:2", "before_commit:2", "after_commit:2", "before_seal:2", "mid_row:3",
         "after_row:2", "before_seal:3", "after_commit:1", "before_commit:1"]


def test_kill_and_resume_gives_the_uninterrupted_analysis(reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    total = len(pd.read_parquet(reference / "results.parquet"))
    seen_torn = False
    for spec in KILLS:
        before = len(read_rows(out / "journal.jsonl")) if out.exists() else 0
        res = _aft("run", str(SMOKE), "--out", str(out), "--workers", "1", kill_at=spec)
        assert res.returncode == -signal.SIGKILL, (spec, res.stderr[-500:])
        raw = (out / "journal.jsonl").read_bytes()
        seen_torn |= spec.startswith("mid_row") and not raw.endswith(b"\n")
        assert len(read_rows(out / "journal.jsonl")) >= before  # nothing recorded is ever lost
    # two kills at random moments, wherever the runner happens to be
    rng = random.Random(7)
    for _ in range(2):
        env = dict(ENV)
        proc = subprocess.Popen([sys.executable, "-m", "aft_bench.cli", "run", str(SMOKE), "--out", str(out),
                                 "--workers", "1"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.5, 4.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert seen_torn  # a kill really landed in the middle of a journal line
    final = _aft("run", str(SMOKE), "--out", str(out), "--workers", "1")
    assert final.returncode == 0, final.stderr[-800:]
    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == total and df["run_id"].is_unique
    assert len(read_rows(out / "journal.jsonl")) == total
    assert main(["analyze", str(out)]) == 0
    assert (out / "analysis" / "primary.csv").read_bytes() == (reference / "analysis" / "primary.csv").read_bytes()
    assert main(["audit", str(out)]) == 0
    assert (out / "quarantine").exists()  # partial traces of killed attempts were kept aside, not deleted
    # every process that got as far as starting its session recorded it once, numbered in order, and saw no more
    # pending work than the one before it. A random kill may land before its process records its session (on a
    # busy machine it often does), so the count lies between the sessions that must exist and all of them.
    sessions = [json.loads(x) for x in (out / "sessions.jsonl").read_text().splitlines()]
    assert [s["session"] for s in sessions] == list(range(1, len(sessions) + 1))
    assert len(KILLS) + 1 <= len(sessions) <= len(KILLS) + 3
    assert len({s["pid"] for s in sessions}) == len(sessions)
    pending = [s["pending"] for s in sessions]
    assert pending[0] == total and pending == sorted(pending, reverse=True)


def test_kill_after_commit_on_sqlite_keeps_database_trace_and_results_consistent(tmp_path: Path) -> None:
    cfg = tmp_path / "sq.toml"
    cfg.write_text('[experiment]\nid = "sq"\ncomparisons = ["duplicate_effects"]\nbackend = "sqlite"\n'
                   'tasks_per_workload = 2\n')
    out = tmp_path / "out"
    for spec in ("before_commit:1", "after_commit:2", "before_seal:2", "after_row:2"):
        assert _aft("run", str(cfg), "--out", str(out), "--workers", "1", kill_at=spec).returncode == -signal.SIGKILL
    assert _aft("run", str(cfg), "--out", str(out), "--workers", "1").returncode == 0
    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == 4 and df["run_id"].is_unique
    import sqlite3

    for _, row in df.iterrows():  # each recorded run's database agrees with its row
        db = sqlite3.connect(out / "db" / f"{row['run_id']}.sqlite")
        commits = db.execute("SELECT COUNT(*) FROM ledger").fetchone()[0]
        db.close()
        events = [json.loads(x) for x in (out / "traces" / f"{row['run_id']}.jsonl").read_text().splitlines()]
        assert commits == sum(e["kind"] == "commit" for e in events)
    # the databases of killed attempts (a committed effect among them) are kept in quarantine, not lost
    assert list((out / "quarantine").rglob("*.sqlite"))
    assert main(["audit", str(out)]) == 0


def test_second_runner_is_refused(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text("{}")
    with open(out / ".runner.lock", "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        assert main(["run", str(SMOKE), "--out", str(out), "--worlds", str(WORLDS)]) == 2
    assert "another aft-bench runner" in capsys.readouterr().err


def test_resume_refuses_a_different_config_naming_it(reference: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    cfg = tmp_path / "smoke2.toml"
    cfg.write_text(SMOKE.read_text().replace("seeds = [0]", "seeds = [0, 1]"))
    before = (out / "journal.jsonl").read_bytes()
    assert main(["run", str(cfg), "--out", str(out), "--worlds", str(WORLDS)]) == 2
    err = capsys.readouterr().err
    assert "experiment.seeds" in err and "[0] -> [0, 1]" in err
    assert (out / "journal.jsonl").read_bytes() == before


def test_rerun_of_a_complete_directory_runs_nothing(reference: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    before = read_rows(out / "journal.jsonl")
    assert main(["run", str(SMOKE), "--out", str(out), "--worlds", str(WORLDS)]) == 0
    assert read_rows(out / "journal.jsonl") == before


def test_resume_on_a_missing_directory_starts_the_matrix(tmp_path: Path) -> None:
    out = tmp_path / "new"
    assert main(["run", str(SMOKE), "--out", str(out), "--worlds", str(WORLDS), "--workers", "1"]) == 0
    assert len(pd.read_parquet(out / "results.parquet")) == 36


def test_harness_failure_is_not_a_row_and_stays_pending(tmp_path: Path, monkeypatch, capsys) -> None:
    secret = "sk-test-0123456789abcdef"
    monkeypatch.setenv("FAKE_PROVIDER_API_KEY", secret)
    original = Backend.commit

    def broken(self, plan, **kw):  # a backend that crashes on one operation
        if plan.op_name == "fulfil_order":
            raise RuntimeError(f"backend exploded while using {secret}")
        return original(self, plan, **kw)

    monkeypatch.setattr(Backend, "commit", broken)
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["run", str(SMOKE), "--out", str(out), "--worlds", str(WORLDS), "--workers", "1"]) == 1
    failures = [json.loads(x) for x in (out / "failures.jsonl").read_text().splitlines()]
    assert failures and all(f["workload"] == "partial" for f in failures)
    err = capsys.readouterr().err  # the log says why, without the folder: the last failure, in one line
    assert f"run {failures[-1]['run_id']} failed: RuntimeError: backend exploded" in err and secret not in err
    assert secret not in (out / "failures.jsonl").read_text() and "[redacted]" in failures[0]["message"]
    rows = pd.read_parquet(out / "results.parquet")
    assert not set(f["run_id"] for f in failures) & set(rows["run_id"])
    monkeypatch.setattr(Backend, "commit", original)
    assert main(["run", str(SMOKE), "--out", str(out), "--worlds", str(WORLDS), "--workers", "1"]) == 0
    assert len(pd.read_parquet(out / "results.parquet")) == 36
    assert main(["audit", str(out)]) == 0
    for p in out.rglob("*"):
        if p.is_file() and p.suffix in (".jsonl", ".json"):
            assert secret not in p.read_text(errors="replace"), p


def test_full_disk_fails_clearly_and_keeps_earlier_results(reference: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    before = (out / "results.parquet").read_bytes()
    (out / "results.parquet.tmp").symlink_to("/dev/full")  # the compaction's temp file hits ENOSPC
    assert main(["run", str(SMOKE), "--out", str(out), "--worlds", str(WORLDS)]) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and "intact" in err
    assert (out / "results.parquet").read_bytes() == before


def test_read_only_out_fails_clearly(capsys) -> None:
    assert main(["run", str(SMOKE), "--out", "/sys/aft-bench-test", "--worlds", str(WORLDS)]) == 1
    assert "cannot write /sys/aft-bench-test" in capsys.readouterr().err


def test_freeze_refuses_changed_inputs_naming_them(tmp_path: Path, capsys) -> None:
    worlds = tmp_path / "worlds"
    shutil.copytree(WORLDS, worlds)
    cfg = tmp_path / "smoke.toml"
    cfg.write_text(SMOKE.read_text())
    assert main(["freeze", str(cfg), "--worlds", str(worlds)]) == 0
    lock = json.loads((tmp_path / "smoke.lock.json").read_text())
    assert "task:response_loss/rl-01-o1" in lock["inputs"] and "code:judge/labels.py" in lock["inputs"]
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out), "--worlds", str(worlds), "--workers", "1"]) == 0
    assert pd.read_parquet(out / "results.parquet")["lock_hash"].eq(lock["lock_hash"]).all()
    wl = worlds / "workloads" / "response_loss.toml"
    wl.write_text(wl.read_text().replace("Charge order o1 its amount of 50.", "Charge order o1 now."))
    out2 = tmp_path / "out2"
    assert main(["run", str(cfg), "--out", str(out2), "--worlds", str(worlds)]) == 2
    err = capsys.readouterr().err
    assert "task:response_loss/rl-01-o1" in err and "workload:response_loss" in err
    assert not out2.exists()


def test_analysis_excludes_rows_made_before_the_current_freeze(reference: Path, tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "smoke.toml"
    cfg.write_text(SMOKE.read_text())
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out), "--worlds", str(WORLDS), "--workers", "1"]) == 0
    assert main(["freeze", str(cfg), "--worlds", str(WORLDS)]) == 0  # frozen after these rows were made
    capsys.readouterr()
    main(["analyze", str(out)])
    assert "excluding 36 rows" in capsys.readouterr().err
    assert main(["analyze", str(out), "--include-stale-lock"]) == 0


def test_audit_detects_tampering_and_checks_the_manuscript(reference: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    primary = {r["comparison"]: r for r in json.loads((out / "analysis" / "primary.json").read_text())}
    good = f"[{primary['duplicate_effects']['utility_diff']:.4f}](aft:primary/duplicate_effects/utility_diff)"
    paper = tmp_path / "paper.md"
    paper.write_text(f"Effect-aware interfaces reduce duplicates by {good} in utility.\n")
    assert main(["audit", str(out), "--manuscript", str(paper)]) == 0
    paper.write_text("Duplicates fall by [0.9999](aft:primary/duplicate_effects/utility_diff).\n")
    assert main(["audit", str(out), "--manuscript", str(paper)]) == 1
    assert "manuscript 0.9999 != analysis" in capsys.readouterr().out
    trace = next((out / "traces").iterdir())
    trace.write_text(trace.read_text().replace('"kind":"stage"', '"kind":"stagE"', 1))
    assert main(["audit", str(out)]) == 1
    assert "FAIL  trace hash chains" in capsys.readouterr().out


def test_audit_checks_results_columns_against_the_row_model(reference: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    assert main(["audit", str(out)]) == 0
    capsys.readouterr()
    df = pd.read_parquet(out / "results.parquet")
    df.drop(columns=["agent_spec"]).to_parquet(out / "results.parquet")
    assert main(["audit", str(out)]) == 1
    assert "column 'agent_spec': missing from the table" in capsys.readouterr().out


def test_check_gate_passes_and_fails_with_clear_messages(reference: Path, tmp_path: Path, capsys) -> None:
    ok = tmp_path / "ok.toml"
    ok.write_text('bounds = ["resume_recovery.utility_diff >= 0.9", "unsafe_commits.ci_low > 0"]\n')
    assert main(["check", str(reference), "--expect", str(ok)]) == 0
    assert "PASS  resume_recovery.utility_diff >= 0.9" in capsys.readouterr().out
    bad = tmp_path / "bad.toml"
    bad.write_text('bounds = ["duplicate_effects.utility_diff >= 0.99"]\n')
    assert main(["check", str(reference), "--expect", str(bad)]) == 1
    captured = capsys.readouterr()
    assert "FAIL" in captured.out and "duplicate_effects.utility_diff >= 0.99" in captured.err
    typo = tmp_path / "typo.toml"
    typo.write_text('bounds = ["duplicate_effect.utility_diff >= 0.5"]\n')
    assert main(["check", str(reference), "--expect", str(typo)]) == 2
    assert "unknown comparison 'duplicate_effect'" in capsys.readouterr().err


def test_the_ci_gate_fails_when_any_primary_effect_is_halved(tmp_path: Path) -> None:
    """configs/ci_expect.toml bites: on the deterministic effects it passes; halving any one fails it."""
    from aft_bench.analysis.gate import Expectations, evaluate
    from aft_bench.common.datafile import read_toml

    effects = {"discovery_context": 2484.8, "discovery_recall": 0.0, "resume_recovery": 1.0, "durable_recovery": 1.0,
               "duplicate_effects": 0.5, "unsafe_commits": 1.0, "terminal_verification": 1.0,
               "partial_verification": 1.0}

    def table(values: dict[str, float]) -> list[dict]:
        rows = [{"comparison": c, "utility_diff": v, "ci_low": v / 4, "ci_high": v, "p_adjusted": 0.04}
                for c, v in values.items()]
        rows[1]["ci_low"] = 0.0  # recall: non-inferior
        return rows

    expect = ROOT / "configs" / "ci_expect.toml"
    bounds = Expectations.model_validate(read_toml(expect)).bounds
    assert all(r.ok for r in evaluate(table(effects), bounds, expect))
    for comp, value in effects.items():
        if value:
            results = evaluate(table({**effects, comp: value / 2}), bounds, expect)
            assert any(not r.ok and r.bound.startswith(comp) for r in results), comp
