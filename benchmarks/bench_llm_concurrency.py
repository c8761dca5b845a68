"""Benchmark: LLM episodes run concurrently on one event loop. The offline model (`aft-bench fake-llm`, its own
process) answers every call after LATENCY seconds; 200 episodes run at concurrency 32 through litellm's real
HTTP path, and the wall time of the run is compared with the ideal bound

    ideal = model calls (episodes x turns) x latency / concurrency

    .venv/bin/python benchmarks/bench_llm_concurrency.py [--latency 0.2] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
EXE = Path(sys.executable).with_name("aft-bench")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--concurrency", type=int, default=32)
    args = ap.parse_args()
    server = subprocess.Popen([str(EXE), "fake-llm", "--latency", str(args.latency)], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT)
    try:
        assert server.stdout is not None
        url = re.search(r"(http://\S+/v1)", server.stdout.readline()).group(1)  # type: ignore[union-attr]
        with tempfile.TemporaryDirectory() as tmp:
            cfg = Path(tmp) / "bench.toml"
            cfg.write_text(f'''[experiment]
id = "bench_llm"
comparisons = ["duplicate_effects"]
tasks_per_workload = 10
seeds = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]

[[experiment.agents]]
name = "llm"
model = "openai/fake-capability"
api_base = "{url}"
api_key_env = "AFT_BENCH_FAKE_KEY"
concurrency = {args.concurrency}
''')
            out = Path(tmp) / "out"
            run = subprocess.run([str(EXE), "run", str(cfg), "--out", str(out), "--worlds", str(ROOT / "worlds")],
                                 capture_output=True, text=True, cwd=ROOT, env={"AFT_BENCH_FAKE_KEY": "offline",
                                                                              "PATH": "/usr/bin:/bin"})
            if run.returncode != 0:
                sys.exit(f"run failed: {run.stderr}")
            wall = float(re.search(r"runs in ([0-9.]+) s", run.stdout).group(1))  # type: ignore[union-attr]
            df = pd.read_parquet(out / "results.parquet")
        per_call_cpu = litellm_cpu_per_call(url)
    finally:
        server.terminate()
    calls = int(df["model_calls"].sum())
    ideal = calls * args.latency / args.concurrency
    print(f"{len(df)} episodes, {calls} model calls ({calls / len(df):.2f} per episode), latency {args.latency} s, "
          f"concurrency {args.concurrency}, provider retries {int(df['retries'].sum())}")
    print(f"wall {wall:.2f} s, ideal {ideal:.2f} s: ratio {wall / ideal:.3f} (target <= 1.25)")
    print(f"litellm alone: {per_call_cpu * 1000:.1f} ms CPU per call on one loop, so one loop serves at most "
          f"{1 / per_call_cpu:.0f} calls/s; this run needs {args.concurrency / args.latency:.0f} calls/s at zero "
          f"CPU cost")


def litellm_cpu_per_call(url: str, calls: int = 200) -> float:
    """CPU seconds litellm itself spends per chat-completion call (many in flight on one loop)."""
    import asyncio
    import time

    from aft_bench.interface.tokens import litellm_module

    litellm = litellm_module()
    msgs = [{"role": "system", "content": "Task id: none"}, {"role": "user", "content": "Task: none\nInputs: {}"}]

    async def one() -> None:
        await litellm.acompletion(model="openai/fake-capability", messages=msgs, api_base=url, api_key="none",
                                  num_retries=0, max_retries=0, timeout=30)

    async def run() -> float:
        await one()
        t = time.process_time()
        await asyncio.gather(*(one() for _ in range(calls)))
        return (time.process_time() - t) / calls

    return asyncio.run(run())


if __name__ == "__main__":
    main()
