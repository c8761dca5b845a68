"""`aft-bench serve`: the MCP SDK's own client drives served episodes in memory, over stdio and over HTTP on
127.0.0.1; labels equal those of the same calls made through the harness; rows pass the audit."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
from mcp import Client, StdioServerParameters

from aft_bench.agents.protocol import Call, End, Usage
from aft_bench.cli.main import main
from aft_bench.common.net import free_port, wait_for_port
from aft_bench.episode.episode import run_sync
from aft_bench.episode.row import SCHEMA, label_columns
from aft_bench.experiment.build import resolve_cell
from aft_bench.experiment.config import Cell
from aft_bench.interface.mechanisms import load_conditions
from aft_bench.serving.record import ServedDirectory
from aft_bench.serving.server import Served, Target, build_server
from aft_bench.tasks.workloads import load_workloads

from conftest import ROOT, WORLDS

CHARGE = {"order_id": "o1", "amount": 50, "note": ""}
LOST = Target("response_loss", "rl-01-o1", "I3", "response_loss")
EXE = str(Path(sys.executable).with_name("aft-bench"))


async def _episode(out: Path, target: Target, calls: list[tuple[str, dict]], end: dict | None,
                   after: list[tuple[str, dict]] = ()):
    """Serve one episode in memory; make `calls`, then report `end` (or not), make `after`, disconnect."""
    results = []
    with ServedDirectory(out, WORLDS) as directory:
        served = Served(target, WORLDS, directory)
        async with Client(build_server(served)) as client:
            tools = (await client.list_tools()).tools
            for name, args in calls:
                results.append(await client.call_tool(name, args))
            if end is not None:
                results.append(await client.call_tool("report_outcome", end))
            for name, args in after:
                results.append(await client.call_tool(name, args))
    return tools, results, served


class Replay:
    """The same calls, made through the harness by an agent on the interface."""

    def __init__(self, calls, end) -> None:
        self.calls, self.end = list(calls), end

    async def start(self, brief, surface) -> None:
        pass

    async def restart(self, surface) -> None:
        pass

    async def act(self, observation):
        if self.calls:
            name, args = self.calls.pop(0)
            return Call(name, args)
        return End(self.end["action"], self.end["claim"])

    def usage(self) -> Usage:
        return Usage()

    def take_records(self) -> list:
        return []


def _harness_labels(target: Target, calls, end) -> dict:
    ctx = SimpleNamespace(workloads=load_workloads(WORLDS), conditions=load_conditions())
    wl = ctx.workloads.get(target.workload)
    cell = Cell(wl.info.world, target.backend, target.workload, target.task_id, target.condition, target.fault,
                target.seed, target.catalog_size, "deterministic", '{"max_attempts":3,"name":"deterministic"}',
                "none", 0)
    with ExitStack() as stack:
        setup, _agent, _ = resolve_cell(ctx, cell, None, stack)  # type: ignore[arg-type]
        return label_columns(run_sync(setup, Replay(calls, end)).labels)


def test_a_lost_response_then_a_retry_is_labelled_as_the_same_calls_through_the_harness(tmp_path: Path) -> None:
    calls = [("charge_payment", CHARGE), ("charge_payment", {**CHARGE, "note": "retry"})]
    end = {"action": "finish", "claim": "success", "evidence": "the retry succeeded"}
    tools, results, served = asyncio.run(_episode(tmp_path / "out", LOST, calls, end))
    assert results[0].is_error and "timeout" in results[0].content[0].text  # the response was lost after commit
    assert not results[1].is_error and results[2].content[0].text.startswith("OK: outcome reported")
    row = pd.read_parquet(tmp_path / "out" / "results.parquet").iloc[0].to_dict()
    assert row["agent"] == "mcp" and row["client"].startswith("mcp/") and row["model"] == "unknown"
    expected = _harness_labels(LOST, calls, end)
    assert {k: (None if pd.isna(row[k]) else row[k]) for k in expected} == expected
    assert row["duplicate_effects"] == 1 and row["outcome"] == "unsafely_committed"
    # the wire log beside the row (issue 52): every tools/call as it arrived, in order, on the monotonic clock
    wire = [json.loads(ln) for ln in (tmp_path / "out" / "wire" / f"{row['run_id']}.jsonl").read_text().splitlines()]
    assert [(w["n"], w["tool"], w["args"]) for w in wire] == [(0, "charge_payment", CHARGE), (1, "charge_payment", {
        **CHARGE, "note": "retry"}), (2, "report_outcome", end)]
    assert wire[0]["t"] <= wire[1]["t"] <= wire[2]["t"] <= time.monotonic()


def test_annotations_are_truthful_where_effects_are_known_and_absent_under_legacy(tmp_path: Path) -> None:
    aware, _, _ = asyncio.run(_episode(tmp_path / "a", Target("response_loss", "rl-01-o1", "I5-discovery", "response_loss"),
                                       [], None))
    legacy, _, _ = asyncio.run(_episode(tmp_path / "b", Target("response_loss", "rl-01-o1", "I0", "response_loss"),
                                        [], None))
    by_name = {t.name: t for t in aware}
    charge = by_name["charge_payment"].annotations
    assert (charge.read_only_hint, charge.destructive_hint, charge.idempotent_hint) == (False, True, True)
    assert by_name["get_order"].annotations.read_only_hint is True
    assert by_name["set_customer_tier"].annotations.destructive_hint is False
    assert "report_outcome" in by_name and "idempotency_key" in by_name["charge_payment"].input_schema["properties"]
    assert all(t.annotations is None for t in legacy if t.name != "report_outcome")
    assert by_name["charge_payment"].output_schema["required"] == ["status"]  # structured results: an output schema
    assert all(t.output_schema is None for t in legacy)  # I0 has text results: none
    assert "idempotency_key" not in {p for t in legacy for p in t.input_schema.get("properties", {})}


def test_misleading_annotations_declare_every_write_idempotent_and_harmless(tmp_path: Path) -> None:
    tools, _, _ = asyncio.run(_episode(tmp_path / "m", Target("response_loss", "rl-01-o1", "I3-misleading"), [], None))
    by_name = {t.name: t for t in tools}
    charge = by_name["charge_payment"]
    assert "idempotency_key" not in charge.input_schema["properties"]  # not idempotent at all under I3 ...
    assert (charge.annotations.idempotent_hint, charge.annotations.destructive_hint) == (True, False)  # ... yet
    assert by_name["get_order"].annotations is None  # reads are not lied about (legacy: no hints)


def test_malformed_requests_are_mcp_errors_recorded_in_the_trace(tmp_path: Path) -> None:
    calls = [("no_such_tool", {}), ("charge_payment", {"order_id": 7}), ("charge_payment", {"note": "x" * 1_000_000}),
             ("report_outcome", {"action": "celebrate", "claim": "success"})]
    after = [("charge_payment", CHARGE), ("report_outcome", {"action": "finish", "claim": "success"})]
    _, results, served = asyncio.run(_episode(tmp_path / "out", LOST, calls, {"action": "abort", "claim": "failure"},
                                              after))
    # malformed calls are errors; after the report a call is a normal result saying the episode is over
    assert [r.is_error for r in results] == [True, True, True, True, False, False, False]
    assert "limit is" in results[2].content[0].text
    assert 'report_outcome.action = "celebrate" is not one of' in results[3].content[0].text  # field and value
    assert all(r.content[0].text.startswith("The episode is over") for r in results[5:])
    row = served.row
    trace = [json.loads(ln) for ln in (tmp_path / "out" / "traces" / f"{row['run_id']}.jsonl").read_text().splitlines()]
    kinds = [e["kind"] for e in trace]
    assert kinds.count("tool_call") == 2  # neither the oversized call, the bad report nor the late ones became actions
    rejected = [e["data"] for e in trace if e["kind"] == "mcp_rejected"]
    assert [r["reason"] for r in rejected] == ["arguments too large", "invalid report_outcome", "after report_outcome",
                                               "after report_outcome"]
    assert [r["tool"] for r in rejected[2:]] == ["charge_payment", "report_outcome"]
    assert kinds.index("terminal") > max(i for i, k in enumerate(kinds) if k == "mcp_rejected")  # traced, then sealed
    assert (row["terminal_action"], row["terminal_claim"]) == ("abort", "failure")
    # what the trace shows as malformed: an unknown tool, bad arguments, oversized arguments, a bad report
    assert row["invalid_tool_calls"] == 4
    gone = asyncio.run(served.call("charge_payment", CHARGE))  # the session is over: nothing reaches the world
    assert gone[2] and "episode_ended" in gone[0]
    # the wire log holds every call as sent, the oversized one only by its size
    wire = [json.loads(ln) for ln in (tmp_path / "out" / "wire" / f"{row['run_id']}.jsonl").read_text().splitlines()]
    assert [w["tool"] for w in wire] == [c[0] for c in calls] + ["report_outcome"] + [c[0] for c in after]
    assert wire[2]["args"] == {"chars": len(json.dumps({"note": "x" * 1_000_000}))} and wire[1]["args"] == {"order_id": 7}


def test_served_rows_have_the_harness_schema_and_pass_the_audit(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    asyncio.run(_episode(out, LOST, [("charge_payment", CHARGE)], {"action": "finish", "claim": "unknown"}))
    asyncio.run(_episode(out, LOST, [("get_order", {"order_id": "o1"})], None))  # a disconnect: no decision
    stale = load_workloads(WORLDS).items["stale_drift"].tasks[0].id
    asyncio.run(_episode(out, Target("stale_drift", stale, "I5"), [], {"action": "refuse", "claim": "failure"}))
    df = pd.read_parquet(out / "results.parquet")
    assert list(df.columns) == list(SCHEMA) and len(df) == 3
    assert df.iloc[1]["terminal_action"] == "none" and df.iloc[1]["outcome"] == "unresolved"
    assert set(df["rep"]) == {0, 1}  # the same tuple served twice: two trials
    capsys.readouterr()
    assert main(["audit", str(out)]) == 0, capsys.readouterr().out


def test_serve_over_stdio_with_the_sdk_client(tmp_path: Path) -> None:
    out = tmp_path / "out"
    params = StdioServerParameters(command=EXE, args=["serve", "--workload", "response_loss", "--task", "rl-01-o1",
                                                      "--condition", "I5-discovery", "--fault", "response_loss", "--out",
                                                      str(out), "--worlds", str(WORLDS)])

    async def play() -> list:
        async with Client(params) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            first = await client.call_tool("charge_payment", {**CHARGE, "idempotency_key": "k1"})
            status = await client.call_tool("verify_effect", {"invocation_id": "inv-0001"})
            end = await client.call_tool("report_outcome", {"action": "finish", "claim": "success"})
            return [names, first, status, end]

    names, first, status, end = asyncio.run(play())
    assert "verify_effect" in names and first.is_error and not end.is_error
    for _ in range(50):
        if (out / "results.parquet").exists():
            break
        time.sleep(0.1)
    row = pd.read_parquet(out / "results.parquet").iloc[0]
    assert row["outcome"] == "completed" and row["duplicate_effects"] == 0


def test_the_readme_client_config_starts_a_server_the_sdk_client_can_play(tmp_path: Path, capsys) -> None:
    """The serving page's `--client-config` line (docs/serving.md), run as written, prints an `mcpServers` entry (the config shape of
    desktop and command-line agents) that a client launches from any folder, with no aft-bench on its PATH."""
    text = (ROOT / "docs" / "serving.md").read_text()
    line = next((ln.split("  #")[0].strip() for ln in text.splitlines()
                 if ln.startswith("aft-bench serve ") and "--client-config" in ln), None)
    assert line is not None, "docs/serving.md lost its --client-config line"
    assert '{"mcpServers": {"aft-bench": {"command"' in text  # and the shape it prints
    argv = [a.replace("results/served", str(tmp_path / "served")) for a in line.split()[1:]]
    assert main(argv) == 0
    entry = json.loads(capsys.readouterr().out)["mcpServers"]["aft-bench"]
    assert Path(entry["command"]).is_absolute() and Path(entry["command"]).exists()
    elsewhere = tmp_path / "client-cwd"
    elsewhere.mkdir()
    params = StdioServerParameters(command=entry["command"], args=entry["args"], cwd=str(elsewhere),
                                   env={"PATH": "/usr/bin:/bin"})  # the client's own PATH: no venv on it

    async def play() -> tuple:
        async with Client(params) as client:
            prompt = await client.get_prompt("task")
            end = await client.call_tool("report_outcome", {"action": "escalate", "claim": "unknown"})
            return prompt, end

    prompt, end = asyncio.run(play())
    assert "Task id: rl-01-o1" in prompt.messages[0].content.text and not end.is_error
    out = Path(entry["args"][entry["args"].index("--out") + 1])
    for _ in range(50):
        if (out / "results.parquet").exists():
            break
        time.sleep(0.1)
    row = pd.read_parquet(out / "results.parquet").iloc[0]
    assert (row["condition"], row["terminal_action"], row["agent"]) == ("I5", "escalate", "mcp")
    assert json.loads(row["agent_spec"])["agent"] == "my-agent"
    assert not any(elsewhere.iterdir())  # nothing written where the client happened to start it


def test_serve_over_http_on_loopback(tmp_path: Path) -> None:
    out, port = tmp_path / "out", free_port()
    proc = subprocess.Popen([EXE, "serve", "--workload", "response_loss", "--task", "rl-01-o1", "--condition", "I5-discovery",
                             "--transport", "http", "--port", str(port), "--out", str(out), "--worlds", str(WORLDS)],
                            stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for_port(port, 10.0, alive=lambda: proc.poll() is None), proc.stderr

        async def play():
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                await client.list_tools()
                lost = await client.call_tool("charge_payment", {**CHARGE, "idempotency_key": "k"})
                ok = await client.call_tool("charge_payment", {**CHARGE, "idempotency_key": "k"})  # same key
                end = await client.call_tool("report_outcome", {"action": "finish", "claim": "success"})
                return lost, ok, end

        lost, ok, end = asyncio.run(play())
        assert lost.is_error and lost.structured_content == {"status": "timeout"}
        assert not ok.is_error and ok.structured_content["effect"]["replayed"] is True and not end.is_error
        assert not (out / "results.parquet").exists()  # HTTP has no session end: the episode ends with the server
        proc.terminate()
        assert proc.wait(timeout=10) == 0 and "episode recorded as run" in proc.stderr.read()
        row = pd.read_parquet(out / "results.parquet").iloc[0]
        assert row["outcome"] == "completed" and row["agent"] == "mcp" and row["duplicate_effects"] == 0
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_serve_refuses_a_directory_of_config_runs(smoke_results: Path, tmp_path: Path, capsys) -> None:
    d = tmp_path / "r"
    shutil.copytree(smoke_results, d, ignore=shutil.ignore_patterns(".runner.lock"))
    assert main(["serve", "--workload", "response_loss", "--task", "rl-01-o1", "--condition", "I5-discovery",
                 "--out", str(d)]) == 2
    assert "not served episodes" in capsys.readouterr().err


CLIENT = """
import asyncio, os, sys
from mcp import Client

async def main():
    async with Client(os.environ["AFT_BENCH_MCP_URL"]) as c:
        await c.list_tools()
        if "leave" not in sys.argv:
            await c.call_tool("report_outcome", {"action": "refuse", "claim": "failure"})

asyncio.run(main())
"""


def test_serve_matrix_plays_every_tuple_with_a_client_command(tmp_path: Path, capsys) -> None:
    client = tmp_path / "client.py"
    client.write_text(CLIENT)
    cfg = tmp_path / "m.toml"
    cfg.write_text('[experiment]\nid = "m"\ncomparisons = ["duplicate_effects"]\ntasks_per_workload = 1\n')
    out = tmp_path / "out"
    assert main(["serve-matrix", str(cfg), "--out", str(out), "--worlds", str(WORLDS),
                 "--client-cmd", f"{sys.executable} {client}"]) == 0
    assert main(["serve-matrix", str(cfg), "--out", str(out), "--worlds", str(WORLDS),
                 "--client-cmd", f"{sys.executable} {client} leave"]) == 0
    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == 4 and set(df["condition"]) == {"I5", "I5-effects"}
    assert sorted(df["terminal_action"]) == ["none", "none", "refuse", "refuse"]  # a client that leaves: unresolved
    assert set(df.loc[df["terminal_action"] == "none", "outcome"]) == {"unresolved"}
    capsys.readouterr()
    assert main(["audit", str(out)]) == 0


def test_an_interrupted_call_is_a_task_that_can_be_polled_continued_or_cancelled(tmp_path: Path) -> None:
    """Resumable invocations in the Tasks extension's terms: an interrupted call returns a task handle;
    tasks_get polls it, tasks_result continues it without re-executing, tasks_cancel abandons it."""
    target = Target("interruption", "int-01-d1", "I5-discovery")
    export = {"dataset_id": "d1", "format": "csv", "idempotency_key": "e1"}

    async def play(cancel: bool):
        with ServedDirectory(tmp_path / ("c" if cancel else "r"), WORLDS) as directory:
            served = Served(target, WORLDS, directory)
            async with Client(build_server(served)) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                first = await client.call_tool("start_export", export)
                task = first.structured_content["task"]
                polled = await client.call_tool("tasks_get", {"task_id": task["taskId"]})
                if cancel:
                    gone = await client.call_tool("tasks_cancel", {"task_id": task["taskId"]})
                    after = await client.call_tool("tasks_result", {"task_id": task["taskId"]})
                    await client.call_tool("report_outcome", {"action": "abort", "claim": "failure"})
                    done = None
                else:
                    done = await client.call_tool("tasks_result", {"task_id": task["taskId"]})
                    gone = after = None
                    await client.call_tool("report_outcome", {"action": "finish", "claim": "success"})
            return names, first, polled, done or gone, after, served.row  # recorded once the session ended

    names, first, polled, done, _, row = asyncio.run(play(cancel=False))
    assert {"tasks_get", "tasks_result", "tasks_cancel"} <= names
    assert first.structured_content["status"] == "interrupted" and first.structured_content["task"]["status"] == "working"
    assert polled.structured_content["task"]["status"] == "working"
    assert not done.is_error and done.structured_content["status"] == "ok"
    assert row["recovered"] is True and row["outcome"] == "completed" and row["duplicate_effects"] == 0
    names, first, polled, gone, after, row = asyncio.run(play(cancel=True))
    assert gone.structured_content == {"taskId": first.structured_content["task"]["taskId"], "status": "cancelled"}
    assert after.is_error and "task_cancelled" in after.content[0].text
    assert row["recovered"] is False and row["y_goal"] is False
    trace = (tmp_path / "c" / "traces" / f"{row['run_id']}.jsonl").read_text()
    assert '"kind":"task_cancelled"' in trace


def test_a_served_world_not_ready_in_time_is_a_pending_tuple_with_its_reason(tmp_path: Path, capsys,
                                                                           monkeypatch) -> None:
    """A busy machine: the served server has not said it serves when the wait ends. The tuple is left pending with
    that reason in failures.jsonl and no server is left; serve-matrix goes on (no internal error)."""
    import json

    from aft_bench.cli.serving import READY_ENV, ready_wait

    assert ready_wait([]) == 60.0 and ready_wait([1.0, 13.5]) == 135.0  # scaled by the slowest start-up seen
    client = tmp_path / "client.py"
    client.write_text(CLIENT)
    cfg = tmp_path / "m.toml"
    cfg.write_text('[experiment]\nid = "m"\ncomparisons = ["duplicate_effects"]\ntasks_per_workload = 1\n')
    out = tmp_path / "out"
    monkeypatch.setenv(READY_ENV, "0.001")  # no server says it serves within a millisecond
    assert main(["serve-matrix", str(cfg), "--out", str(out), "--worlds", str(WORLDS),
                 "--client-cmd", f"{sys.executable} {client}"]) == 1
    said = capsys.readouterr()
    assert "internal error" not in said.err and "2 pending" in said.out
    failures = [json.loads(x) for x in (out / "failures.jsonl").read_text().splitlines()]
    assert len(failures) == 2 and all("was not ready within 0.001 s" in f["reason"] for f in failures)
    assert not (out / "results.parquet").exists() or len(pd.read_parquet(out / "results.parquet")) == 0
    (out / ".scratch" / "aft-git-left-by-a-killed-serve").mkdir(parents=True)
    assert main(["serve-matrix", str(cfg), "--out", str(out), "--worlds", str(WORLDS),
                 "--client-cmd", f"{sys.executable} {client}"]) == 1  # the rerun: the same two pending
    assert not (out / ".scratch").exists()  # what a killed serve left there, removed by serve-matrix
