"""The viewer's speed: first paint of the runs table on the paper matrix and on a synthetic 100,000-run directory,
the time to render the largest traces, the server's memory while traces are opened (headless Chromium,
/usr/bin/chromium), and the time `view --bundle` takes to write the paper matrix's static site. Prints the
figures docs/viewer.md quotes.

    .venv/bin/python benchmarks/bench_viewer.py [--paper DIR]   # without --paper the paper matrix is run first

First paint is measured cold: from opening the directory (reading the parquet, hashing it) through starting the
server to the browser showing the first page of the table. The synthetic directory repeats the paper's rows
under new run ids (its traces are the paper's, so any of its runs opens)."""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aft_bench.common.net import listen  # noqa: E402
from aft_bench.viewer.model import Viewer  # noqa: E402
from aft_bench.viewer.server import build_app  # noqa: E402

CHROMIUM = "/usr/bin/chromium"


def paper_dir(tmp: Path) -> Path:
    from aft_bench.common.paths import WORLDS
    from aft_bench.experiment.config import load_matrix
    from aft_bench.experiment.runner import run_matrix

    out = tmp / "paper"
    t0 = time.perf_counter()
    run_matrix(load_matrix(ROOT / "configs" / "paper_deterministic.toml", WORLDS), out, workers=2)
    print(f"paper matrix run in {time.perf_counter() - t0:.1f} s", flush=True)
    return out


def synthetic(paper: Path, tmp: Path, n: int = 100_000) -> Path:
    """A results directory of `n` runs: the paper's rows repeated with fresh run ids and matching traces."""
    out = tmp / "synthetic"
    (out / "traces").mkdir(parents=True)
    table = pq.read_table(paper / "results.parquet")
    reps = -(-n // len(table))
    big = pa.concat_tables([table] * reps).slice(0, n)
    src_ids = big.column("run_id").to_pylist()
    ids = [hashlib.sha256(f"{i}:{r}".encode()).hexdigest()[:16] for i, r in enumerate(src_ids)]
    big = big.set_column(big.column_names.index("run_id"), "run_id", pa.array(ids))
    pq.write_table(big, out / "results.parquet")
    shutil.copy(paper / "manifest.json", out / "manifest.json")
    for new, old in zip(ids, src_ids):
        (out / "traces" / f"{new}.jsonl").symlink_to(paper / "traces" / f"{old}.jsonl")
    return out


def serve(viewer: Viewer) -> tuple[str, object]:
    import uvicorn

    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(build_app(viewer), log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.005)
    return f"http://127.0.0.1:{sock.getsockname()[1]}/", server


def wait_ready(pg) -> None:
    pg.wait_for_function("['ready','error'].includes(document.getElementById('app').dataset.state)", timeout=60_000)
    assert pg.get_attribute("#app", "data-state") == "ready", pg.inner_text("#app")[:300]


def first_paint(pg, directory: Path, repeat: int = 3) -> tuple[float, float, int, object, str]:
    """(best cold seconds, best in-browser seconds, runs, viewer, url): open, serve, show #/runs."""
    best = browser_best = float("inf")
    viewer = url = server = None
    for _ in range(repeat):
        if server is not None:
            server.should_exit = True
        t0 = time.perf_counter()
        viewer = Viewer(directory)
        url, server = serve(viewer)
        t1 = time.perf_counter()
        pg.goto(f"{url}#/runs?sort=context_tokens&desc=1")
        wait_ready(pg)
        t2 = time.perf_counter()
        best, browser_best = min(best, t2 - t0), min(browser_best, t2 - t1)
    return best, browser_best, len(viewer.runs), viewer, url


def trace_render(pg, url: str, viewer: Viewer, directory: Path, k: int = 20) -> tuple[float, float, int]:
    """(median ms, max ms, events of the largest) to render the k largest traces, each opened for the first time."""
    ids = sorted(viewer.runs.ids(), key=lambda r: (directory / "traces" / f"{r}.jsonl").stat().st_size)[-k:]
    times = []
    for rid in ids:
        pg.goto(f"{url}#/run/{rid}")
        wait_ready(pg)
        times.append(int(pg.get_attribute("#app", "data-render-ms")))
    events = len(viewer.run(ids[-1])["events"])
    times.sort()
    return times[len(times) // 2], times[-1], events


SERVER = """
import sys
from aft_bench.cli.flags import OneLineParser
from aft_bench.cli.view import add_parsers
p = OneLineParser(prog="aft-bench"); add_parsers(p.add_subparsers(dest="command", required=True))
a = p.parse_args(["view", sys.argv[1], "--port", "0"]); a.func(a)
"""


def server_memory(directory: Path, ids: list[str]) -> tuple[float, float, float]:
    """RSS in MB of an `aft-bench view` process: serving, after 100 traces opened, after all of `ids`."""
    import re
    import subprocess
    import urllib.request

    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(directory)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://\S+/", line).group(0)
        urllib.request.urlopen(f"{url}api/runs?sort=wall_s").read()

        def rss() -> float:
            for ln in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if ln.startswith("VmRSS:"):
                    return int(ln.split()[1]) / 1024
            return float("nan")

        start = rss()
        for i, rid in enumerate(ids):
            urllib.request.urlopen(f"{url}api/run/{rid}").read()
            if i == 99:
                opened = rss()
        return start, opened, rss()
    finally:
        proc.terminate()
        proc.wait(10)


def bundle_time(paper: Path, tmp: Path, repeat: int = 3) -> tuple[float, float]:
    """`aft-bench view PAPER --bundle OUT` in its own process, as a user runs it: (median wall s, median CPU s)."""
    import resource
    import statistics
    import subprocess

    walls, cpus = [], []
    for i in range(repeat):
        out = tmp / f"site-{i}"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "aft_bench.cli", "view", str(paper), "--bundle", str(out)], check=True,
                       cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        shutil.rmtree(out)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--paper", help="an existing results directory of configs/paper_deterministic.toml")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as t, sync_playwright() as p:
        tmp = Path(t)
        paper = Path(args.paper) if args.paper else paper_dir(tmp)
        big = synthetic(paper, tmp)
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        pg = browser.new_page(viewport={"width": 1280, "height": 900})
        cold, warm, n, viewer, url = first_paint(pg, paper)
        n_paper = n
        print(f"paper ({n:,} runs): first paint of the runs table {cold:.2f} s cold (open + serve + render), "
              f"{warm:.2f} s in the browser")
        med, worst, events = trace_render(pg, url, viewer, paper)
        print(f"trace render (20 largest traces, each opened cold): median {med} ms, max {worst} ms "
              f"(largest {events} events)")
        cold, warm, n, viewer, url = first_paint(pg, big)
        print(f"synthetic ({n:,} runs): first paint of the runs table {cold:.2f} s cold, {warm:.2f} s in the browser")
        browser.close()
        wall, cpu = bundle_time(paper, tmp)
        print(f"view --bundle of the paper matrix ({n_paper:,} runs): median of 3 {wall:.1f} s wall, {cpu:.1f} s CPU")
        start, opened, after = server_memory(big, viewer.runs.ids()[::200][:500])
        print(f"server memory (`view` in its own process, RSS): {start:.0f} MB serving the 100k directory, "
              f"{opened:.0f} MB after the first 100 traces, {after:.0f} MB after 500 (trace cache bounded at 64)")


if __name__ == "__main__":
    main()
