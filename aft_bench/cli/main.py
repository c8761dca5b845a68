"""The `aft-bench` command line. Bad input exits 2 with a message naming file, field and value."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aft_bench import __version__
from aft_bench.cli.flags import COUNT, PORT, SEED, FlagError, OneLineParser, executor, number, scheduler_flag
from aft_bench.common import memory
from aft_bench.common.errors import (CeilingReached, EvidenceError, InputError, OutputError, TraceIntegrityError,
                                     WorldFailed)
from aft_bench.common.files import input_dir
from aft_bench.common.paths import WORLDS
from aft_bench.common.secrets import redact

MAX_WORKERS = 64  # whatever the machine: more processes than this only contend for the journal writer

DEFAULT_WORLDS = WORLDS


def _worlds_dir(arg: str | None) -> Path:
    """`--worlds` (a folder that must exist), else ./worlds when present, else the packaged worlds."""
    if arg is not None:
        return input_dir(Path(arg), "--worlds")
    local = Path.cwd() / "worlds"
    return local if local.is_dir() else DEFAULT_WORLDS


def _workers(requested: int, cells: int) -> tuple[int, str]:
    """`--workers`, capped at cores x 4 and at the number of cells, and the note that says so when it is (shown
    after the run, so it never stands between a command and its one line of error)."""
    if requested < 1:
        raise InputError("--workers", "--workers", requested, "must be at least 1")
    cap = max(1, min((os.cpu_count() or 1) * 4, cells, MAX_WORKERS))
    note = (f"aft-bench: note: --workers {requested} capped at {cap} (cores x 4 = {(os.cpu_count() or 1) * 4}, "
            f"{cells} runs, at most {MAX_WORKERS})") if requested > cap else ""
    return min(requested, cap), note


def _yes(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "NO")


def cmd_calibrate(args: argparse.Namespace) -> int:
    from aft_bench.experiment.calibration import WorldSet, baselines, detector_table, run_cases

    worlds = WorldSet(_worlds_dir(args.worlds))
    cases_path = Path(args.cases) if args.cases else worlds.dir / "calibration" / "cases.toml"
    results = run_cases(worlds, cases_path)
    rows = detector_table(results)
    width = max(len(r.detector) for r in rows)
    print(f"{'detector':<{width}}  positive fired  negative silent")
    for r in rows:
        print(f"{r.detector:<{width}}  {_yes(r.positive_fired):<14}  {_yes(r.negative_silent)}")
    bad_cases = [r for r in results if not r.ok]
    for r in bad_cases:
        kind = "positive missed" if r.case.positive else "negative fired"
        print(f"  FAIL {r.case.detector} ({kind}) on {r.case.task}: {r.case.note}", file=sys.stderr)
    base = baselines(worlds)
    print()
    print(f"{'task':<36}  do-nothing              oracle")
    for b in base:
        print(f"{b.task:<36}  {b.nothing_outcome:<22}  {b.oracle_outcome}{'' if b.ok else '  <-- FAIL'}")
    failed_detectors = [r.detector for r in rows if not r.ok]
    failed_base = [b.task for b in base if not b.ok]
    print()
    print(f"{len(results)} cases, {len(rows)} detectors: {len(rows) - len(failed_detectors)} calibrated, "
          f"{len(failed_detectors)} failing; baselines: {len(base) - len(failed_base)}/{len(base)} hold")
    return 1 if failed_detectors or failed_base or bad_cases else 0


def cmd_validate(args: argparse.Namespace) -> int:
    from aft_bench.cli.validate import validate_path

    worlds = _worlds_dir(args.worlds)
    for raw in args.paths:
        print(validate_path(raw, worlds, live=args.live))
    return 0


def cmd_verify_trace(args: argparse.Namespace) -> int:
    from aft_bench.runtime.trace import verify_file

    if not Path(args.trace).is_file():
        raise InputError(args.trace, "trace", args.trace, "no such trace file")
    head = verify_file(args.trace, args.head)
    print(f"ok  {args.trace}: chain intact and sealed, head {head}")
    return 0


def cmd_catalog(args: argparse.Namespace) -> int:
    from aft_bench.world.catalog import generate_catalog

    try:
        tools = generate_catalog(args.size, args.seed, tuple(args.required))
    except ValueError as exc:
        raise InputError("--size/--required", "catalog", args.size, str(exc)) from None
    if args.json:
        print(json.dumps([t.schema() for t in tools], indent=2))
    else:
        for t in tools:
            print(t.card())
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from aft_bench.agents.registry import preflight
    from aft_bench.experiment.config import load_matrix
    from aft_bench.experiment.progress import progress_for
    from aft_bench.experiment.runner import run_matrix

    scheduler = executor(args)
    if scheduler is None and (args.workers > 1 or args.loops > 1):  # worker processes likely: their server
        from aft_bench.experiment.executors import start_process_server  # starts loading beside ours

        start_process_server()
    matrix = load_matrix(args.config, _worlds_dir(args.worlds))
    workers, note = _workers(args.workers, len(matrix.cells))
    out = Path(os.path.abspath(args.out))  # resolved once: a relative --out gives the rows an absolute one does
    t0 = time.perf_counter()
    for i, spec in enumerate(matrix.agents):
        preflight(spec, args.config, f"experiment.agents.{i}")
    if args.max_cost is not None and args.max_cost < 0:
        raise InputError("--max-cost", "--max-cost", args.max_cost, "must be 0 or more")
    if not 1 <= args.loops <= 64:
        raise InputError("--loops", "--loops", args.loops, "must be between 1 and 64")
    from aft_bench.experiment.cluster import ClusterError
    from aft_bench.experiment.recording import recorded_models

    try:
        with recorded_models(matrix, args.record and Path(args.record), args.replay and Path(args.replay)) as extra:
            rows = run_matrix(matrix, out, progress_for(matrix.experiment.id), workers=workers,
                              rerun_missing=args.rerun_missing, max_cost=args.max_cost, loops=args.loops,
                              scheduler=scheduler, row_extra=extra)
    except ClusterError as exc:  # the cluster, not the input: what was recorded is intact and the folder resumes
        print(f"aft-bench: error: {_one_line(str(exc))}", file=sys.stderr)
        return 1
    wall = time.perf_counter() - t0
    fired = [r["fault_fired"] for r in rows if r["fault_fired"] is not None]
    missing = len(matrix.cells) - len(rows)
    print(f"{len(rows)} runs in {wall:.1f} s ({len(rows) / max(wall, 1e-9):.0f} runs/s); "
          f"faults fired in {sum(fired)}/{len(fired)} faulted runs")
    print(f"results: {out / 'results.parquet'}  traces: {out / 'traces'}  manifest: {out / 'manifest.json'}")
    if missing:
        _say_failure(out, {str(r["run_id"]) for r in rows})
        print(f"aft-bench: {missing} tuples failed and stay pending (see {out / 'failures.jsonl'}); "
              f"rerun the same command to resume", file=sys.stderr)
    if note:  # after the failure lines, never before them: the first line a failed run prints says what failed
        print(note, file=sys.stderr)
    return 1 if missing else 0


def _say_failure(out: Path, recorded: set[str]) -> None:
    """Why a tuple failed, in one line: the first cassette miss of a replay (run, turn, request hash and the field
    that changed), else the last failure of a tuple still pending (so a CI log says what went wrong without the
    folder; a failure an earlier session since recovered from is not it)."""
    from aft_bench.agents.cassette import MISS
    from aft_bench.experiment.journal import read_records

    last = None
    for f in read_records(out / "failures.jsonl"):
        if str(f.get("run_id")) in recorded:
            continue
        text = str(f.get("message") or "")
        if MISS in text:
            print(f"aft-bench: replay miss in run {f.get('run_id')}: {text.split(MISS + ': ', 1)[-1]}",
                  file=sys.stderr)
            return
        last = f
    if last is not None:
        said = _one_line(f"{last.get('error') or 'error'}: {last.get('message') or ''}", 400)
        print(f"aft-bench: run {last.get('run_id')} failed: {said}", file=sys.stderr)


def cmd_profile(args: argparse.Namespace) -> int:
    from aft_bench.analysis.profile import write_profile

    for e in write_profile(Path(args.dir), Path(args.out)):
        build = f"{e['build_ms']:g} ms" if e["build_ms"] is not None else "not measured (no program ran)"
        print(f"{e['world']} / {e['model']} / network {e['network'] or 'none'}: RTT + DEC {e['step_ms']:g} ms per "
              f"step, BUILD {build} ({e['runs']} runs)")
    print(f"profile: {args.out}")
    return 0


def cmd_summarize(args: argparse.Namespace) -> int:
    from aft_bench.analysis.summary import summarize

    print(summarize(Path(args.dir)))
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from aft_bench.analysis.analyze import Options, analyze, format_table3

    opts = Options(seed=args.seed, resamples=args.resamples, permutations=args.permutations, flip_unit=args.flip_unit)
    tables = analyze(Path(args.dir), opts, include_stale=args.include_stale_lock)
    print(format_table3(tables["comparisons"], tables["meta"]))
    print(f"\nanalysis: {Path(args.dir) / 'analysis'}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from aft_bench.analysis.report import render

    md, html_path = render(Path(args.dir), stale_ok=args.stale_ok)
    print(f"report: {md}\n        {html_path}")
    return 0


def cmd_freeze(args: argparse.Namespace) -> int:
    from aft_bench.experiment.config import load_matrix
    from aft_bench.experiment.freeze import freeze

    matrix = load_matrix(args.config, _worlds_dir(args.worlds))
    path = freeze(matrix)
    print(f"frozen: {path} ({len(json.loads(path.read_text())['inputs'])} inputs)")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from aft_bench.analysis.audit import audit

    checks = audit(Path(args.dir), Path(args.manuscript) if args.manuscript else None)
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"{'PASS' if c.ok else 'FAIL'}  {c.name:<{width}}  {c.detail}")
    failed = [c for c in checks if not c.ok]
    print(f"{len(checks) - len(failed)}/{len(checks)} checks passed")
    return 1 if failed else 0


def cmd_check(args: argparse.Namespace) -> int:
    from aft_bench.analysis.gate import check

    results = check(Path(args.dir), Path(args.expect), stale_ok=args.stale_ok)
    for r in results:
        shown = "missing" if r.measured is None else f"{r.measured:.6g}"
        print(f"{'PASS' if r.ok else 'FAIL'}  {r.bound:<44} measured {shown}")
    failed = [r for r in results if not r.ok]
    if failed:
        print(f"aft-bench: {len(failed)} mechanism bound(s) failed: " + "; ".join(r.bound for r in failed),
              file=sys.stderr)
        return 1
    print(f"all {len(results)} bounds hold")
    return 0


def cmd_fake_llm(args: argparse.Namespace) -> int:
    from aft_bench.agents.fake_llm import FAILURES, POLICIES, FakeModel, index_tasks, serve

    if args.policy is not None and args.policy not in POLICIES:
        raise InputError("--policy", "--policy", args.policy, f"unknown policy; known: {', '.join(POLICIES)}")
    if not 0 <= args.failure_rate <= 1:
        raise InputError("--failure-rate", "--failure-rate", args.failure_rate, "must be between 0 and 1")
    kinds = tuple(args.failures.split(",")) if args.failures else FAILURES
    if bad := [k for k in kinds if k not in FAILURES]:
        raise InputError("--failures", "--failures", bad[0], f"unknown failure; known: {', '.join(FAILURES)}")
    dirs = [_worlds_dir(args.worlds), *(input_dir(Path(d), "--extra-worlds") for d in args.extra_worlds)]
    model = FakeModel(index_tasks(dirs), args.failure_rate, kinds, args.latency, args.seed,
                      policy=args.policy)
    server = serve(model, args.host, args.port)
    print(f"fake model on http://{args.host}:{server.server_port}/v1 (model names fake-<policy>: "
          f"{', '.join(POLICIES)}); Ctrl-C stops it", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.shutdown()
    return 0


def _plain(value: object) -> str:
    """One listing field as text: parameters as `name=default`, other lists comma-separated."""
    if isinstance(value, list):
        return ",".join(f"{v['name']}={v['default']}" if isinstance(v, dict) else str(v) for v in value) or "-"
    return str(value)


def cmd_list(args: argparse.Namespace) -> int:
    from aft_bench.cli.listing import listing

    data = listing(args.what, _worlds_dir(args.worlds))
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        for item in data:
            print("  ".join(_plain(v) for v in item.values()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="aft-bench", description=__doc__)
    p.add_argument("--version", action="version", version=f"aft-bench {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("calibrate", help="run every detector's known-positive and known-negative case")
    c.add_argument("--worlds", help="worlds directory (default: ./worlds)")
    c.add_argument("--cases", help="calibration cases file (default: WORLDS/calibration/cases.toml)")
    c.set_defaults(func=cmd_calibrate)

    v = sub.add_parser("validate", help="validate data files of any kind (worlds, tasks, workloads, fault "
                       "schedules, calibration cases, configs, expectations), recognised by content")
    v.add_argument("paths", nargs="+")
    v.add_argument("--worlds", help="worlds directory for configs and workloads (default: ./worlds)")
    v.add_argument("--live", action="store_true", help="an external world is also checked against its live server: "
                   "its tools listed, its example calls accepted by their schemas, its probe's output canonical JSON")
    v.set_defaults(func=cmd_validate)

    t = sub.add_parser("verify-trace", help="check a trace file's hash chain and seal")
    t.add_argument("trace")
    t.add_argument("--head", help="expected head hash (e.g. from a result row)")
    t.set_defaults(func=cmd_verify_trace)

    r = sub.add_parser("run", help="run an experiment matrix into a new output directory")
    r.add_argument("config")
    r.add_argument("--out", required=True)
    r.add_argument("--worlds", help="worlds directory (default: ./worlds)")
    r.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                   help="worker processes (default: min(2, cores); capped at cores x 4 and the run count); "
                        "results are identical for any count")
    r.add_argument("--loops", type=int, default=1,
                   help="event loops (processes) for agents that wait on the network, each agent's concurrency "
                        "split between them (default 1); results are identical for any count")
    r.add_argument("--max-cost", type=number(0, 1e12), help="spend ceiling in US dollars (overrides the config's "
                   "max_cost_usd; not part of the config's identity): no new tuple starts once reached, exit 3")
    r.add_argument("--executor", choices=("local", "dask"), default="local",
                   help="where cells run: this machine (default) or a Dask cluster (the extra aft-bench[dask]); "
                        "not part of the config's identity: the same rows either way")
    r.add_argument("--scheduler", type=scheduler_flag, metavar="ADDRESS",
                   help="with --executor dask: tcp://host:port of a running scheduler, or local[:N] to start N "
                        "worker processes on 127.0.0.1 (default local: min(2, cores))")
    r.add_argument("--record", metavar="CASSETTE", help="record every model call of the run's llm agents (request "
                   "and answer, never a key) into this new cassette file")
    r.add_argument("--replay", metavar="CASSETTE", help="answer every model call from this cassette, offline; a "
                   "request it never recorded fails its tuple (exit 1), naming the field that changed")
    r.add_argument("--rerun-missing", action="store_true",
                   help="move finished runs whose trace or database is missing or fails verification back to "
                        "pending (their old rows are kept under quarantine/)")
    r.set_defaults(func=cmd_run)

    pf = sub.add_parser("profile", help="measure the warm-start profile of ToolPro's profile-driven policy (RTT + "
                        "DEC per step, BUILD) from a results directory's runs, per world and model")
    pf.add_argument("dir")
    pf.add_argument("--out", required=True, metavar="P.json", help="the profile file to write (an agent table's "
                    "`profile`)")
    pf.set_defaults(func=cmd_profile)

    s = sub.add_parser("summarize", help="per workload x condition summary of a results directory")
    s.add_argument("dir")
    s.set_defaults(func=cmd_summarize)

    a = sub.add_parser("analyze", help="matched pairs, clustered CIs, permutation tests, Holm; Table 3")
    a.add_argument("dir")
    a.add_argument("--seed", type=SEED, default=0)
    a.add_argument("--resamples", type=COUNT, default=2000, help="bootstrap resamples of task clusters")
    a.add_argument("--permutations", type=COUNT, default=10_000, help="random sign flips")
    a.add_argument("--flip-unit", choices=["pair", "cluster"], default="cluster",
                   help="sign-flip whole task clusters (default) or single pairs (the paper's method)")
    a.add_argument("--include-stale-lock", action="store_true",
                   help="keep rows made before the config's current evidence freeze")
    a.set_defaults(func=cmd_analyze)

    rp = sub.add_parser("report", help="Markdown + HTML report with figures from DIR/analysis")
    rp.add_argument("dir")
    rp.add_argument("--stale-ok", action="store_true",
                    help="report an analysis made from other results than results.parquet holds (said in the header)")
    rp.set_defaults(func=cmd_report)

    fz = sub.add_parser("freeze", help="write CONFIG's evidence-freeze lock file (hashes of every input)")
    fz.add_argument("config")
    fz.add_argument("--worlds", help="worlds directory (default: ./worlds)")
    fz.set_defaults(func=cmd_freeze)

    au = sub.add_parser("audit", help="release checks over a results directory; exit 1 on any failure")
    au.add_argument("dir")
    au.add_argument("--manuscript", help="markdown whose [n](aft:table/comparison/field) numbers are checked")
    au.set_defaults(func=cmd_audit)

    ck = sub.add_parser("check", help="CI gate: bounds on mechanism effects; exit 1 when one fails")
    ck.add_argument("dir")
    ck.add_argument("--expect", required=True)
    ck.add_argument("--stale-ok", action="store_true",
                    help="check an analysis made from other results than results.parquet holds")
    ck.set_defaults(func=cmd_check)

    ls = sub.add_parser("list", help="list agents, comparisons, conditions, workloads, worlds or faults")
    ls.add_argument("what", choices=["agents", "comparisons", "conditions", "workloads", "worlds", "faults"])
    ls.add_argument("--json", action="store_true")
    ls.add_argument("--worlds", help="worlds directory (default: ./worlds)")
    ls.set_defaults(func=cmd_list)

    g = sub.add_parser("catalog", help="print a generated tool catalog")
    g.add_argument("--size", type=int, default=10)
    g.add_argument("--seed", type=SEED, default=0)
    g.add_argument("--required", nargs="*", default=[])
    g.add_argument("--json", action="store_true", help="full schemas instead of compact cards")
    g.set_defaults(func=cmd_catalog)
    from aft_bench.cli.routing import add_parsers

    add_parsers(sub, g)
    from aft_bench.cli.serving import add_parsers as add_serving

    add_serving(sub, _worlds_dir)
    from aft_bench.cli.view import add_parsers as add_view

    add_view(sub)
    from aft_bench.cli.scorecard import add_parsers as add_scorecard

    add_scorecard(sub, _worlds_dir)
    from aft_bench.cli.atlas import add_parsers as add_atlas

    add_atlas(sub)

    fk = sub.add_parser("fake-llm", help="serve the offline OpenAI-compatible model (tests, demos, benchmarks)")
    fk.add_argument("--host", default="127.0.0.1")
    fk.add_argument("--port", type=PORT, default=0, help="0: any free port (printed)")
    fk.add_argument("--policy", help="answer every request with this policy (default: from the model name)")
    fk.add_argument("--failure-rate", type=number(0, 1), default=0.0, help="share of requests that fail (seeded)")
    fk.add_argument("--failures", help="comma-separated kinds to inject: 429,500,timeout,drop (default: all)")
    fk.add_argument("--latency", type=number(0, 3600), default=0.0, help="seconds before every reply")
    fk.add_argument("--seed", type=SEED, default=0)
    fk.add_argument("--worlds", help="worlds directory whose tasks the model knows (default: ./worlds)")
    fk.add_argument("--extra-worlds", action="append", default=[], metavar="DIR",
                    help="another worlds folder whose tasks it knows too (a config's own worlds); repeatable")
    fk.set_defaults(func=cmd_fake_llm)
    return p


def _one_line(text: str, limit: int = 600) -> str:
    flat = " ".join(redact(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _crash_log(exc: BaseException) -> str:
    """Write the full (redacted) traceback of an unforeseen error to a log file; returns where, or why not."""
    import tempfile
    import traceback

    try:
        folder = Path(tempfile.gettempdir()) / "aft-bench"
        folder.mkdir(exist_ok=True)
        path = folder / f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        text = "".join(traceback.format_exception(exc))
        path.write_text(f"aft-bench {__version__}\nargv: {redact(' '.join(sys.argv))}\n\n{redact(text)}")
        return str(path)
    except OSError as err:
        return f"(log not written: {err.strerror})"


def _log_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: Any = None, line: str | None = None) -> None:
    """Library warnings (pydantic, litellm, ...) go to a log file, redacted, never between a command and its one
    line of error or result."""
    import tempfile

    try:
        folder = Path(tempfile.gettempdir()) / "aft-bench"
        folder.mkdir(exist_ok=True)
        with open(folder / f"warnings-{time.strftime('%Y%m%d')}.log", "a", encoding="utf-8") as log:
            log.write(redact(f"{time.strftime('%H:%M:%S')} pid {os.getpid()} {category.__name__} {filename}:{lineno}: "
                             f"{message}\n"))
    except OSError:
        pass  # a warning is not worth an error


_KNOWN = (InputError, TraceIntegrityError, OutputError, EvidenceError, CeilingReached, OSError, KeyboardInterrupt,
          MemoryError, WorldFailed)


def _call(args: argparse.Namespace) -> int:
    """The command, with an error raised inside a task group (anyio's, asyncio's) taken out of its group: the
    group's first error the contract knows, else its only one, so that it gets its own one line and exit code."""
    try:
        return int(args.func(args))
    except BaseExceptionGroup as group:
        leaves = list(_leaves(group))
        known = [e for e in leaves if isinstance(e, _KNOWN)]
        if known or len(leaves) == 1:
            raise (known or leaves)[0] from None
        raise


def _leaves(group: BaseExceptionGroup) -> Any:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


def _unnamed_file() -> str:
    """What to name when the system named no file: the working folder if it was deleted under the command."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return "the working folder (deleted while the command ran)"
    return "?"


def _say_memory_short(exc: BaseException) -> None:
    """One line saying memory is short; its module is imported with this one, as nothing may be imported once
    memory is short."""
    try:
        said = _one_line(memory.describe(exc))
    except MemoryError:
        said = "memory is short: an allocation failed; raise the limit (ulimit -v) or free memory"
    print(f"aft-bench: error: {said}", file=sys.stderr)


# the commands that start real servers outside a run directory: SIGTERM must let them stop those and remove
# their folders (run, serve and view have their own handling)
TERM_AS_INTERRUPT = {"cmd_scorecard", "cmd_init_world", "cmd_validate"}


def _terminate_as_interrupt() -> None:
    """SIGTERM (`timeout`, a CI runner, `kill`) ends a command as Ctrl-C does: its finally blocks stop its servers
    and remove its folders, and it says it was interrupted. A command with a handler of its own (serve, view) sets
    it later, over this one."""
    import signal

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):  # a closed terminal too
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, interrupt)


def _absolute_env() -> None:
    """Paths from the environment resolved once, against the folder the command started in, so that every worker
    and server process this command starts reads the same folder (a relative AFT_BENCH_SERVERS broke them)."""
    from aft_bench.world.external import SERVERS_ENV

    if os.environ.get(SERVERS_ENV):
        os.environ[SERVERS_ENV] = os.path.abspath(os.environ[SERVERS_ENV])


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. The error contract: bad input exits 2, an output or integrity problem exits 1, each
    with one line naming the file, field or flag; anything unforeseen exits 1 with one line and a log path."""
    import warnings

    memory.under_limit()  # under `ulimit -v`: allocators that reserve only what they use
    warnings.showwarning = _log_warning
    _absolute_env()
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] | None = None
    if argv[:1] == ["init-world"] and "--" in argv:  # the server's command is everything after `--`, whatever
        cut = argv.index("--")                         # options stand between the name and it
        argv, command = argv[:cut], argv[cut + 1:]
    try:
        args = build_parser().parse_args(argv)
    except FlagError as exc:
        print(f"aft-bench: error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    if command is not None:
        args.command = [*args.command, *command]
    if getattr(getattr(args, "func", None), "__name__", "") in TERM_AS_INTERRUPT:
        _terminate_as_interrupt()
    try:
        return _call(args)
    except InputError as exc:
        print(f"aft-bench: error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except TraceIntegrityError as exc:
        print(f"aft-bench: trace integrity: {_one_line(str(exc))}", file=sys.stderr)
        return 1
    except (OutputError, EvidenceError) as exc:
        print(f"aft-bench: error: {_one_line(str(exc))}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader went away (`aft-bench ... | head`): nothing to say, and say it quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 141  # as a process ended by SIGPIPE
    except OSError as exc:  # a file-system problem no command anticipated: name the file, no traceback
        where = exc.filename if exc.filename is not None else _unnamed_file()
        print(f"aft-bench: error: {where}: {_one_line(exc.strerror or str(exc))}", file=sys.stderr)
        return 1
    except CeilingReached as exc:
        print(f"aft-bench: {_one_line(str(exc))}", file=sys.stderr)
        return 3
    except WorldFailed as exc:  # a real server failed in a served episode: said, not an internal error
        print(f"aft-bench: {_one_line(str(exc))}; the episode was not recorded", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("aft-bench: interrupted; everything recorded before this point is intact", file=sys.stderr)
        return 130
    except MemoryError as exc:  # an allocation failed: said as such (with the limit), not as an internal error
        _say_memory_short(exc)
        return 1
    except Exception as exc:  # noqa: BLE001 - the last resort: one line and a log, never a traceback
        if memory.failed_load(exc):  # a compiled module the loader could not map under an address-space limit
            _say_memory_short(exc)
            return 1
        log = _crash_log(exc)
        print(f"aft-bench: internal error: {type(exc).__name__}: {_one_line(str(exc), 300)}; full log: {log}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
