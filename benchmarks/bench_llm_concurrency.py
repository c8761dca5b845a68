"""Benchmark: LLM episodes run concurrently on one event loop. The offline model (`aft-bench fake-llm`, its own
process) answers every call after LATENCY seconds; 200 episodes run at concurrency 32 through litellm's real
HTTP path, and the wall time of the run is compared with the ideal bound

    ideal = model calls (episodes x turns) x latency / concurrency

The run is timed in this process after litellm and the tokenizer are loaded (a one-off ~4 s import that is
not concurrency; with `--loops N` also the process server that preloads them for the loop processes): the
wall is admission, starting the loops, every episode, the journal and results.parquet. `--price` declares a
price for the offline model (0.15 / 0.60 USD per million input / output tokens, a small hosted model's), so
litellm computes its cost from that instead of searching its price map for a model it does not know on every
call (a declared price of 0 is no cheaper: litellm then runs its zero-cost diagnostics on every call).

    .venv/bin/python benchmarks/bench_llm_concurrency.py [--latency 0.2] [--concurrency 32] [--price] [--loops 2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from aft_bench.experiment import executors
from aft_bench.experiment.config import load_matrix
from aft_bench.experiment.runner import run_matrix
from aft_bench.interface import tokens

ROOT = Path(__file__).resolve().parent.parent
EXE = Path(sys.executable).with_name("aft-bench")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--price", action="store_true", help="declare a price for the offline model (0.15/0.60 USD per Mtok)")
    ap.add_argument("--loops", type=int, default=1, help="event loops (processes) sharing the concurrency")
    args = ap.parse_args()
    log = Path(tempfile.mkdtemp()) / "requests.jsonl"  # the server logs every request: litellm alone replays them
    server = subprocess.Popen([str(EXE), "fake-llm", "--latency", str(args.latency)], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT, env={**os.environ, "AFT_FAKE_LLM_LOG": str(log)})
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
{"input_usd_per_mtok = 0.15" + chr(10) + "output_usd_per_mtok = 0.6" if args.price else ""}
''')
            out = Path(tmp) / "out"
            os.environ["AFT_BENCH_FAKE_KEY"] = "offline"
            tokens.warm()  # the tokenizer, then litellm: one-off imports, untimed (the runner's own warm-up finds them)
            tokens.litellm_module()
            if args.loops > 1:  # the process server and its preload (the tokenizer) start once, untimed
                warm = executors.context().Process(target=os.getpid)
                warm.start()
                warm.join()
            matrix = load_matrix(cfg, ROOT / "worlds")
            t0, c0 = time.perf_counter(), time.process_time()
            run_matrix(matrix, out, loops=args.loops)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            df = pd.read_parquet(out / "results.parquet")
        calls = int(df["model_calls"].sum())
        served_cpu = _cpu_s(server.pid)
        requests = [json.loads(ln)["request"] for ln in log.read_text().splitlines()]
        alone_wall, alone_cpu = litellm_alone(url, requests, args.concurrency, args.price)
    finally:
        server.terminate()
    ideal = calls * args.latency / args.concurrency
    print(f"{len(df)} episodes{' (declared price 0.15/0.60 USD per Mtok)' if args.price else ''}, {calls} model calls "
          f"({calls / len(df):.2f} per episode), latency {args.latency} s, concurrency {args.concurrency} on "
          f"{args.loops} loop(s), "
          f"provider retries {int(df['retries'].sum())}")
    print(f"harness: wall {wall:.2f} s, ideal {ideal:.2f} s: ratio {wall / ideal:.3f} (target <= 1.25)")
    n = len(requests)
    print(f"litellm alone, the same {n} requests (as the harness sent them) from {args.concurrency} callers on one "
          f"loop, no harness: wall {alone_wall:.2f} s, ratio {alone_wall / ideal:.3f}")
    print(f"CPU per model call: harness {cpu / calls * 1000:.2f} ms, litellm alone {alone_cpu / n * 1000:.2f} ms: "
          f"ratio {(cpu / calls) / (alone_cpu / n):.3f} (bar <= 1.2)" + (" [loops > 1: the harness's CPU in its "
          "loop processes is not counted here]" if args.loops > 1 else ""))
    print(f"wall: harness / litellm alone {wall / alone_wall:.3f} (bar <= 1.15)")
    print(f"the offline model's own process (on the same cores): {served_cpu / calls * 1000:.1f} ms CPU per call")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def litellm_alone(url: str, requests: list[dict], concurrency: int, price: bool) -> tuple[float, float]:
    """Wall and CPU seconds of the harness's own requests sent again as bare litellm chat completions by
    `concurrency` callers in turn on one event loop: the floor the harness stands on, against the same server."""
    import asyncio

    litellm = tokens.litellm_module()
    pricing = {"input_cost_per_token": 0.15e-6, "output_cost_per_token": 0.6e-6} if price else {}
    kept = ("messages", "tools", "temperature", "max_tokens", "tool_choice")

    async def caller(mine: list[dict]) -> None:
        for body in mine:
            await litellm.acompletion(model=f"openai/{body['model']}", api_base=url, api_key="none", num_retries=0,
                                      max_retries=0, timeout=30, **{k: body[k] for k in kept if k in body},
                                      **pricing)

    async def run() -> tuple[float, float]:
        await caller(requests[:1])
        t, c = time.perf_counter(), time.process_time()
        await asyncio.gather(*(caller(requests[i::concurrency]) for i in range(concurrency)))
        return time.perf_counter() - t, time.process_time() - c

    return asyncio.run(run())


if __name__ == "__main__":
    main()
