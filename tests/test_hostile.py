"""Defects a hostile probe found, one test each (each failed before its fix): damaged journals accepted, values
the results table cannot hold wedging a folder, leftovers of interrupted writes refusing later commands, served
episodes lost to a signal or merged into a dead attempt's trace."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest
from mcp import Client, StdioServerParameters
from stub_provider import REPORT_ESCALATE, answered, error_reply, provider, tool_reply

from aft_bench.cli.main import main
from aft_bench.experiment.journal import encode

from conftest import ROOT, WORLDS

EXE = str(Path(sys.executable).with_name("aft-bench"))
SMALL = '[experiment]\nid = "h"\ncomparisons = ["duplicate_effects"]\ntasks_per_workload = 1\n'


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".runner.lock"))
    return dst


def _small_run(tmp_path: Path, name: str = "r") -> tuple[Path, Path]:
    cfg = tmp_path / "h.toml"
    cfg.write_text(SMALL)
    out = tmp_path / name
    assert main(["run", str(cfg), "--out", str(out), "--workers", "1"]) == 0
    return cfg, out


def _rewrite_journal(out: Path, change) -> None:
    lines = (out / "journal.jsonl").read_text().splitlines()
    rows = [json.loads(ln)["row"] for ln in lines]
    (out / "journal.jsonl").write_text("".join(encode(r) for r in change(rows)))


@pytest.mark.parametrize("damage", ["duplicate", "missing column", "extra column", "wrong type"])
def test_a_damaged_journal_stops_run_and_fails_the_audit(tmp_path: Path, capsys, damage: str) -> None:
    """Checksummed lines whose rows are not results (a run twice, a column missing or extra, a wrong type)."""
    cfg, out = _small_run(tmp_path)
    changes = {
        "duplicate": lambda rows: rows + rows[-1:],
        "missing column": lambda rows: [rows[0], {k: v for k, v in rows[1].items() if k != "outcome"}],
        "extra column": lambda rows: [rows[0], {**rows[1], "bonus": 1}],
        "wrong type": lambda rows: [rows[0], {**rows[1], "duplicate_effects": "1"}],
    }
    _rewrite_journal(out, changes[damage])
    (out / "results.parquet").unlink()  # so that nothing but the journal could vouch for the rows
    capsys.readouterr()
    assert main(["run", str(cfg), "--out", str(out), "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert "journal.jsonl: line" in err and len(err.strip().splitlines()) == 1
    assert not (out / "results.parquet").exists()  # nothing compacted from a damaged journal
    assert main(["audit", str(out)]) == 1


def test_seeds_beyond_64_bits_are_refused_before_anything_exists(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "s.toml"
    cfg.write_text(SMALL + "seeds = [9223372036854775808]\n")
    assert main(["run", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "experiment.seeds.0" in capsys.readouterr().err and not (tmp_path / "o").exists()
    assert main(["serve", "--workload", "response_loss", "--task", "rl-01-o1", "--condition", "I5",
                 "--seed", str(2**63), "--out", str(tmp_path / "s")]) == 2
    assert "--seed" in capsys.readouterr().err and not (tmp_path / "s").exists()


def _liar(request: dict, headers: object) -> tuple[int, dict]:
    """A provider that answers report_outcome and reports 10^20 prompt tokens."""
    return 200, tool_reply("report_outcome", REPORT_ESCALATE, prompt_tokens=10**20)


def test_a_provider_reporting_impossible_usage_leaves_the_tuple_pending_not_the_folder_wedged(tmp_path: Path,
                                                                                             capsys) -> None:
    with provider(_liar) as base:
        cfg = tmp_path / "l.toml"
        cfg.write_text(SMALL + f'[[experiment.agents]]\nname = "llm"\nmodel = "openai/liar"\napi_base = '
                       f'"{base}"\nretries = 0\n')
        out = tmp_path / "o"
        for _ in range(2):  # and a rerun completes what it can, again
            assert main(["run", str(cfg), "--out", str(out)]) == 1
            assert "pending" in capsys.readouterr().err
            assert (out / "results.parquet").exists() and len(pd.read_parquet(out / "results.parquet")) == 0
    failures = [json.loads(ln) for ln in (out / "failures.jsonl").read_text().splitlines()]
    assert {f["error"] for f in failures if f.get("run_id")} == {"UnrecordableRow"}
    assert "does not fit in 64 bits" in failures[-1]["message"]


def test_leftovers_of_interrupted_writes_are_healed_not_refused(smoke_results: Path, tmp_path: Path) -> None:
    d = _copy(smoke_results, tmp_path / "d")
    (d / ".analysis-old").mkdir()
    (d / ".analysis-old" / "primary.json").write_text("[]")
    assert main(["analyze", str(d), "--resamples", "50", "--permutations", "50"]) == 0
    assert not (d / ".analysis-old").exists() and (d / "analysis" / "primary.json").read_text() != "[]"
    (d / ".report-old").mkdir()
    (d / ".report-old" / "report.md").write_text("old")
    assert main(["report", str(d)]) == 0 and not (d / ".report-old").exists()
    shutil.rmtree(d / "analysis")  # interrupted between the two renames: only the old copy is left
    shutil.copytree(smoke_results / "analysis", d / ".analysis-old")
    assert main(["analyze", str(d), "--resamples", "50", "--permutations", "50"]) == 0
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "manifest.json.tmp").write_text("{")  # a full disk during the very first manifest write
    cfg = tmp_path / "h.toml"
    cfg.write_text(SMALL)
    assert main(["run", str(cfg), "--out", str(fresh), "--workers", "1"]) == 0


def _stdio_server(tmp_path: Path, out: Path) -> tuple[StdioServerParameters, Path]:
    pidfile = tmp_path / "pid"
    args = ["serve", "--workload", "response_loss", "--task", "rl-01-o1", "--condition", "I3", "--out", str(out),
            "--worlds", str(WORLDS), "--agent", "sig"]
    script = f'echo $$ > {pidfile}; exec {EXE} ' + " ".join(args)
    return StdioServerParameters(command="/bin/sh", args=["-c", script]), pidfile


def _charge_then_signal(params: StdioServerParameters, pidfile: Path, signum: int) -> None:
    async def play() -> None:
        try:
            async with Client(params) as client:
                await client.call_tool("get_order", {"order_id": "o1"})
                await client.call_tool("charge_payment", {"order_id": "o1", "amount": 50, "note": ""})
                os.kill(int(pidfile.read_text()), signum)
                await asyncio.sleep(3)
        except BaseException:  # noqa: BLE001 - the server went away under the client: expected
            pass

    asyncio.run(play())


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_a_stdio_server_records_the_episode_first(tmp_path: Path, signum: int) -> None:
    out = tmp_path / "o"
    params, pidfile = _stdio_server(tmp_path, out)
    _charge_then_signal(params, pidfile, signum)
    for _ in range(50):
        if (out / "results.parquet").exists():
            break
        time.sleep(0.1)
    row = pd.read_parquet(out / "results.parquet").iloc[0]
    assert row["terminal_action"] == "none" and row["tool_calls"] >= 2  # the committed charge is in the record
    assert main(["audit", str(out)]) == 0


def test_serving_a_tuple_again_after_a_killed_server_starts_a_fresh_attempt(tmp_path: Path) -> None:
    out = tmp_path / "o"
    params, pidfile = _stdio_server(tmp_path, out)
    _charge_then_signal(params, pidfile, signal.SIGKILL)
    assert not (out / "results.parquet").exists() and len(list((out / "traces").glob("*.jsonl"))) == 1

    async def again() -> None:
        async with Client(params) as client:
            await client.call_tool("report_outcome", {"action": "escalate", "claim": "unknown"})

    asyncio.run(again())
    for _ in range(50):
        if (out / "results.parquet").exists():
            break
        time.sleep(0.1)
    assert len(pd.read_parquet(out / "results.parquet")) == 1
    assert len(list((out / "quarantine").rglob("*.jsonl"))) == 1  # the dead attempt, kept aside
    assert main(["audit", str(out)]) == 0  # the new trace is not appended to the dead one


class _SlowLoris(BaseHTTPRequestHandler):
    """A provider that answers at once and then sends its body one byte a second, forever (600 s); it notes
    when each request arrived."""

    protocol_version = "HTTP/1.1"
    arrivals: list[float] = []

    def do_POST(self) -> None:
        self.arrivals.append(time.monotonic())
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        try:
            for _ in range(600):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(1.0)
        except OSError:
            pass

    def log_message(self, *args) -> None:
        pass


def test_a_provider_that_never_finishes_its_body_ends_within_the_deadline(tmp_path: Path, capsys) -> None:
    """timeout_s bounds the whole call, not each read: each of the retries + 1 attempts ends at the harness's
    own deadline (named in the failure) while the body would have taken 600 s. The time is measured from the
    first request, not from the process start (litellm's import alone takes 2-10 s depending on the machine's
    load), and bounded loosely: a busy machine may fire a timer late, but never by minutes."""
    handler = type("SlowLoris", (_SlowLoris,), {"arrivals": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cfg = tmp_path / "s.toml"
        cfg.write_text('[experiment]\nid = "s"\nworkloads = ["response_loss"]\nconditions = ["I5"]\n'
                       'tasks_per_workload = 1\n[[experiment.agents]]\nname = "llm"\nmodel = "openai/slow"\n'
                       f'api_base = "http://127.0.0.1:{server.server_port}/v1"\ntimeout_s = 2\nretries = 1\n'
                       'backoff_s = 500\nmax_backoff_s = 0.5\n')
        assert main(["run", str(cfg), "--out", str(tmp_path / "o")]) == 1
        ended = time.monotonic()
        assert "pending" in capsys.readouterr().err
        failure = json.loads((tmp_path / "o" / "failures.jsonl").read_text().splitlines()[-1])
        assert "CallDeadline" in failure["message"] and "after 2 attempt(s)" in failure["message"], failure["message"]
        assert len(handler.arrivals) == 2  # retries = 1: one attempt and one retry, each cut at its deadline
        budget = 2 * 2 + 0.5  # timeout_s x (retries + 1) + the backoff cap
        assert ended - handler.arrivals[0] < 4 * budget, ended - handler.arrivals[0]
    finally:
        server.shutdown()


@pytest.mark.parametrize(("setting", "field"), [
    ('timeout_s = inf', "timeout_s"), ('backoff_s = nan', "backoff_s"), ('timeout_s = 0', "timeout_s"),
    ('input_usd_per_mtok = -1\noutput_usd_per_mtok = 1', "input_usd_per_mtok"),
    ('api_base = "http://me:sk-abcdefghijklmnopqrstuv@127.0.0.1/v1"', "api_base"),
    ('api_base = "not a url"', "api_base"), ('model = "sk-abcdefghijklmnopqrstuvwxyz"', "model"),
])
def test_impossible_or_secret_agent_settings_are_refused_by_validate_and_run(tmp_path: Path, capsys, setting,
                                                                            field) -> None:
    base = {"model": 'model = "openai/x"'}
    lines = [setting] + ([base["model"]] if not setting.startswith("model") else [])
    cfg = tmp_path / "c.toml"
    cfg.write_text(SMALL + '[[experiment.agents]]\nname = "llm"\n' + "\n".join(lines) + "\n")
    assert main(["validate", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert field in err and len(err.strip().splitlines()) == 1 and "sk-abc" not in err
    assert main(["run", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert field in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_network_settings_and_ceilings_must_be_finite(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "n.toml"
    cfg.write_text(SMALL + "max_cost_usd = inf\n")
    assert main(["validate", str(cfg)]) == 2 and "max_cost_usd" in capsys.readouterr().err
    cfg.write_text(SMALL + "[experiment.network]\nrtt_ms = nan\ndecision_ms = 1\nbuild_ms = 1\n")
    assert main(["validate", str(cfg)]) == 2 and "rtt_ms" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["analyze", "x", "--resamples", "0"], ["analyze", "x", "--permutations", "-3"], ["run", "c", "--out", "o",
    "--max-cost", "nan"], ["fake-llm", "--latency", "inf"], ["fake-llm", "--port", "70000"],
    ["serve", "--workload", "w", "--task", "t", "--condition", "I5", "--port", "-1"], ["run"], ["no-such-command"],
])
def test_a_bad_flag_is_one_line_naming_it(argv, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("aft-bench: error:") and "usage:" not in err


def test_a_port_in_use_is_exit_1_and_leaves_nothing(tmp_path: Path, capsys) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--workload", "response_loss", "--task", "rl-01-o1", "--condition", "I5",
                     "--transport", "http", "--port", str(port), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert f"--port {port}" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def _nan_model(request: dict, headers: object) -> tuple[int, dict]:
    """A model whose first tool call has NaN arguments, then reports."""
    if answered(request):
        return 200, tool_reply("report_outcome", REPORT_ESCALATE)
    return 200, tool_reply("get_order", '{"order_id": NaN}')


def test_nan_arguments_from_a_model_are_an_invalid_call_answered_to_it(tmp_path: Path) -> None:
    with provider(_nan_model) as base:
        cfg = tmp_path / "n.toml"
        cfg.write_text('[experiment]\nid = "n"\nworkloads = ["response_loss"]\nconditions = ["I5-discovery"]\n'
                       'tasks_per_workload = 1\n[[experiment.agents]]\nname = "llm"\nmodel = "openai/nan"\n'
                       f'api_base = "{base}"\nretries = 0\n')
        out = tmp_path / "o"
        assert main(["run", str(cfg), "--out", str(out)]) == 0
    row = pd.read_parquet(out / "results.parquet").iloc[0]
    assert (row["terminal_action"], row["invalid_tool_calls"], row["tool_calls"]) == ("escalate", 1, 0)
    assert main(["audit", str(out)]) == 0


@pytest.mark.parametrize("where", ["journal.jsonl", ".runner.lock", "traces/x.jsonl"])
def test_a_fifo_where_a_file_should_be_is_refused_not_waited_on(tmp_path: Path, capsys, where: str) -> None:
    cfg, out = _small_run(tmp_path)
    target = out / where
    if target.exists():
        target.unlink()
    os.mkfifo(target)
    capsys.readouterr()
    assert main(["run", str(cfg), "--out", str(out), "--workers", "1"]) == 2  # returns: it did not block
    err = capsys.readouterr().err
    assert "named pipe" in err and target.name in err and len(err.strip().splitlines()) == 1
    assert main(["audit", str(out)]) == 2 and "named pipe" in capsys.readouterr().err


SILENT = "import time\ntime.sleep(600)\n"


def test_import_mcp_gives_up_on_a_silent_server_and_stores_no_secret(tmp_path: Path, capsys, monkeypatch) -> None:
    from aft_bench.routing import imported

    silent = tmp_path / "silent.py"
    silent.write_text(SILENT)
    monkeypatch.setattr(imported, "IMPORT_TIMEOUT_S", 2.0)
    monkeypatch.setenv("PLANTED_API_KEY", "canary-0123456789")
    t0 = time.monotonic()
    cmd = f"{sys.executable} {silent} --key canary-0123456789"
    with pytest.raises(Exception) as caught:
        imported.import_mcp(cmd=cmd, timeout_s=imported.IMPORT_TIMEOUT_S)
    assert time.monotonic() - t0 < 10 and "within 2 s" in str(caught.value)
    assert "canary-0123456789" not in str(caught.value)
    out = tmp_path / "cat.json"  # a real server: its source is stored with the planted key redacted
    serve = (f"{EXE} serve --workload response_loss --task rl-01-o1 --condition I5-discovery --out "
             f"{tmp_path / 's'} --worlds {WORLDS} --agent canary-0123456789")
    # its own deadline, not the 2 s patched in above for the silent one (a server's start takes longer when busy)
    assert main(["catalog", "import-mcp", "--cmd", serve, "--out", str(out), "--timeout", "300"]) == 0
    assert "canary-0123456789" not in out.read_text() and "[redacted]" in out.read_text()


def test_at_concurrency_1_no_tuple_starts_once_the_ceiling_is_passed(tmp_path: Path, capsys) -> None:
    """The row's spend is counted before the episode's slot frees: the second tuple sees the first one's cost."""
    from aft_bench.agents.fake_llm import FakeModel, index_tasks, serve

    srv = serve(FakeModel(index_tasks([WORLDS]), policy="capability"))
    try:
        cfg = tmp_path / "c.toml"
        cfg.write_text('[experiment]\nid = "c"\nworkloads = ["response_loss"]\nconditions = ["I5", "I4"]\n'
                       'tasks_per_workload = 2\n[[experiment.agents]]\nname = "llm"\nmodel = "openai/gpt-4o-mini"\n'
                       f'api_base = "http://127.0.0.1:{srv.server_port}/v1"\nconcurrency = 1\n')
        out = tmp_path / "o"
        assert main(["run", str(cfg), "--out", str(out), "--max-cost", "0.0000001"]) == 3
        assert len(pd.read_parquet(out / "results.parquet")) == 1  # the first passed the ceiling; none after it
    finally:
        srv.shutdown()


def test_the_ledger_reserves_the_largest_tuple_for_each_one_in_flight() -> None:
    """Known positive and negative of the start rule: a slow start under a ceiling, then one peak per tuple."""
    from aft_bench.experiment.spend import Spend

    spend = Spend([], max_cost=1.0, max_tokens=None)
    assert [spend.begin(), spend.begin()] == ["start", "wait"]  # nothing finished yet: the first tuple alone
    spend.end({"run_id": "a", "cost_usd": 0.3})
    assert [spend.begin(), spend.begin(), spend.begin()] == ["start", "start", "wait"]  # 0.3 + 2 x 0.3 <= 1.0
    spend.end(None)  # a failed tuple frees its reservation and counts nothing
    assert spend.begin() == "start" and spend.cost == 0.3
    spend.end({"run_id": "b", "cost_usd": 0.3})
    spend.end({"run_id": "c", "cost_usd": 0.3})
    assert spend.begin() == "stop"  # 0.9 committed: another 0.3 could pass the ceiling, whatever is in flight
    free = Spend([], max_cost=None, max_tokens=None)
    assert {free.begin() for _ in range(64)} == {"start"}  # no ceiling: nothing reserved, no slow start
    zero = Spend([{"run_id": "z", "cost_usd": 0.0}], max_cost=1.0, max_tokens=None)
    assert {zero.begin() for _ in range(64)} == {"start"}  # free tuples (the offline model) reserve nothing
    assert Spend([{"run_id": "b", "cost_usd": 1.2}], 1.0, None).overshoot() == pytest.approx(0.2)


def test_at_concurrency_16_the_ceiling_holds_to_one_tuple(tmp_path: Path, capsys) -> None:
    """16 episodes could be in flight at once; the reservations keep the run within one tuple of its ceiling
    (without them the episodes in flight when it is reached would all pass it), and the overshoot is reported."""
    from aft_bench.agents.fake_llm import FakeModel, index_tasks, serve

    srv = serve(FakeModel(index_tasks([WORLDS]), policy="capability", latency_s=0.05))
    try:
        cfg = tmp_path / "c.toml"
        cfg.write_text('[experiment]\nid = "c16"\nworkloads = ["response_loss", "stale_drift"]\n'
                       'conditions = ["I5", "I4", "I3", "I2"]\ntasks_per_workload = 4\n[[experiment.agents]]\n'
                       f'name = "llm"\nmodel = "openai/gpt-4o-mini"\napi_base = "http://127.0.0.1:{srv.server_port}/v1"'
                       '\nconcurrency = 16\n')
        free = tmp_path / "free"
        assert main(["run", str(cfg), "--out", str(free)]) == 0
        costs = pd.read_parquet(free / "results.parquet")["cost_usd"]
        assert len(costs) == 32 and costs.min() > 0
        ceiling = 4.5 * costs.mean()
        out = tmp_path / "o"
        capsys.readouterr()
        assert main(["run", str(cfg), "--out", str(out), "--max-cost", f"{ceiling:.10f}"]) == 3
        spent = pd.read_parquet(out / "results.parquet")["cost_usd"]
        assert 2 <= len(spent) < 32  # more than the slow start's first tuple ran, and the ceiling stopped the rest
        assert spent.sum() <= ceiling + costs.max()
        err = capsys.readouterr().err
        assert "spend ceiling reached" in err and (spent.sum() <= ceiling or "passed the ceiling" in err)
    finally:
        srv.shutdown()


CANARY = "sk-canaryQ7f3k9LmN2pR5tV8wX1yZ4"  # key-shaped, and planted in the environment


class _Echo:
    """A provider that echoes the request's Authorization header everywhere it can: an error body (its first
    answer), the reply's text and a tool call's arguments (traced as the call)."""

    calls = 0

    @classmethod
    def answer(cls, request: dict, headers: object) -> tuple[int, dict]:
        auth = headers.get("Authorization", "")  # type: ignore[attr-defined]
        cls.calls += 1
        if cls.calls == 1:
            return 500, error_reply(f"bad key {auth}")
        if answered(request):
            args = json.dumps({"action": "escalate", "claim": "unknown", "evidence": f"header was {auth}"})
            return 200, tool_reply("report_outcome", args, content=f"I saw {auth}")
        return 200, tool_reply("get_order", json.dumps({"order_id": f"header was {auth}"}), content=f"I saw {auth}")


def test_a_planted_key_appears_in_no_file_the_harness_writes(tmp_path: Path, monkeypatch) -> None:
    """The key named by api_key_env, echoed back by the provider in an error, a reply and a tool call's arguments,
    reaches no journal, table, manifest, trace, failure record, analysis or report."""
    monkeypatch.setenv("AFT_CANARY_LLM", CANARY)  # a name that does not look like a secret: known by api_key_env
    _Echo.calls = 0
    with provider(_Echo.answer) as base:
        cfg = tmp_path / "k.toml"
        cfg.write_text('[experiment]\nid = "k"\nworkloads = ["response_loss"]\nconditions = ["I5-discovery", "I4"]\n'
                       'tasks_per_workload = 1\n[[experiment.agents]]\nname = "llm"\nmodel = "openai/m"\n'
                       f'api_base = "{base}"\napi_key_env = "AFT_CANARY_LLM"\n'
                       'retries = 0\nconcurrency = 1\n')
        out = tmp_path / "o"
        assert main(["run", str(cfg), "--out", str(out)]) == 1  # the first tuple's provider error: pending
        assert main(["run", str(cfg), "--out", str(out)]) == 0  # then every tuple recorded
        assert main(["analyze", str(out), "--resamples", "20", "--permutations", "20"]) == 0
        assert main(["report", str(out)]) == 0
    assert _Echo.calls >= 3 and (out / "failures.jsonl").exists()
    evidence = [e for e in (out / "traces").glob("*.jsonl") if "header was" in e.read_text()]
    assert evidence, "the echo should have reached the trace (redacted)"
    leaks = [str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()]
    assert leaks == []


@pytest.mark.parametrize("damage", ["garbage", "another run's database"])
def test_a_damaged_sqlite_database_stops_the_resume_and_fails_the_audit(tmp_path: Path, capsys, damage: str) -> None:
    cfg = tmp_path / "q.toml"
    cfg.write_text(SMALL.replace('["duplicate_effects"]', '["unsafe_commits"]') + 'backends = ["sqlite"]\n')
    out = tmp_path / "o"
    assert main(["run", str(cfg), "--out", str(out), "--workers", "1"]) == 0
    assert main(["audit", str(out)]) == 0
    commits = {p.stem: p.read_text().count('"kind":"commit"') for p in (out / "traces").glob("*.jsonl")}
    victim, donor = min(commits, key=commits.get), max(commits, key=commits.get)
    assert commits[victim] != commits[donor]  # guarded runs refuse the stale write, unguarded ones commit it
    if damage == "garbage":
        (out / "db" / f"{victim}.sqlite").write_bytes(b"not a database at all" * 100)
    else:  # a database swapped in from another run: it opens, but does not hold this run's commits
        shutil.copy(out / "db" / f"{donor}.sqlite", out / "db" / f"{victim}.sqlite")
    capsys.readouterr()
    assert main(["run", str(cfg), "--out", str(out), "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert victim in err and ("unreadable" if damage == "garbage" else "commit(s)") in err
    assert main(["audit", str(out)]) == 1


BAD_NAMES_SERVER = '''
import anyio
import mcp.types as mt
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

async def list_tools(ctx, params):
    names = ["good_tool", "good_tool", "evil\\u200btool", "rtl\\u202etool", "new\\nline", "ok.name-2"]
    return mt.ListToolsResult(tools=[mt.Tool(name=n, description="d", input_schema={"type": "object"})
                                     for n in names])

async def main():
    server = Server("bad", version="1", on_list_tools=list_tools)
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options())

anyio.run(main)
'''


def test_imported_tool_names_follow_mcps_rule_and_validate_accepts_what_import_writes(tmp_path: Path, capsys) -> None:
    script = tmp_path / "bad_server.py"
    script.write_text(BAD_NAMES_SERVER)
    out = tmp_path / "cat.json"
    assert main(["catalog", "import-mcp", "--cmd", f"{sys.executable} {script}", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "2 tools" in said and "4 not imported" in said
    names = [t["name"] for t in json.loads(out.read_text())["tools"]]
    assert names == ["good_tool", "ok.name-2"]  # the zero-width, right-to-left, newline and repeated ones left out
    assert main(["validate", str(out)]) == 0 and "tool catalog: 2 tools" in capsys.readouterr().out
    assert main(["catalog", "review", str(out), "--approve", "good_tool", "--effect", "read"]) == 0


def _descendants(pid: int) -> set[int]:
    """Every live descendant of `pid`, from /proc."""
    parents: dict[int, int] = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat_file.parent.name)] = int(fields[1])
    out, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - out
        out |= frontier
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc to see processes")
def test_worker_processes_die_with_a_killed_runner(tmp_path: Path) -> None:
    temp = Path(tempfile.mkdtemp(prefix="t-", dir="/tmp"))  # short enough for the forkserver's socket path
    try:
        _worker_processes_die(tmp_path, temp)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _worker_processes_die(tmp_path: Path, temp: Path) -> None:
    import subprocess

    runner = subprocess.Popen([EXE, "run", str(ROOT / "configs" / "paper_deterministic.toml"), "--out",
                               str(tmp_path / "o"), "--workers", "2", "--worlds", str(WORLDS)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "TMPDIR": str(temp)})
    try:
        family: set[int] = set()
        for _ in range(300):  # the forkserver, its two workers, the resource tracker
            family = _descendants(runner.pid)
            if len(family) >= 4:
                break
            time.sleep(0.05)
        assert len(family) >= 4, family
    finally:
        runner.kill()
        runner.wait()
    deadline = time.monotonic() + 10
    alive = family
    while alive and time.monotonic() < deadline:
        alive = {p for p in family if Path(f"/proc/{p}").exists() and "Z" not in _state(p)}
        time.sleep(0.1)
    for p in alive:
        os.kill(p, signal.SIGKILL)
    assert alive == set()
    # multiprocessing's own folder (pymp-*, the forkserver's socket) is in the runner's scratch folder, not loose
    # in the temp folder, and the reaper the runner started removes that folder once the runner and its workers
    # are gone: nothing is left in the temp folder
    deadline = time.monotonic() + 30
    while list(temp.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(temp.iterdir()) == []


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_a_programs_printed_output_is_capped_in_the_trace_not_flooding_stderr(tmp_path: Path, capfd) -> None:
    from contextlib import ExitStack
    from types import SimpleNamespace

    from test_survivors import Steps

    from aft_bench.agents.protocol import Call, End
    from aft_bench.episode.episode import run_sync
    from aft_bench.experiment.build import resolve_cell
    from aft_bench.experiment.config import Cell
    from aft_bench.interface.mechanisms import load_conditions
    from aft_bench.interface.programs import PRINT_CAP
    from aft_bench.tasks.workloads import load_workloads

    ctx = SimpleNamespace(workloads=load_workloads(WORLDS), conditions=load_conditions())
    cell = Cell("payments", "memory", "program_repair", "pr-01-o1-gold", "I0-program-replay", "none", 0, None,
                "deterministic", '{"max_attempts":3,"name":"deterministic"}', "none", 0)
    flood = 'for i in range(2000):\n    print("x" * 1000)\n"done"'
    (tmp_path / "traces").mkdir()
    with ExitStack() as stack:
        setup, _agent, _ = resolve_cell(ctx, cell, tmp_path, stack)  # type: ignore[arg-type]
        run_sync(setup, Steps([lambda _: Call("run_program", {"source": flood}), lambda _: End("abort", "unknown")]))
    assert len(capfd.readouterr().err) < 10_000  # 2 MB printed, none of it on the host's stderr
    events = [json.loads(ln) for ln in (tmp_path / "traces" / f"{cell.run_id}.jsonl").read_text().splitlines()]
    output = [e["data"] for e in events if e["kind"] == "program_output"]
    assert len(output) == 1 and output[0]["chars"] == 2000 * 1001 and output[0]["truncated"] is True
    assert len(output[0]["text"]) == PRINT_CAP


def test_an_oversized_argument_inside_a_program_is_refused_like_at_the_boundary(tmp_path: Path) -> None:
    from test_survivors import _play

    from aft_bench.agents.protocol import Call, End

    def played(argument: str) -> dict:
        source = f'CALL("get_order", {{"order_id": {argument}}}, "READ")\n"done"'
        return _play("program_repair", "pr-01-o1-gold", "I0-program-replay", "none",
                     [lambda _: Call("run_program", {"source": source}), lambda _: End("abort", "unknown")])

    huge, small = played('"o" * 17_000_000'), played('"o1"')
    assert small["tool_calls"] == 2  # run_program and the read it made
    assert huge["tool_calls"] == 1 and huge["program_attempts"] == 1  # it ran; its call never reached the tool


PLAIN_SECRET = "canary-plain-5d1f0c2a9e"  # not key-shaped: known only as the value of a secret-named variable


def test_a_served_client_s_secrets_reach_no_file(tmp_path: Path, monkeypatch) -> None:
    """An MCP client that puts the environment's key in its handshake name and in a call's arguments (where the
    LLM scrubber never looks): the one redaction choke point keeps it out of journal, table, manifest and trace."""
    import mcp.types as mt

    from aft_bench.serving.record import ServedDirectory
    from aft_bench.serving.server import Served, Target, build_server

    monkeypatch.setenv("PLANTED_API_KEY", PLAIN_SECRET)
    out = tmp_path / "o"

    async def play() -> None:
        with ServedDirectory(out, WORLDS) as directory:
            served = Served(Target("response_loss", "rl-01-o1", "I3", "response_loss"), WORLDS, directory, None)
            info = mt.Implementation(name=f"agent-{PLAIN_SECRET}", version=CANARY)
            async with Client(build_server(served), client_info=info) as client:
                await client.call_tool("get_order", {"order_id": f"o1 {PLAIN_SECRET}"})
                await client.call_tool("report_outcome", {"action": "escalate", "claim": "unknown",
                                                          "evidence": f"{PLAIN_SECRET} and {CANARY}"})

    asyncio.run(play())
    row = pd.read_parquet(out / "results.parquet").iloc[0]
    assert row["client"].startswith("agent-[redacted]")  # recorded, redacted: not dropped
    trace = next((out / "traces").glob("*.jsonl")).read_text()
    assert "[redacted]" in trace and main(["audit", str(out)]) == 0  # redacted before hashing: the chain holds
    leaks = [str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()
             and (PLAIN_SECRET.encode() in p.read_bytes() or CANARY.encode() in p.read_bytes())]
    assert leaks == []


def test_a_secret_spanning_json_syntax_is_redacted_string_by_string(monkeypatch) -> None:
    """A secret value that happens to contain JSON punctuation cannot break the record it is cut out of."""
    from aft_bench.common.canonical import canonical_json
    from aft_bench.common.secrets import redact_json

    monkeypatch.setenv("ODD_TOKEN", '","x":"')
    text = canonical_json({"a": "1", "x": "2", "b": 'say ","x":" here'})
    clean = json.loads(redact_json(text))
    assert set(clean) == {"a", "x", "b"} and clean["b"] == "say [redacted] here"
    assert redact_json(canonical_json({"a": "nothing"})) == '{"a":"nothing"}'


# Writers that need no redaction, and why; every other place that writes a file must use the choke point.
NOT_EVIDENCE_TEXT = {
    ("experiment/freeze.py", "tmp.write_text(text)"): "the lock file: hashes and paths of the config's inputs",
    ("experiment/rundir.py", "open(self.out / self.LOCK"): "the runner's lock file, empty",
    ("experiment/evidence.py", 'open(tmp, "w"'): "re-encodes rows read from the journal, redacted when journaled",
    ("cli/routing.py", "path.write_text(text)"): "generated routing suites, data files of the project",
    ("episode/row.py", "to_parquet("): "results.parquet is compacted only from journal rows (redacted)",
    ("analysis/analyze.py", "to_csv("): "tables computed from journal rows (redacted)",
    ("analysis/analyze.py", "to_parquet("): "pairs computed from journal rows (redacted)",
    ("analysis/report.py", "savefig("): "figures: pixels",
    ("common/redacted_log.py", 'open(path, "w"'): "the redacting log itself",
    ("common/files.py", 'open(tmp, "w"'): "write_atomic itself",
    ("runtime/trace.py", '.open("a"'): "trace lines: data redacted in append_canonical before hashing",
    ("experiment/journal.py", 'open(path, "a"'): "journal and append_record: redacted in append / before writing",
    ("agents/fake_llm.py", 'open(path, "a"'): "the offline model's exchange log, redacted on the line below",
    ("cli/main.py", "open(folder / f\"warnings-"): "library warnings, redacted on the line below",
    ("agents/cassette.py", "tmp.write_bytes(data)"): "the cassette: to_bytes passes it through redact_json",
    ("experiment/landing.py", "path.write_bytes(data)"): "a worker's trace (redacted as it was written) or database",
    ("experiment/shipping.py", "path.write_bytes(data)"): "inputs shipped to a worker: the project's data files",
    ("experiment/shipping.py", "config.write_bytes(shipped.config)"): "the config shipped to a worker",
    ("world/mcp_stdio.py", 'open(self.stderr_path, "ab")'): "a real server's stderr, in the episode's scratch folder, "
    "removed when the episode ends; its last line reaches only an error message, redacted where that is recorded",
    ("world/mcp_http.py", 'open(self.stderr_path, "ab")'): "an HTTP server's stderr, as for stdio servers above",
    ("world/launcher.py", 'os.fdopen(in_w, "wb")'): "the pipe to a forked server's stdin (its JSON-RPC requests), "
    "not a file",
    ("world/resource.py", 'p.write_text(text, encoding="utf-8")'): "an external world's fixture files: the world's "
    "own data, written into the episode's fresh folder",
    ("atlas/cache.py", '(dest / "package.json").write_text('): "an empty npm prefix's package.json, a constant",
    ("atlas/cache.py", "tmp.write_text(json.dumps(marker"): "an install's marker: registry, package, release, pins",
    ("atlas/cell.py", "(target / WORLD_FILE).write_text("): "the drafted world in the cell's scratch folder, removed "
    "when the cell ends; the records written from it are redacted value by value",
    ("atlas/run.py", 'open(out / ".atlas.lock", "a")'): "the atlas folder's writer lock, empty",
}
WRITER = re.compile(r"write_text\(|write_bytes\(|open\([^)]*[\"'][wa]b?[\"']|\.open\([\"'][wa]|to_parquet\(|to_csv\("
                    r"|savefig\(")


def test_every_writer_of_evidence_passes_the_redaction_choke_point() -> None:
    """A new place that writes a file must redact (on its line) or be listed above with the reason it need not."""
    unexplained = []
    for path in sorted((ROOT / "aft_bench").rglob("*.py")):
        rel = str(path.relative_to(ROOT / "aft_bench"))
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            if not WRITER.search(line) or "redact" in line:
                continue
            if rel.startswith("viewer/"):  # the viewer writes only its bundle, outside DIR, from what DIR holds
                continue
            if not any(rel == f and snippet in line for f, snippet in NOT_EVIDENCE_TEXT):
                unexplained.append(f"{rel}:{n}: {line.strip()}")
    assert unexplained == []


def test_a_credential_in_a_key_column_is_never_journaled(tmp_path: Path, monkeypatch) -> None:
    """Redacting a key column would break the row's run id, so such a row is refused whole (the tuple pending)."""
    from aft_bench.experiment.journal import Journal, UnrecordableRow

    _cfg, out = _small_run(tmp_path)
    row = json.loads((out / "journal.jsonl").read_text().splitlines()[0])["row"]
    monkeypatch.setenv("PLANTED_API_KEY", PLAIN_SECRET)
    journal = Journal(tmp_path / "j.jsonl")
    with pytest.raises(UnrecordableRow, match="key column model carries a credential"):
        journal.append({**row, "model": f"m-{PLAIN_SECRET}"})
    journal.append({**row, "client": f"x-{PLAIN_SECRET}/1"})  # not a key column: recorded, redacted
    assert PLAIN_SECRET not in (tmp_path / "j.jsonl").read_text()
    assert journal.rows[-1]["client"] == "x-[redacted]/1"


def test_a_full_disk_while_a_folder_is_written_names_the_folder(tmp_path: Path, capsys, monkeypatch) -> None:
    """An OSError with no file name (pandas writing a CSV onto a full disk) said "?: No space left on device"."""
    import errno

    _cfg, out = _small_run(tmp_path)

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    capsys.readouterr()
    assert main(["analyze", str(out), "--resamples", "20", "--permutations", "20"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"aft-bench: error: cannot write {out / 'analysis'}: No space left on device; results recorded " \
                  "earlier are intact"
    assert not (out / "analysis").exists() and not [p for p in out.iterdir() if p.name.startswith(".analysis")]


def test_a_library_warning_goes_to_the_log_not_between_the_command_and_its_error(tmp_path: Path, capsys,
                                                                                   monkeypatch) -> None:
    """A pydantic-style warning raised while a command runs made its error several lines long."""
    import tempfile
    import warnings

    cli = sys.modules["aft_bench.cli.main"]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    real = cli.cmd_validate

    def noisy(args):
        warnings.warn("Pydantic serializer warnings: Expected 9 fields but got 5", UserWarning, stacklevel=1)
        return real(args)

    monkeypatch.setattr(cli, "cmd_validate", noisy)  # build_parser binds the command when main() calls it
    bad = tmp_path / "bad.toml"
    bad.write_text("[experiment\n")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "serializer" not in err
    logs = list((tmp_path / "aft-bench").glob("warnings-*.log"))
    assert logs and "Expected 9 fields" in logs[0].read_text()


@pytest.mark.parametrize("key", ["sk-" + "a" * 20, "ghp_" + "a" * 22, "github_pat_" + "a" * 22, "xoxb-" + "1" * 12,
                                 "AKIA" + "A" * 16, "AIza" + "a" * 35, "hf_" + "a" * 32,
                                 "eyJ" + "a" * 12 + "." + "b" * 12 + "." + "c" * 12, "Bearer " + "a" * 20])
def test_the_fast_prefilter_lets_every_key_shape_through_to_redaction(key: str) -> None:
    """The hot path skips the key patterns when no key prefix occurs: every shape must still reach them."""
    from aft_bench.common.secrets import KEY_PREFIXES, redact

    assert KEY_PREFIXES.search(key) and redact(f'{{"a": "x {key} y"}}') == '{"a": "x [redacted] y"}'
    assert not KEY_PREFIXES.search("the highest right-hand weight of a rough night")  # ordinary text skips


def test_a_long_text_found_clean_is_checked_again_when_the_secrets_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """The verdict cache for long texts (a large surface event repeated across traces) is keyed on the secrets:
    a value that becomes secret later is redacted from the same text, and a key inside a long text always is."""
    from aft_bench.common.secrets import LONG_TEXT, REDACTED, redact

    token = "tok" + "9" * 30
    text = '{"tools":["' + "a" * LONG_TEXT + '","' + token + '"]}'
    assert redact(text) is text and redact(text) is text  # clean, then answered from the cache
    monkeypatch.setenv("VENDOR_API_TOKEN", token)
    assert redact(text) == text.replace(token, REDACTED)  # the environment changed: scanned again
    monkeypatch.delenv("VENDOR_API_TOKEN")
    assert redact(text) is text
    keyed = text.replace(token, "sk-" + "b" * 24)
    assert REDACTED in redact(keyed) and REDACTED in redact(keyed)  # a dirty long text is never cached as clean
