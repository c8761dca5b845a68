"""Benchmark: milliseconds per episode of a config's matrix, in process, one cell after another, with and
without trace files; optionally the same measurement of an earlier commit, and the ratio.

    .venv/bin/python benchmarks/bench_episode.py [CONFIG] [--against COMMIT] [--repeat 5] [--hot]

A measurement is what a run pays: a fresh process loads the matrix, runs its first cell once and loads the
tokenizer (the one-off imports: tokenizer, BM25), then times one pass over every cell (cold per-world caches, as in a real run).
Each mode is measured in `--repeat` fresh processes and the median counts (a single best pass swings by
about 5 % on a shared machine). `--hot` adds two more passes in the same process (every per-world cache
warm; the better one counts), which favours code whose caches are unbounded.
With `--against`, the commit is checked out into a temporary git worktree and measured by this same script
(the older package layout is recognised); the worktree is removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent


def _runner(config: Path) -> tuple[list[Any], Callable[[Any, Path | None], Any]]:
    """The cells of `config` and a function running one cell (trace folder or None), for either layout."""
    worlds = config.parent.parent / "worlds"  # the worlds of the tree the config belongs to
    try:
        from aft_bench.experiment.build import run_cell
        from aft_bench.experiment.config import load_matrix

        matrix = load_matrix(config, worlds)
        return list(matrix.cells), lambda cell, out: run_cell(matrix, cell, out)
    except ImportError:  # the flat layout before the subpackages (run dir = traces folder's parent)
        from aft_bench.config import load_plan  # type: ignore[import-not-found,no-redef]
        from aft_bench.runner import run_cell as old_run_cell  # type: ignore[import-not-found,no-redef]

        plan = load_plan(config, worlds)
        return list(plan.cells), lambda cell, out: old_run_cell(plan, cell, out / "traces" if out else None)


def _warm_tokenizer() -> None:
    try:
        from aft_bench.interface.tokens import warm
    except ImportError:  # a layout without the module (its tokenizer loads with the first cell)
        return
    warm()


def one_pass(config: Path, mode: str, passes: int) -> list[float]:
    """Seconds per episode of `passes` passes over the matrix in this process (after one warm-up cell)."""
    cells, run = _runner(config)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) if mode == "trace_files" else None
        if target is not None:
            (target / "traces").mkdir()
        run(cells[0], None)
        _warm_tokenizer()  # the first cell may count no tokens: load the tokenizer before timing, as documented
        for _ in range(passes):
            t0 = time.perf_counter()
            for cell in cells:
                run(cell, target)
            out.append((time.perf_counter() - t0) / len(cells))
            if target is not None:
                for f in (target / "traces").iterdir():
                    f.unlink()
    return out


def measure(config: Path, repeat: int, hot: bool, pythonpath: str | None = None) -> dict[str, Any]:
    """Median cold pass (and median of the better hot pass) per mode, over fresh processes of this script."""
    env = {**os.environ, **({"PYTHONPATH": pythonpath} if pythonpath else {})}
    result: dict[str, Any] = {}
    for mode in ("no_trace_files", "trace_files"):
        runs = []
        for _ in range(repeat):
            res = subprocess.run([sys.executable, str(Path(__file__).resolve()), str(config), "--pass", mode,
                                  "--passes", "3" if hot else "1"], env=env, check=True, capture_output=True,
                                 text=True, cwd=pythonpath or ROOT)
            runs.append(json.loads(res.stdout.splitlines()[-1]))
        result[mode] = round(1000 * statistics.median(r[0] for r in runs), 4)
        if hot:
            result[f"{mode}_hot"] = round(1000 * statistics.median(min(r[1:]) for r in runs), 4)
    return result


def against(commit: str, config: Path, repeat: int, hot: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            return measure(tree / config.relative_to(ROOT), repeat, hot, pythonpath=str(tree))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False,
                           capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("config", nargs="?", default=str(ROOT / "configs" / "paper_deterministic.toml"))
    ap.add_argument("--against", help="an earlier commit to measure the same way")
    ap.add_argument("--repeat", type=int, default=5, help="fresh processes per mode; the median counts")
    ap.add_argument("--hot", action="store_true", help="also report passes with every cache warm")
    ap.add_argument("--pass", dest="mode", help=argparse.SUPPRESS)
    ap.add_argument("--passes", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    config = Path(args.config).resolve()
    if args.mode:  # a measuring child process
        print(json.dumps(one_pass(config, args.mode, args.passes)))
        return
    rows = [("this tree", measure(config, args.repeat, args.hot))]
    if args.against:
        rows.insert(0, (args.against[:12], against(args.against, config, args.repeat, args.hot)))
    now = rows[-1][1]
    modes = [m for m in ("no_trace_files", "trace_files", "no_trace_files_hot", "trace_files_hot") if m in now]
    print(f"{config.name}: {len(_runner(config)[0])} episodes, in process, 1 at a time, "
          f"median of {args.repeat} fresh processes (ms/episode)")
    print(f"  {'':<12} " + "  ".join(f"{m.replace('_', ' '):>20}" for m in modes))
    for name, r in rows:
        print(f"  {name:<12} " + "  ".join(f"{r[m]:>20.3f}" for m in modes))
    if args.against:
        before = rows[0][1]
        print(f"  {'after/before':<12} " + "  ".join(f"{now[m] / before[m]:>20.3f}" for m in modes))


if __name__ == "__main__":
    main()
