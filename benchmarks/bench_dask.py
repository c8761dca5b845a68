"""Benchmark: the Dask executor (`aft-bench run --executor dask`) on this machine.

1. LLM-latency-bound episodes: the offline model (`aft-bench fake-llm --latency 0.2`, its own process) answers
   every call after 200 ms; the same matrix of `llm` episodes runs on a LocalCluster of 1 and of 2 worker
   processes (one thread each, one episode at a time per worker). Throughput = episodes / wall of the run; the bar
   is 2 workers >= 1.8x the throughput of 1.
2. Per-task overhead on deterministic episodes: `configs/ci.toml` (288 runs of a few ms each) with the serial
   local executor against a LocalCluster of 1 worker: (dask wall - serial wall) / runs.

Clusters are started before the clock and warmed by a one-cell run (worker processes start, import the package
and load the tokenizer once: about 5 s that a long matrix pays once); each timed run still ships its inputs to
the workers and rebuilds the matrix there, and fsyncs every row to the journal.

    .venv/bin/python benchmarks/bench_dask.py [--latency 0.2] [--seeds 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dask
from distributed import LocalCluster

from aft_bench.experiment.config import load_matrix
from aft_bench.experiment.runner import run_matrix
from aft_bench.interface import tokens

ROOT = Path(__file__).resolve().parent.parent
EXE = Path(sys.executable).with_name("aft-bench")


def llm_config(folder: Path, url: str, seeds: int, tasks: int) -> Path:
    path = folder / f"llm_{seeds}_{tasks}.toml"
    path.write_text(f'''[experiment]
id = "bench_dask_llm"
comparisons = ["duplicate_effects"]
tasks_per_workload = {tasks}
seeds = {list(range(seeds))}

[[experiment.agents]]
name = "llm"
model = "openai/fake-capability"
api_base = "{url}"
api_key_env = "AFT_BENCH_FAKE_KEY"
concurrency = 16
''')
    return path


def timed(config: Path, out: Path, scheduler: str | None) -> tuple[float, int]:
    """Wall seconds of one run into a fresh folder, and its row count."""
    matrix = load_matrix(config, ROOT / "worlds")
    t0 = time.perf_counter()
    rows = run_matrix(matrix, out, scheduler=scheduler)
    return time.perf_counter() - t0, len(rows)


def cluster(n: int) -> LocalCluster:
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        return LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                            dashboard_address=None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per setting (median reported)")
    args = ap.parse_args()
    os.environ["AFT_BENCH_FAKE_KEY"] = "offline"  # inherited by the worker processes
    tokens.warm()
    server = subprocess.Popen([str(EXE), "fake-llm", "--latency", str(args.latency)], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT)
    try:
        assert server.stdout is not None
        url = re.search(r"(http://\S+/v1)", server.stdout.readline()).group(1)  # type: ignore[union-attr]
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            warm, cfg = llm_config(folder, url, 1, 1), llm_config(folder, url, args.seeds, 2)
            llm: dict[int, tuple[float, int, int]] = {}
            for n in (1, 2):
                with cluster(n) as c:
                    timed(warm, folder / f"warm{n}", c.scheduler_address)
                    walls = []
                    for r in range(args.repeats):
                        wall, rows = timed(cfg, folder / f"llm{n}-{r}", c.scheduler_address)
                        walls.append(wall)
                    llm[n] = (statistics.median(walls), rows, len(walls))
            ci = ROOT / "configs" / "ci.toml"
            serial = statistics.median(timed(ci, folder / f"serial{r}", None)[0] for r in range(args.repeats))
            with cluster(1) as c:
                timed(warm, folder / "warm-ci", c.scheduler_address)
                on_dask = [timed(ci, folder / f"ci{r}", c.scheduler_address) for r in range(args.repeats)]
    finally:
        server.terminate()
    (w1, n1, _), (w2, n2, _) = llm[1], llm[2]
    ratio = (n2 / w2) / (n1 / w1)
    print(f"LLM episodes ({n1} per run, offline model answering after {args.latency} s, median of {args.repeats}):")
    print(f"  1 worker : {w1:.2f} s, {n1 / w1:.2f} episodes/s")
    print(f"  2 workers: {w2:.2f} s, {n2 / w2:.2f} episodes/s")
    print(f"  throughput ratio 2 vs 1 workers: {ratio:.2f}x (bar >= 1.8x: {'met' if ratio >= 1.8 else 'NOT met'})")
    dask_wall = statistics.median(w for w, _ in on_dask)
    runs = on_dask[0][1]
    print(f"deterministic episodes (configs/ci.toml, {runs} runs, median of {args.repeats}):")
    print(f"  local serial: {serial:.2f} s ({serial / runs * 1000:.2f} ms/run)")
    print(f"  dask, 1 worker: {dask_wall:.2f} s ({dask_wall / runs * 1000:.2f} ms/run)")
    print(f"  per-task overhead of dask: {(dask_wall - serial) / runs * 1000:.2f} ms "
          f"(including shipping the inputs and rebuilding the matrix once per run)")


if __name__ == "__main__":
    main()
