"""The gateway's added time per tool call against a direct call with the official MCP SDK client on the same real
server, for the three shipped worlds, and a server's start-up from nothing against the gateway's (forked where
the world declares `[server.fork]`) and against the gateway's whole open.

    .venv/bin/python benchmarks/gateway_overhead.py [--calls 100] [--rounds 3] [--worlds git,filesystem,memory]

Per world, a read (passed through: no probe after it) and a write that changes the resource on every call (the
gateway probes the real state after it); on git also a write that changes nothing (`git_add` of an unchanged
file). The SDK client and the gateway alternate rounds, each on its own fresh resource, so a change in the
machine's load falls on both. Prints median milliseconds per call and the ratio gateway / SDK. Needs
`make worlds`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from aft_bench.runtime.gateway import Gateway
from aft_bench.runtime.trace import Trace
from aft_bench.world.external import WORKSPACE, ExternalWorld, load_external
from aft_bench.world.resource import Resource

ROOT = Path(__file__).resolve().parents[1]
Args = Callable[[str, int], dict[str, Any]]  # (the resource folder as the caller names it, call number) -> args

CALLS: dict[str, dict[str, Args]] = {
    "git": {
        "read git_status": lambda r, i: {"repo_path": r},
        "write, unchanged: git_add": lambda r, i: {"repo_path": r, "files": ["README.md"]},
        "write: git_create_branch": lambda r, i: {"repo_path": r, "branch_name": f"bench-{i}"},
    },
    "filesystem": {
        "read list_directory": lambda r, i: {"path": r},
        "write: write_file": lambda r, i: {"path": f"{r}/bench-{i}.txt", "content": f"call {i}\n"},
    },
    "memory": {
        "read search_nodes": lambda r, i: {"query": "Alice"},
        "write: create_entities": lambda r, i: {"entities": [{"name": f"bench-{i}", "entityType": "note",
                                                              "observations": []}]},
    },
}


async def _sdk(world: ExternalWorld, calls: int) -> dict[str, float]:
    """The official client, started from nothing on a fresh resource, calling the server directly."""
    res = Resource(world).make()
    try:
        root = res.root
        argv = world.server.argv(root)
        params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(root),
                                       env={**os.environ, **res.env(), **world.server.environment(root)})
        t0 = time.perf_counter()
        with open(os.devnull, "w") as quiet:  # the servers' start-up lines, as the gateway keeps them in a log
            async with stdio_client(params, errlog=quiet) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                await session.list_tools()
                out = {"start": time.perf_counter() - t0}
                for label, args in CALLS[world.id].items():
                    tool = label.rsplit(" ", 1)[-1]
                    times = []
                    for i in range(calls):
                        t = time.perf_counter()
                        await session.call_tool(tool, args(str(root), i))
                        times.append(time.perf_counter() - t)
                    out[label] = statistics.median(times)
            return out
    finally:
        res.remove()


def _gateway(world: ExternalWorld, calls: int) -> dict[str, float]:
    t0 = time.perf_counter()
    gw = Gateway(world, Trace()).open()
    out = {"open": time.perf_counter() - t0, "start": gw.start_s}
    try:
        for label, args in CALLS[world.id].items():
            tool = label.rsplit(" ", 1)[-1]
            times = []
            for i in range(calls):
                t = time.perf_counter()
                gw.invoke(tool, args(WORKSPACE, i))
                times.append(time.perf_counter() - t)
            out[label] = statistics.median(times)
    finally:
        gw.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worlds", default="git,filesystem,memory")
    a = ap.parse_args()
    print(f"{a.rounds} rounds x {a.calls} calls per tool; load average at start {os.getloadavg()[0]:.2f}")
    for name in a.worlds.split(","):
        world = load_external(ROOT / "worlds" / name)
        _gateway(world, 1)  # the forked launcher starts once per process, as in a matrix; not timed here
        sdk, gw = [], []
        for _ in range(a.rounds):
            sdk.append(asyncio.run(_sdk(world, a.calls)))
            gw.append(_gateway(world, a.calls))
        print(f"\n{world.server.package} {world.server.version}")
        for label in CALLS[name]:
            s = statistics.median(r[label] for r in sdk) * 1000
            g = statistics.median(r[label] for r in gw) * 1000
            print(f"  {label:<30} SDK client {s:7.2f} ms   gateway {g:7.2f} ms   ratio {g / s:5.2f}")
        s = statistics.median(r["start"] for r in sdk)
        g = statistics.median(r["start"] for r in gw)
        o = statistics.median(r["open"] for r in gw)
        how = "forked" if world.server.fork is not None and os.environ.get("AFT_BENCH_FORK") != "0" else "started"
        print(f"  server start-up (initialize + tools/list): from nothing (SDK client) {s:.3f} s, "
              f"gateway ({how}) {g:.3f} s; the gateway's whole open (folder, fixture, probe, server, check) {o:.3f} s")
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
