"""Run the test suite while every core is kept busy, to find tests that assert timing instead of truth.

A test must hold on a laptop that is doing something else and on a shared CI machine: what it asserts must be
true whatever the timing (nothing lost, nothing duplicated, results identical, an error named). This script
starts CPU spinners (``stress-ng --cpu`` when Debian's stress-ng is installed, else Python busy loops) at a
chosen number per core, runs ``python -m pytest`` with the given arguments, samples the load average while the
suite runs, stops the spinners and prints one summary line per run::

    .venv/bin/python benchmarks/suite_under_load.py --runs 3                 # the suite on 2 workers, 2 spinners a core
    .venv/bin/python benchmarks/suite_under_load.py --per-core 0 -- -n 2     # the same suite with no load
    .venv/bin/python benchmarks/suite_under_load.py -- -n 2 tests/test_runner.py -x

Exit status: 0 when every run passed, else the first failing run's pytest status.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def start_load(spinners: int) -> list[subprocess.Popen]:
    """`spinners` processes that each keep one core busy until they are stopped."""
    if spinners <= 0:
        return []
    if shutil.which("stress-ng"):
        cmd = ["stress-ng", "--cpu", str(spinners), "--cpu-method", "matrixprod", "--quiet"]
        return [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)]
    code = "while True:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", code], start_new_session=True) for _ in range(spinners)]


def stop_load(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


class LoadSampler:
    """Samples the one-minute load average every few seconds while the suite runs."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every_s,), daemon=True)

    def _run(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> "LoadSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


_SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed).*?)\s*=*$")


def run_once(pytest_args: list[str], spinners: int, log: Path) -> tuple[int, str, float, list[float]]:
    """One suite run under `spinners` busy processes: (pytest status, its summary line, seconds, load samples)."""
    load = start_load(spinners)
    t0 = time.monotonic()
    try:
        with LoadSampler() as sampler, log.open("w") as out:
            rc = subprocess.run([sys.executable, "-m", "pytest", *pytest_args], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT).returncode
    finally:
        stop_load(load)
    took = time.monotonic() - t0
    lines = log.read_text(errors="replace").splitlines()
    summary = next((m.group(1) for line in reversed(lines) if (m := _SUMMARY.match(line.strip()))), "no summary")
    return rc, summary, took, sampler.samples


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1, help="suite runs in a row (default 1)")
    ap.add_argument("--per-core", type=int, default=2, help="busy processes per core (default 2; 0 for none)")
    ap.add_argument("--logs", type=Path, default=Path("/tmp"), help="where each run's pytest output goes")
    ap.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments (default: -n 2)")
    args = ap.parse_args(argv)
    pytest_args = args.pytest_args or ["-n", "2"]
    spinners = args.per_core * (os.cpu_count() or 1)
    first_failure = 0
    for i in range(1, args.runs + 1):
        log = args.logs / f"suite_under_load-{i}.log"
        rc, summary, took, samples = run_once(pytest_args, spinners, log)
        mean = sum(samples) / len(samples) if samples else float("nan")
        peak = max(samples, default=float("nan"))
        print(f"run {i}/{args.runs}: {summary} in {took / 60:.1f} min; {spinners} spinners; "
              f"load average mean {mean:.1f}, peak {peak:.1f}; pytest status {rc}; log {log}", flush=True)
        if rc and not first_failure:
            first_failure = rc
    return first_failure


if __name__ == "__main__":
    sys.exit(main())
