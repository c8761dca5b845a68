"""configs/real_git_faults.toml reduced to two tasks (issue 49): the labels of every fault at the gateway under
GW-bare, GW-status and GW-verify on the real mcp-server-git, as the paper matrix's expected-labels test holds its
own. Each row follows from the fault's meaning: an interruption or a restart before the request reaches the server
is recovered by a bare re-issue; another writer's commit first makes the agent's commit a stale write whatever the
condition; a false success is believed unless the state is checked; a false failure is believed unless the state
is checked (the invocation record shows what the gateway said, not the state)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = (ROOT / "configs" / "real_git_faults.toml").read_text().replace("seeds = [0]",
                                                                         "seeds = [0]\ntasks_per_workload = 2")

# fault -> condition -> (outcome, y_goal, duplicate_effects, terminal_claim, incorrect_claim, recovered, stale_writes)
EXPECTED = {
    "interruption": dict.fromkeys(("GW-bare", "GW-status", "GW-verify"),
                                  ("completed", True, 0, "success", False, True, 0)),
    "server_restart": dict.fromkeys(("GW-bare", "GW-status", "GW-verify"),
                                    ("completed", True, 0, "success", False, True, 0)),
    "stale_state": dict.fromkeys(("GW-bare", "GW-status", "GW-verify"),
                                 ("unsafely_committed", True, 0, "success", False, None, 1)),
    "false_success": {**dict.fromkeys(("GW-bare", "GW-status"),
                                      ("unnecessarily_failed", False, 0, "success", True, None, 0)),
                      "GW-verify": ("completed", True, 0, "success", False, None, 0)},
    "false_failure": {**dict.fromkeys(("GW-bare", "GW-status"), ("completed", True, 0, "failure", True, None, 0)),
                      "GW-verify": ("completed", True, 0, "success", False, None, 0)},
}


def test_every_gateway_fault_has_its_labels_on_the_real_git_server(tmp_path: Path) -> None:
    cfg = tmp_path / "real_git_faults.toml"
    cfg.write_text(CONFIG)
    done = subprocess.run([sys.executable, "-m", "aft_bench.cli", "run", str(cfg), "--out", str(tmp_path / "o"),
                           "--workers", "2"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    df = pd.read_parquet(tmp_path / "o" / "results.parquet")
    assert len(df) == 30 and df["fault_fired"].all() and df["task_id"].nunique() == 2
    cols = ["outcome", "y_goal", "duplicate_effects", "terminal_claim", "incorrect_claim", "recovered", "stale_writes"]
    got: dict[str, dict[str, set]] = {}
    for _, r in df.iterrows():
        row = tuple(None if pd.isna(r[c]) else (bool(r[c]) if c in ("y_goal", "incorrect_claim", "recovered")
                                                else r[c]) for c in cols)
        got.setdefault(r["fault"], {}).setdefault(r["condition"], set()).add(row)
    assert got == {f: {c: {v} for c, v in by.items()} for f, by in EXPECTED.items()}
    _its_three_comparisons_are_the_answer(tmp_path / "o")


def _its_three_comparisons_are_the_answer(out: Path) -> None:
    """analyze prints exactly the config's three comparisons, Holm across the three (issue 50); the report shows
    them alone, with no empty row and no column of the paper's values."""
    done = subprocess.run([sys.executable, "-m", "aft_bench.cli", "analyze", str(out)], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    three = ["gateway_verify_terminal_git", "gateway_status_recovery_git", "gateway_status_terminal_git"]
    assert lines[0] == "primary: Holm across its 3 comparisons" and [x.split()[0] for x in lines[3:6]] == three
    assert lines[6].startswith("p values:") and "missing" not in done.stdout and "not computed" not in done.stdout
    table = pd.read_csv(out / "analysis" / "comparisons.csv")
    assert table["comparison"].tolist() == three and (table["pairs"] > 0).all()
    ps = sorted(table["p_raw"])
    holm = [min(1.0, max((3 - i) * p for i, p in enumerate(ps[:k + 1]))) for k in range(3)]
    assert sorted(table["p_adjusted"]) == pytest.approx(holm)
    assert subprocess.run([sys.executable, "-m", "aft_bench.cli", "report", str(out)], capture_output=True,
                          cwd=ROOT, timeout=600).returncode == 0
    md = (out / "report" / "report.md").read_text()
    section = md.split("## Comparisons: primary", 1)[1].split("\n## ", 1)[0]
    rows = [x for x in section.splitlines() if x.startswith("| gateway_")]
    assert [r.split("|")[1].strip() for r in rows] == three and "paper (reference)" not in section
    from test_own_comparisons import experiment_page_opens_on

    experiment_page_opens_on(out, three, out.parent, servers=30, server="mcp-server-git 2026.10.19")
