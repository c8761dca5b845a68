"""Every path from the command line or the environment is resolved once (issue 47): a relative `--out` and a
relative `AFT_BENCH_SERVERS` give the rows an absolute one gives, on the real git, filesystem and memory servers
(a relative `--out` once failed every git and filesystem tuple, and recorded every memory row as not completed
while the audit passed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from aft_bench.world.external import servers_dir

ROOT = Path(__file__).resolve().parents[1]

CONFIG = """[experiment]
id = "paths"
comparisons = ["gateway_key_claims", "gateway_key_duplicates_fs", "gateway_key_claims_memory"]
tasks_per_workload = 2
seeds = [0]
"""


def _run(cwd: Path, out: str, servers: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AFT_BENCH_SERVERS": servers}
    return subprocess.run([sys.executable, "-m", "aft_bench.cli", "run", "paths.toml", "--out", out,
                           "--worlds", str(ROOT / "worlds"), "--workers", "2"], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=900)


def _rows(out: Path) -> list[tuple]:
    import pandas as pd

    df = pd.read_parquet(out / "results.parquet")
    cols = ["run_id", "workload", "condition", "outcome", "y_goal", "duplicate_effects", "claim_correct",
            "fault_fired", "trace_head"]
    return sorted(tuple(r) for r in df[cols].itertuples(index=False))


def test_a_relative_out_and_servers_folder_give_the_rows_of_absolute_ones(tmp_path: Path) -> None:
    (tmp_path / "paths.toml").write_text(CONFIG)
    absolute = _run(tmp_path, str(tmp_path / "abs"), str(servers_dir()))
    assert absolute.returncode == 0, absolute.stderr
    relative = _run(tmp_path, "results/rel", os.path.relpath(servers_dir(), tmp_path))
    assert relative.returncode == 0, relative.stderr
    rows = _rows(tmp_path / "abs")
    assert {r[1] for r in rows} == {"git_faults", "filesystem_response_loss", "memory_response_loss"} or \
        len({r[1] for r in rows}) == 3
    assert _rows(tmp_path / "results" / "rel") == rows
    assert all(r[7] for r in rows)  # every fault fired
    # the rows are worth comparing: every key-condition tuple completed on all three servers
    assert {r[1] for r in rows if r[2] == "GW-key" and r[3] == "completed"} == {r[1] for r in rows}
    audit = subprocess.run([sys.executable, "-m", "aft_bench.cli", "audit", "results/rel"], capture_output=True,
                           text=True, cwd=tmp_path, timeout=600)
    assert audit.returncode == 0, audit.stdout + audit.stderr
