"""Recorded models: a run against a stochastic provider recorded once (`--record`) replays (`--replay`) with every
label and usage column identical, offline, through litellm's real HTTP path; a one-word change in a tool
description makes replay fail closed (exit 1, no row) naming the run, the turn, the request hash and the field."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pandas as pd

from aft_bench.agents.fake_llm import FakeModel, index_tasks, serve
from aft_bench.cli.main import main

from conftest import ROOT, WORLDS

TIMING = {"latency_s", "wall_s", "retry_wait_s"}  # clocks: a replay waits as long, but never exactly as long
PROVENANCE = {"session", "cassette", "code_version", "trace_head"}  # the trace holds the clocks too
KEY = "sk-cassetteKEY0123456789abcdefXYZ"


def _config(tmp_path: Path, base: str, key_env: bool = False) -> Path:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[experiment]\nid = "cassette"\ncomparisons = ["duplicate_effects", "terminal_verification"]\n'
                   'tasks_per_workload = 2\n[[experiment.agents]]\nname = "llm"\nmodel = "openai/fake-capability"\n'
                   f'api_base = "{base}"\n' + ('api_key_env = "CASSETTE_TEST_API_KEY"\n' if key_env else "") +
                   # 21 attempts with short waits: the fake's seeded failures come in arrival order, so the first
                   # calls of a run see the same early streak (seed 7 begins 10 failures in 16) and 9 attempts
                   # ran out in about 1.5 % of runs, a correct ProviderError that failed the test
                   'concurrency = 4\nretries = 20\n'
                   'backoff_s = 0.01\nmax_backoff_s = 0.05\n')
    return cfg


def test_a_recorded_stochastic_model_replays_to_identical_rows(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("CASSETTE_TEST_API_KEY", KEY)
    model = FakeModel(index_tasks([WORLDS]), failure_rate=0.3, failures=("429", "500"), seed=7)
    srv = serve(model)
    tape = tmp_path / "run.cassette"
    try:
        cfg = _config(tmp_path, f"http://127.0.0.1:{srv.server_port}/v1", key_env=True)
        code = main(["run", str(cfg), "--out", str(tmp_path / "live"), "--record", str(tape)])
        failed = tmp_path / "live" / "failures.jsonl"
        assert code == 0, failed.read_text() if failed.exists() else code
    finally:
        srv.shutdown()  # from here on no provider exists: the replay can only answer from the cassette
    live = pd.read_parquet(tmp_path / "live" / "results.parquet").set_index("run_id").sort_index()
    assert live["retries"].sum() > 0 and live["cassette"].isna().all()  # the failures were recorded too
    assert KEY.encode() not in tape.read_bytes() and KEY.encode() not in gzip.decompress(tape.read_bytes())
    assert main(["run", str(cfg), "--out", str(tmp_path / "replay"), "--replay", str(tape)]) == 0
    again = pd.read_parquet(tmp_path / "replay" / "results.parquet").set_index("run_id").sort_index()
    same = [c for c in live.columns if c not in TIMING | PROVENANCE and not c.endswith("_hash")]
    pd.testing.assert_frame_equal(live[same], again[same])
    assert again["cassette"].nunique() == 1 and len(again["cassette"].iloc[0]) == 16
    assert "cassette:" in capsys.readouterr().out


def test_a_changed_tool_description_makes_replay_fail_closed(tmp_path: Path, capsys) -> None:
    cfg = _config(tmp_path, "offline")
    tape = tmp_path / "run.cassette"
    assert main(["run", str(cfg), "--out", str(tmp_path / "live"), "--record", str(tape)]) == 0
    worlds = tmp_path / "worlds"
    shutil.copytree(WORLDS, worlds)
    world = worlds / "payments" / "world.toml"
    world.write_text(world.read_text().replace('description = "Charge a payment for an order. Irreversible: money moves."',
                                               'description = "Read one order by its id."', 1))
    capsys.readouterr()
    code = main(["run", str(cfg), "--out", str(tmp_path / "replay"), "--replay", str(tape), "--worlds", str(worlds)])
    err = capsys.readouterr().err
    miss = [json.loads(ln) for ln in (tmp_path / "replay" / "failures.jsonl").read_text().splitlines()]
    assert code == 1 and miss and all("cassette miss" in f["message"] for f in miss)
    replayed = pd.read_parquet(tmp_path / "replay" / "results.parquet")
    assert not set(replayed["run_id"]) & {f["run_id"] for f in miss}  # a tuple that missed has no row
    recorded = json.loads(gzip.decompress(tape.read_bytes()))["entries"]
    shown = {a["episode"] for e in recorded if "money moves." in json.dumps(e["request"]) for a in e["answers"]}
    assert {f["run_id"] for f in miss} == shown  # exactly the tuples whose model was shown that description
    assert set(replayed["run_id"]) | shown == set(pd.read_parquet(tmp_path / "live" / "results.parquet")["run_id"])
    assert all("differs from the nearest recorded request" in f["message"] and "turn " in f["message"] for f in miss)
    fields = {f["message"].rsplit(" at ", 1)[1] for f in miss}  # where the model was first shown the new text:
    assert fields and all(f.startswith(("tools[", "messages[")) for f in fields)  # a schema or a describe result
    assert "replay miss in run" in err and "request " in err and "differs from the nearest" in err


def test_a_damaged_cassette_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    cfg = _config(tmp_path, "offline")
    bad = tmp_path / "bad.cassette"
    bad.write_bytes(gzip.compress(b'{"format": "aft-bench-cassette", "version": 9, "entries": []}'))
    assert main(["run", str(cfg), "--out", str(tmp_path / "o"), "--replay", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "version" in err and not (tmp_path / "o").exists()
    tape = tmp_path / "t.cassette"
    tape.write_text("x")
    assert main(["run", str(cfg), "--out", str(tmp_path / "o"), "--record", str(tape)]) == 2  # never overwritten
    assert tape.read_text() == "x"


def test_the_committed_ci_cassette_replays_the_live_offline_run(tmp_path: Path) -> None:
    """The CI gate's cassette still answers every call this code makes, and its rows equal a live run's: a change
    that shows the model something else fails here first (re-record: see configs/llm_replay_ci.toml)."""
    cfg = ROOT / "configs" / "llm_replay_ci.toml"
    assert main(["run", str(cfg), "--out", str(tmp_path / "replay"), "--replay",
                 str(ROOT / "configs" / "llm_replay_ci.cassette")]) == 0
    assert main(["run", str(cfg), "--out", str(tmp_path / "live")]) == 0
    live = pd.read_parquet(tmp_path / "live" / "results.parquet").set_index("run_id").sort_index()
    again = pd.read_parquet(tmp_path / "replay" / "results.parquet").set_index("run_id").sort_index()
    same = [c for c in live.columns if c not in TIMING | PROVENANCE and not c.endswith("_hash")]
    pd.testing.assert_frame_equal(live[same], again[same])
    assert main(["analyze", str(tmp_path / "replay"), "--resamples", "100", "--permutations", "100"]) == 0
    assert main(["check", str(tmp_path / "replay"), "--expect", str(ROOT / "configs" / "llm_replay_ci_expect.toml")]) == 0
