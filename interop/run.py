"""Third-party agent frameworks on served episodes, compared tuple for tuple with the harness's own `llm` agent.

1. the reference: `aft-bench run CONFIG` with the config's in-process `llm` agent (the embedded offline model);
2. `aft-bench fake-llm` on a free 127.0.0.1 port (every request and reply logged to DIR/fake-llm.jsonl);
3. per client: `aft-bench serve-matrix CONFIG --out DIR/<client> --client-cmd '<python> <client script>'`
   (`--agent <client> --model fake-capability` when serve-matrix has those flags), the client given the fake
   model's URL in AFT_INTEROP_MODEL_BASE;
4. the labels of every tuple compared with the reference (outcome, y_goal, y_correct, recovered,
   duplicate_effects, terminal_action, terminal_claim), with the business invocations each episode's trace
   shows; a table per client;
5. the MCP Inspector's CLI (if npx exists) lists a served episode's tools, and calls one on another.

Exit status 1 on any mismatch or pending tuple (the clients' failures are in DIR/<client>/failures.jsonl and
DIR/<client>/logs/), 0 when every client reproduced the reference.

    .venv-interop/bin/python interop/run.py [--out DIR] [--clients openai_agents,pydantic_ai,...] [--no-inspector]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
KEY = ["workload", "task_id", "condition", "fault", "fault_seed", "backend", "catalog_size", "rep"]
LABELS = ["outcome", "y_goal", "y_correct", "recovered", "duplicate_effects", "terminal_action", "terminal_claim"]
MODEL = "fake-capability"
# The newest Inspector that runs on Node 20 (0.16 and later need Node >= 22.7.5, 2.x >= 22.19); 0.15.0 speaks the
# handshake-era protocol (its SDK is 1.x). Another: AFT_INTEROP_INSPECTOR=@modelcontextprotocol/inspector@<version>.
INSPECTOR = os.environ.get("AFT_INTEROP_INSPECTOR", "@modelcontextprotocol/inspector@0.15.0")


@dataclass(frozen=True)
class ClientSpec:
    name: str
    script: str
    args: tuple[str, ...] = ()
    serve: tuple[str, ...] = ()  # extra serve-matrix flags (only if serve-matrix has them)
    note: str = ""
    negative: bool = False  # a known negative: under selective discovery it must NOT reach a business tool


CLIENTS = {c.name: c for c in (
    ClientSpec("openai_agents", "openai_agents_client.py", note="openai-agents, StopAtTools(['report_outcome'])"),
    ClientSpec("pydantic_ai", "pydantic_ai_client.py", ("--end", "output"),
               note="pydantic-ai, report_outcome as an output tool (output function)"),
    ClientSpec("pydantic_ai_text", "pydantic_ai_client.py", ("--end", "text"),
               note="pydantic-ai, output_type=str: ends on the model's text"),
    ClientSpec("sdk_list_once", "sdk_list_once_client.py", negative=True,
               note="mcp SDK Client, tools listed once (dynamic form): a known negative, it cannot see described "
                    "tools, so selective tuples must reach no business tool (eager ones match)"),
    ClientSpec("sdk_list_once_facade", "sdk_list_once_client.py", serve=("--discovery-form", "facade"),
               note="mcp SDK Client, tools listed once, served with --discovery-form facade"),
)}


@dataclass
class Played:
    client: ClientSpec
    out: Path
    seconds: float = 0.0
    rc: int | None = None
    skipped: str | None = None
    rows: dict[tuple, dict[str, Any]] = field(default_factory=dict)
    pending: dict[tuple, dict[str, Any]] = field(default_factory=dict)


def free_port() -> int:
    from aft_bench.common.net import free_port as fp

    return fp()


def wait_for_port(port: int, timeout_s: float, alive: Any) -> bool:
    from aft_bench.common.net import wait_for_port as wp

    return wp(port, timeout_s, alive=alive)


def _key(row: dict[str, Any]) -> tuple:
    return tuple(None if _missing(row.get(k)) else row.get(k) for k in KEY)


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _norm(v: Any) -> Any:
    if _missing(v):
        return None
    if hasattr(v, "item"):
        v = v.item()
    return v


def read_rows(out: Path) -> dict[tuple, dict[str, Any]]:
    import pandas as pd

    path = out / "results.parquet"
    if not path.exists():
        return {}
    return {_key(r): r for r in pd.read_parquet(path).to_dict("records")}


def read_pending(out: Path) -> dict[tuple, dict[str, Any]]:
    path = out / "failures.jsonl"
    found: dict[tuple, dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            t = rec.get("tuple") or {}
            found[tuple(t.get(k) for k in KEY)] = rec
    return found


def tool_calls(trace: Path) -> list[str]:
    """The tool calls an episode's trace shows arriving at the server, in order (facade calls as call_tool:<name>)."""
    calls = []
    for line in trace.read_text().splitlines() if trace.exists() else []:
        e = json.loads(line)
        if e.get("kind") == "tool_call":
            data = e.get("data", {})
            inner = (data.get("args") or {}).get("name") if data.get("tool") == "call_tool" else None
            calls.append(f"call_tool:{inner}" if inner else str(data.get("tool")))
    return calls


def quarantined(out: Path) -> dict[tuple, Path]:
    """Partial traces of abandoned episodes (the client failed), by tuple, from their `cell` event."""
    found: dict[tuple, Path] = {}
    for trace in sorted(out.glob("quarantine/*/traces/*.jsonl")):
        for line in trace.read_text().splitlines():
            e = json.loads(line)
            if e.get("kind") == "cell":
                cell = e.get("data", {})
                found[tuple(cell.get(k) for k in KEY[:-1])] = trace
                break
    return found


def business_calls(trace: Path) -> list[str]:
    """The business operations an episode's trace shows reaching the pipeline or the gateway (its `invocation`
    events: `op` on a built-in world, `tool` on a real server's)."""
    if not trace.exists():
        return []
    ops = []
    for line in trace.read_text().splitlines():
        e = json.loads(line)
        if e.get("kind") == "invocation":
            data = e.get("data", {})
            ops.append(str(data.get("op") or data.get("tool")))
    return ops


def has_flag(exe: str, command: str, flag: str) -> bool:
    out = subprocess.run([exe, command, "--help"], capture_output=True, text=True, check=False).stdout
    return flag in out


def run_reference(exe: str, config: Path, out: Path) -> float:
    t0 = time.perf_counter()
    with open(out.parent / "llm.log", "w") as log:
        rc = subprocess.run([exe, "run", str(config), "--out", str(out)], stdout=log, stderr=subprocess.STDOUT,
                            check=False).returncode
    if rc != 0:
        sys.exit(f"interop: the reference run failed (exit {rc}); see {out.parent / 'llm.log'}")
    return time.perf_counter() - t0


def play(exe: str, spec: ClientSpec, config: Path, out: Path, python: str, env: dict[str, str], timeout: float,
         named: bool, flags_ok: bool) -> Played:
    played = Played(spec, out)
    if spec.serve and not flags_ok:
        played.skipped = f"serve-matrix has no {spec.serve[0]} flag"
        return played
    client_cmd = shlex.join([python, str(HERE / "clients" / spec.script), *spec.args])
    cmd = [exe, "serve-matrix", str(config), "--out", str(out), "--client-cmd", client_cmd, "--timeout", str(timeout),
           *spec.serve] + (["--agent", spec.name, "--model", MODEL] if named else [])
    t0 = time.perf_counter()
    with open(out.parent / f"{spec.name}.log", "w") as log:
        log.write("$ " + shlex.join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            print(f"  [{spec.name}] {line.rstrip()}", flush=True)
        played.rc = proc.wait()
    played.seconds = time.perf_counter() - t0
    played.rows = read_rows(out)
    played.pending = read_pending(out)
    return played


def compare(reference: dict[tuple, dict[str, Any]], ref_dir: Path, played: Played) -> int:
    """Print the client's table; returns its number of mismatches (a pending tuple is one)."""
    print(f"\n== {played.client.name}: {played.client.note}")
    if played.skipped:
        print(f"   skipped: {played.skipped}")
        return 0
    print(f"   serve-matrix exit {played.rc}, {played.seconds:.1f} s; rows in {played.out}")
    head = f"   {'tuple':<34} {'llm (reference)':<44} {'served':<44} {'business calls':<30} match"
    print(head)
    bad = 0
    quarantine = quarantined(played.out)
    for key, ref in sorted(reference.items(), key=lambda kv: [str(x) for x in kv[0]]):
        want = tuple(_norm(ref.get(k)) for k in LABELS)
        row = played.rows.get(key)
        name = f"{key[0]}/{key[1]} {key[2]}"
        if row is None:
            rec = played.pending.get(key)
            why = rec.get("reason") if rec else "no row and no failure record"
            last = ""
            if rec and rec.get("client_log_tail"):
                last = rec["client_log_tail"].strip().splitlines()[-1][:160]
            print(f"   {name:<34} {_fmt(want):<44} {'PENDING: ' + str(why):<44} {'-':<30} NO")
            if last:
                print(f"   {'':<34} client: {last}")
            partial = quarantine.get(key[:-1])
            if partial is not None:
                print(f"   {'':<34} calls the server saw: {', '.join(tool_calls(partial)) or 'none'} "
                      f"(quarantined trace {partial})")
            bad += 1
            continue
        got = tuple(_norm(row.get(k)) for k in LABELS)
        ops = business_calls(played.out / "traces" / f"{row['run_id']}.jsonl")
        same = got == want
        selective = json.loads(ref.get("mechanisms") or "{}").get("discovery") == "selective"
        if played.client.negative and selective:  # the known negative: expected to reach nothing
            verdict, ok = ("as expected (unreachable)" if not ops else "NO: reached a business tool"), not ops
        else:
            verdict, ok = ("yes" if same else "NO"), same
        bad += not ok
        calls = f"{len(ops)} ({','.join(dict.fromkeys(ops))})" if ops else "0 (none reached)"
        print(f"   {name:<34} {_fmt(want):<44} {_fmt(got):<44} {calls[:30]:<30} {verdict}")
        if not same and not (played.client.negative and selective):
            trace = played.out / "traces" / f"{row['run_id']}.jsonl"
            print(f"   {'':<34} reference calls: {', '.join(tool_calls(ref_dir / 'traces' / (ref['run_id'] + '.jsonl')))}")
            print(f"   {'':<34} served calls:    {', '.join(tool_calls(trace)) or 'none'} (trace {trace})")
    return bad


def _fmt(labels: tuple) -> str:
    outcome, goal, correct, recovered, dup, action, claim = labels
    short = {True: "T", False: "F", None: "-"}
    return (f"{outcome} g{short.get(goal, goal)} c{short.get(correct, correct)} r{short.get(recovered, recovered)} "
            f"d{dup} {action}/{claim}")


def inspector(exe: str, config: Path, out: Path, named: bool) -> tuple[bool | None, str]:
    """The MCP Inspector's CLI against served episodes: tools/list on one, tools/call on another (the CLI opens
    one session per invocation, and a served episode belongs to its first session). None: skipped."""
    npx = shutil.which("npx")
    if npx is None or shutil.which("node") is None:
        return None, "inspector: skipped (node/npx not found)"
    from aft_bench.experiment.config import load_matrix

    cell = load_matrix(config, ROOT / "worlds").cells[0]
    t0 = time.perf_counter()
    lines = []
    ok = True
    for method, extra in (("tools/list", []),
                          ("tools/call", ["--tool-name", "report_outcome", "--tool-arg", "action=escalate",
                                          "--tool-arg", "claim=unknown"])):
        port = free_port()
        serve = [exe, "serve", "--workload", cell.workload, "--task", cell.task_id, "--condition", "I4",
                 "--transport", "http", "--port", str(port), "--out", str(out)] + (
            ["--agent", "mcp-inspector", "--model", "none"] if named else [])
        server = subprocess.Popen(serve, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if not wait_for_port(port, 15.0, alive=lambda s=server: s.poll() is None):
                return False, "inspector: the server did not start"
            cli = [npx, "-y", INSPECTOR, "--cli", f"http://127.0.0.1:{port}/mcp", "--transport", "http",
                   "--method", method, *extra]
            done = subprocess.run(cli, capture_output=True, text=True, timeout=300, check=False)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
        text = done.stdout.strip()
        try:
            answer = json.loads(text)
        except ValueError:
            answer = None
        if method == "tools/list":
            names = [t["name"] for t in (answer or {}).get("tools", [])]
            good = done.returncode == 0 and "report_outcome" in names
            lines.append(f"inspector: {shlex.join(cli[1:])}\n  -> exit {done.returncode}, {len(names)} tools: "
                         f"{', '.join(names)}" + ("" if good else f"\n  {(done.stderr or text)[-400:]}"))
        else:
            content = (answer or {}).get("content") or [{}]
            good = done.returncode == 0 and isinstance(answer, dict) and not answer.get("isError")
            lines.append(f"inspector: {shlex.join(cli[1:])}\n  -> exit {done.returncode}, isError "
                         f"{(answer or {}).get('isError')}: {str(content[0].get('text', text))[:200]}"
                         + ("" if good else f"\n  {(done.stderr or text)[-400:]}"))
        ok = ok and good
    lines.append(f"inspector: {time.perf_counter() - t0:.1f} s (episodes in {out})")
    return ok, "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="results directory (default: results/interop-<time>)")
    ap.add_argument("--config", default=str(HERE / "interop.toml"))
    ap.add_argument("--clients", default=",".join(CLIENTS), help=f"comma-separated, of: {', '.join(CLIENTS)}")
    ap.add_argument("--python", default=sys.executable, help="the interpreter the client scripts run with")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per served tuple")
    ap.add_argument("--no-inspector", action="store_true")
    args = ap.parse_args()
    names = [n for n in args.clients.split(",") if n]
    if unknown := [n for n in names if n not in CLIENTS]:
        ap.error(f"unknown client(s) {unknown}; known: {', '.join(CLIENTS)}")
    out = Path(args.out or ROOT / "results" / f"interop-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    config = Path(args.config).resolve()
    exe = str(Path(sys.executable).with_name("aft-bench"))
    os.chdir(ROOT)
    named = has_flag(exe, "serve-matrix", "--agent")
    facade = has_flag(exe, "serve-matrix", "--discovery-form")
    t_all = time.perf_counter()

    print(f"interop: reference (in-process llm agent) -> {out / 'llm'}", flush=True)
    ref_s = run_reference(exe, config, out / "llm")
    reference = read_rows(out / "llm")
    print(f"interop: reference: {len(reference)} rows in {ref_s:.1f} s", flush=True)

    port = free_port()
    env = {**os.environ, "AFT_FAKE_LLM_LOG": str(out / "fake-llm.jsonl")}
    fake = subprocess.Popen([exe, "fake-llm", "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    results: list[Played] = []
    try:
        if not wait_for_port(port, 15.0, alive=lambda: fake.poll() is None):
            sys.exit("interop: the offline model did not start")
        client_env = {**os.environ, "AFT_INTEROP_MODEL_BASE": f"http://127.0.0.1:{port}/v1", "AFT_INTEROP_MODEL": MODEL}
        for name in names:
            spec = CLIENTS[name]
            print(f"interop: {name} -> {out / name}", flush=True)
            results.append(play(exe, spec, config, out / name, args.python, client_env, args.timeout, named,
                                facade or not spec.serve))
    finally:
        fake.terminate()
        fake.wait(timeout=10)

    bad = {p.client.name: compare(reference, out / "llm", p) for p in results}
    print()
    if args.no_inspector:
        insp_ok, insp = None, "inspector: skipped (--no-inspector)"
    else:
        insp_ok, insp = inspector(exe, config, out / "inspector", named)
    print(insp)
    print(f"\ninterop: reference {ref_s:.1f} s; " + "; ".join(
        f"{p.client.name} {p.seconds:.1f} s" for p in results if not p.skipped)
        + f"; total {time.perf_counter() - t_all:.1f} s")
    for p in results:
        n = len(reference)
        print(f"interop: {p.client.name:<22} " + (f"skipped ({p.skipped})" if p.skipped else
                                                    f"{n - bad[p.client.name]}/{n} tuples as expected"
                                                    + (" (a known negative)" if p.client.negative else
                                                       " (labels equal the reference)")))
    failed = any(bad.values()) or insp_ok is False
    print(f"interop: {'MISMATCH' if failed else 'every client as expected'}; results in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
