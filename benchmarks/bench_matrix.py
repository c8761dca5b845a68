"""Benchmark: a config's whole matrix to its report, as a user runs it: `run` (1 and 2 workers), then `analyze`,
`report` and `audit` of the 2-worker results, each a fresh process; optionally the same of an earlier commit.

    .venv/bin/python benchmarks/bench_matrix.py [CONFIG] [--against COMMIT] [--repeat 3]

Each step's figure is the median of `--repeat` rounds (a shared 2-core machine swings by 10 % or more); with
`--against`, the commit is checked out into a temporary git worktree, measured in the same rounds (its round,
then this tree's, alternating), and the ratio printed. "to report" is run (2 workers) + analyze + report.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("run_1_worker", "run_2_workers", "analyze", "report", "audit")


def _timed(tree: Path, *args: str) -> float:
    """Seconds of one `aft-bench` command in a fresh process importing the package of `tree`."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "aft_bench.cli", *args], cwd=tree, env=_env(tree), check=True,
                   capture_output=True, text=True)
    return time.perf_counter() - t0


def _env(tree: Path) -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(tree)}


def one_round(tree: Path, config: Path) -> dict[str, float]:
    """Every step once, in fresh results folders."""
    got: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        got["run_1_worker"] = _timed(tree, "run", str(config), "--out", f"{tmp}/one", "--workers", "1")
        out = f"{tmp}/two"
        got["run_2_workers"] = _timed(tree, "run", str(config), "--out", out, "--workers", "2")
        got["analyze"] = _timed(tree, "analyze", out)
        got["report"] = _timed(tree, "report", out)
        got["audit"] = _timed(tree, "audit", out)
    got["to_report"] = got["run_2_workers"] + got["analyze"] + got["report"]
    return got


def _worktree(commit: str, tmp: str) -> Path:
    tree = Path(tmp) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT, check=True, capture_output=True)
    return tree


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("config", nargs="?", default="configs/paper_deterministic.toml")
    ap.add_argument("--against", help="an earlier commit to measure the same way, round by round")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the median of each step counts")
    args = ap.parse_args()
    trees: dict[str, Path] = {"this tree": ROOT}
    with tempfile.TemporaryDirectory() as tmp:
        if args.against:
            trees = {args.against[:12]: _worktree(args.against, tmp), **trees}
        try:
            rounds: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
            for _ in range(args.repeat):
                for name, tree in trees.items():
                    rounds[name].append(one_round(tree, Path(args.config)))
        finally:
            if args.against:
                subprocess.run(["git", "worktree", "remove", "--force", str(trees[args.against[:12]])], cwd=ROOT,
                               check=False, capture_output=True)
    cols = (*STEPS, "to_report")
    med: dict[str, dict[str, Any]] = {n: {c: statistics.median(r[c] for r in rs) for c in cols}
                                      for n, rs in rounds.items()}
    print(f"{args.config}: seconds per step, fresh processes, median of {args.repeat} rounds")
    print(f"  {'':<12} " + "  ".join(f"{c.replace('_', ' '):>13}" for c in cols))
    for name, m in med.items():
        print(f"  {name:<12} " + "  ".join(f"{m[c]:>13.2f}" for c in cols))
    if args.against:
        before, now = med[args.against[:12]], med["this tree"]
        print(f"  {'after/before':<12} " + "  ".join(f"{now[c] / before[c]:>13.3f}" for c in cols))


if __name__ == "__main__":
    main()
