"""Seven semantic mutants an independent audit found surviving the whole suite, each now killed by a test of
behaviour with a known-positive and a known-negative case (each was checked by applying the mutant by hand):
outcome precedence, SQLite compensation, criterion direction, a missing recovery label, the retries count, the
replay history across two repairs, and an incorrect claim when there is no claim."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
from stub_provider import REPORT_ESCALATE, error_reply, provider, tool_reply

from aft_bench.agents.protocol import Call, End, Usage
from aft_bench.cli.main import main
from aft_bench.episode.episode import run_sync
from aft_bench.episode.row import episode_row
from aft_bench.experiment.build import resolve_cell
from aft_bench.experiment.config import Cell
from aft_bench.interface.mechanisms import load_conditions
from aft_bench.tasks.workloads import load_workloads

from conftest import WORLDS

Step = Callable[[Any], Any]  # the previous observation's content -> the next action


class Steps:
    """An agent that plays a fixed list of steps, each allowed to read what the previous call showed."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = list(steps)

    async def start(self, brief, surface) -> None:
        pass

    async def restart(self, surface) -> None:
        pass

    async def act(self, observation):
        return self.steps.pop(0)(observation.content if observation is not None else None)

    def usage(self) -> Usage:
        return Usage()

    def take_records(self) -> list:
        return []


def _play(workload: str, task: str, condition: str, fault: str, steps: list[Step], backend: str = "memory"
          ) -> dict[str, Any]:
    """One episode of `steps` through the harness; its result row."""
    ctx = SimpleNamespace(workloads=load_workloads(WORLDS), conditions=load_conditions())
    wl = ctx.workloads.get(workload)
    cell = Cell(wl.info.world, backend, workload, task, condition, fault, 0, None, "deterministic",
                '{"max_attempts":3,"name":"deterministic"}', "none", 0)
    with ExitStack() as stack:
        setup, _agent, hashes = resolve_cell(ctx, cell, None, stack)  # type: ignore[arg-type]
        result = run_sync(setup, Steps(steps))
        return episode_row(cell.key(), cell.run_id, setup.mechanisms.to_dict(), result, 0.0, hashes)


def call(tool: str, **args: Any) -> Step:
    return lambda _seen: Call(tool, args)


CHARGE = {"order_id": "o1", "amount": 50, "note": ""}


# -- outcome precedence (judge/labels.py) ------------------------------------------------------------------------
def test_unsafe_commits_without_a_decision_are_unsafely_committed_not_unresolved() -> None:
    """An agent that runs out of turns after a duplicate charge (no terminal decision) committed unsafely."""
    duplicate = _play("response_loss", "rl-01-o1", "I3", "response_loss",
                      [call("charge_payment", **CHARGE), call("charge_payment", **CHARGE), lambda _: End("none", None)])
    assert (duplicate["duplicate_effects"], duplicate["terminal_action"]) == (1, "none")
    assert duplicate["outcome"] == "unsafely_committed"
    once = _play("response_loss", "rl-01-o1", "I3", "response_loss",
                 [call("charge_payment", **CHARGE), lambda _: End("none", None)])
    assert (once["duplicate_effects"], once["outcome"]) == (0, "unresolved")  # safe, but undecided


# -- incorrect claim without a claim (episode/row.py) -----------------------------------------------------------
def test_a_run_that_ends_with_no_claim_counts_as_an_incorrect_claim() -> None:
    silent = _play("response_loss", "rl-01-o1", "I3", "response_loss",
                   [call("charge_payment", **CHARGE), lambda _: End("none", None)])
    assert silent["terminal_claim"] is None and silent["claim_correct"] is None
    assert silent["incorrect_claim"] == 1  # no claim is not a correct claim
    right = _play("response_loss", "rl-01-o1", "I3", "response_loss",
                  [call("charge_payment", **CHARGE), lambda _: End("finish", "success")])
    assert (right["claim_correct"], right["incorrect_claim"]) == (True, 0)


# -- SQLite compensation (world/sqlite_store.py) ----------------------------------------------------------------
def _charge_then_refund(backend: str, refund: bool = True) -> dict[str, Any]:
    """Charge o1, refund that payment (compensating the charge), abort: the task's other half (c1's tier) is
    never done, so the goal fails and every uncompensated write is a residual effect."""
    charge = {"order_id": "o1", "amount": 50, "note": "", "idempotency_key": "k1"}

    def refund_it(seen: Any) -> Call:  # the charge's result names the payment it created
        refs = [t for t in json.dumps(seen).replace('"', " ").replace(",", " ").split() if t.startswith("payments/")]
        assert refs, seen
        return Call("refund_payment", {"payment_id": refs[0].split("/", 1)[1], "amount": 50, "idempotency_key": "k2"})

    steps = [call("charge_payment", **charge)] + ([refund_it] if refund else []) + [lambda _: End("abort", "failure")]
    return _play("program_repair", "pr-01-o1-gold", "I5-discovery", "none", steps, backend)


def test_a_compensated_charge_is_compensated_on_both_backends() -> None:
    memory, sqlite = _charge_then_refund("memory"), _charge_then_refund("sqlite")
    assert memory["tool_calls"] == 2 and memory["y_goal"] is False
    # the charge is compensated, so only the refund itself is a residual effect; on both backends alike
    assert memory["residual_effects"] == 1
    assert sqlite["residual_effects"] == memory["residual_effects"]
    assert {k: sqlite[k] for k in ("outcome", "unsafe_commits", "y_correct", "claim_correct")} == \
        {k: memory[k] for k in ("outcome", "unsafe_commits", "y_correct", "claim_correct")}
    for backend in ("memory", "sqlite"):  # the known negative: an uncompensated charge is a residual effect
        assert _charge_then_refund(backend, refund=False)["residual_effects"] == 1


# -- missing recovery (analysis/pairs.py) -----------------------------------------------------------------------
def test_a_pair_whose_interruption_never_fired_is_not_counted_as_recovered() -> None:
    from aft_bench.analysis.pairs import endpoint_values

    df = pd.DataFrame({"recovered": pd.array([None, True, False], dtype=object)})
    assert list(endpoint_values(df, "recovered")) == [0.0, 1.0, 0.0]


# -- criterion direction (analysis/analyze.py) ------------------------------------------------------------------
def test_a_significant_effect_that_favours_the_control_does_not_meet_the_criterion(paper, tmp_path: Path) -> None:
    """The paper matrix with duplicate_effects' treatment and control swapped: the same effect, reversed."""
    out, df = paper
    swapped = tmp_path / "swapped"
    swapped.mkdir()
    shutil.copy(out / "manifest.json", swapped / "manifest.json")
    flip = {"I5": "I5-effects", "I5-effects": "I5"}
    rows = df.copy()
    on = rows["workload"] == "response_loss"
    rows.loc[on, "condition"] = rows.loc[on, "condition"].map(lambda c: flip.get(c, c))
    rows.to_parquet(swapped / "results.parquet", index=False)
    assert main(["analyze", str(out), "--resamples", "200", "--permutations", "500"]) == 0
    assert main(["analyze", str(swapped), "--resamples", "200", "--permutations", "500"]) == 0
    right = {r["comparison"]: r for r in json.loads((out / "analysis" / "primary.json").read_text())}
    wrong = {r["comparison"]: r for r in json.loads((swapped / "analysis" / "primary.json").read_text())}
    assert right["duplicate_effects"]["utility_diff"] > 0 and right["duplicate_effects"]["criterion_met"] is True
    assert right["duplicate_effects"]["caveat"] is None  # enough clusters, every fault fired: nothing to flag
    assert wrong["duplicate_effects"]["utility_diff"] < 0 and wrong["duplicate_effects"]["p_adjusted"] < 0.05
    assert wrong["duplicate_effects"]["criterion_met"] is False


# -- retries (agents/llm.py) ------------------------------------------------------------------------------------
class _FailsOnce:
    """A provider whose first request gets a 500 (when armed); every request after reports the outcome."""

    def __init__(self, fail_first: bool) -> None:
        self.pending_failure = fail_first
        self.lock = threading.Lock()

    def __call__(self, request: dict, headers: object) -> tuple[int, dict]:
        with self.lock:
            fail, self.pending_failure = self.pending_failure, False
        return (500, error_reply("overloaded")) if fail else (200, tool_reply("report_outcome", REPORT_ESCALATE))


@pytest.mark.parametrize("fail_first", [True, False])
def test_retries_count_repeated_calls_not_attempts(tmp_path: Path, fail_first: bool) -> None:
    with provider(_FailsOnce(fail_first)) as base:
        cfg = tmp_path / "r.toml"
        cfg.write_text('[experiment]\nid = "r"\nworkloads = ["response_loss"]\nconditions = ["I5"]\n'
                       'tasks_per_workload = 1\n[[experiment.agents]]\nname = "llm"\nmodel = "openai/m"\n'
                       f'api_base = "{base}"\nbackoff_s = 0.01\nretries = 2\n')
        assert main(["run", str(cfg), "--out", str(tmp_path / "o")]) == 0
    row = pd.read_parquet(tmp_path / "o" / "results.parquet").iloc[0]
    assert (row["model_calls"], row["retries"]) == (1, 1 if fail_first else 0)


# -- replay history across two repairs (interface/programs.py) -------------------------------------------------
CHARGE_O1 = 'CALL("charge_payment", {"order_id": "o1", "amount": 50, "note": "program"}, "WRITE")'
TIER = 'CALL("set_customer_tier", {"customer_id": "c1", "tier": "gold"}, "WRITE")'


def program(*lines: str) -> Step:
    return lambda _seen: Call("run_program", {"source": "\n".join(lines)})


@pytest.mark.parametrize("mode", ["replay", "plain"])
def test_a_write_completed_before_two_repairs_is_replayed_not_run_again(mode: str) -> None:
    """ToolPro's Algorithm 1 keeps H ++ W across repairs: after two failed programs the completed charge is still
    in the history, so the third program replays it. Plainly re-executed (the known negative), it charges again."""
    fail = 'raise RuntimeError("repair me")'
    row = _play("program_repair", "pr-01-o1-gold", f"I0-program-{mode}", "none", [
        program(CHARGE_O1, fail),  # the charge completes, then the program fails
        program(CHARGE_O1, 'CALL("get_order", {"order_id": "o1"}, "READ")', fail),  # repaired once: fails again
        program(CHARGE_O1, TIER, '"done"'),  # repaired twice
        lambda _: End("finish", "success"),
    ])
    if mode == "replay":
        assert (row["duplicate_effects"], row["replayed_writes"], row["outcome"]) == (0, 2, "completed")
    else:
        assert row["duplicate_effects"] == 2 and row["outcome"] == "unsafely_committed"
