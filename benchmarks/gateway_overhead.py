"""The gateway's added time per tool call against a direct call with the official MCP SDK client, on the same
real server (mcp-server-git, worlds/git), and a bare server start-up against a gateway's whole open (fresh folder,
fixture, probe, server, tools/list check).

    .venv/bin/python benchmarks/gateway_overhead.py [--calls 200] [--rounds 5]

Each round starts one server for the SDK client and one gateway, and times `git_status` (a read: no probe after
it) and `git_add` of an unchanged file (a write: the gateway probes the repository after it). Prints the median
per-call time of each and their ratio. Needs `make worlds`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from aft_bench.runtime.gateway import Gateway
from aft_bench.runtime.trace import Trace
from aft_bench.world.external import load_external
from aft_bench.world.resource import Resource

ROOT = Path(__file__).resolve().parents[1]
WORLD = load_external(ROOT / "worlds" / "git")


async def _sdk(calls: int) -> dict[str, float]:
    res = Resource(WORLD).make()
    try:
        root = res.root
        params = StdioServerParameters(command=WORLD.server.argv(root)[0], args=WORLD.server.argv(root)[1:],
                                       cwd=str(root), env={**res.env()})
        t0 = time.perf_counter()
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()
            start = time.perf_counter() - t0
            out = {"start": start}
            for tool, args in (("git_status", {"repo_path": str(root)}),
                               ("git_add", {"repo_path": str(root), "files": ["README.md"]})):
                times = []
                for _ in range(calls):
                    t = time.perf_counter()
                    await session.call_tool(tool, args)
                    times.append(time.perf_counter() - t)
                out[tool] = statistics.median(times)
        return out
    finally:
        res.remove()


def _gateway(calls: int) -> dict[str, float]:
    t0 = time.perf_counter()
    gw = Gateway(WORLD, Trace()).open()
    out = {"open": time.perf_counter() - t0, "start": gw.start_s}
    try:
        for tool, args in (("git_status", {"repo_path": "/workspace"}),
                           ("git_add", {"repo_path": "/workspace", "files": ["README.md"]})):
            times = []
            for _ in range(calls):
                t = time.perf_counter()
                gw.invoke(tool, args)
                times.append(time.perf_counter() - t)
            out[tool] = statistics.median(times)
    finally:
        gw.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    sdk, gw = [], []
    for _ in range(a.rounds):  # alternate, so a change in the machine's load falls on both
        sdk.append(asyncio.run(_sdk(a.calls)))
        gw.append(_gateway(a.calls))
    load = subprocess.run(["cat", "/proc/loadavg"], capture_output=True, text=True).stdout.split()[0]
    print(f"mcp-server-git {WORLD.server.version}, {a.rounds} rounds x {a.calls} calls per tool, load average {load}")
    for tool in ("git_status", "git_add"):
        s = statistics.median(r[tool] for r in sdk) * 1000
        g = statistics.median(r[tool] for r in gw) * 1000
        print(f"{tool:<12} SDK client {s:7.2f} ms/call   gateway {g:7.2f} ms/call   ratio {g / s:.3f}")
    s = statistics.median(r["start"] for r in sdk)
    g = statistics.median(r["start"] for r in gw)
    o = statistics.median(r["open"] for r in gw)
    print(f"server start-up (initialize + tools/list): SDK client {s:.2f} s, gateway {g:.2f} s; "
          f"the gateway's whole open (folder, fixture, probe, server, check) {o:.2f} s")


if __name__ == "__main__":
    main()
