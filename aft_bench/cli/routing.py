"""The router's commands: `route-eval`, `route-suites` and the `catalog` review cycle (import-mcp, review,
resolve). Each registers its parser here and runs through `main`'s error contract."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from aft_bench.cli.flags import integer, number
from aft_bench.common.errors import InputError

SUITES = ("lite", "l2", "l3", "l3h", "l3x", "l3y")
TABLE = [("cases", "{:d}"), ("tools", "{:d}"), ("micro_precision", "{:.3f}"), ("micro_recall", "{:.3f}"),
         ("micro_f1", "{:.3f}"), ("macro_f1", "{:.3f}"), ("naive_tokens", "{:,}"), ("compact_tokens", "{:,}"),
         ("router_tokens", "{:,.1f}"), ("reduction", "{:.2%}"), ("naive_chars4", "{:,.0f}"),
         ("router_chars4", "{:,.1f}"), ("reduction_chars4", "{:.2%}"), ("surface_tokens", "{:d}")]


def cmd_route_eval(args: argparse.Namespace) -> int:
    from aft_bench.interface.ranking import RANKERS
    from aft_bench.routing.evaluate import evaluate
    from aft_bench.routing.suites import load_suite

    rankers = [args.ranker] if args.ranker else list(RANKERS)
    for r in rankers:
        if r not in RANKERS:
            raise InputError("--ranker", "--ranker", r, f"unknown ranker; known: {', '.join(RANKERS)}")
    suite = load_suite(args.suite)
    from aft_bench.interface.minilm import ModelMissing

    try:
        rows = [evaluate(suite, r) for r in rankers]
    except ModelMissing as exc:  # a ranker's packaged model is not installed: one line, before any output
        print(f"aft-bench: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({r["ranker"]: {k: v for k, v in r.items() if k != "per_case" or args.cases}
                          for r in rows}, indent=2))
        return 0
    print(f"suite {suite.suite.id}: {suite.suite.description}")
    width = max(len(k) for k, _ in TABLE)
    print(f"{'':{width}}  " + "  ".join(f"{r['ranker']:>10}" for r in rows))
    for key, fmt in TABLE:
        print(f"{key:{width}}  " + "  ".join(f"{fmt.format(r[key]):>10}" for r in rows))
    return 0


def cmd_route_suites(args: argparse.Namespace) -> int:
    from aft_bench.routing.suites import ROUTING, generate, to_toml

    stale = []
    for name in SUITES:
        text, path = to_toml(generate(name)), ROUTING / f"{name}.toml"
        if args.write:
            path.write_text(text)
        elif not path.exists() or path.read_text() != text:
            stale.append(str(path))
    if stale:
        print(f"aft-bench: stale routing suites (regenerate with route-suites --write): {', '.join(stale)}")
        return 1
    print("routing suites written" if args.write else "routing suites are current")
    return 0


def cmd_catalog_import(args: argparse.Namespace) -> int:
    from aft_bench.common.secrets import redact
    from aft_bench.routing.imported import IMPORT_TIMEOUT_S, import_mcp, save_catalog

    cat = import_mcp(args.cmd, args.url, IMPORT_TIMEOUT_S if args.timeout is None else args.timeout)
    save_catalog(cat, Path(args.out))
    skipped = json.loads(cat.source.get("skipped", "[]"))
    print(redact(f"{len(cat.tools)} tools from {cat.source.get('server')} written to {args.out}, all pending review"
                 + (f"; {len(skipped)} not imported (a name outside MCP's rule [A-Za-z0-9_.-]{{1,128}}, a second "
                    f"tool of one name, or a name shaped like a credential): {', '.join(map(repr, skipped[:5]))}"
                    if skipped else "")))
    return 0


def _disjoint(*flags: tuple[str, list[str]]) -> None:
    """A tool named under two of review's flags is a contradiction, refused before the catalog is read (else
    the first flag in review's order silently wins)."""
    for i, (flag, names) in enumerate(flags):
        for other, other_names in flags[i + 1:]:
            if both := [n for n in names if n in other_names]:
                raise InputError(flag, other, both[0], f"named under both {flag} and {other}; a tool takes one state")


def cmd_catalog_review(args: argparse.Namespace) -> int:
    from aft_bench.routing.imported import load_catalog, review, save_catalog

    path = Path(args.file)
    _disjoint(("--approve", args.approve), ("--block", args.block), ("--pin", args.pin))
    cat = review(load_catalog(path), path, args.approve, args.block, args.pin, args.effect)
    save_catalog(cat, path)
    counts: dict[str, int] = {}
    for t in cat.tools:
        counts[t.state] = counts.get(t.state, 0) + 1
    print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return 0


def cmd_catalog_resolve(args: argparse.Namespace) -> int:
    from aft_bench.routing.imported import load_catalog, router_for

    path = Path(args.file)
    try:
        router = router_for(load_catalog(path), args.profile)
    except KeyError as exc:
        raise InputError("--profile", "--profile", args.profile, str(exc.args[0])) from None
    session = router.resolve(args.task, args.k)
    out: dict[str, Any] = {"profile": args.profile, "session": session,
                           "permitted": [c.name for c in router.permitted]}
    print(json.dumps(out, indent=2))
    return 0


def add_parsers(sub: Any, catalog: argparse.ArgumentParser) -> None:
    re_ = sub.add_parser("route-eval", help="router selection quality and context tokens on a routing suite")
    re_.add_argument("suite", help="lite, l2, l3, l3h, l3x or l3y (held out) or a suite file")
    re_.add_argument("--ranker", help="one ranker (default: every ranker)")
    re_.add_argument("--json", action="store_true", help="machine-readable, per ranker")
    re_.add_argument("--cases", action="store_true", help="with --json: each case's resolved session")
    re_.set_defaults(func=cmd_route_eval)
    rs = sub.add_parser("route-suites", help="check (or --write) the generated routing suites")
    rs.add_argument("--write", action="store_true")
    rs.set_defaults(func=cmd_route_suites)

    csub = catalog.add_subparsers(dest="catalog_command")
    im = csub.add_parser("import-mcp", help="list a real MCP server's tools into a catalog file, pending review")
    im.add_argument("--cmd", help="server command (stdio)")
    im.add_argument("--url", help="server URL (streamable HTTP)")
    im.add_argument("--out", required=True, help="catalog file (JSON)")
    im.add_argument("--timeout", type=number(0, 86400, lo_open=True), default=None,
                    help="seconds the server has to start and list its tools (default 60; a server with many "
                    "thousands of tools may need more)")
    im.set_defaults(func=cmd_catalog_import)
    rv = csub.add_parser("review", help="approve, block or pin tools of a catalog file")
    rv.add_argument("file")
    rv.add_argument("--approve", nargs="+", default=[], metavar="NAME")
    rv.add_argument("--block", nargs="+", default=[], metavar="NAME")
    rv.add_argument("--pin", nargs="+", default=[], metavar="NAME")
    rv.add_argument("--effect", help="reviewed effect class of the approved or pinned tools")
    rv.set_defaults(func=cmd_catalog_review)
    rz = csub.add_parser("resolve", help="resolve a session in a catalog file under a profile")
    rz.add_argument("file")
    rz.add_argument("task")
    rz.add_argument("--profile", default="default")
    rz.add_argument("--k", type=integer(1, 10_000), default=3, help="at most this many tools in the session")
    rz.set_defaults(func=cmd_catalog_resolve)
