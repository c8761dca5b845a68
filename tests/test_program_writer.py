"""Programs a model writes (issue 29): the offline model's `programmer` and `broken` policies write the task as
one tool program from the plan and the tools they are shown, never from the task's reference program; each of
the broken kinds meets the real sandbox's validation or limits; and end to end on ToolPro's repair workload the
`llm` agent repairs, replays and falls back stepwise without a crash and without a write running twice under
replay (plain re-execution, the control, runs them again)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from aft_bench.agents.fake_llm import index_tasks
from aft_bench.agents.program_writer import BROKEN_KINDS, broken_kind, plan_calls, program_status, written_program
from aft_bench.cli.main import main
from aft_bench.interface.programs import ProgramRunner, validate
from aft_bench.interface.tools import Observation

from conftest import ROOT, WORLDS

CONFIG = ROOT / "configs" / "llm_programs.toml"
TASKS = index_tasks([WORLDS])
EFFECTS = {"charge_payment": "WRITE", "set_customer_tier": "WRITE", "get_order": "READ"}


def _repair_task():
    return next(s for (tid, _), s in TASKS.items() if tid.startswith("pr-01"))


def test_the_written_program_comes_from_the_plan_never_the_reference_program() -> None:
    with_reference = [(tid, s) for (tid, _), s in TASKS.items() if s.program]
    assert with_reference  # program_flow's tasks carry a reference program
    for tid, script in with_reference:
        source = written_program(tid, script.plan, [])
        assert script.program.strip() not in source
        assert source.count("CALL(") == len(plan_calls(script.plan))  # one CALL per plan call, in plan order
        assert validate(source, {s.call: "READ" if s.read else "WRITE" for _, s in plan_calls(script.plan)}) == []


def _run(source: str, mode: str = "replay") -> tuple[dict, list[str]]:
    calls: list[str] = []

    def call(tool: str, args: dict) -> Observation:
        calls.append(tool)
        return Observation({"status": "ok", "result": {"tool": tool}})

    return ProgramRunner(mode).run(source, EFFECTS, call, lambda *a, **k: None), calls


@pytest.mark.parametrize("kind, status, says, writes", [
    ("undeclared_tool", "program_rejected", "unknown tool 'charge_payment_now'", 0),
    ("wrong_effect", "program_rejected", "'charge_payment' is a WRITE tool", 0),
    ("type_error", "program_failed", "TypeError", 1),
    ("runaway_loop", "program_failed", "MemoryError: memory limit exceeded", 2),
])
def test_each_broken_program_meets_the_sandbox(kind: str, status: str, says: str, writes: int) -> None:
    out, calls = _run(written_program("pr-01-o1-gold", _repair_task().plan, [], kind))
    assert out["error"] == status and says in out["detail"] and len(calls) == writes
    assert program_status(out)[0] == ("error_refused" if status == "program_rejected" else "error_run")
    assert program_status(f"ERROR {status}: {out['detail']}") == program_status(out)  # the text form alike
    fixed, calls = _run(written_program("pr-01-o1-gold", _repair_task().plan, []))  # the known positive
    assert fixed["status"] == "ok" and calls == ["charge_payment", "set_customer_tier"]
    assert program_status(f"OK: {json.dumps({'result': 'done'})}") == ("ok", "")


def test_every_broken_kind_appears_on_the_repair_workload() -> None:
    kinds = {broken_kind(tid) for (tid, _) in TASKS if tid.startswith("pr-")}
    assert kinds == set(BROKEN_KINDS)


def _rows(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "results.parquet")


def test_a_model_s_broken_programs_are_repaired_replayed_or_finished_stepwise(tmp_path: Path) -> None:
    out = tmp_path / "broken"
    assert main(["run", str(CONFIG), "--out", str(out)]) == 0  # no tuple failed: never a crash
    assert not (out / "failures.jsonl").exists()
    df = _rows(out)
    replay, plain = df[df["condition"] == "I0-program-replay"], df[df["condition"] == "I0-program-plain"]
    assert len(replay) == len(plain) == 16
    assert (replay["outcome"] == "completed").all() and (replay["duplicate_effects"] == 0).all()
    assert set(replay["mode"]) == {"program", "fallback"} and replay["replayed_writes"].sum() > 0
    fell_back = replay[replay["mode"] == "fallback"]
    assert set(fell_back["task_id"].map(broken_kind)) == {"changed_write"} and (fell_back["fallbacks"] == 1).all()
    assert plain["duplicate_effects"].sum() > 0  # the control runs completed writes again
    assert main(["analyze", str(out), "--resamples", "200", "--permutations", "500"]) == 0
    row = next(r for r in json.loads((out / "analysis" / "comparisons.json").read_text())
               if r["comparison"] == "replay_duplicates")
    assert row["clusters"] == 16 and row["ci_low"] > 0 and row["criterion_met"] is True


def test_the_programmer_without_mistakes_runs_one_program_per_task(tmp_path: Path) -> None:
    cfg = tmp_path / "programmer.toml"
    cfg.write_text(CONFIG.read_text().replace("fake-broken", "fake-programmer"))
    assert main(["run", str(cfg), "--out", str(tmp_path / "o")]) == 0
    df = _rows(tmp_path / "o")
    assert (df["mode"] == "program").all() and (df["program_attempts"] == 1).all()
    assert (df["outcome"] == "completed").all() and df["duplicate_effects"].sum() == 0


@pytest.mark.parametrize("policy", ["broken", "programmer"])
def test_with_keys_and_under_selective_discovery_every_run_completes_once(tmp_path: Path, policy: str) -> None:
    """Keyed tools: the stepwise fallback keeps each step's own key (a shifted key would answer a later write
    with an earlier one's result). Selective discovery: the plan's tools are not yet loaded, validation refuses
    even a correct program, and the model goes stepwise instead of resubmitting it."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('[experiment]\nid = "keys"\nworkloads = ["program_repair"]\n'
                   'conditions = ["I0-program-replay-keys", "I5-program-replay"]\nseeds = [0]\n'
                   f'[[experiment.agents]]\nname = "llm"\nmodel = "openai/fake-{policy}"\napi_base = "offline"\n'
                   'concurrency = 16\n')
    assert main(["run", str(cfg), "--out", str(tmp_path / "o")]) == 0
    df = _rows(tmp_path / "o")
    assert len(df) == 32 and (df["outcome"] == "completed").all() and df["duplicate_effects"].sum() == 0
    selective = df[df["condition"] == "I5-program-replay"]
    assert (selective["program_attempts"] == 0).all() and (selective["model_turns"] < 13).all()


def test_the_broken_policy_s_mistake_per_submission() -> None:
    from aft_bench.agents.program_writer import mistake_of

    assert [mistake_of("changed_write", j) for j in range(3)] == ["type_error", "changed_write", "changed_write"]
    assert [mistake_of("undeclared_tool", j) for j in range(2)] == ["undeclared_tool", None]
    assert [mistake_of(None, j) for j in range(2)] == [None, None]


def test_programs_a_model_writes_beat_its_stepwise_calls_in_latency_and_traffic(tmp_path: Path) -> None:
    """configs/llm_program_latency.toml: the programmer with run_program offered against the same model without
    it, on the 16 Memos workflows at RTT = 1000 ms; both comparisons hold with their CI above zero."""
    from aft_bench.analysis.analyze import Options, analyze

    out = tmp_path / "o"
    assert main(["run", str(ROOT / "configs" / "llm_program_latency.toml"), "--out", str(out)]) == 0
    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == 32 and set(df["outcome"]) == {"completed"} and df["duplicate_effects"].sum() == 0
    written = df[df["condition"] == "I0-program-replay"]
    assert (written["mode"] == "program").all() and (df[df["condition"] == "I0"]["mode"] == "step").all()
    rows = {r["comparison"]: r for r in analyze(out, Options(resamples=500, permutations=2000))["comparisons"]}
    for cid in ("program_latency_written", "program_traffic_written"):
        assert rows[cid]["pairs"] == 16 and rows[cid]["ci_low"] > 0 and rows[cid]["criterion_met"] is True, rows[cid]
