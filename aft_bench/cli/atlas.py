"""`aft-bench atlas ATLAS.toml --out DIR`: the scorecard of every server × release an atlas file names, each release
installed once into its own cache folder, recorded cell by cell (a rerun measures only what is missing), then the
dataset, drift, SARIF, badges, annotation evidence and the Atlas page built from what was recorded."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any


def cmd_atlas(args: argparse.Namespace) -> int:
    from aft_bench.atlas import run as atlas_run
    from aft_bench.atlas.cache import default_cache
    from aft_bench.atlas.releases import lock_path
    from aft_bench.atlas.sarif import RULES
    from aft_bench.atlas.spec import load_atlas
    from aft_bench.cli.flags import executor
    from aft_bench.common.errors import InputError

    path = Path(os.path.abspath(args.atlas))
    atlas = load_atlas(path)
    scheduler = executor(args)
    classes = tuple(x.replace("-", "_") for x in (args.sarif or "").split(",") if x) or None
    if classes is not None:
        bad = [c for c in classes if c not in RULES]
        if bad:
            raise InputError("--sarif", "--sarif", bad[0], f"unknown class; known: {', '.join(RULES)}")
    only = set(args.only.split(",")) if args.only else None
    if only is not None:
        unknown = sorted(only - {e.name for e in atlas.servers})
        if unknown:
            raise InputError(path, "--only", unknown[0], "the atlas has no such server")
    if not args.out and not args.install_only:
        raise InputError("atlas", "--out", "", "name the atlas folder (--out DIR)")
    out = Path(os.path.abspath(args.out or "."))
    cache = Path(os.path.abspath(args.cache)) if args.cache else default_cache()
    resolved = atlas_run.resolve(atlas, lock_path(path), refresh=args.refresh, offline=args.offline, atlas_file=path)
    planned = atlas_run.plan(atlas, resolved, only)  # what this run measures; what it publishes: every server's
    everything = atlas_run.plan(atlas, resolved)  # recorded cells (--only never shrinks a folder's dataset)
    say = None if args.quiet else atlas_run.progress_line
    if args.install_only:
        failed = atlas_run.install_all(planned, cache, say)
        print(f"atlas {atlas.id}: {len(planned) - failed} of {len(planned)} releases installed in {cache}"
              + (f"; {failed} could not be (their cells will be untestable)" if failed else ""))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    with atlas_run.writer(out):  # one atlas process per folder: the single writer of its cells
        return _measure_and_publish(args, atlas, (planned, everything), out, cache, scheduler, classes, say)


def _measure_and_publish(args: argparse.Namespace, atlas: Any, plans: tuple[list[Any], list[Any]], out: Path,
                         cache: Path, scheduler: str | None, classes: tuple[str, ...] | None, say: Any) -> int:
    from aft_bench.atlas import run as atlas_run
    from aft_bench.atlas.cell import CELL_VERSION
    from aft_bench.atlas.publish import publish
    from aft_bench.viewer.atlas_page import write_page

    planned, everything = plans
    todo = [p for p in planned if atlas_run.recorded(out, p, args.retry_untestable) is None]
    if say is not None:
        say(f"atlas {atlas.id}: {len(planned)} server-releases, {len(planned) - len(todo)} already recorded, "
            f"{len(todo)} to measure")
    if todo:
        try:
            atlas_run.run(atlas, todo, out, cache, workers=args.workers, scheduler=scheduler, say=say)
        except atlas_run.WorkerLost as exc:
            print(f"aft-bench: atlas: {exc}; every cell recorded so far is kept: run again to measure the rest",
                  file=sys.stderr)
            return 1
    doc = publish(out, atlas.id, [(p.entry.name, p.release, p.order, atlas_run.entry_key(p.entry))
                                  for p in everything], CELL_VERSION, **({"classes": classes} if classes else {}))
    write_page(out / "site" / "index.html", doc)
    f = doc["findings"]
    print(f"atlas {atlas.id}: {f['cells']} of {len(everything)} server-releases recorded ({f['measured_cells']} "
          f"measured); {f['writing_tools']} writing tools on {f['measured_servers']} servers: "
          + ", ".join(f"{n} {c.replace('_', ' ')}" for c, n in f["classes"].items())
          + f"; {f['untestable_tools']} untestable")
    print(f"written: {out}/dataset.jsonl, summary.md, atlas.sarif, drift.json, badges/, evidence/, cards/, "
          f"site/index.html")
    return 0


def add_parsers(sub: Any) -> None:
    from aft_bench.cli.flags import integer, scheduler_flag

    a = sub.add_parser("atlas", help="the scorecard of every server × release an atlas file names: dataset, drift, "
                       "SARIF, badges, annotation evidence and an Atlas page")
    a.add_argument("atlas", help="the atlas file (ATLAS.toml); its releases are resolved once into ATLAS.lock.json")
    a.add_argument("--out", help="the atlas folder: cells/ (one file per server × release, kept "
                   "across runs) and what is built from them")
    a.add_argument("--workers", type=integer(1, 64), default=2,
                   help="cells measured at once on this machine (default 2)")
    a.add_argument("--executor", choices=("local", "dask"), default="local", help="where cells run: this machine "
                   "or a Dask cluster (the extra aft-bench[dask]); the same dataset either way")
    a.add_argument("--scheduler", type=scheduler_flag, metavar="ADDRESS", help="with --executor dask: "
                   "tcp://host:port or local[:N]")
    a.add_argument("--only", help="comma-separated server names: measure only these")
    a.add_argument("--cache", help="where releases are installed (default $AFT_BENCH_ATLAS_CACHE, else .atlas/)")
    a.add_argument("--refresh", action="store_true", help="ask the registries again which releases `since` names")
    a.add_argument("--offline", action="store_true", help="never ask a registry: releases from the lock only")
    a.add_argument("--sarif", help="comma-separated classes the SARIF reports (default duplicate,false-failure,"
                   "annotation; also silent-success)")
    a.add_argument("--install-only", action="store_true", help="install every release into the cache and stop "
                   "(what `make atlas-install` runs from the lock)")
    a.add_argument("--retry-untestable", action="store_true", help="measure again the cells recorded as "
                   "untestable (an install the network broke)")
    a.add_argument("--quiet", action="store_true", help="no progress lines")
    a.set_defaults(func=cmd_atlas)

