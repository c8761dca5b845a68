"""Accounting a user reads, pinned to exact values (issue 39, part 4): four behaviours that only loose or
one-sided tests touched, each a plausible one-line bug away from a wrong number that nothing would catch.

1. The spend ceiling. At concurrency 1 a tuple starts only while committed spend plus its own reservation (the
   largest tuple so far) stays within the ceiling (experiment/spend.py, `Ledger._admits`), so a ceiling of 2.5
   tuples' cost records exactly 2 rows, and a ceiling of 0 records none. Spend counted twice (the executor counts
   a row before its slot frees, the runner again on receipt) would stop the run after 1 row, at half its ceiling
   (or, when the runner's count lands late, report twice what was spent); a ceiling of 0 read as "no ceiling"
   would run everything.
2. A recorded rate limit. A 429 with Retry-After recorded into a cassette must replay with the same waits: the
   row's `retry_wait_s` and `retries` and the trace's per-call `waits`. A replay that drops the header falls
   back to jittered backoff, and nothing compared the two.
3. `aft-bench profile` over a folder that also holds warm starts. A warm run's `policy_step_ms` is copied from
   the profile it read, not measured: averaged in, it would drag the new profile towards the old one. The step
   is safe, and so is BUILD: a warm program's measured_build_ms is its clock time less the copied step
   (agents/program.py), 10110.0 and 10100.0 where every program took 12600 ms, so it too comes from cold starts
   alone (the profile's BUILD was 10940.0 and 11171.428571 before that was fixed).
4. Cost over a group mixing priced and unpriced runs. The unpriced runs' cost is unknown, so the group's cost
   per run and per completed task are unknown too ("unknown" in the report), never a mean over the priced part.

Every test runs the real command (`aft_bench.cli.main.main`) against the offline model or the fake model's
server on 127.0.0.1; each failed against a hand-made mutant of the code it defends (see each docstring)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from aft_bench.agents.fake_llm import FakeModel, index_tasks, serve
from aft_bench.cli.main import main
from aft_bench.experiment.config import load_matrix

from conftest import WORLDS

INPUT_USD, OUTPUT_USD = 0.15, 0.60  # USD per million tokens, declared for the offline model
PRICE = f"input_usd_per_mtok = {INPUT_USD}\noutput_usd_per_mtok = {OUTPUT_USD}\n"
SEEDS = (0, 1, 2, 3)  # one task under four fault seeds: four tuples the offline model plays alike


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _results(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "results.parquet")


# --- 1. the spend ceiling -------------------------------------------------------------------------------------

def _priced_config(tmp_path: Path, ceiling: str = "") -> Path:
    """One response_loss task under I5 and four fault seeds, the offline capability model at a declared price,
    one episode in flight (concurrency 1); `ceiling` is extra [experiment] lines."""
    return _write(tmp_path / "priced.toml",
                  '[experiment]\nid = "ceiling"\nworkloads = ["response_loss"]\nconditions = ["I5"]\n'
                  f'tasks_per_workload = 1\nseeds = {list(SEEDS)}\n{ceiling}'
                  '[[experiment.agents]]\nname = "llm"\nmodel = "openai/fake-capability"\napi_base = "offline"\n'
                  f'concurrency = 1\n{PRICE}')


@pytest.fixture(scope="module")
def tuple_cost(tmp_path_factory: pytest.TempPathFactory) -> float:
    """What one tuple of `_priced_config` costs, read from a real run without a ceiling (every tuple alike)."""
    tmp = tmp_path_factory.mktemp("free")
    out = tmp / "free"
    assert main(["run", str(_priced_config(tmp)), "--out", str(out)]) == 0
    df = _results(out)
    costs = set(df["cost_usd"])
    assert len(df) == len(SEEDS) and len(costs) == 1  # the offline model plays the four tuples alike
    (cost,) = costs
    # the declared price: prompt and completion tokens at 0.15 and 0.60 USD per million
    row = df.iloc[0]
    assert cost == pytest.approx((row["prompt_tokens"] * INPUT_USD + row["completion_tokens"] * OUTPUT_USD) / 1e6)
    assert cost > 0
    return float(cost)


def test_a_ceiling_of_two_and_a_half_tuples_records_exactly_two_rows(tuple_cost: float, tmp_path: Path,
                                                                       capsys) -> None:
    """Start rule at concurrency 1: committed + own reservation (the largest tuple so far) <= ceiling. After one
    tuple 1c + 1c <= 2.5c starts the second; after two, 2c + 1c > 2.5c stops: 2 rows, 2 tuples not started.
    Mutants: `Spend.add` without its once-per-run_id check (the executor's `end(row)` and the runner's `add(row)`
    both count): 1 row when the runner's count lands first (the run stops at half its ceiling), else 2 rows with
    $0.0039 committed and an overshoot reported; the reservation dropped from `_admits`: 3 rows."""
    ceiling = 2.5 * tuple_cost
    out = tmp_path / "o"
    capsys.readouterr()
    assert main(["run", str(_priced_config(tmp_path)), "--out", str(out), "--max-cost", repr(ceiling)]) == 3
    df = _results(out)
    assert len(df) == 2
    assert df["cost_usd"].sum() == pytest.approx(2 * tuple_cost)
    err = capsys.readouterr().err
    assert f"spend ceiling reached (${2 * tuple_cost:.4f} of ${ceiling}," in err
    assert ": 2 tuples not started;" in err


@pytest.mark.parametrize("how", ["--max-cost 0", "max_cost_usd = 0"])
def test_a_ceiling_of_zero_records_no_row(tmp_path: Path, capsys, how: str) -> None:
    """A ceiling of 0 (the flag, or the config's max_cost_usd) is a ceiling already reached, not "no ceiling": exit
    3, no row, every tuple not started. Mutants, each running every tuple: the runner reads the flag as
    `max_cost or max_cost_usd` (the flag's case), the ledger tests `bool(self.max_cost)` (both cases)."""
    flag = how.split() if how.startswith("--") else []
    cfg = _priced_config(tmp_path, "" if flag else how + "\n")
    out = tmp_path / "o"
    capsys.readouterr()
    assert main(["run", str(cfg), "--out", str(out), *flag]) == 3
    assert len(_results(out)) == 0 and (out / "journal.jsonl").read_text() == ""
    err = capsys.readouterr().err
    assert "spend ceiling reached ($0.0000 of $0.0," in err and f": {len(SEEDS)} tuples not started;" in err


# --- 2. a recorded rate limit replays its waits -----------------------------------------------------------------

RETRY_AFTER_S = 0.0625  # a binary fraction: sums of it are exact


def _model_calls(out: Path, run_id: str) -> list[dict[str, Any]]:
    """The trace's model_call events of one run: (turn, retries, waits) of each, in order."""
    events = [json.loads(ln) for ln in (out / "traces" / f"{run_id}.jsonl").read_text().splitlines()]
    return [{"turn": e["data"]["turn"], "retries": e["data"]["retries"], "waits": e["data"].get("waits", [])}
            for e in events if e["kind"] == "model_call"]


def test_a_recorded_retry_after_replays_the_same_waits(tmp_path: Path) -> None:
    """A provider that admits two requests at a time and answers the rest 429 with Retry-After 0.0625 s, four
    episodes at once (measured: 5 to 8 rate limits a recording, at most 4 on one call, of the 20 retries allowed),
    recorded; the replay (the provider gone) waits exactly as the recording did: each row's
    `retry_wait_s` = retries x 0.0625 and the trace's waits, call by call, `retry_after` of 0.0625 s each.
    Mutant: the cassette player answers without the recorded headers (`_reply(self, answer["status"], {}, ...)`):
    the replay backs off by its own jittered schedule and every figure differs."""
    srv = serve(FakeModel(index_tasks([WORLDS]), max_inflight=2, retry_after_s=RETRY_AFTER_S, latency_s=0.02))
    cfg = _write(tmp_path / "rl.toml",
                 '[experiment]\nid = "ratelimit"\nworkloads = ["response_loss"]\nconditions = ["I5"]\n'
                 f'tasks_per_workload = 1\nseeds = {list(SEEDS)}\n[[experiment.agents]]\nname = "llm"\n'
                 f'model = "openai/fake-capability"\napi_base = "http://127.0.0.1:{srv.server_port}/v1"\n'
                 'concurrency = 4\nretries = 20\nbackoff_s = 0.01\n')
    tape = tmp_path / "rl.cassette"
    try:
        assert main(["run", str(cfg), "--out", str(tmp_path / "live"), "--record", str(tape)]) == 0
    finally:
        srv.shutdown()  # from here on no provider exists: the replay answers from the cassette alone
    assert main(["run", str(cfg), "--out", str(tmp_path / "replay"), "--replay", str(tape)]) == 0
    live = _results(tmp_path / "live").set_index("run_id").sort_index()
    again = _results(tmp_path / "replay").set_index("run_id").sort_index()
    assert len(live) == len(SEEDS) and list(again.index) == list(live.index)
    assert live["retries"].sum() > 0  # the rate limit was met while recording (4 episodes, 2 admitted at a time)
    assert (live["retry_wait_s"] == live["retries"] * RETRY_AFTER_S).all()  # each retry waited as asked
    assert again["retries"].tolist() == live["retries"].tolist()
    assert again["retry_wait_s"].tolist() == live["retry_wait_s"].tolist()
    for run_id in live.index:
        recorded = _model_calls(tmp_path / "live", run_id)
        assert _model_calls(tmp_path / "replay", run_id) == recorded
        waits = [w for call in recorded for w in call["waits"]]
        assert len(waits) == live.loc[run_id, "retries"]
        assert all((w["reason"], w["status"], w["seconds"]) == ("retry_after", 429, RETRY_AFTER_S) for w in waits)


# --- 3. the profile of a folder holding cold and warm starts ----------------------------------------------------

DEC, BUILD = 1500.0, 12600.0
RTTS = (10.0, 2000.0)
OLD_STEP_MS = {10.0: 4000.0, 2000.0: 6000.0}  # an older profile's steps: neither is what a cold start measures now


def _profile_config(tmp_path: Path, agents: str) -> Path:
    nets = "".join(f"[[experiment.network]]\nrtt_ms = {r}\ndecision_ms = {DEC}\nbuild_ms = {BUILD}\n" for r in RTTS)
    return _write(tmp_path / "mixed.toml",
                  '[experiment]\nid = "mixed"\nworkloads = ["toolpro_memos"]\nconditions = ["I0-program-replay"]\n'
                  f'tasks_per_workload = 4\n{nets}{agents}')


COLD = '[[experiment.agents]]\nname = "program"\nmode = "profile"\nbuild_ms = 12600\n'
WARM = '[[experiment.agents]]\nname = "program"\nmode = "profile"\nprofile = "old.json"\n'


def _old_profile(tmp_path: Path) -> None:
    """old.json: a profile file of this deployment (its network keys as the matrix writes them) whose steps are
    OLD_STEP_MS, as if measured another day."""
    networks = sorted({c.network for c in load_matrix(_profile_config(tmp_path, COLD), WORLDS).cells})
    entries = [{"world": "memos", "model": "none", "network": n, "step_ms": OLD_STEP_MS[json.loads(n)["rtt_ms"]],
                "build_ms": BUILD, "runs": 8} for n in networks]
    _write(tmp_path / "old.json", json.dumps({"version": 1, "source": "elsewhere", "profiles": entries}))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of cold and warm starts into one results folder (the warm ones read old.json)."""
    tmp = tmp_path_factory.mktemp("mixed")
    _old_profile(tmp)
    out = tmp / "o"
    assert main(["run", str(_profile_config(tmp, COLD + WARM)), "--out", str(out)]) == 0
    return out


def _profile(results: Path, tmp_path: Path) -> dict[float, dict[str, Any]]:
    """`aft-bench profile` over `results`: the new profile's entries by RTT."""
    new = tmp_path / "new.json"
    assert main(["profile", str(results), "--out", str(new)]) == 0
    return {json.loads(e["network"])["rtt_ms"]: e for e in json.loads(new.read_text())["profiles"]}


def test_profile_of_a_folder_with_warm_starts_takes_steps_from_cold_starts_alone(mixed: Path, tmp_path: Path,
                                                                                 capsys) -> None:
    """Cold starts measure RTT + DEC on the clock (1510 and 3500 ms); warm starts in the same folder copy 4000 and
    6000 ms from an older profile. The new profile's steps are 1510.0 and 3500.0, as printed. Mutant: `profiles`
    averages every profile-mode run's `policy_step_ms` (`runs["policy_step_ms"]`): 2755.0 and 4750.0.
    (BUILD is left to the next test: the warm runs' copied step leaks into it.)"""
    starts = _results(mixed).groupby("policy_start")["policy_step_ms"].agg(lambda s: sorted(set(s)))
    assert starts.to_dict() == {"cold": [r + DEC for r in RTTS], "warm": sorted(OLD_STEP_MS.values())}
    capsys.readouterr()
    got = _profile(mixed, tmp_path)
    assert {r: (e["world"], e["model"], e["step_ms"]) for r, e in got.items()} == {
        10.0: ("memos", "none", 1510.0), 2000.0: ("memos", "none", 3500.0)}
    shown = capsys.readouterr().out
    assert '"rtt_ms":10.0}: RTT + DEC 1510 ms per step,' in shown
    assert '"rtt_ms":2000.0}: RTT + DEC 3500 ms per step,' in shown


def test_profile_of_a_folder_with_warm_starts_measures_build_as_the_clock_charged_it(mixed: Path,
                                                                                      tmp_path: Path) -> None:
    """Every program in the folder, cold or warm, took BUILD = 12600 ms on the virtual clock (no jitter); the new
    profile's BUILD should say 12600.0 at both RTTs, whatever step the warm starts were given."""
    built = _results(mixed).dropna(subset=["measured_build_ms"])
    assert set(built["policy_start"]) == {"cold", "warm"}  # programs ran in both kinds of start
    assert {r: e["build_ms"] for r, e in _profile(mixed, tmp_path).items()} == {10.0: BUILD, 2000.0: BUILD}


# --- 4. cost of a group mixing priced and unpriced runs ---------------------------------------------------------

def _cost_rows(out: Path) -> dict[str, dict[str, str]]:
    """The report's Cost section: each per-condition table row (the arm rows repeat them) by its model column."""
    section = (out / "report" / "report.md").read_text().split("## Cost")[1].split("\n## ")[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in ln.strip("|").split("|")))) for ln in lines[2:]]
    return {r["model"]: r for r in rows if r["scope"] == "condition"}


def test_cost_of_a_group_mixing_priced_and_unpriced_runs_is_unknown(tmp_path: Path) -> None:
    """response_loss under I5, two tasks, two offline models: fake-capability at a declared price, fake-naive
    unpriced (cost_usd null). The pooled group mixes them: cost unknown (cost_known false, cost per run and per
    completed task null, "unknown" in the report's three cost columns), never the priced half's mean or a NaN;
    the priced model's own group is exact: its rows' mean cost. Mutant: `summarize_runs` treats a group as priced
    when any run is (`not runs["cost_usd"].isna().all()`): pooled shows a partial mean and a NaN per completed
    task."""
    cfg = _write(tmp_path / "mixed.toml",
                 '[experiment]\nid = "mixedcost"\nworkloads = ["response_loss"]\nconditions = ["I5"]\n'
                 'tasks_per_workload = 2\n[[experiment.agents]]\nname = "llm"\nmodel = "openai/fake-capability"\n'
                 f'api_base = "offline"\n{PRICE}[[experiment.agents]]\nname = "llm"\nmodel = "openai/fake-naive"\n'
                 'api_base = "offline"\n')
    out = tmp_path / "o"
    assert main(["run", str(cfg), "--out", str(out)]) == 0
    assert main(["analyze", str(out), "--resamples", "50", "--permutations", "50"]) == 0
    assert main(["report", str(out)]) == 0
    df = _results(out)
    priced = df[df["model"] == "openai/fake-capability"]
    assert len(priced) == 2 and priced["cost_usd"].notna().all() and priced["cost_usd"].min() > 0
    assert df[df["model"] == "openai/fake-naive"]["cost_usd"].isna().all()
    rows = {r["model"]: r for r in json.loads((out / "analysis" / "cost.json").read_text())
            if r["scope"] == "condition"}
    assert set(rows) == {"pooled", "openai/fake-capability", "openai/fake-naive"}
    for unknown in ("pooled", "openai/fake-naive"):
        r = rows[unknown]
        assert (r["cost_known"], r["cost_per_run"], r["cost_per_completed"], r["ci_low"], r["ci_high"]) == (
            False, None, None, None, None), unknown
    assert rows["pooled"]["runs"] == 4 and rows["pooled"]["prompt_tokens_per_run"] == df["prompt_tokens"].mean()
    known = rows["openai/fake-capability"]
    mean = float(priced["cost_usd"].mean())
    assert (known["cost_known"], known["runs"], known["cost_per_run"]) == (True, 2, mean)
    done = int((priced["outcome"] == "completed").sum())
    assert done > 0 and known["cost_per_completed"] == float(priced["cost_usd"].sum()) / done
    shown = _cost_rows(out)
    for unknown in ("pooled", "openai/fake-naive"):
        r = shown[unknown]
        assert (r["USD per run"], r["USD per completed task"], r["95% task-clustered CI"]) == (
            "unknown", "unknown", "unknown"), unknown
    assert shown["openai/fake-capability"]["USD per run"] == f"{mean:.4g}"
