"""A client's quirks never become results (issue 38): a client that opens one MCP session per operation, or that
fails after its session closed, leaves its tuple pending with a reason, whatever the order in which its session
and its process end; the abandon message only when nothing was recorded; a client that freezes its tool list
under the dynamic discovery form is told about the facade form. Real SDK clients over HTTP on 127.0.0.1, played
through `serve` and `serve-matrix` as a user runs them."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from mcp import Client

from aft_bench.cli.main import main
from aft_bench.common.net import free_port, wait_for_port
from aft_bench.experiment.journal import read_rows
from aft_bench.serving.record import ServedDirectory
from aft_bench.serving.server import Served, Target, build_server

from conftest import WORLDS

EXE = str(Path(sys.executable).with_name("aft-bench"))
I5 = Target("response_loss", "rl-01-o1", "I5", "response_loss")

# The quick-start form of langchain-mcp-adapters and llama-index-tools-mcp, in the SDK's terms: a new session
# for every operation. The first (which lists the tools) owns the episode and ends it; the next is refused.
PER_OPERATION = """
import asyncio, os, sys
from mcp import Client

URL = os.environ["AFT_BENCH_MCP_URL"]

async def main():
    async with Client(URL, mode="legacy") as c:
        await c.list_tools()
    try:
        async with Client(URL, mode="legacy") as c:
            await c.call_tool("report_outcome", {"action": "refuse", "claim": "failure"})
    except BaseException as exc:  # refused: this client shrugs (exit 0) or gives up (exit 1)
        print("refused:", repr(exc)[:300])
        sys.exit(int(sys.argv[1]))

asyncio.run(main())
"""

# One session, played to its report and closed cleanly (the DELETE is sent), then the process fails.
FAILS_AFTER_CLOSING = """
import asyncio, os, sys
from mcp import Client

async def main():
    async with Client(os.environ["AFT_BENCH_MCP_URL"], mode="legacy") as c:
        await c.list_tools()
        await c.call_tool("report_outcome", {"action": "refuse", "claim": "failure"})
    sys.exit(int(sys.argv[1]))

asyncio.run(main())
"""

# A client that fixes its tool list when it starts: it finds and describes the business tool (and is told the
# list changed) but never lists again, so it cannot call it; it reports. With sys.argv[1] == "relist" it lists
# again after the notice, as openai-agents and pydantic-ai do (the known negative of the hint).
FROZEN = """
import asyncio, os, sys
from mcp import Client

async def main():
    async with Client(os.environ["AFT_BENCH_MCP_URL"], mode="legacy") as c:
        await c.list_tools()
        await c.call_tool("search_tools", {"query": "charge the order payment"})
        await c.call_tool("describe_tool", {"name": "charge_payment"})
        if sys.argv[1] == "relist":
            await c.list_tools()
        await c.call_tool("report_outcome", {"action": "abort", "claim": "failure"})

asyncio.run(main())
"""


def _matrix(tmp_path: Path, script: str) -> tuple[Path, list[str]]:
    client = tmp_path / "client.py"
    client.write_text(script)
    cfg = tmp_path / "m.toml"
    cfg.write_text('[experiment]\nid = "m"\nworkloads = ["response_loss"]\nconditions = ["I5"]\n'
                   'tasks_per_workload = 1\n')
    out = tmp_path / "out"
    return out, ["serve-matrix", str(cfg), "--out", str(out), "--worlds", str(WORLDS), "--agent", "probe",
                 "--client-cmd"]


def _failures(out: Path) -> list[dict]:
    return [json.loads(ln) for ln in (out / "failures.jsonl").read_text().splitlines()]


def test_a_client_with_one_session_per_operation_leaves_its_tuple_pending(tmp_path: Path, capsys) -> None:
    out, base = _matrix(tmp_path, PER_OPERATION)
    client = tmp_path / "client.py"
    assert main([*base, f"{sys.executable} {client} 0"]) == 1  # it shrugs off the refusal and exits 0
    said = capsys.readouterr().out
    assert "0 recorded, 1 pending" in said and "one MCP session per operation" in said
    assert main([*base, f"{sys.executable} {client} 1"]) == 1  # it gives up: exit 1
    assert "0 recorded, 1 pending" in capsys.readouterr().out
    reasons = [f["reason"] for f in _failures(out)]
    assert "one MCP session per operation" in reasons[0] and reasons[1] == "the client exited with code 1"
    assert not (out / "results.parquet").exists() and read_rows(out / "journal.jsonl") == []
    assert len(list((out / "quarantine").rglob("*.jsonl"))) == 2  # each ended episode's trace, kept aside
    logs = [(out / f["logs"].replace("{server,client}", "server")).read_text() for f in _failures(out)]
    assert all("episode abandoned" in log and "episode recorded" not in log for log in logs)


def test_a_client_that_fails_after_closing_its_session_is_not_an_outcome(tmp_path: Path, capsys) -> None:
    out, base = _matrix(tmp_path, FAILS_AFTER_CLOSING)
    client = tmp_path / "client.py"
    assert main([*base, f"{sys.executable} {client} 1"]) == 1
    assert "0 recorded, 1 pending" in capsys.readouterr().out
    failure = _failures(out)[0]
    assert failure["reason"] == "the client exited with code 1" and failure["client_exit"] == 1
    assert read_rows(out / "journal.jsonl") == [] and len(list((out / "quarantine").rglob("*.jsonl"))) == 1
    # the same client exiting 0: the same episode is an outcome, recorded once (nothing real became pending)
    assert main([*base, f"{sys.executable} {client} 0"]) == 0
    assert "1 recorded, 0 pending" in capsys.readouterr().out
    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == 1 and df.iloc[0]["terminal_action"] == "refuse" and df.iloc[0]["rep"] == 0
    assert main(["audit", str(out)]) == 0


def _serve(tmp_path: Path, port: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([EXE, "serve", "--workload", "response_loss", "--task", "rl-01-o1", "--condition", "I5",
                             "--transport", "http", "--port", str(port), "--out", str(tmp_path / "o"), "--worlds",
                             str(WORLDS), "--agent", "probe", *extra], stderr=subprocess.PIPE, text=True)


def test_serve_abandons_the_episode_when_the_client_goes_on_in_another_session(tmp_path: Path) -> None:
    """Without serve-matrix: the first session ends without a call (the row waits), then another session
    arrives; it is refused with the reason and the episode is abandoned, whichever ended first."""
    port = free_port()
    proc = _serve(tmp_path, port)
    url = f"http://127.0.0.1:{port}/mcp"

    async def per_operation():
        async with Client(url, mode="legacy") as c:
            await c.list_tools()
        try:
            async with Client(url, mode="legacy") as c:
                await c.list_tools()
        except BaseException as exc:  # noqa: BLE001 - the SDK raises the MCP error inside a task group
            return repr(exc)
        return None

    try:
        assert wait_for_port(port, 10.0, alive=lambda: proc.poll() is None)
        refused = asyncio.run(per_operation())
        assert refused is not None and "episode was abandoned" in refused
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "ended without a tool call" in err and "episode abandoned: the session that owned" in err
    assert err.count("episode abandoned") == 1 and "episode recorded" not in err
    assert read_rows(tmp_path / "o" / "journal.jsonl") == []
    assert len(list((tmp_path / "o" / "quarantine").rglob("*.jsonl"))) == 1


def test_a_session_without_a_call_and_no_other_is_still_an_outcome(tmp_path: Path) -> None:
    """A client that looks and leaves (and never comes back) is an agent that did nothing: recorded, at the stop."""
    port = free_port()
    proc = _serve(tmp_path, port)

    async def look():
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as c:
            await c.list_tools()

    try:
        assert wait_for_port(port, 10.0, alive=lambda: proc.poll() is None)
        asyncio.run(look())
        time.sleep(0.2)
        assert read_rows(tmp_path / "o" / "journal.jsonl") == []  # waiting: the client might go on
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "episode recorded as run" in err and "abandoned" not in err
    df = pd.read_parquet(tmp_path / "o" / "results.parquet")
    assert len(df) == 1 and df.iloc[0]["outcome"] == "unresolved"


def test_the_abandon_message_appears_only_when_nothing_was_recorded(tmp_path: Path) -> None:
    """Recorded at the session's end, then told to abandon (SIGUSR1): the row stands and nothing says otherwise."""
    port = free_port()
    proc = _serve(tmp_path, port)

    async def play():
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as c:
            await c.call_tool("report_outcome", {"action": "refuse", "claim": "failure"})

    try:
        assert wait_for_port(port, 10.0, alive=lambda: proc.poll() is None)
        asyncio.run(play())
        for _ in range(100):
            if (tmp_path / "o" / "results.parquet").exists():
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "episode recorded as run" in err and "abandoned" not in err
    assert len(pd.read_parquet(tmp_path / "o" / "results.parquet")) == 1


async def _frozen_in_memory(out: Path, relist: bool) -> Served:
    with ServedDirectory(out, WORLDS) as directory:
        served = Served(I5, WORLDS, directory, {"agent": "probe"})
        async with Client(build_server(served)) as c:
            await c.list_tools()
            await c.call_tool("search_tools", {"query": "charge the order payment"})
            await c.call_tool("describe_tool", {"name": "charge_payment"})
            if relist:
                names = [t.name for t in (await c.list_tools()).tools]
                assert "charge_payment" in names
                await c.call_tool("get_order", {"order_id": "o1"})  # not described: refused, not business
            await c.call_tool("report_outcome", {"action": "abort", "claim": "failure"})
    return served


def test_a_frozen_tool_list_under_the_dynamic_form_is_named_and_a_relisting_client_is_not(tmp_path: Path,
                                                                                          capsys) -> None:
    frozen = asyncio.run(_frozen_in_memory(tmp_path / "a", relist=False))
    assert frozen.froze_its_list() and frozen.row is not None  # still an outcome: the hint is a hint
    relisted = asyncio.run(_frozen_in_memory(tmp_path / "b", relist=True))
    assert not relisted.froze_its_list()
    # through serve-matrix, in one line naming the facade form; the re-listing client earns none
    out, base = _matrix(tmp_path, FROZEN)
    client = tmp_path / "client.py"
    assert main([*base, f"{sys.executable} {client} frozen"]) == 0
    said = capsys.readouterr().out
    assert "1 recorded, 0 pending" in said
    assert any(ln.startswith("serve-matrix: in 1 tuple(s)") and "--discovery-form facade" in ln
               for ln in said.splitlines()), said
    (tmp_path / "r").mkdir()
    _, base = _matrix(tmp_path / "r", FROZEN)
    assert main([*base, f"{sys.executable} {tmp_path / 'r' / 'client.py'} relist"]) == 0
    assert "--discovery-form facade" not in capsys.readouterr().out


def test_a_second_client_on_the_sessionless_wire_is_refused_when_its_requests_name_it(tmp_path: Path) -> None:
    """2026-07-28 has no sessions, but each request may carry its client's identity: a second client that names
    itself is refused, not folded into the first one's episode under the first one's name."""
    from mcp.types import Implementation

    port = free_port()
    proc = _serve(tmp_path, port)
    url = f"http://127.0.0.1:{port}/mcp"

    async def two():
        async with Client(url, client_info=Implementation(name="first", version="1")) as a:
            await a.list_tools()
            refused = None
            try:
                async with Client(url, client_info=Implementation(name="second", version="1")) as b:
                    await b.call_tool("report_outcome", {"action": "finish", "claim": "success"})
            except BaseException as exc:  # noqa: BLE001 - the SDK raises the MCP error inside a task group
                refused = repr(exc)
            await a.call_tool("report_outcome", {"action": "abort", "claim": "failure"})
        return refused

    try:
        assert wait_for_port(port, 10.0, alive=lambda: proc.poll() is None)
        refused = asyncio.run(two())
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert refused is not None and "another session owns it" in refused
    df = pd.read_parquet(tmp_path / "o" / "results.parquet")
    assert len(df) == 1 and df.iloc[0]["terminal_action"] == "abort"  # the first client's episode, its report


SLEEPER = """
import asyncio, os, sys
from mcp import Client

async def main():
    async with Client(os.environ["AFT_BENCH_MCP_URL"], mode="legacy") as c:
        await c.list_tools()
        with open(sys.argv[1], "w") as f:
            f.write(str(os.getpid()))
        await asyncio.sleep(600)

asyncio.run(main())
"""


def test_a_killed_serve_matrix_takes_its_server_and_client_with_it(tmp_path: Path, capsys) -> None:
    """SIGKILL gives serve-matrix no chance to clean up: its server (told to abandon the episode) and its client
    die with it, so the folder's lock is free and a rerun plays the tuple; nothing half-played is recorded."""
    import psutil

    out, base = _matrix(tmp_path, SLEEPER)
    marker = tmp_path / "client.pid"
    proc = subprocess.Popen([EXE, *base[:-1], "--client-cmd", f"{sys.executable} {tmp_path / 'client.py'} {marker}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), "the client never connected"
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 2 and int(marker.read_text()) in {c.pid for c in children}
    finally:
        proc.kill()
        proc.wait()
    _, alive = psutil.wait_procs(children, timeout=30)
    assert alive == [], [p.cmdline() for p in alive]
    assert read_rows(out / "journal.jsonl") == [] and len(list((out / "quarantine").rglob("*.jsonl"))) == 1
    (tmp_path / "client.py").write_text(FAILS_AFTER_CLOSING)
    assert main([*base, f"{sys.executable} {tmp_path / 'client.py'} 0"]) == 0  # the lock is free
    assert "1 recorded, 0 pending" in capsys.readouterr().out
