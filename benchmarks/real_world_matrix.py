"""A real-server matrix's wall time against the sum of its bare server start-ups: the three shipped worlds x 16
task clusters x the key comparison's two conditions (GW-key, GW-bare), 96 episodes, each on a fresh server.

    .venv/bin/python benchmarks/real_world_matrix.py [--workers 2] [--starts 5]

Runs the matrix four times: every server started from nothing when its episode opens (AFT_BENCH_FORK=0
AFT_BENCH_POOL=0), the same with the next episode's world prepared ahead (the pool), mcp-server-git forked from its
pre-imported launcher without the pool (as shipped), and forked and pooled; checks all give the same rows, and
prints each wall beside the sum of bare start-ups (each world's median start from nothing, initialize and
tools/list, times its episodes). Needs `make worlds`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from aft_bench.world.external import load_external
from aft_bench.world.mcp_stdio import StdioServer
from aft_bench.world.resource import Resource

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """[experiment]
id = "real_world_matrix"
description = "Three real servers x 16 tasks x GW-key and GW-bare (benchmarks/real_world_matrix.py)."
comparisons = ["gateway_key_claims", "gateway_key_duplicates_fs", "gateway_key_claims_memory"]
seeds = [0]
"""
EPISODES = {"git": 32, "filesystem": 32, "memory": 32}


def bare_start(name: str, n: int) -> float:
    """Median seconds to start the world's server from nothing and list its tools, on a fresh resource."""
    world = load_external(ROOT / "worlds" / name)
    times = []
    for _ in range(n):
        res = Resource(world).make()
        try:
            t0 = time.perf_counter()
            with StdioServer(world.server.argv(res.root), cwd=res.root,
                             env={**res.env(), **world.server.environment(res.root)}) as srv:
                srv.tools()
                times.append(time.perf_counter() - t0)
        finally:
            res.remove()
    return statistics.median(times)


MODES = {  # name -> (AFT_BENCH_FORK, AFT_BENCH_POOL)
    "every server from nothing, no pool": ("0", "0"),
    "every server from nothing, pooled": ("0", "1"),
    "mcp-server-git forked, no pool": ("1", "0"),
    "mcp-server-git forked, pooled": ("1", "1"),
}


def run(config: Path, out: Path, workers: int, fork: str, pool: str) -> float:
    env = {**os.environ, "AFT_BENCH_FORK": fork, "AFT_BENCH_POOL": pool}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "aft_bench.cli", "run", str(config), "--out", str(out),
                           "--workers", str(workers)], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"the matrix failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return wall


def labels(out: Path) -> list[tuple]:
    df = pd.read_parquet(out / "results.parquet")
    return sorted(df[["run_id", "outcome", "duplicate_effects", "claim_correct", "trace_head"]]
                  .itertuples(index=False, name=None))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--starts", type=int, default=5, help="bare start-ups timed per world (the median is used)")
    a = ap.parse_args()
    starts = {name: bare_start(name, a.starts) for name in EPISODES}
    total = sum(starts[n] * k for n, k in EPISODES.items())
    print("bare start-up from nothing (median of %d): %s" % (
        a.starts, ", ".join(f"{n} {s:.3f} s" for n, s in starts.items())))
    print(f"sum of the matrix's bare start-ups: {total:.1f} s ({sum(EPISODES.values())} episodes)")
    with tempfile.TemporaryDirectory(prefix="aft-real-matrix-") as tmp:
        config = Path(tmp) / "real_world_matrix.toml"
        config.write_text(CONFIG)
        rows = {}
        for i, (how, (fork, pool)) in enumerate(MODES.items()):
            out = Path(tmp) / f"mode-{i}"
            wall = run(config, out, a.workers, fork, pool)
            rows[how] = labels(out)
            print(f"matrix, {how}, --workers {a.workers}: {len(rows[how])} runs in {wall:.1f} s, "
                  f"wall / sum of bare start-ups {wall / total:.2f}")
        print("rows equal every way:", all(r == rows[how] for r in rows.values()))
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
