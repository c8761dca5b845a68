"""`aft-bench serve` and `aft-bench serve-matrix`: external MCP agents in faulted worlds, one episode per server."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from aft_bench.cli.flags import PORT, SEED, number
from aft_bench.common.errors import InputError
from aft_bench.common.net import listen
from aft_bench.common.redacted_log import RedactedLog
from aft_bench.common.secrets import redact

READY = "serving"  # the server's first stderr word once it takes requests and signals
RECORDED = re.compile(r"aft-bench: episode recorded as run (\S+)")
ABANDONED = re.compile(r"aft-bench: episode abandoned: (.+?); nothing recorded")
FROZE_HINT = ("hint: the client listed its tools, was told the list changed, never listed them again and made no "
              "business call: it may fix its tool list when it starts (LangGraph's and LlamaIndex's agents do); "
              "serve it with --discovery-form facade")
TAIL_LINES = 12
ABANDON_WITH_PARENT = "AFT_BENCH_ABANDON_WITH_PARENT"  # set by serve-matrix for the servers it starts
STOP_WAIT_S = 30.0
READY_MIN_S = 60.0  # the least a served tuple's server is given to say it serves
READY_ENV = "AFT_BENCH_SERVE_READY_S"  # a fixed wait instead (seconds), for a machine known to be slow, and tests


def _agent_options(args: argparse.Namespace) -> dict[str, Any]:
    """The `mcp` agent's parameters the flags give (unset flags are left out)."""
    given = {"agent": args.agent, "model": args.model, "discovery_form": args.discovery_form,
             "response_loss": args.response_loss}
    return {k: v for k, v in given.items() if v is not None}


def cmd_serve(args: argparse.Namespace, worlds: Path) -> int:
    import anyio

    from aft_bench.interface.tokens import warm
    from aft_bench.serving.record import ServedDirectory
    from aft_bench.serving.server import Served, Target, build_server, task_text

    if os.environ.get(ABANDON_WITH_PARENT):  # started by serve-matrix: its death (even SIGKILL) abandons the episode
        from aft_bench.common.lifetime import die_with_parent

        die_with_parent(signal.SIGUSR1)
    target = Target(args.workload, args.task, args.condition, args.fault, args.seed, args.backend, args.catalog_size)
    extra = _also_worlds(args)
    if args.show_task:
        print(task_text(target, worlds, extra))
        return 0
    if args.out is None:
        raise InputError("--out", "--out", None, "serve records its episode: give --out DIR")
    if args.client_config:
        Served(target, worlds, None, _agent_options(args), extra)  # a config that would fail at connect: refused now
        print(json.dumps(client_config(args, worlds), indent=2))
        return 0
    served = Served(target, worlds, None, _agent_options(args), extra)  # every flag checked before anything is made
    served.record_at = args.record_at
    sock = listen(args.host, args.port) if args.transport == "http" else None  # and the port is ours
    warm()  # the tokenizer (litellm, ~2 s to import) before the client's first request, not during it

    async def serve() -> None:
        with ServedDirectory(Path(args.out), worlds) as directory:
            served.directory = directory
            served.prepare_world()  # a real server starts while the client connects, not on its first request
            server = build_server(served)
            if args.transport == "stdio":
                await _serve_stdio(served, server)
            else:
                await _serve_http(served, server, sock, target)
            if served.abandoned and served.row is None:  # SIGUSR1: serve-matrix's word (said once, if not yet)
                await served.abandon("the client failed (serve-matrix's word)")
            elif served.row is not None:
                print(f"aft-bench: episode recorded as run {served.row['run_id']} in {args.out}", file=sys.stderr,
                      flush=True)
            if served.froze_its_list():
                print(f"aft-bench: {FROZE_HINT}", file=sys.stderr, flush=True)
            if served.output_error is not None:
                raise served.output_error

    anyio.run(serve)
    return 0


async def _serve_stdio(served: Any, server: Any) -> None:
    """Serve over stdio until the client disconnects; SIGTERM or SIGINT ends (and records) the episode, SIGUSR1
    abandons it (serve-matrix's word that the client failed)."""
    import anyio
    from mcp.server.stdio import stdio_server

    from aft_bench.serving.pipe_lines import pipe_lines

    async with anyio.create_task_group() as tg:
        async def on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGUSR1) as signals:
                async for signum in signals:
                    served.abandoned = served.abandoned or signum == signal.SIGUSR1
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(on_signal)
        async with stdio_server(stdin=pipe_lines()) as (read, write):  # type: ignore[arg-type]
            await server.run(read, write, server.create_initialization_options())
        tg.cancel_scope.cancel()


GRACE_S = 10  # seconds a stopped served episode waits for requests still open


async def _serve_http(served: Any, server: Any, sock: socket.socket, target: Any) -> None:
    """Serve streamable HTTP on the bound socket; SIGTERM stops it (the lifespan records the episode), SIGUSR1
    abandons it."""
    import uvicorn

    from aft_bench.serving.server import http_app

    host, port = sock.getsockname()[:2]
    app = http_app(served, server, host)
    # after SIGTERM, a client still holding a request open (a hung tool call) gets GRACE_S, then is cut off: a
    # stop that waited for the client ran until the client gave up (60 s and more)
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=GRACE_S))

    def abandon(*_: Any) -> None:
        served.abandoned = True
        uv.should_exit = True

    signal.signal(signal.SIGUSR1, abandon)
    # uvicorn re-raises SIGTERM after its shutdown; this handler lets it pass so the run ends with exit 0
    signal.signal(signal.SIGTERM, lambda *_: None)
    async def announce() -> None:  # once uvicorn has started (its signal handlers are in place): ready
        while not uv.started and not uv.should_exit:
            await asyncio.sleep(0.01)
        print(f"{READY} {target.workload}/{target.task_id} under {target.condition} on http://{host}:{port}/mcp",
              file=sys.stderr, flush=True)

    ready = asyncio.ensure_future(announce())
    await uv.serve(sockets=[sock])
    ready.cancel()
    if not served.abandoned:
        await served.finish()


def _also_worlds(args: argparse.Namespace) -> tuple[Path, ...]:
    """`--also-worlds` folders (each must exist), absolute."""
    from aft_bench.common.files import input_dir

    return tuple(input_dir(Path(x), "--also-worlds").resolve() for x in getattr(args, "also_worlds", None) or ())


def client_config(args: argparse.Namespace, worlds: Path) -> dict[str, Any]:
    """The `mcpServers` entry a desktop or command-line agent needs to launch this server over stdio: absolute
    paths throughout, so it works from whatever folder the client starts it in and without `aft-bench` on PATH."""
    exe = Path(sys.executable).with_name("aft-bench").resolve()
    serve = ["serve", "--workload", args.workload, "--task", args.task, "--condition", args.condition,
             "--seed", str(args.seed), "--backend", args.backend, "--out", str(Path(args.out).resolve()),
             "--worlds", str(worlds.resolve())]
    serve += ["--fault", args.fault] if args.fault else []
    serve += ["--catalog-size", str(args.catalog_size)] if args.catalog_size is not None else []
    serve += [x for d in _also_worlds(args) for x in ("--also-worlds", str(d))]
    serve += [f"--{k.replace('_', '-')}={v}" for k, v in _agent_options(args).items()]
    return {"mcpServers": {"aft-bench": {"command": str(exe), "args": serve}}}


def cmd_serve_matrix(args: argparse.Namespace, worlds: Path) -> int:
    """Play every tuple of a config with an external MCP client: per tuple a fresh HTTP server, then the
    client command (with AFT_BENCH_MCP_URL set), then the server stops. A client that fails (non-zero exit,
    timeout) or never connects leaves its tuple pending in failures.jsonl; nothing is counted that did not
    happen. With a named agent, a tuple already recorded is not played again (rerunning continues)."""
    from aft_bench.agents.registry import AgentSpec
    from aft_bench.experiment.config import load_matrix
    from aft_bench.experiment.journal import append_record, read_records
    from aft_bench.serving.record import ServedDirectory
    from aft_bench.serving.server import Served, Target

    command = _client_command(args.client_cmd, args.shell)  # before anything is created
    matrix = load_matrix(args.config, worlds, served=True)
    flags = _agent_options(args)
    configured = [{k: v for k, v in AgentSpec.parse(c.agent_spec).params.items() if (k, v) != ("agent", "unknown")}
                  for c in matrix.cells if c.agent == "mcp"]  # an unnamed agent is named by its handshake
    merged = [{**p, **flags} for p in configured] if configured else [flags]  # flags override the config
    agents = [dict(a) for a in dict.fromkeys(map(_frozen, merged))]  # each agent once, in config order
    tuples = list(dict.fromkeys((c.workload, c.task_id, c.condition, c.fault, c.fault_seed, c.backend,
                                 c.catalog_size, c.rep) for c in matrix.cells))
    out = Path(args.out)
    plan = {"comparisons": [c.model_dump(mode="json") for c in matrix.comparisons],
            "families": [f.model_dump(mode="json") for f in matrix.families]}
    with ServedDirectory(out, worlds, session=False, plan=plan):  # made (or checked) before anything is written
        pass
    _clear_scratch(out)  # what a killed serve left of its real-server episode (its server died with it)
    logs = out / "logs"
    exe = str(Path(sys.executable).with_name("aft-bench"))
    total = len(tuples) * len(agents)
    recorded_rows = [rec.get("row") or {} for rec in read_records(out / "journal.jsonl")]  # before this run
    recorded = skipped = pending = froze = 0
    n = 0
    starts: list[float] = []  # seconds each tuple's server took to say it serves
    for options in agents:
        for wl, task, cond, fault, seed, backend, size, rep in tuples:
            n += 1
            target = Target(wl, task, cond, fault, seed, backend, size)
            name = f"{wl}/{task} {cond} {fault} seed {seed} rep {rep}" + (f" [{options['agent']}]" if "agent" in options else "")
            if "agent" in options:
                key = Served(target, worlds, None, options, matrix.extra_worlds).key(options["agent"])
                done = sum(1 for r in recorded_rows if all(r.get(k) == v for k, v in key.items()))
                if done > rep:
                    skipped += 1
                    print(f"{n}/{total}  {name}  already recorded", flush=True)
                    continue
            logs.mkdir(parents=True, exist_ok=True)
            stem = logs / f"{n:04d}-{wl}-{task}-{cond}-{fault}-s{seed}-r{rep}"
            t_tuple = time.monotonic()
            ok, why, detail = _play_tuple(exe, target, options, out, (worlds, *matrix.extra_worlds), command, args,
                                          stem, ready_wait(starts))
            froze += detail.pop("froze_its_list")
            started = detail.pop("ready_s")
            starts += [started] if started is not None else []
            took = (f" (server ready in {started:.1f} s, tuple {time.monotonic() - t_tuple:.1f} s)"
                    if started is not None else "")
            if ok:
                recorded += 1
                print(f"{n}/{total}  {name}  recorded as run {why}{took}", flush=True)
            else:
                pending += 1
                append_record(out / "failures.jsonl", {
                    "kind": "serve-matrix", "tuple": {"workload": wl, "task_id": task, "condition": cond, "fault": fault,
                                                      "fault_seed": seed, "backend": backend, "catalog_size": size,
                                                      "rep": rep}, "agent": options, "reason": why, **detail,
                    "logs": str(stem.relative_to(out)) + ".{server,client}.log", "at": time.time()})
                print(f"{n}/{total}  {name}  PENDING: {why}", flush=True)
    print(f"serve-matrix: {total} tuple(s): {recorded} recorded, {pending} pending, {skipped} already recorded; "
          f"results: {out / 'results.parquet'}" + (f"; the pending are in {out / 'failures.jsonl'}" if pending else ""))
    if froze:
        print(f"serve-matrix: in {froze} tuple(s) {FROZE_HINT.removeprefix('hint: ')}")
    return 1 if pending else 0


def _client_command(text: str, shell: bool) -> str | list[str]:
    """`--client-cmd` as it will be run: a shell line, or split into words (an empty or unbalanced one is refused)."""
    if shell:
        if not text.strip():
            raise InputError("--client-cmd", "--client-cmd", text, "is empty: give the command that runs the client")
        return text
    try:
        words = shlex.split(text)
    except ValueError as exc:  # an unbalanced quote
        raise InputError("--client-cmd", "--client-cmd", text, f"cannot be split into words ({exc})") from None
    if not words:
        raise InputError("--client-cmd", "--client-cmd", text, "is empty: give the command that runs the client")
    return words


def _frozen(params: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(params.items()))


def ready_wait(seen: list[float]) -> float:
    """How long a served tuple's server may take to say it serves: at least READY_MIN_S, and ten times the slowest
    start-up this run has seen (on a busy machine a start-up took 13-16 s against a fixed 20 s)."""
    fixed = os.environ.get(READY_ENV)
    return float(fixed) if fixed else max(READY_MIN_S, 10 * max(seen, default=0.0))


def _play_tuple(exe: str, target: Any, options: dict[str, Any], out: Path, folders: tuple[Path, ...], command: Any,
                args: argparse.Namespace, stem: Path, ready_s: float) -> tuple[bool, str, dict[str, Any]]:
    """One tuple: a fresh server, the client, then the server told to record (client ended well) or to abandon
    (it failed). Returns (recorded, run id or why not, details for failures.jsonl). A server not ready within
    `ready_s` is stopped and its tuple left pending with that reason."""
    from aft_bench.common.net import free_port

    port = free_port()
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
    cmd = [exe, "serve", "--workload", target.workload, "--task", target.task_id, "--condition", target.condition,
           "--fault", target.fault, "--seed", str(target.seed), "--backend", target.backend, "--transport", "http",
           "--port", str(port), "--out", str(out), "--worlds", str(folders[0]), "--record-at", "stop", *flags] + (
        ["--catalog-size", str(target.catalog_size)] if target.catalog_size is not None else []) + [
        x for d in folders[1:] for x in ("--also-worlds", str(d))]  # a config's own worlds, beside --worlds
    server_log, client_log = stem.with_suffix(".server.log"), stem.with_suffix(".client.log")
    slog = RedactedLog(server_log)  # an agent or a server that prints a key: the key stops at the log
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=slog.fd, text=True,
                              env={**os.environ, ABANDON_WITH_PARENT: "1"})
    slog.handed()
    client_rc: int | None = None
    why = ""
    t0 = time.monotonic()
    try:
        if not _wait_ready(server_log, ready_s, alive=lambda: server.poll() is None):
            if server.poll() is not None:  # it ended before it served: what it said is why
                raise InputError("--out", "serve", f"{target.workload}/{target.task_id} {target.condition}",
                                 "the server did not start: " + _tail(server_log, 3).replace("\n", " | "))
            why = f"the server was not ready within {ready_s:g} s (a busy machine?); rerun to play it"
            return False, why, {"client_exit": None, "client_log_tail": "", "server_log_tail": _tail(server_log),
                                "froze_its_list": False, "ready_s": None}
        ready = time.monotonic() - t0
        env = {**os.environ, "AFT_BENCH_MCP_URL": f"http://127.0.0.1:{port}/mcp"}
        clog = RedactedLog(client_log)
        # through the lifetime launcher: the client gets SIGTERM if serve-matrix dies (SIGKILL included)
        words = ["/bin/sh", "-c", command] if args.shell else list(command)
        client = subprocess.Popen([sys.executable, "-m", "aft_bench.common.lifetime", *words], env=env,
                                  stdout=clog.fd, stderr=subprocess.STDOUT)
        clog.handed()
        try:
            client_rc = client.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            client.kill()
            client.wait()
            why = f"the client timed out after {args.timeout:g} s"
        finally:
            clog.close()
        if not why and client_rc != 0:
            why = f"the client exited with code {client_rc}"
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGUSR1 if why else signal.SIGTERM)
            try:
                server.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        slog.close()
        _clear_scratch(out)  # the tuple's server has exited: nothing of its episode's folder is in use
    said = _tail(server_log, 50)
    detail = {"client_exit": client_rc, "client_log_tail": _tail(client_log), "server_log_tail": _tail(server_log),
              "froze_its_list": FROZE_HINT in said, "ready_s": ready}
    found = RECORDED.search(said)
    if found:  # recorded only at the stop that follows a client's exit 0 (--record-at stop)
        return True, found.group(1), detail
    abandoned = ABANDONED.search(said)
    if not why and abandoned:  # the server found the episode to be the client's failure
        why = abandoned.group(1)
    if not why:
        why = "the client never connected (nothing to record)" if server.returncode == 0 else (
            f"the server ended with code {server.returncode}")
    return False, why, detail


def _clear_scratch(out: Path) -> None:
    """Remove a served directory's scratch folder (external worlds' episode folders). serve-matrix runs one served
    tuple at a time, so between tuples nothing in it belongs to a live server."""
    import shutil

    shutil.rmtree(out / ".scratch", ignore_errors=True)


def _wait_ready(log: Path, timeout_s: float, alive: Any) -> bool:
    """Until the server says it serves (its signal handlers installed), it dies, or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive():
        said = _tail(log, 50)
        if said.startswith(READY) or f"\n{READY} " in said:
            return True
        time.sleep(0.02)
    return False


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last lines of a log, secrets redacted."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return redact("\n".join(text.splitlines()[-lines:]))


def add_parsers(sub: Any, worlds_dir: Any) -> None:
    """The `serve` and `serve-matrix` commands (`worlds_dir` resolves `--worlds`)."""

    def agent_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--agent", help="name of the agent under test, recorded in the row's agent spec (default: "
                       "the client's handshake name, with a warning when that is an SDK default)")
        p.add_argument("--model", help="the model behind the agent, recorded as the row's `model` (default: unknown)")
        p.add_argument("--discovery-form", choices=["dynamic", "facade"],
                       help="selective discovery as a changing tools/list (dynamic, the default) or as a stable "
                       "call_tool meta-tool for clients that freeze their list (facade)")
        p.add_argument("--response-loss", choices=["envelope", "transport"],
                       help="a lost response reaches the client as a timeout result (envelope, the default) or is "
                       "never sent, so the client's own timeout decides (transport)")

    sv = sub.add_parser("serve", help="serve one faulted episode over MCP to an external agent; record it in --out")
    sv.add_argument("--workload", required=True)
    sv.add_argument("--task", required=True)
    sv.add_argument("--condition", required=True)
    sv.add_argument("--fault", help="the task's fault variant (default: its first)")
    sv.add_argument("--seed", type=SEED, default=0)
    sv.add_argument("--backend", choices=["memory", "sqlite"], default="memory")
    sv.add_argument("--catalog-size", type=int, help="discovery workloads: the catalog size")
    sv.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=PORT, default=8765)
    sv.add_argument("--out", help="results directory receiving the episode (several served episodes may share one)")
    sv.add_argument("--worlds", help="worlds directory (default: ./worlds)")
    sv.add_argument("--also-worlds", action="append", metavar="DIR",
                    help="another worlds folder whose workloads are served beside --worlds' (a config's own worlds; "
                    "repeatable)")
    sv.add_argument("--show-task", action="store_true", help="print the task as the agent sees it and exit")
    sv.add_argument("--record-at", choices=["session-end", "stop"], default="session-end",
                    help="when the episode's row is written: when the owning session ends (session-end, the default; "
                    "over stdio that is the client's disconnect) or only when the server is stopped with SIGTERM "
                    "(stop: what serve-matrix uses, so that a client that fails after its session closed is "
                    "abandoned with SIGUSR1 and never recorded)")
    sv.add_argument("--client-config", action="store_true",
                    help="print the mcpServers entry (absolute paths) that launches this server over stdio, and exit")
    agent_flags(sv)
    sv.set_defaults(func=lambda a: cmd_serve(a, worlds_dir(a.worlds)))

    sm = sub.add_parser("serve-matrix", help="play every tuple of a config with an external MCP client command")
    sm.add_argument("config")
    sm.add_argument("--out", required=True)
    sm.add_argument("--client-cmd", required=True,
                    help="run once per tuple, with AFT_BENCH_MCP_URL set to that tuple's server")
    sm.add_argument("--shell", action="store_true", help="run the client command through the shell")
    sm.add_argument("--timeout", type=number(0, 7 * 86400, lo_open=True), default=600.0, help="seconds per tuple before the client is stopped")
    sm.add_argument("--worlds", help="worlds directory (default: ./worlds)")
    agent_flags(sm)
    sm.set_defaults(func=lambda a: cmd_serve_matrix(a, worlds_dir(a.worlds)))
