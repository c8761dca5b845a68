"""The `llm` agent end to end through litellm's real HTTP path against the offline model on 127.0.0.1:
parity with the deterministic agent, fail-closed provider handling, no key anywhere, spend ceilings, and
clear errors for configs that could not run."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from aft_bench.agents.fake_llm import FakeModel, index_tasks, serve
from aft_bench.cli.main import main

from conftest import ROOT, WORLDS

KEYS = ["world", "backend", "workload", "task_id", "condition", "fault", "fault_seed", "catalog_size", "rep"]
LABELS = ["fault_fired", "outcome", "y_goal", "y_correct", "recovered", "duplicate_effects", "unsafe_commits",
          "unauthorized_effects", "stale_writes", "unintended_effects", "residual_effects", "terminal_action",
          "terminal_claim", "claim_correct", "incorrect_claim", "recall", "tool_calls"]
CANARY = "sk-canary-0123456789abcdefABCDEF"


@pytest.fixture(scope="module")
def tasks() -> dict:
    return index_tasks([WORLDS])


@pytest.fixture
def server(tasks: dict) -> Iterator:
    """A fresh offline model per test (its failure injection is seeded and stateful)."""
    made = []

    def start(**kw):  # type: ignore[no-untyped-def]
        srv = serve(FakeModel(tasks, **kw))
        made.append(srv)
        return f"http://127.0.0.1:{srv.server_port}/v1"

    yield start
    for srv in made:
        srv.shutdown()


def _config(tmp: Path, agent: str, extra: str = "", comparisons: str = '["duplicate_effects"]') -> Path:
    p = tmp / "llm.toml"
    p.write_text(f'''[experiment]
id = "llm_test"
comparisons = {comparisons}
seeds = [0]
tasks_per_workload = 2
catalog_sizes = [10, 50]
{extra}

[[experiment.agents]]
name = "llm"
{agent}
''')
    return p


def _labels(d: Path) -> pd.DataFrame:
    df = pd.read_parquet(d / "results.parquet")
    return df[KEYS + LABELS].astype(str).sort_values(KEYS).reset_index(drop=True)


def test_the_offline_capability_model_reproduces_the_deterministic_labels_on_smoke(smoke_results: Path,
                                                                                   tmp_path: Path) -> None:
    """The quality bar: same world, faults and outcome, tuple for tuple, through litellm -> HTTP -> fake model."""
    out = tmp_path / "llm"
    assert main(["run", str(ROOT / "configs" / "llm_offline.toml"), "--out", str(out)]) == 0
    assert _labels(out).equals(_labels(smoke_results))
    rows = pd.read_parquet(out / "results.parquet")
    assert (rows["model_calls"] == rows["model_turns"]).all() and (rows["prompt_tokens"] > 0).all()
    assert rows["cost_usd"].isna().all()  # litellm has no price for the offline model: unknown, not 0
    assert (rows["model_bytes"] > 0).all() and (rows["traffic_bytes"] > rows["model_bytes"]).all()
    assert main(["audit", str(out)]) == 0
    trace = (out / "traces" / f"{rows['run_id'].iloc[0]}.jsonl").read_text().splitlines()
    calls = [json.loads(ln)["data"] for ln in trace if '"kind":"model_call"' in ln]
    assert calls and {"request_hash", "prompt_tokens", "latency_s", "retries", "tool_context_tokens"} <= set(calls[0])


def test_provider_failures_leave_tuples_pending_and_reruns_complete_them(server, tmp_path: Path, capsys,
                                                                           monkeypatch) -> None:
    """20 % injected 429/500/dropped connections, one harness retry per call (an episode of ~6 calls then fails
    with p ~ 0.2, so the first run leaves failures): failed tuples are failure records, never rows; rerunning
    completes the matrix (a tuple still failing after 15 reruns: p ~ 1e-10) with no duplicate tuple, and the
    audit passes."""
    monkeypatch.setenv("AFT_CANARY_KEY", CANARY)
    base = server(failure_rate=0.2, failures=("429", "500", "drop"), seed=3)
    cfg = _config(tmp_path, f'model = "openai/fake-capability"\napi_base = "{base}"\napi_key_env = "AFT_CANARY_KEY"\n'
                            "retries = 1\nbackoff_s = 0.01\nconcurrency = 1\n",  # one at a time: the seeded
                  # failures then hit the same calls on every machine, so the test is deterministic
                  comparisons='["duplicate_effects", "unsafe_commits", "resume_recovery"]')
    out = tmp_path / "out"
    codes = []
    for _ in range(15):
        codes.append(main(["run", str(cfg), "--out", str(out)]))
        if codes[-1] == 0:
            break
    assert codes[0] == 1 and codes[-1] == 0, codes
    failures = [json.loads(ln) for ln in (out / "failures.jsonl").read_text().splitlines()]
    assert failures and all(f["error"] == "ProviderError" for f in failures)
    assert all("after 2 attempt(s)" in f["message"] for f in failures)
    journal = [json.loads(ln)["row"]["run_id"] for ln in (out / "journal.jsonl").read_text().splitlines()]
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(journal) == len(set(journal)) == len(manifest["run_ids"])
    capsys.readouterr()
    assert main(["audit", str(out)]) == 0
    for f in out.rglob("*"):  # the key is named by its variable only, never written
        if f.is_file():
            assert CANARY not in f.read_bytes().decode("utf-8", "replace"), f
    assert "AFT_CANARY_KEY" in (out / "manifest.json").read_text()


def test_harness_retries_absorb_transient_failures_and_are_counted(server, tmp_path: Path) -> None:
    base = server(failure_rate=0.3, failures=("429", "500"), seed=1)
    cfg = _config(tmp_path, f'model = "openai/fake-capability"\napi_base = "{base}"\nretries = 6\nbackoff_s = 0.01\n')
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out)]) == 0
    rows = pd.read_parquet(out / "results.parquet")
    assert rows["retries"].sum() > 0 and not (out / "failures.jsonl").exists()


def test_two_event_loops_give_the_same_rows_as_one_and_obey_the_ceiling(server, tasks: dict, tmp_path: Path,
                                                                        capsys) -> None:
    """`--loops 2`: the cells in two loop processes, the runner still the single writer: the same labels tuple
    for tuple as one loop; under a spend ceiling both loops stop starting cells and the rerun completes."""
    base = server()
    cfg = _config(tmp_path, f'model = "openai/fake-capability"\napi_base = "{base}"\nconcurrency = 4\n')
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(["run", str(cfg), "--out", str(one)]) == 0
    assert main(["run", str(cfg), "--out", str(two), "--loops", "2"]) == 0
    assert _labels(two).equals(_labels(one))
    journal = [json.loads(ln)["row"]["run_id"] for ln in (two / "journal.jsonl").read_text().splitlines()]
    assert len(journal) == len(set(journal)) == len(pd.read_parquet(one / "results.parquet"))
    srv = serve(FakeModel(tasks, policy="capability"))  # answers as any model: a priced one here
    priced = _config(tmp_path, f'model = "openai/gpt-4o-mini"\napi_base = "http://127.0.0.1:{srv.server_port}/v1"\n'
                     'concurrency = 1\n')
    capped = tmp_path / "capped"
    assert main(["run", str(priced), "--out", str(capped), "--loops", "2", "--max-cost", "0.000001"]) == 3
    first = len(pd.read_parquet(capped / "results.parquet"))
    assert 1 <= first < len(journal)  # each loop finishes what it started (at most one each), then stops
    assert main(["run", str(priced), "--out", str(capped), "--loops", "2"]) == 0
    assert len(pd.read_parquet(capped / "results.parquet")) == len(journal)
    srv.shutdown()
    assert main(["run", str(cfg), "--out", str(tmp_path / "x"), "--loops", "0"]) == 2
    capsys.readouterr()


def test_malformed_model_actions_are_answered_and_counted_not_failures(server, tmp_path: Path) -> None:
    base = server()
    det = tmp_path / "det"
    assert main(["run", str(_config(tmp_path, f'model = "openai/fake-capability"\napi_base = "{base}"\n')),
                 "--out", str(det)]) == 0
    bad = tmp_path / "bad"
    assert main(["run", str(_config(tmp_path, f'model = "openai/fake-invalid"\napi_base = "{base}"\n')),
                 "--out", str(bad)]) == 0
    rows = pd.read_parquet(bad / "results.parquet")
    assert (rows["invalid_tool_calls"] == 2).all()  # an unknown tool, then arguments that are not JSON
    same = _labels(bad).drop(columns=["tool_calls"]).equals(_labels(det).drop(columns=["tool_calls"]))
    assert same  # after its noise the model behaves; the unknown-tool call is one more traced tool call
    assert (rows["tool_calls"].to_numpy() >= 1).all()


def test_a_forced_tool_choice_reaches_the_server_and_an_unset_one_leaves_run_keys_alone(server,
                                                                                       tmp_path: Path) -> None:
    """`tool_choice = "report_outcome"` goes out with every request (the offline model obeys it, as a real server
    would: each episode ends at its first decision); unset, it is not sent and not in the agent spec, so results
    recorded before the parameter existed keep their run keys."""
    from aft_bench.agents.registry import agent_spec

    base = server()
    free, forced = tmp_path / "free", tmp_path / "forced"
    assert main(["run", str(_config(tmp_path, f'model = "openai/fake-capability"\napi_base = "{base}"\n')),
                 "--out", str(free)]) == 0
    assert main(["run", str(_config(tmp_path, f'model = "openai/fake-capability"\napi_base = "{base}"\n'
                                              'tool_choice = "report_outcome"\n')), "--out", str(forced)]) == 0
    a, b = pd.read_parquet(free / "results.parquet"), pd.read_parquet(forced / "results.parquet")
    assert (a["tool_calls"] > 0).all() and not a["agent_spec"].str.contains("tool_choice").any()
    assert (b["tool_calls"] == 0).all() and (b["model_calls"] == 1).all() and (b["terminal_action"] == "escalate").all()
    assert set(a["run_id"]).isdisjoint(b["run_id"])  # a set tool_choice is part of the run key
    assert "tool_choice" not in agent_spec({"name": "llm", "model": "openai/x", "api_base": "offline"}).params


def test_an_overclaiming_model_is_labelled_by_the_state_not_by_its_claim(server, tmp_path: Path) -> None:
    base = server()
    out = tmp_path / "out"
    cfg = _config(tmp_path, f'model = "openai/fake-overclaim"\napi_base = "{base}"\n', comparisons='["terminal_verification"]')
    assert main(["run", str(cfg), "--out", str(out)]) == 0
    rows = pd.read_parquet(out / "results.parquet")
    assert (rows["terminal_claim"] == "success").all()
    false = rows[~rows["y_goal"]]
    assert len(false) and (false["claim_correct"] == False).all()  # noqa: E712 - a column of bools


def test_the_spend_ceiling_stops_new_tuples_and_a_raised_one_continues(server, tasks: dict, tmp_path: Path,
                                                                       capsys) -> None:
    """A priced model (litellm knows gpt-4o-mini's price): the ceiling stops the run with exit 3; the same
    experiment continues under a raised ceiling, nothing else changed."""
    srv = serve(FakeModel(tasks, policy="capability"))
    try:
        base = f"http://127.0.0.1:{srv.server_port}/v1"
        cfg = _config(tmp_path, f'model = "openai/gpt-4o-mini"\napi_base = "{base}"\nconcurrency = 1\n')
        out = tmp_path / "out"
        assert main(["run", str(cfg), "--out", str(out), "--max-cost", "0.000001"]) == 3
        assert "spend ceiling reached" in capsys.readouterr().err
        first = pd.read_parquet(out / "results.parquet")
        manifest = json.loads((out / "manifest.json").read_text())
        assert 1 <= len(first) < len(manifest["run_ids"]) and (first["cost_usd"] > 0).all()
        assert main(["run", str(cfg), "--out", str(out), "--max-cost", "100"]) == 0
        assert len(pd.read_parquet(out / "results.parquet")) == len(manifest["run_ids"])
    finally:
        srv.shutdown()


def test_a_declared_price_is_what_litellm_charges_per_reported_token(server, tmp_path: Path) -> None:
    """A self-hosted model litellm cannot price gets the declared price: cost = tokens x price, per row."""
    base = server()
    cfg = _config(tmp_path, f'model = "openai/fake-capability"\napi_base = "{base}"\nconcurrency = 2\n'
                  "input_usd_per_mtok = 2.0\noutput_usd_per_mtok = 8.0\n")
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out)]) == 0
    rows = pd.read_parquet(out / "results.parquet")
    expected = (rows["prompt_tokens"] * 2.0 + rows["completion_tokens"] * 8.0) / 1e6
    assert (rows["cost_usd"] > 0).all() and ((rows["cost_usd"] - expected).abs() < 1e-12).all()


def test_a_token_ceiling_applies_to_models_without_a_price(server, tmp_path: Path, capsys) -> None:
    base = server()
    cfg = _config(tmp_path, f'model = "openai/fake-capability"\napi_base = "{base}"\nconcurrency = 1\n',
                  extra="max_tokens_total = 1")
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out)]) == 3
    assert "tuples not started" in capsys.readouterr().err


@pytest.mark.parametrize("agent, extra, field", [
    ('model = "no-such-model-anywhere"', "", "litellm does not know the model"),
    ('model = "openai/fake-capability"\napi_base = "http://127.0.0.1:9/v1"\napi_key_env = "AFT_UNSET_KEY_X"', "",
     "AFT_UNSET_KEY_X, which is not set"),
    ('model = "openai/fake-capability"\napi_base = "offline"\nconcurrency = 0', "", "concurrency"),
    ('model = "openai/fake-capability"\napi_base = "offline"', "max_cost_usd = -1", "max_cost_usd"),
    ('model = "openai/fake-capability"\napi_base = "offline"\ninput_usd_per_mtok = 1.0', "", "declared together"),
])
def test_configs_that_could_not_run_are_one_line_and_exit_2(tmp_path: Path, capsys, agent: str, extra: str,
                                                             field: str) -> None:
    cfg = _config(tmp_path, agent, extra)
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0], err
    assert not out.exists()


def test_a_negative_max_cost_flag_is_refused(tmp_path: Path, capsys) -> None:
    cfg = _config(tmp_path, 'model = "openai/fake-capability"\napi_base = "offline"')
    assert main(["run", str(cfg), "--out", str(tmp_path / "o"), "--max-cost", "-1"]) == 2
    assert "--max-cost" in capsys.readouterr().err


def test_the_suite_cannot_reach_beyond_loopback() -> None:
    with pytest.raises(OSError, match="stays on 127.0.0.1"):
        socket.create_connection(("192.0.2.1", 80), timeout=0.1)


def test_through_the_router_the_offline_model_matches_the_deterministic_agent(tmp_path: Path) -> None:
    """Routed discovery on the LLM path: the capability-aware offline model resolves, describes and calls
    through the router exactly as the deterministic agent does (same labels, tuple for tuple)."""
    base = '[experiment]\nid = "r"\ncomparisons = ["router_safety"]\ntasks_per_workload = 4\n'
    det, llm = tmp_path / "det.toml", tmp_path / "llm.toml"
    det.write_text(base)
    llm.write_text(base + '[[experiment.agents]]\nname = "llm"\nmodel = "openai/fake-capability"\n'
                   'api_base = "offline"\nconcurrency = 4\n')
    assert main(["run", str(det), "--out", str(tmp_path / "d")]) == 0
    assert main(["run", str(llm), "--out", str(tmp_path / "l")]) == 0
    assert _labels(tmp_path / "l").equals(_labels(tmp_path / "d"))
    assert set(pd.read_parquet(tmp_path / "l" / "results.parquet")["condition"]) == {"I5", "I5-routed"}
