"""Where a served real-server tuple's time goes, quiet and with both cores kept busy: `serve-matrix` over the memory
world's key comparison (GW-key, GW-bare; N tasks) with a small MCP SDK client (initialize, list the tools, make the
task's first call, report), per tuple the time until the served server says it serves (the `aft-bench serve`
process starting: Python, the harness, its world prepared in the background) and the whole tuple (server, client,
recording), against the same episodes played in-process by `aft-bench run`.

    .venv/bin/python benchmarks/served_overhead.py [--tasks 4] [--load 2]

`--load K` runs K busy-looping processes beside the measurement (0 for quiet only). Needs `make worlds`.
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXE = str(Path(sys.executable).with_name("aft-bench"))

CLIENT = """
import asyncio, os
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

async def main():
    async with streamable_http_client(os.environ["AFT_BENCH_MCP_URL"]) as (r, w, *_), ClientSession(r, w) as s:
        await s.initialize()
        tools = [t.name for t in (await s.list_tools()).tools]
        await s.call_tool("read_graph", {}) if "read_graph" in tools else None
        await s.call_tool("report_outcome", {"action": "escalate", "claim": "unknown"})

asyncio.run(main())
"""


def _spin(stop: multiprocessing.synchronize.Event) -> None:
    while not stop.is_set():
        pass


def serve_matrix(tasks: int, tmp: Path) -> tuple[float, list[float], list[float]]:
    cfg = tmp / "served.toml"
    cfg.write_text(f'[experiment]\nid = "served"\ncomparisons = ["gateway_key_claims_memory"]\n'
                   f'tasks_per_workload = {tasks}\nseeds = [0]\n')
    client = tmp / "client.py"
    client.write_text(CLIENT)
    out = tmp / f"out-{time.monotonic_ns()}"
    t0 = time.perf_counter()
    done = subprocess.run([EXE, "serve-matrix", str(cfg), "--out", str(out), "--agent", "bench",
                           "--client-cmd", f"{sys.executable} {client}"], capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    found = re.findall(r"server ready in ([\d.]+) s, tuple ([\d.]+) s", done.stdout)
    if done.returncode != 0 or not found:
        raise SystemExit(f"serve-matrix failed ({done.returncode}): {done.stdout[-500:]} {done.stderr[-500:]}")
    return wall, [float(a) for a, _ in found], [float(b) for _, b in found]


def in_process(tasks: int, tmp: Path) -> float:
    cfg = tmp / "run.toml"
    cfg.write_text(f'[experiment]\nid = "inproc"\ncomparisons = ["gateway_key_claims_memory"]\n'
                   f'tasks_per_workload = {tasks}\nseeds = [0]\n')
    t0 = time.perf_counter()
    subprocess.run([EXE, "run", str(cfg), "--out", str(tmp / f"run-{time.monotonic_ns()}"), "--workers", "1"],
                   check=True, capture_output=True, cwd=ROOT)
    return time.perf_counter() - t0


def measure(tasks: int, load: int) -> None:
    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(load)]
    for p in spinners:
        p.start()
    try:
        with tempfile.TemporaryDirectory(prefix="served-bench-") as tmp:
            wall, ready, tuples = serve_matrix(tasks, Path(tmp))
            run = in_process(tasks, Path(tmp))
    finally:
        stop.set()
        for p in spinners:
            p.join()
    n = len(tuples)
    print(f"load {load}: {n} served tuples in {wall:.1f} s; per tuple median {statistics.median(tuples):.2f} s "
          f"(max {max(tuples):.2f}), of which the server's start until it serves median "
          f"{statistics.median(ready):.2f} s (max {max(ready):.2f}); the same {n} episodes in-process: "
          f"{run:.1f} s in all, {run / n:.2f} s each")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--load", type=int, default=2)
    args = p.parse_args()
    measure(args.tasks, 0)
    if args.load:
        measure(args.tasks, args.load)


if __name__ == "__main__":
    main()
