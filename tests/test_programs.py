"""Tool programs: validation before execution, the pydantic-monty sandbox, the host CALL as enforcement point,
and effect-aware replay against plain re-execution."""

from __future__ import annotations

import json

import pytest

from aft_bench.episode.episode import open_pipeline
from aft_bench.interface.interface import Interface
from aft_bench.interface.mechanisms import load_conditions
from aft_bench.interface.programs import validate
from aft_bench.judge.labels import compute_labels
from aft_bench.runtime.faults import FaultSchedule
from aft_bench.runtime.trace import Trace

from conftest import task_of

EFFECTS = {"get_order": "READ", "charge_payment": "WRITE"}
GOOD = 'o = CALL("get_order", {"order_id": "o1"}, "READ")\nCALL("charge_payment", {"order_id": "o1", "amount": 50, "note": ""}, "WRITE")'


@pytest.mark.parametrize("source, reason", [
    ("import os", "imports are outside the surface"),
    ("from os import path", "imports are outside the surface"),
    ('open("/etc/passwd")', "'open' is outside the surface"),
    ('eval("1")', "'eval' is outside the surface"),
    ('__import__("os")', "'__import__' is outside the surface"),
    ("x = ().__class__", "attribute '__class__' is outside the surface"),
    ("while True:\n    pass", "unbounded loop"),
    ('CALL("launch", {}, "WRITE")', "unknown tool 'launch'"),
    ('CALL("charge_payment", {}, "READ")', "'charge_payment' is a WRITE tool, labelled READ"),
    ('t = "get_order"\nCALL(t, {}, "READ")', "CALL's tool must be a literal name"),
    ('CALL("get_order", {}, e)', "CALL's effect must be the literal"),
    ("x = (", "syntax error"),
    ("x = 1\n" * 20_000, "the limit is"),
])
def test_programs_outside_the_surface_are_rejected_with_their_line(source: str, reason: str) -> None:
    found = validate(source, EFFECTS)
    assert found and any(reason in d.reason for d in found), found


def test_a_program_inside_the_surface_passes() -> None:
    assert validate(GOOD, EFFECTS) == []
    assert validate("total = 0\nfor i in range(3):\n    total += i\ntotal", EFFECTS) == []


def _interface(worlds, condition: str):
    world, task = task_of(worlds, "payments/charge-o1")
    mech = load_conditions().resolve(condition)
    pipe = open_pipeline(world, task, FaultSchedule(id="t"), 0, Trace(), durable_state=mech.durable)
    return Interface(pipe, mech), task


def _labels(iface, task):
    return compute_labels(iface.pipeline.trace.events(), iface.pipeline.backend.state, task.criteria)


def test_a_program_runs_every_call_through_the_interface(worlds) -> None:
    iface, task = _interface(worlds, "I0-program-replay")
    assert "run_program" in {t.name for t in iface.surface()}
    obs = iface.call("run_program", {"source": GOOD})
    assert str(obs.content).startswith("OK: ") and '"calls":2' in obs.content
    kinds = [e.kind for e in iface.pipeline.trace.events()]
    assert kinds.count("tool_call") == 3 and "commit" in kinds and "program_completed" in kinds
    assert _labels(iface, task).y_goal


HOSTILE = ["import os", 'open("/etc/passwd").read()', 'eval("1+1")', '__import__("os")',
           "i = 0\nwhile i >= 0:\n    i += 1", "x = [0] * 10**9", "def f(n):\n    return f(n + 1)\nf(0)",
           'CALL("charge_payment", {"order_id": "o1", "amount": 50, "note": ""}, "READ")',
           'CALL("self_destruct", {}, "WRITE")', "x = 1\n" * 200_000]


@pytest.mark.parametrize("source", HOSTILE, ids=[h.splitlines()[0][:24] for h in HOSTILE])
def test_hostile_programs_are_contained_recorded_and_change_nothing(worlds, source: str) -> None:
    iface, _ = _interface(worlds, "I5-program-replay")
    iface.materialized |= {"charge_payment", "get_order"}
    before = iface.pipeline.backend.state_hash()
    obs = iface.call("run_program", {"source": source})
    assert obs.content["status"] == "error" and obs.content["error"] in ("program_rejected", "program_failed")
    assert iface.pipeline.backend.state_hash() == before and iface.pipeline.backend.state["ledger"] == []
    kinds = {e.kind for e in iface.pipeline.trace.events()}
    assert kinds & {"program_rejected", "program_failed"}
    assert iface.call("run_program", {"source": 'CALL("get_order", {"order_id": "o1"}, "READ")'}).content["status"] \
        == "ok"  # the sandbox and the episode survive


FAILING = GOOD + "\n1 / 0"  # fails after its write completed


@pytest.mark.parametrize("condition, commits, duplicates", [("I0-program-plain", 2, 1), ("I0-program-replay", 1, 0)])
def test_replay_never_repeats_a_completed_write_and_plain_does(worlds, condition: str, commits: int,
                                                              duplicates: int) -> None:
    iface, task = _interface(worlds, condition)
    first = iface.call("run_program", {"source": FAILING})
    assert first.content.startswith("ERROR program_failed")
    repaired = iface.call("run_program", {"source": GOOD})
    assert repaired.content.startswith("OK: ")
    lb = _labels(iface, task)
    assert (lb.commits, lb.duplicate_effects) == (commits, duplicates)
    replayed = [e for e in iface.pipeline.trace.events() if e.kind == "write_replayed"]
    assert len(replayed) == (1 if condition.endswith("replay") else 0)


def test_a_repair_that_changes_the_completed_write_prefix_falls_back_to_stepwise(worlds) -> None:
    iface, task = _interface(worlds, "I0-program-replay")
    iface.call("run_program", {"source": FAILING})
    changed = GOOD.replace('"note": ""', '"note": "other"')
    out = iface.call("run_program", {"source": changed})
    assert out.content.startswith("ERROR program_failed") and "replay disabled" in out.content
    assert iface.call("run_program", {"source": GOOD}).content.startswith("ERROR program_rejected")
    assert _labels(iface, task).commits == 1  # the changed write never went out
    assert "program_fallback" in {e.kind for e in iface.pipeline.trace.events()}
    stepwise = iface.call("get_order", {"order_id": "o1"})
    assert str(stepwise.content).startswith("OK: ")


def test_on_the_repair_workload_replay_never_duplicates_and_plain_duplicates_once_per_task(tmp_path) -> None:
    """The quality bar, on every one of the 16 task clusters of `program_repair`, through the runner."""
    import pandas as pd

    from aft_bench.cli.main import main

    from conftest import ROOT

    out = tmp_path / "out"
    assert main(["run", str(ROOT / "configs" / "toolpro_repair.toml"), "--out", str(out)]) == 0
    df = pd.read_parquet(out / "results.parquet")
    by = df.groupby("condition")
    assert (by.get_group("I0-program-replay")["duplicate_effects"] == 0).all()
    assert (by.get_group("I0-program-plain")["duplicate_effects"] == 1).all()
    assert df["task_id"].nunique() == 16 and df["y_goal"].all()
    assert main(["analyze", str(out), "--permutations", "2000", "--resamples", "200"]) == 0
    row = next(r for r in pd.read_csv(out / "analysis" / "comparisons.csv").to_dict("records")
               if r["comparison"] == "replay_duplicates")
    assert row["pairs"] == 16 and row["utility_diff"] == 1.0 and row["criterion_met"]


def test_the_program_agent_writes_the_plan_with_keys_and_a_failure_point(worlds) -> None:
    import asyncio

    from aft_bench.agents.program import Params, ProgramAgent
    from aft_bench.interface.tools import ToolSpec
    from aft_bench.tasks.workloads import load_workloads

    from conftest import WORLDS

    task = load_workloads(WORLDS).items["program_repair"].tasks[0]
    agent = ProgramAgent(Params(fail_after=1), task.script)
    keyed = {"type": "object", "properties": {"order_id": {}, "idempotency_key": {}}}
    asyncio.run(agent.start(task.brief, [ToolSpec("charge_payment", "", keyed, "business"),
                                          ToolSpec("run_program", "", {}, "lifecycle")]))
    src = agent.source(1)
    assert "'idempotency_key': 'pr-01-o1-gold-0'" in src and src.count("CALL(") == 2
    assert src.index("raise RuntimeError") < src.index("set_customer_tier")
    assert validate(agent.source(0), {"charge_payment": "WRITE", "set_customer_tier": "WRITE"}) == []


def test_the_virtual_clock_and_the_consolidation_rule() -> None:
    import pandas as pd

    from aft_bench.analysis.toolpro import program_saves_ms, virtual_latency_s

    rows = pd.DataFrame({"model_turns": [3, 2], "round_trips": [2, 1], "program_attempts": [0, 1]})
    assert list(virtual_latency_s(rows, rtt_ms=100, decision_ms=500, build_ms=50)) == [1.7, 1.15]
    assert program_saves_ms(5, rtt_ms=1, decision_ms=0, build_ms=10) < 0  # at 1 ms RTT stepwise wins
    assert program_saves_ms(5, rtt_ms=100, decision_ms=0, build_ms=10) > 0  # at 100 ms the program wins


def test_program_runs_record_their_mode_attempts_replays_and_traffic(tmp_path) -> None:
    import pandas as pd

    from aft_bench.cli.main import main

    from conftest import ROOT

    out = tmp_path / "out"
    assert main(["run", str(ROOT / "configs" / "toolpro_repair.toml"), "--out", str(out)]) == 0
    df = pd.read_parquet(out / "results.parquet")
    assert set(df["mode"]) == {"program"} and (df["program_attempts"] == 2).all() and (df["round_trips"] == 2).all()
    replay = df[df["condition"] == "I0-program-replay"]
    assert (replay["replayed_writes"] == 1).all() and (df["fallbacks"] == 0).all()
    assert (df["traffic_bytes"] > 0).all()
    assert main(["audit", str(out)]) == 0  # the new label columns are re-judged from the trace too


@pytest.mark.parametrize("params, problem", [
    ({"mode": "policy", "rtt_ms": 10}, "needs its profile"),
    ({"mode": "step", "rtt_ms": 10}, "give them with mode"),
    ({"mode": "sometimes"}, "mode"),
])
def test_the_policy_needs_its_whole_profile_and_only_the_policy_takes_one(params: dict, problem: str) -> None:
    from pydantic import ValidationError

    from aft_bench.agents.program import Params

    with pytest.raises(ValidationError, match=problem):
        Params(**params)


def test_stepwise_and_program_modes_complete_every_memos_workflow(tmp_path) -> None:
    """ToolPro's Memos workflows (N = 5..20, read-only and read-write): the same end state either way; N round
    trips and N + 1 decisions stepwise, one round trip and two decisions as a program."""
    import pandas as pd

    from aft_bench.cli.main import main

    cfg = tmp_path / "memos.toml"
    cfg.write_text('[experiment]\nid = "memos"\nworkloads = ["toolpro_memos"]\nconditions = ["I0-program-replay"]\n'
                   '[[experiment.agents]]\nname = "program"\nmode = "step"\n'
                   '[[experiment.agents]]\nname = "program"\nmode = "skeleton"\n'
                   '[[experiment.agents]]\nname = "program"\nmode = "program"\n')
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out)]) == 0
    everything = pd.read_parquet(out / "results.parquet")
    variant = everything["agent_spec"].map(lambda spec: json.loads(spec)["mode"])
    by_mode = {m: g.set_index("task_id").sort_index() for m, g in everything.groupby(variant)}
    skeleton, stepwise, program = by_mode["skeleton"], by_mode["step"], by_mode["program"]
    assert (skeleton["mode"] == "step").all()  # the row's mode is how it ran: stepwise calls
    # skeleton-guided stepwise: the same calls and decisions as stepwise, but the whole tool context only once
    assert skeleton["y_goal"].all()
    assert (skeleton[["round_trips", "model_turns"]] == stepwise[["round_trips", "model_turns"]]).all().all()
    assert (skeleton["model_bytes"] < stepwise["model_bytes"]).all()
    long = skeleton.index.str[-2:].astype(int) >= 10
    assert (program.loc[long, "model_bytes"] < skeleton.loc[long, "model_bytes"]).all()
    df = everything[variant != "skeleton"]
    n = df["task_id"].str[-2:].astype(int)
    assert len(df) == 32 and df["y_goal"].all() and (df["outcome"] == "completed").all()
    step, prog = df["mode"] == "step", df["mode"] == "program"
    assert step.sum() == prog.sum() == 16
    assert (df.loc[step, "round_trips"] == n[step]).all() and (df.loc[step, "model_turns"] == n[step] + 1).all()
    assert (df.loc[prog, "round_trips"] == 1).all() and (df.loc[prog, "model_turns"] == 2).all()


def test_a_skeleton_is_derived_once_per_process_and_again_after_a_restart() -> None:
    """Skeleton mode counts the whole surface's schemas at its first decision and after a lost process, and only
    the next call's tool schema at every other step."""
    import asyncio

    from aft_bench.agents.program import Params, ProgramAgent, _bytes
    from aft_bench.interface.tools import ToolSpec
    from aft_bench.tasks.task import Brief, PlanStep, Script

    specs = [ToolSpec(name, f"{name} a memo.", {"type": "object", "properties": {"memo_id": {"type": "string"}}},
                      "business")
             for name in ("get_memo", "archive_memo", "delete_memo")]
    plan = (PlanStep(call="get_memo", args={"memo_id": "m1"}, read=True),
            PlanStep(call="archive_memo", args={"memo_id": "m1"}))
    agent = ProgramAgent(Params(mode="skeleton"), Script(plan=plan, oracle=()))
    whole, get, archive = _bytes([t.schema() for t in specs]), _bytes(specs[0].schema()), _bytes(specs[1].schema())

    async def play() -> list[int]:
        sent = []
        await agent.start(Brief(task_id="t", spec="archive m1", inputs={}), specs)
        await agent.act(None)
        sent.append(agent.usage().model_bytes)
        await agent.restart(specs)  # the process lost its state: the skeleton is derived again
        await agent.act(None)
        sent.append(agent.usage().model_bytes)
        return sent

    assert asyncio.run(play()) == [whole + get, whole + get + whole + archive]


def test_the_rtt_sweep_policy_switches_mode_and_the_report_shows_it(tmp_path) -> None:
    """configs/toolpro_rtt_sweep.toml: with its declared profile (DEC 1.5 s, BUILD 12.6 s, N = 8) dT changes
    sign at 300 ms, so the policy runs stepwise at 1-100 ms and a program at 1000-2000 ms, and is never slower
    than the better fixed mode; the report carries the table and the figure."""
    import pandas as pd

    from aft_bench.analysis.toolpro import rtt_sweep
    from aft_bench.cli.main import main

    from conftest import ROOT

    out = tmp_path / "out"
    assert main(["run", str(ROOT / "configs" / "toolpro_rtt_sweep.toml"), "--out", str(out)]) == 0
    sweep = rtt_sweep(pd.read_parquet(out / "results.parquet"))
    assert sweep is not None and list(sweep["rtt_ms"]) == [1, 10, 100, 1000, 2000]
    assert list(sweep["policy_mode"]) == ["step"] * 3 + ["program"] * 2
    assert (sweep["policy_gap_pct"] <= 0).all()
    assert (sweep["step_s"] < sweep["program_s"]).tolist() == [True, True, True, False, False]
    assert (sweep["skeleton_s"] == sweep["step_s"]).all()  # on this clock a decision costs DEC however it is made
    assert sweep["ToolPro step (reference)"].tolist() == [14.50, 14.57, 15.30, 22.48, 30.50]  # shown, not used
    assert main(["analyze", str(out)]) == 0 and main(["report", str(out)]) == 0
    md = (out / "report" / "report.md").read_text()
    assert "## ToolPro RTT sweep" in md and (out / "report" / "fig6_rtt_sweep.png").stat().st_size > 0


def test_programs_are_served_as_an_mcp_tool(tmp_path) -> None:
    """A condition with programs on, served by `aft-bench serve`: `run_program` is an MCP tool whose calls go
    through the pipeline like any other."""
    import asyncio

    from mcp import Client

    from aft_bench.serving.record import ServedDirectory
    from aft_bench.serving.server import Served, Target, build_server

    from conftest import WORLDS

    source = 'CALL("set_memo_visibility", {"memo_id": "m1", "visibility": "private"}, "WRITE")'

    async def play():
        with ServedDirectory(tmp_path / "out", WORLDS) as directory:
            served = Served(Target("toolpro_sweep", "memos-w-08", "I0-program-replay"), WORLDS, directory)
            async with Client(build_server(served)) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                result = await client.call_tool("run_program", {"source": source})
                await client.call_tool("report_outcome", {"action": "finish", "claim": "failure"})
        return names, result, served.row

    names, result, row = asyncio.run(play())
    assert "run_program" in names and not result.is_error, result
    assert row["mode"] == "program" and row["program_attempts"] == 1 and row["y_goal"] is False  # 1 of 8 memos


def test_policy_against_stepwise_on_the_memos_workflows_is_an_agent_contrast(tmp_path) -> None:
    """configs/toolpro_workflows.toml: at 100 ms the policy runs N = 5 stepwise and N >= 10 as one program, so
    program_latency and program_traffic pair it with the stepwise runs task by task (same condition, other agent
    spec) and both favour it; the clock is a row column under the experiment's network profile."""
    import json

    import pandas as pd

    from aft_bench.cli.main import main

    from conftest import ROOT

    out = tmp_path / "out"
    assert main(["run", str(ROOT / "configs" / "toolpro_workflows.toml"), "--out", str(out)]) == 0
    df = pd.read_parquet(out / "results.parquet")
    mode = df["agent_spec"].map(lambda s: json.loads(s)["mode"])
    policy = df[mode == "policy"].set_index("task_id")["mode"]
    assert policy[policy.index.str.endswith("05")].eq("step").all()
    assert policy[~policy.index.str.endswith("05")].eq("program").all()
    step = df[mode == "step"]
    assert (step["virtual_latency_s"] == (step["model_turns"] * 1.5 + step["round_trips"] * 0.1)).all()
    assert (step["model_bytes"] > 0).all()  # no model: the schemas a model would be sent per decision
    assert main(["analyze", str(out)]) == 0
    rows = {r["comparison"]: r for r in json.loads((out / "analysis" / "comparisons.json").read_text())}
    for cid in ("program_latency", "program_traffic"):
        assert rows[cid]["pairs"] == 16 and rows[cid]["utility_diff"] > 0, rows[cid]
    pairs = pd.read_parquet(out / "analysis" / "pairs.parquet")
    assert (pairs.loc[pairs["comparison"] == "program_latency", "utility_diff"] >= 0).all()


@pytest.mark.parametrize("arms, problem", [
    ({"treatment_agent": {"mode": "policy"}}, "together"),
    ({"treatment_agent": {"mode": "step"}, "control_agent": {"mode": "step"}}, "same arm"),
])
def test_an_agent_contrast_names_both_arms_and_they_differ(arms: dict, problem: str) -> None:
    from pydantic import ValidationError

    from aft_bench.experiment.comparisons import Comparison

    with pytest.raises(ValidationError, match=problem):
        Comparison(id="x", treatment="I0", control="I0", workload="w", endpoint="y_goal", direction="higher",
                   test="two_sided", **arms)


def test_a_lost_write_response_defeats_replay_and_only_a_key_prevents_the_duplicate(tmp_path) -> None:
    """configs/toolpro_loss.toml on all 16 tasks: the re-executed program charges again under replay alone (the
    lost write is not a completed history entry, nothing is replayed) and never with an idempotency key."""
    import json

    import pandas as pd

    from aft_bench.cli.main import main

    from conftest import ROOT

    out = tmp_path / "out"
    assert main(["run", str(ROOT / "configs" / "toolpro_loss.toml"), "--out", str(out)]) == 0
    df = pd.read_parquet(out / "results.parquet")
    assert df["fault_fired"].all() and (df["program_attempts"] == 2).all() and (df["replayed_writes"] == 0).all()
    by = df.groupby("condition")["duplicate_effects"]
    assert (by.get_group("I0-program-replay") == 1).all() and (by.get_group("I0-program-replay-keys") == 0).all()
    assert main(["analyze", str(out), "--permutations", "2000", "--resamples", "200"]) == 0
    row = next(r for r in json.loads((out / "analysis" / "comparisons.json").read_text())
               if r["comparison"] == "program_loss_duplicates")
    assert row["pairs"] == 16 and row["utility_diff"] == 1.0


def test_under_selective_discovery_the_program_agent_loads_its_tools_first(tmp_path) -> None:
    """I5-program-replay shows no business schema up front: the agent describes each plan tool, then its
    program (or its stepwise calls) can use them."""
    import pandas as pd

    from aft_bench.cli.main import main

    cfg = tmp_path / "p5.toml"
    cfg.write_text('[experiment]\nid = "p5"\nworkloads = ["program_repair"]\nconditions = ["I5-program-replay"]\n'
                   'tasks_per_workload = 4\n[[experiment.agents]]\nname = "program"\n'
                   '[[experiment.agents]]\nname = "program"\nmode = "step"\n')
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out)]) == 0
    df = pd.read_parquet(out / "results.parquet")
    assert df["y_goal"].all() and set(df["mode"]) == {"program", "step"}
    assert (df["model_turns"] - df["round_trips"] == 1).all()  # every decision but the end is a call
    assert (df.loc[df["mode"] == "program", "round_trips"] == 3).all()  # two describes, one program


def test_programs_that_bind_loop_and_branch_on_read_results_reach_the_same_state(tmp_path) -> None:
    """The cbench-like `program_flow` workload: each task's reference program binds amounts and customers from
    reads, loops over orders and branches on their status or a customer's tier, in one round trip; the stepwise
    plan reaches the same end state in one round trip per call (o4, already paid, is never charged)."""
    import pandas as pd

    from aft_bench.cli.main import main

    cfg = tmp_path / "pf.toml"
    cfg.write_text('[experiment]\nid = "pf"\nworkloads = ["program_flow"]\nconditions = ["I4-program-replay"]\n'
                   '[[experiment.agents]]\nname = "program"\n[[experiment.agents]]\nname = "program"\nmode = "step"\n')
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out)]) == 0
    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == 16 and df["y_goal"].all() and (df["unintended_effects"] == 0).all()
    prog = df[df["mode"] == "program"]
    assert len(prog) == 8 and (prog["round_trips"] == 1).all() and (prog["program_attempts"] == 1).all()
    assert (df[df["mode"] == "step"]["round_trips"] >= 2).all()
