"""Benchmark: SQLite-backend runs/second against in-memory runs/second on the same matrix.

    .venv/bin/python benchmarks/bench_backends.py

The matrix is configs/sqlite_replication.toml restricted to one backend at a time, one worker, fresh
processes. Two rates: the whole command (imports and start-up included) and the time inside the runs
(median of the rows' wall_s: reset, calls, commits, trace, labels), which isolates the backend's own cost;
the median leaves out the first run's one-off tokenizer import.

    .venv/bin/python benchmarks/bench_backends.py --commits

runs the SQLite matrix once in this process with the dialect's COMMIT timed: how many durable commits a run
makes (every invocation checkpoint and every effect is one, synchronous=FULL; a COMMIT that only ends an
implicit read transaction is counted apart) and how long they take: the floor of a SQLite run under the same
durability semantics.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def commits() -> None:
    """Durable commits per SQLite run and the time spent in them (the fsync floor of a run)."""
    from sqlalchemy.engine.default import DefaultDialect

    spent = {"n": 0, "s": 0.0, "reads": 0, "reads_s": 0.0}
    commit = DefaultDialect.do_commit

    def timed(self: DefaultDialect, dbapi_connection: Any) -> None:
        durable = bool(getattr(dbapi_connection, "in_transaction", True))  # else: an implicit read ends
        t = time.perf_counter()
        commit(self, dbapi_connection)
        took = time.perf_counter() - t
        spent["s" if durable else "reads_s"] += took
        spent["n" if durable else "reads"] += 1

    DefaultDialect.do_commit = timed  # type: ignore[method-assign]
    import pandas as pd

    from aft_bench.cli.main import main as cli

    base = (ROOT / "configs" / "sqlite_replication.toml").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "sqlite.toml"
        cfg.write_text(re.sub(r"backends = \[.*\]", 'backends = ["sqlite"]', base))
        assert cli(["run", str(cfg), "--out", f"{tmp}/out", "--workers", "1"]) == 0
        rows = pd.read_parquet(f"{tmp}/out/results.parquet")
    n = len(rows)
    print(f"sqlite runs={n}  durable commits per run {spent['n'] / n:.2f}, time in them per run "
          f"{spent['s'] / n * 1000:.2f} ms ({spent['s'] / spent['n'] * 1000:.3f} ms each); "
          f"read transactions ended per run {spent['reads'] / n:.2f} ({spent['reads_s'] / n * 1000:.2f} ms); "
          f"median run {rows['wall_s'].median() * 1000:.1f} ms")


def main() -> None:
    if "--commits" in sys.argv[1:]:
        commits()
        return
    base = (ROOT / "configs" / "sqlite_replication.toml").read_text()
    exe = Path(sys.executable).with_name("aft-bench")
    rates = {}
    for backend in ("memory", "sqlite"):
        with tempfile.TemporaryDirectory() as tmp:
            cfg = Path(tmp) / f"{backend}.toml"
            cfg.write_text(re.sub(r"backends = \[.*\]", f'backends = ["{backend}"]', base))
            t0 = time.perf_counter()
            out = subprocess.run([str(exe), "run", str(cfg), "--out", f"{tmp}/out", "--workers", "1"],
                                 cwd=ROOT, capture_output=True, text=True, check=True).stdout
            wall = time.perf_counter() - t0
            runs = int(out.split()[0])
            import pandas as pd

            median = float(pd.read_parquet(f"{tmp}/out/results.parquet")["wall_s"].median())
            rates[backend] = (runs / wall, 1 / median)
            print(f"{backend:<7} runs={runs}  command wall={wall:.1f}s ({runs / wall:.1f} runs/s)  "
                  f"median run {median * 1000:.1f} ms ({1 / median:.0f} runs/s)")
    cmd = rates["sqlite"][0] / rates["memory"][0]
    steady = rates["sqlite"][1] / rates["memory"][1]
    print(f"sqlite/memory rate: {cmd:.2f} for the whole command, {steady:.2f} per run (median)")


if __name__ == "__main__":
    main()
