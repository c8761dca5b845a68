"""Issue 52: who re-issues a call whose answer was lost, and what that does to a real server. Plays
`interop/retries/retries.toml` (mcp-server-git 2025.11.25 behind the gateway, git_commit's answer lost after the
server committed, once or three times in a row, never sent: `serve-matrix --response-loss transport`) once per
client setting below, then reads each tuple's wire log beside the offline model's log (analysis/reissues.py) and
prints, per client setting and fault: wire calls, the framework's re-issues, the model's, and the commits the
framework's re-issues made. `--check` exits 1 unless the quality bar holds: openai-agents told to retry twice
re-sends the lost commit exactly twice when every answer is lost (loss_3), and never with retries off (GW-bare).
Under GW-key the model passes an idempotency key, which a framework's re-send carries: the gateway answers it from
its record, and the re-send changes nothing.

    .venv-interop/bin/python interop/retries.py [--out DIR] [--check] [--settings a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from run import free_port, wait_for_port  # noqa: E402

from aft_bench.analysis.reissues import (attribute, changes_by_wire, model_calls, read_jsonl, shares,  # noqa: E402
                                         summary)
from aft_bench.experiment.journal import read_rows  # noqa: E402

MODEL = "fake-capability"
CONFIG = HERE / "retries" / "retries.toml"


@dataclass(frozen=True)
class Setting:
    """A client at one of its retry settings: its script, its arguments, and what its retries are."""

    name: str
    script: str
    args: tuple[str, ...]
    retries: str


SETTINGS = {s.name: s for s in (
    Setting("openai_agents-retry0", "openai_agents_client.py", ("--max-retry-attempts", "0", "--timeout", "2"),
            "max_retry_attempts=0 (the default), 2 s per call"),
    Setting("openai_agents-retry2", "openai_agents_client.py",
            ("--max-retry-attempts", "2", "--timeout", "2", "--backoff", "0.1"),
            "max_retry_attempts=2, 2 s per call, backoff 0.1 s"),
    Setting("pydantic_ai-retries3", "pydantic_ai_client.py", ("--max-retries", "3", "--read-timeout", "2"),
            "max_retries=3 (the model is asked again), 2 s per call"),
    Setting("mcp_sdk-timeout2", "sdk_list_once_client.py", ("--read-timeout", "2"),
            "no retry setting (the SDK re-sends nothing), 2 s per call"),
)}


def play(exe: str, s: Setting, config: Path, out: Path, env: dict[str, str], python: str) -> tuple[int, float]:
    client = shlex.join([python, str(HERE / "clients" / s.script), *s.args])
    cmd = [exe, "serve-matrix", str(config), "--out", str(out), "--client-cmd", client, "--timeout", "90",
           "--response-loss", "transport", "--agent", s.name, "--model", MODEL]
    t0 = time.perf_counter()
    with open(out.parent / f"{s.name}.log", "w") as log:
        log.write("$ " + shlex.join(cmd) + "\n")
        log.flush()
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, check=False).returncode
    return rc, time.perf_counter() - t0


def tuples(outs: dict[str, Path], log: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each tuple served into each folder of `outs` (recorded or abandoned): its fault, and who re-issued what. The
    model's log is shared by every tuple of every setting, played one after another: a tuple's share is what lies
    between the last wire call of the tuple before it and the first of the tuple after it."""
    found = []
    for name, out in outs.items():
        journal = out / "journal.jsonl"
        rows = {r["run_id"]: r for r in read_rows(journal)} if journal.exists() else {}
        for path in sorted((out / "wire").glob("*.jsonl")) if (out / "wire").exists() else []:
            wire = read_jsonl(path)
            if wire:
                found.append((name, out, path.stem, wire, rows.get(path.stem)))
    result: dict[str, list[dict[str, Any]]] = {name: [] for name in outs}
    for (name, out, run_id, wire, row), mine in zip(found, shares([f[3] for f in found], log)):
        trace = _trace_of(out, run_id)
        changed = changes_by_wire(wire, trace) if trace is not None else {}
        s = summary(attribute(wire, model_calls(mine), changed), mine)
        result[name].append({"run_id": run_id, "fault": row.get("fault") if row else _fault_of(trace),
                             "condition": row.get("condition") if row else None,
                             "workload": row.get("workload") if row else None,
                             "task_id": row.get("task_id") if row else None,
                             "recorded": row is not None, "outcome": row.get("outcome") if row else None,
                             "duplicate_effects": row.get("duplicate_effects") if row else None, **s})
    return result


def _trace_of(out: Path, run_id: str) -> Path | None:
    """A tuple's trace: beside its row, or, for a tuple its client abandoned, in quarantine/ (None: not found)."""
    found = [out / "traces" / f"{run_id}.jsonl", *sorted(out.glob(f"quarantine/*/traces/{run_id}.jsonl"))]
    return next((t for t in found if t.exists()), None)


def _fault_of(trace: Path | None) -> str | None:
    """An abandoned tuple's fault variant, from its trace's first event (`schedule`: workload/variant)."""
    if trace is None:
        return None
    first = read_jsonl(trace)[:1]
    schedule = str(first[0].get("data", {}).get("schedule", "")) if first else ""
    return schedule.partition("/")[2] or None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="results folder (default results/retries-<time>)")
    ap.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, of: {', '.join(SETTINGS)}")
    ap.add_argument("--python", default=sys.executable, help="the interpreter that runs the clients")
    ap.add_argument("--config", default=str(CONFIG), help="the experiment played per setting (default: the quick "
                    "check, retries/retries.toml; retries/matrix.toml is the server x client matrix)")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the quality bar holds (the quick check)")
    a = ap.parse_args()
    out = Path(a.out or ROOT / "results" / f"retries-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    exe = str(Path(sys.executable).with_name("aft-bench"))
    os.chdir(ROOT)
    port = free_port()
    model_log = out / "fake-llm.jsonl"
    config = Path(a.config).resolve()
    own = tomllib.loads(config.read_text(encoding="utf-8")).get("experiment", {}).get("worlds", [])
    extra = [arg for d in own for arg in ("--extra-worlds", str(config.parent / d))]  # the model knows their tasks
    fake = subprocess.Popen([exe, "fake-llm", "--port", str(port), *extra], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "AFT_FAKE_LLM_LOG": str(model_log)})
    report: dict[str, Any] = {}
    try:
        if not wait_for_port(port, 15.0, alive=lambda: fake.poll() is None):
            sys.exit("retries: the offline model did not start")
        env = {**os.environ, "AFT_INTEROP_MODEL_BASE": f"http://127.0.0.1:{port}/v1", "AFT_INTEROP_MODEL": MODEL}
        for name in a.settings.split(","):
            s = SETTINGS[name]
            rc, seconds = play(exe, s, config, out / name, env, a.python)
            report[name] = {"retries": s.retries, "serve_matrix_exit": rc, "seconds": round(seconds, 1)}
            print(f"retries: {name}: serve-matrix exit {rc}, {seconds:.1f} s", flush=True)
    finally:
        fake.terminate()
        fake.wait(timeout=10)
    log = read_jsonl(model_log) if model_log.exists() else []
    for name, found in tuples({name: out / name for name in report}, log).items():
        report[name]["tuples"] = found
    (out / "retries.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    print(f"\n{'client setting':<24} {'workload/task':<40} {'condition':<13} {'fault':<13} {'recorded':<9} {'wire':>4} "
          f"{'framework':>9} {'model':>5} {'fw changes':>10} {'dup':>3}  model shown")
    for name, r in report.items():
        for t in r["tuples"]:
            shown = "; ".join(f"{k}: {str(v)[:60]!r}" for k, v in t["model_told"].items()) or "-"
            where = f"{t['workload']}/{t['task_id']}"
            print(f"{name:<24} {where:<40} {str(t['condition']):<13} {str(t['fault']):<13} {str(t['recorded']):<9} "
                  f"{t['wire_calls']:>4} {t['framework_reissues']:>9} {t['model_reissues']:>5} {t['framework_changes']:>10} "
                  f"{str(t['duplicate_effects']):>3}  {shown}")
    print(f"\nretries: results in {out}")
    if not a.check:
        return 0
    return 0 if _bar(report) else 1


def _bar(report: dict[str, Any]) -> bool:
    """openai-agents retrying twice re-sends the lost commit exactly twice under loss_3; with retries off, never."""
    def framework(name: str, fault: str) -> int | None:
        found = [t for t in report.get(name, {}).get("tuples", [])
                 if t["fault"] == fault and t["condition"] == "GW-bare"]
        return found[0]["framework_reissues"] if len(found) == 1 else None

    got = {"retry2/loss_3": framework("openai_agents-retry2", "loss_3"),
           "retry0/loss_3": framework("openai_agents-retry0", "loss_3"),
           "retry0/loss_1": framework("openai_agents-retry0", "loss_1")}
    ok = got == {"retry2/loss_3": 2, "retry0/loss_3": 0, "retry0/loss_1": 0}
    print(f"retries: quality bar {'held' if ok else 'NOT held'}: framework re-issues {got} "
          f"(wanted 2, 0, 0)")
    return ok


if __name__ == "__main__":
    sys.exit(main())
