"""Benchmark: wall time and runs/second of a config's whole matrix, for 1 and 2 workers.

    .venv/bin/python benchmarks/bench_matrix.py [configs/paper_deterministic.toml]

Each measurement is a fresh process (as a user runs it), so it includes imports and cache warm-up.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    config = sys.argv[1] if len(sys.argv) > 1 else "configs/paper_deterministic.toml"
    exe = Path(sys.executable).with_name("aft-bench")
    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            out = subprocess.run([str(exe), "run", config, "--out", f"{tmp}/out", "--workers", str(workers)],
                                 cwd=ROOT, capture_output=True, text=True, check=True).stdout
            wall = time.perf_counter() - t0
            runs = int(out.split()[0])
            print(f"{config}  workers={workers}  runs={runs}  wall={wall:.1f}s  {runs / wall:.0f} runs/s")


if __name__ == "__main__":
    main()
