"""Served episodes as MCP clients meet them: selective discovery as a changing tool list (announced) or a stable
facade, named agents, one session one episode over HTTP, faults as the protocol delivers them (a withheld
response included), and serve-matrix never counting what did not happen. Real SDK clients, in memory, over stdio
and over HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from aft_bench.cli.main import main
from aft_bench.common.net import free_port, wait_for_port
from aft_bench.serving.record import ServedDirectory
from aft_bench.serving.server import Served, Target, build_server

from conftest import WORLDS

EXE = str(Path(sys.executable).with_name("aft-bench"))
CHARGE = {"order_id": "o1", "amount": 50, "note": "", "idempotency_key": "k1"}
I5 = Target("response_loss", "rl-01-o1", "I5", "response_loss")


def _trace(out: Path, run_id: str) -> list[dict]:
    return [json.loads(ln) for ln in (out / "traces" / f"{run_id}.jsonl").read_text().splitlines()]


async def _play(out: Path, target: Target, script, agent: dict | None = None):
    """Serve one episode in memory and run `script(client)` against it; returns (script's value, served)."""
    with ServedDirectory(out, WORLDS) as directory:
        served = Served(target, WORLDS, directory, agent)
        async with Client(build_server(served)) as client:
            value = await script(client)
    return value, served


def _names(listing) -> list[str]:
    return [t.name for t in listing.tools]


def test_a_described_tool_joins_the_list_and_becomes_callable(tmp_path: Path) -> None:
    async def script(c):
        before = await c.list_tools()
        found = await c.call_tool("search_tools", {"query": "charge the order payment"})
        described = await c.call_tool("describe_tool", {"name": "charge_payment"})
        after = await c.list_tools()
        lost = await c.call_tool("charge_payment", CHARGE)  # the planned response loss
        again = await c.call_tool("charge_payment", CHARGE)  # same key: replayed, not re-executed
        await c.call_tool("report_outcome", {"action": "finish", "claim": "success"})
        return before, found, described, after, lost, again

    (before, found, described, after, lost, again), served = asyncio.run(_play(tmp_path / "o", I5, script))
    assert "charge_payment" not in _names(before)  # selective: nothing business-shaped until described
    assert "charge_payment" in found.content[0].text and not described.is_error
    listed = {t.name: t for t in after.tools}
    assert "charge_payment" in listed and "get_order" not in listed  # only what was described
    assert listed["charge_payment"].input_schema["additionalProperties"] is False  # extras are refused: say so
    assert lost.is_error and lost.structured_content == {"status": "timeout"}
    assert not again.is_error and again.structured_content["effect"]["replayed"] is True
    row = served.row
    assert (row["outcome"], row["duplicate_effects"], row["invalid_tool_calls"]) == ("completed", 0, 0)
    assert json.loads(row["agent_spec"])["discovery_form"] == "dynamic"


def test_the_list_change_is_announced_on_both_eras_over_http(tmp_path: Path) -> None:
    """2025-11-25 sessions get notifications/tools/list_changed (listChanged: true); 2026-07-28 clients get it on
    their subscriptions/listen stream."""
    port = free_port()
    proc = subprocess.Popen([EXE, "serve", "--workload", "response_loss", "--task", "rl-01-o1", "--condition", "I5",
                             "--transport", "http", "--port", str(port), "--out", str(tmp_path / "o"), "--worlds",
                             str(WORLDS), "--agent", "probe"], stderr=subprocess.PIPE, text=True)
    seen: list[str] = []

    async def note(message) -> None:
        seen.append(type(message).__name__)

    async def legacy():
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy", message_handler=note) as c:
            caps = c.session.server_capabilities
            await c.list_tools()
            await c.call_tool("search_tools", {"query": "orders"})  # no change: no notice
            quiet = list(seen)
            await c.call_tool("describe_tool", {"name": "get_order"})
            return caps, quiet, _names(await c.list_tools())

    try:
        assert wait_for_port(port, 10.0, alive=lambda: proc.poll() is None)
        caps, quiet, names = asyncio.run(legacy())
        assert caps.tools.list_changed is True
        assert "ToolListChangedNotification" not in quiet and seen.count("ToolListChangedNotification") == 1
        assert "get_order" in names
    finally:
        proc.terminate()
        proc.wait(timeout=20)

    async def modern(server):
        async with Client(server, mode="2026-07-28") as c:
            async with c.listen(tools_list_changed=True) as sub:
                await c.call_tool("describe_tool", {"name": "get_order"})
                event = await asyncio.wait_for(sub.__anext__(), 5)
            return type(event).__name__

    with ServedDirectory(tmp_path / "m", WORLDS) as directory:
        served = Served(I5, WORLDS, directory, {"agent": "probe"})
        assert asyncio.run(modern(build_server(served))) == "ToolsListChanged"


def test_the_facade_serves_a_stable_list_and_still_needs_the_tool_described(tmp_path: Path) -> None:
    async def script(c):
        first = _names(await c.list_tools())
        early = await c.call_tool("call_tool", {"name": "charge_payment", "arguments": CHARGE})  # not described yet
        await c.call_tool("describe_tool", {"name": "charge_payment"})
        lost = await c.call_tool("call_tool", {"name": "charge_payment", "arguments": CHARGE})
        again = await c.call_tool("call_tool", {"name": "charge_payment", "arguments": CHARGE})
        bad = await c.call_tool("call_tool", {"tool": "charge_payment"})
        last = _names(await c.list_tools())
        await c.call_tool("report_outcome", {"action": "finish", "claim": "success"})
        return first, early, lost, again, bad, last

    (first, early, lost, again, bad, last), served = asyncio.run(
        _play(tmp_path / "f", I5, script, {"agent": "frozen", "discovery_form": "facade"}))
    assert first == last and "call_tool" in first and "charge_payment" not in last  # the list never changes
    assert early.is_error and "describe_tool first" in early.content[0].text
    assert lost.structured_content == {"status": "timeout"} and again.structured_content["effect"]["replayed"]
    assert bad.is_error
    row = served.row
    assert json.loads(row["agent_spec"])["discovery_form"] == "facade"
    assert (row["outcome"], row["duplicate_effects"], row["invalid_tool_calls"]) == ("completed", 0, 2)
    calls = [e["data"]["tool"] for e in _trace(tmp_path / "f", row["run_id"]) if e["kind"] == "tool_call"]
    assert calls == ["charge_payment", "describe_tool", "charge_payment", "charge_payment"]  # as the interface saw them


def test_named_agents_are_agents_not_repetitions(tmp_path: Path, capsys) -> None:
    out = tmp_path / "o"

    async def report(c):
        await c.call_tool("report_outcome", {"action": "escalate", "claim": "unknown"})

    for agent in ({"agent": "openai-agents", "model": "fake-capability"}, {"agent": "pydantic-ai", "model": "m2"},
                  {"agent": "openai-agents", "model": "fake-capability"}, None):
        asyncio.run(_play(out, I5, report, agent))
    df = pd.read_parquet(out / "results.parquet")
    names = [json.loads(s)["agent"] for s in df["agent_spec"]]
    assert names == ["openai-agents", "pydantic-ai", "openai-agents", "mcp/0.1.0"]
    assert list(df["rep"]) == [0, 0, 1, 0] and list(df["model"]) == ["fake-capability", "m2", "fake-capability",
                                                                     "unknown"]
    assert set(df["client"]) == {"mcp/0.1.0"}  # the handshake, in its own column
    assert capsys.readouterr().err.count("give --agent NAME") == 1  # only the unnamed generic handshake


def test_over_http_the_first_session_owns_the_episode_and_its_delete_records_it(tmp_path: Path) -> None:
    out, port = tmp_path / "o", free_port()
    proc = subprocess.Popen([EXE, "serve", "--workload", "response_loss", "--task", "rl-01-o1", "--condition", "I5",
                             "--transport", "http", "--port", str(port), "--out", str(out), "--worlds", str(WORLDS),
                             "--agent", "a"], stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/mcp"

    async def play():
        async with Client(url, mode="legacy") as a:
            await a.list_tools()
            refused = None
            try:
                async with Client(url, mode="legacy") as b:
                    await b.call_tool("report_outcome", {"action": "finish", "claim": "success"})
            except BaseException as exc:  # noqa: BLE001 - the SDK raises the MCP error inside a task group
                refused = exc
            end = await a.call_tool("report_outcome", {"action": "abort", "claim": "failure"})
        return refused, end

    try:
        assert wait_for_port(port, 10.0, alive=lambda: proc.poll() is None)
        refused, end = asyncio.run(play())
        assert refused is not None and "another session owns it" in repr(refused)
        assert "when this session ends (HTTP DELETE)" in end.content[0].text
        for _ in range(50):  # the DELETE sent when the client closed recorded it, the server still running
            if (out / "results.parquet").exists():
                break
            time.sleep(0.1)
        assert proc.poll() is None
        df = pd.read_parquet(out / "results.parquet")
        assert len(df) == 1 and df.iloc[0]["terminal_action"] == "abort"  # the other session's report: not taken
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert len(pd.read_parquet(out / "results.parquet")) == 1  # the server's stop added nothing
    assert main(["audit", str(out)]) == 0


def test_a_transport_lost_response_is_never_sent_and_the_client_times_out(tmp_path: Path) -> None:
    async def script(c):
        await c.call_tool("describe_tool", {"name": "charge_payment"})
        timed_out = None
        try:
            await c.call_tool("charge_payment", CHARGE, read_timeout_seconds=1.0)
        except MCPError as exc:
            timed_out = exc
        again = await c.call_tool("charge_payment", CHARGE)
        await c.call_tool("report_outcome", {"action": "finish", "claim": "success"})
        return timed_out, again

    out = tmp_path / "t"
    (timed_out, again), served = asyncio.run(_play(out, I5, script, {"agent": "t", "response_loss": "transport"}))
    assert timed_out is not None and "timed out" in str(timed_out).lower()  # no result at all: the client's timeout
    assert again.structured_content["effect"]["replayed"] is True
    row = served.row
    assert json.loads(row["agent_spec"])["response_loss"] == "transport"  # not the default: part of the run key
    assert (row["outcome"], row["fault_fired"], row["duplicate_effects"]) == ("completed", True, 0)
    stages = [e["data"].get("stage") for e in _trace(out, row["run_id"]) if e["kind"] == "stage"]
    assert "RESPONSE_DROPPED" in stages
    assert main(["audit", str(out)]) == 0


def test_a_fault_arms_only_on_a_call_the_backend_accepted(tmp_path: Path) -> None:
    """A client that types an argument wrongly gets invalid_arguments, and the planned response loss waits for
    the first well-formed call instead of firing on the rejected one."""
    async def script(c):
        await c.call_tool("describe_tool", {"name": "charge_payment"})
        wrong = await c.call_tool("charge_payment", {**CHARGE, "amount": "50"})
        right = await c.call_tool("charge_payment", CHARGE)
        await c.call_tool("report_outcome", {"action": "escalate", "claim": "unknown"})
        return wrong, right

    (wrong, right), served = asyncio.run(_play(tmp_path / "a", I5, script, {"agent": "x"}))
    assert wrong.structured_content["error"] == "invalid_arguments"
    assert right.structured_content == {"status": "timeout"}  # the loss fired here
    trace = _trace(tmp_path / "a", served.row["run_id"])
    armed = [e["data"]["inv"] for e in trace if e["kind"] == "fault_armed"]
    assert armed == ["inv-0002"] and served.row["invalid_tool_calls"] == 1


@pytest.mark.parametrize(("condition", "resumable"), [("I5", True), ("I5-resume", False)])
def test_an_interruption_is_an_error_only_where_it_cannot_be_resumed(tmp_path: Path, condition, resumable) -> None:
    export = {"dataset_id": "d1", "format": "csv", "idempotency_key": "e1"}

    async def script(c):
        await c.call_tool("describe_tool", {"name": "start_export"})
        first = await c.call_tool("start_export", export)
        await c.call_tool("report_outcome", {"action": "escalate", "claim": "unknown"})
        return first

    first, _ = asyncio.run(_play(tmp_path / condition, Target("interruption", "int-01-d1", condition), script,
                                 {"agent": "x"}))
    assert first.structured_content["status"] == "interrupted"
    assert first.structured_content["resumable"] is resumable and first.is_error is (not resumable)


CLIENT = """
import asyncio, os, sys
from mcp import Client

async def main():
    async with Client(os.environ["AFT_BENCH_MCP_URL"], mode="legacy") as c:
        await c.list_tools()
        await c.call_tool("report_outcome", {"action": "refuse", "claim": "failure"})
        if sys.argv[1] != "0":
            os._exit(int(sys.argv[1]))  # a crash: the session never ends cleanly

asyncio.run(main())
"""


def test_serve_matrix_never_counts_what_did_not_happen(tmp_path: Path, capsys) -> None:
    client = tmp_path / "client.py"
    client.write_text(CLIENT)
    cfg = tmp_path / "m.toml"
    cfg.write_text('[experiment]\nid = "m"\ncomparisons = ["duplicate_effects"]\ntasks_per_workload = 1\n')
    out = tmp_path / "out"
    base = ["serve-matrix", str(cfg), "--out", str(out), "--worlds", str(WORLDS), "--agent", "probe"]
    assert main([*base, "--client-cmd", "true"]) == 1  # never connects
    summary = capsys.readouterr().out
    assert "0 recorded, 2 pending" in summary and "never connected" in summary
    assert main([*base, "--client-cmd", f"{sys.executable} {client} 3"]) == 1  # reports, then crashes mid-session
    assert "0 recorded, 2 pending" in capsys.readouterr().out
    assert not (out / "results.parquet").exists()  # a failed client's episode is not a row ...
    assert len(list((out / "quarantine").rglob("*.jsonl"))) == 2  # ... its partial trace is kept aside
    failures = [json.loads(ln) for ln in (out / "failures.jsonl").read_text().splitlines()]
    assert [f["reason"] for f in failures[2:]] == ["the client exited with code 3"] * 2
    assert failures[0]["tuple"]["workload"] == "response_loss" and failures[2]["client_exit"] == 3
    assert all((out / f["logs"].replace("{server,client}", part)).exists() for f in failures for part in
               ("server", "client"))
    assert main([*base, "--client-cmd", f"{sys.executable} {client} 0"]) == 0
    assert "2 recorded, 0 pending" in capsys.readouterr().out
    assert main([*base, "--client-cmd", f"{sys.executable} {client} 0"]) == 0  # rerun: nothing played twice
    assert "0 recorded, 0 pending, 2 already recorded" in capsys.readouterr().out
    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == 2 and set(df["terminal_action"]) == {"refuse"} and set(df["rep"]) == {0}
    assert main(["audit", str(out)]) == 0


def test_a_config_can_name_the_served_agent_and_run_refuses_it(tmp_path: Path, capsys) -> None:
    client = tmp_path / "client.py"
    client.write_text(CLIENT)
    cfg = tmp_path / "m.toml"
    cfg.write_text('[experiment]\nid = "m"\ncomparisons = ["duplicate_effects"]\ntasks_per_workload = 1\n'
                   '[[experiment.agents]]\nname = "mcp"\nagent = "cfg-agent"\nmodel = "cfg-model"\n'
                   'response_loss = "transport"\n')
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(tmp_path / "r")]) == 2
    assert "use `aft-bench serve`" in capsys.readouterr().err
    assert main(["serve-matrix", str(cfg), "--out", str(out), "--worlds", str(WORLDS), "--model", "flag-model",
                 "--client-cmd", f"{sys.executable} {client} 0"]) == 0
    df = pd.read_parquet(out / "results.parquet")
    specs = [json.loads(s) for s in df["agent_spec"]]
    assert {(s["agent"], s["response_loss"]) for s in specs} == {("cfg-agent", "transport")}
    assert set(df["model"]) == {"flag-model"}  # a flag overrides the config
