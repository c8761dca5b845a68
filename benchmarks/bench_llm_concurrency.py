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

The two sides share the machine with the offline model's process, so one pair of runs swings by about 0.1 in
the CPU ratio; `--rounds N` measures N pairs, each the harness's run then litellm alone on that run's requests,
and the medians count (each round's figures are printed too). Each side starts after a full collection, so neither
pays for the other's garbage.

    .venv/bin/python benchmarks/bench_llm_concurrency.py [--latency 0.2] [--concurrency 32] [--price] [--loops 2]
                                                        [--rounds 5] [--abba]

With `--abba` a round is the harness, litellm alone, litellm alone again and the harness again, and its ratios are
of the two sides' sums: this machine's speed drifts by tens of per cent within a minute, and with one run a side
that drift fell on whichever side ran second (single rounds from 0.97 to 1.55 in one 9-round run).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
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
    ap.add_argument("--rounds", type=int, default=1, help="pairs of runs (harness, then litellm alone); medians count")
    ap.add_argument("--abba", action="store_true", help="each round harness, litellm alone, litellm alone, harness "
                    "(the pairs' sums): a drift of the machine's speed within a round cancels")
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
            os.environ["AFT_BENCH_FAKE_KEY"] = "offline"
            tokens.warm()  # the tokenizer, then litellm: one-off imports, untimed (the runner's own warm-up finds them)
            tokens.litellm_module()
            if args.loops > 1:  # the process server and its preload (the tokenizer) start once, untimed
                warm = executors.context().Process(target=os.getpid)
                warm.start()
                warm.join()
            matrix = load_matrix(cfg, ROOT / "worlds")
            rounds = []

            def harness(out: Path) -> tuple[float, float, pd.DataFrame, list[dict]]:
                seen = len(log.read_text().splitlines()) if log.exists() else 0
                gc.collect()  # each side starts with no garbage of the other's to collect (timeit's hygiene)
                t0, c0 = time.perf_counter(), time.process_time()
                run_matrix(matrix, out, loops=args.loops)
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                requests = [json.loads(ln)["request"] for ln in log.read_text().splitlines()[seen:]]
                return wall, cpu, pd.read_parquet(out / "results.parquet"), requests

            for r in range(args.rounds):
                wall, cpu, df, requests = harness(Path(tmp) / f"out{r}")
                alone_wall, alone_cpu = litellm_alone(url, requests, args.concurrency, args.price)
                calls, alone_calls = int(df["model_calls"].sum()), len(requests)
                if args.abba:  # then litellm alone again and the harness again: a drift in the machine's speed
                    #            over the round weighs on both sides alike
                    wall2, cpu2 = litellm_alone(url, requests, args.concurrency, args.price)
                    alone_wall, alone_cpu, alone_calls = (alone_wall + wall2) / 2, alone_cpu + cpu2, 2 * alone_calls
                    wall2, cpu2, df2, _ = harness(Path(tmp) / f"out{r}b")
                    wall, cpu, calls = (wall + wall2) / 2, cpu + cpu2, calls + int(df2["model_calls"].sum())
                rounds.append(Round(wall, cpu, calls, int(df["retries"].sum()), len(df), alone_wall, alone_cpu,
                                    alone_calls))
        served_cpu = _cpu_s(server.pid)
    finally:
        server.terminate()
    first = rounds[0]
    per_run = first.calls // (2 if args.abba else 1)  # one run of the harness (an ABBA round holds two)
    ideal = per_run * args.latency / args.concurrency
    print(f"{first.episodes} episodes{' (declared price 0.15/0.60 USD per Mtok)' if args.price else ''}, {per_run} model "
          f"calls ({per_run / first.episodes:.2f} per episode), latency {args.latency} s, concurrency "
          f"{args.concurrency} on {args.loops} loop(s), provider retries {sum(r.retries for r in rounds)}; "
          f"{len(rounds)} round(s), each the harness then litellm alone{' (twice, then the harness again)' if args.abba else ''} on the same requests (as the harness sent "
          f"them) from {args.concurrency} callers on one loop")
    for i, r in enumerate(rounds, start=1):
        print(f"  round {i}: harness wall {r.wall:.2f} s, CPU {r.cpu_per_call * 1000:.2f} ms/call; litellm alone wall "
              f"{r.alone_wall:.2f} s, CPU {r.alone_cpu_per_call * 1000:.2f} ms/call; ratios CPU {r.cpu_ratio:.3f}, "
              f"wall {r.wall_ratio:.3f}")
    med = statistics.median
    print(f"harness: wall {med(r.wall for r in rounds):.2f} s, ideal {ideal:.2f} s: ratio "
          f"{med(r.wall for r in rounds) / ideal:.3f} (target <= 1.25)")
    print(f"litellm alone: wall {med(r.alone_wall for r in rounds):.2f} s, ratio "
          f"{med(r.alone_wall for r in rounds) / ideal:.3f}")
    print(f"CPU per model call: harness {med(r.cpu_per_call for r in rounds) * 1000:.2f} ms, litellm alone "
          f"{med(r.alone_cpu_per_call for r in rounds) * 1000:.2f} ms: ratio {med(r.cpu_ratio for r in rounds):.3f} "
          f"(median of the rounds' ratios; bar <= 1.2)" + (" [loops > 1: the harness's CPU in its loop processes is "
                                                          "not counted here]" if args.loops > 1 else ""))
    print(f"wall: harness / litellm alone {med(r.wall_ratio for r in rounds):.3f} (median; bar <= 1.15)")
    print(f"the offline model's own process (on the same cores): "
          f"{served_cpu / sum(r.calls + r.alone_calls for r in rounds) * 1000:.1f} ms CPU per call")


@dataclass(frozen=True)
class Round:
    """One pair of runs: the harness's matrix, then litellm alone on the requests that run sent."""

    wall: float
    cpu: float
    calls: int
    retries: int
    episodes: int
    alone_wall: float
    alone_cpu: float
    alone_calls: int

    @property
    def cpu_per_call(self) -> float:
        return self.cpu / self.calls

    @property
    def alone_cpu_per_call(self) -> float:
        return self.alone_cpu / self.alone_calls

    @property
    def cpu_ratio(self) -> float:
        return self.cpu_per_call / self.alone_cpu_per_call

    @property
    def wall_ratio(self) -> float:
        return self.wall / self.alone_wall


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
        gc.collect()
        t, c = time.perf_counter(), time.process_time()
        await asyncio.gather(*(caller(requests[i::concurrency]) for i in range(concurrency)))
        return time.perf_counter() - t, time.process_time() - c

    return asyncio.run(run())


if __name__ == "__main__":
    main()
