"""Benchmark: the per-episode overhead of program mode. One episode submits one program (a read and a write
through the interface) in the pydantic-monty sandbox; the same two calls made stepwise are the baseline.
The sandbox's worker pool starts once per process (reported separately, amortized over a run).

    .venv/bin/python benchmarks/bench_programs.py [--episodes 200]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from aft_bench.episode.episode import open_pipeline
from aft_bench.interface.interface import Interface
from aft_bench.interface.mechanisms import load_conditions
from aft_bench.runtime.faults import FaultSchedule
from aft_bench.runtime.trace import Trace
from aft_bench.tasks.worldset import WorldSet

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ('o = CALL("get_order", {"order_id": "o1"}, "READ")\n'
           'CALL("charge_payment", {"order_id": "o1", "amount": 50, "note": ""}, "WRITE")')


def episode(world, task, mech, program: bool) -> float:
    t0 = time.perf_counter()
    iface = Interface(open_pipeline(world, task, FaultSchedule(id="b"), 0, Trace()), mech)
    iface.surface()
    if program:
        iface.call("run_program", {"source": PROGRAM})
    else:
        iface.call("get_order", {"order_id": "o1"})
        iface.call("charge_payment", {"order_id": "o1", "amount": 50, "note": ""})
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=200)
    n = ap.parse_args().episodes
    world, task = WorldSet(ROOT / "worlds").task("payments/charge-o1", ROOT / "worlds", "bench")
    mech = load_conditions().resolve("I0-program-replay")
    t0 = time.perf_counter()
    episode(world, task, mech, True)  # starts the sandbox's worker pool
    start = time.perf_counter() - t0
    step = statistics.median(episode(world, task, mech, False) for _ in range(n))
    prog = statistics.median(episode(world, task, mech, True) for _ in range(n))
    print(f"{n} episodes each: stepwise {step * 1000:.2f} ms, program {prog * 1000:.2f} ms (median); "
          f"program-mode overhead {(prog - step) * 1000:.2f} ms per episode (target <= 5 ms); "
          f"sandbox pool start {start * 1000:.0f} ms once per process")


if __name__ == "__main__":
    main()
