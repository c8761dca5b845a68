"""How long the shipped atlas takes on this machine: every release installed from the lock first (`--install-only`,
timed apart: it is network time, done once), then the whole atlas measured into a fresh folder with a warm cache,
and a rerun over the finished folder (which must measure nothing). Prints one line per phase and the load beside it.

    .venv/bin/python benchmarks/atlas_time.py [--atlas atlases/mcp.toml] [--workers 2] [--executor dask] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "aft_bench.cli", "atlas", *args], capture_output=True, text=True,
                          cwd=ROOT)
    if done.returncode != 0:
        sys.exit(f"atlas {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return time.perf_counter() - t0, done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--atlas", default="atlases/mcp.toml")
    ap.add_argument("--workers", default="2")
    ap.add_argument("--executor", default="local", choices=("local", "dask"))
    ap.add_argument("--out", help="keep the measured atlas folder here (default: a temporary folder, removed)")
    a = ap.parse_args()
    spent, done = _run([a.atlas, "--install-only", "--offline", "--quiet"])
    print(f"install from the lock: {spent:.1f} s ({done.stdout.strip()})")
    with tempfile.TemporaryDirectory(prefix="atlas-bench-") as tmp:
        out = str(Path(a.out).resolve() if a.out else Path(tmp) / "out")
        if a.out and Path(out).exists():
            sys.exit(f"--out {out} exists: the benchmark measures into a new folder")
        load = os.getloadavg()[0]
        flags = ["--workers", a.workers] + (["--executor", "dask", "--scheduler", f"local:{a.workers}"]
                                            if a.executor == "dask" else [])
        spent, done = _run([a.atlas, "--out", out, "--offline", "--quiet", *flags])
        print(f"whole atlas, warm cache, {a.executor} with {a.workers} workers: {spent:.1f} s "
              f"(load {load:.1f} at start, {os.getloadavg()[0]:.1f} at end)\n  {done.stdout.strip().splitlines()[0]}")
        spent, done = _run([a.atlas, "--out", out, "--offline"])
        said = next((ln for ln in done.stderr.splitlines() if "already recorded" in ln), "")
        print(f"rerun over the finished folder: {spent:.1f} s ({said})")


if __name__ == "__main__":
    main()
