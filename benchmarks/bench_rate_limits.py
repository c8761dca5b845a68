"""Rate-limit etiquette side by side: the same LLM matrix against the offline model limited to a few calls in
flight (429 + Retry-After beyond them), at fixed and at adaptive (AIMD) concurrency. Prints the 429s the provider
sent, the retries and seconds waited the rows record, and the wall time of each run.

    .venv/bin/python benchmarks/bench_rate_limits.py [--limit 3] [--concurrency 32] [--tasks 16]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd

from aft_bench.agents.fake_llm import FakeModel, index_tasks, serve
from aft_bench.cli.main import main as cli
from aft_bench.common.paths import WORLDS


def one(adaptive: bool, args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    model = FakeModel(index_tasks([WORLDS]), latency_s=args.latency, max_inflight=args.limit,
                      retry_after_s=args.retry_after)
    srv = serve(model)
    cfg = tmp / f"c{int(adaptive)}.toml"
    cfg.write_text('[experiment]\nid = "rate_limits"\nworkloads = ["response_loss"]\nconditions = ["I5", "I4"]\n'
                   f'tasks_per_workload = {args.tasks}\n[[experiment.agents]]\nname = "llm"\n'
                   f'model = "openai/fake-capability"\napi_base = "http://127.0.0.1:{srv.server_port}/v1"\n'
                   f'concurrency = {args.concurrency}\nretries = 20\nadaptive = {str(adaptive).lower()}\n')
    out = tmp / f"o{int(adaptive)}"
    t0 = time.perf_counter()
    try:
        assert cli(["run", str(cfg), "--out", str(out)]) == 0
    finally:
        srv.shutdown()
    wall = time.perf_counter() - t0
    df = pd.read_parquet(out / "results.parquet")
    return {"429s": sum(1 for *_, s in model.arrivals if s == 429), "calls": len(model.arrivals),
            "retries": int(df["retries"].sum()), "waited_s": float(df["retry_wait_s"].sum()), "wall_s": wall,
            "runs": len(df)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=int, default=3, help="calls the provider takes at once")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--tasks", type=int, default=16)
    p.add_argument("--latency", type=float, default=0.2, help="seconds per model answer")
    p.add_argument("--retry-after", type=float, default=1.0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        fixed, adaptive = one(False, args, Path(d)), one(True, args, Path(d))
    for name, r in (("fixed", fixed), ("adaptive", adaptive)):
        print(f"{name:<9} runs {r['runs']:>4}  provider calls {r['calls']:>5}  429s {r['429s']:>5}  retries "
              f"{r['retries']:>5}  waited {r['waited_s']:>7.1f} s  wall {r['wall_s']:>6.1f} s")
    print(f"429s adaptive / fixed: {adaptive['429s'] / max(fixed['429s'], 1):.2f} (bar: <= 0.33)")


if __name__ == "__main__":
    main()
