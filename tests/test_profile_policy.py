"""ToolPro's profile-driven policy within one episode (program agent, mode = "profile"): a cold start measures
RTT + DEC on its first stepwise calls from the virtual clock its observations carry and decides for the calls
left; `aft-bench profile` averages what runs measured per deployment; a warm start decides from that profile
before its first call. Networks are an axis of the matrix."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from aft_bench.cli.main import main
from aft_bench.experiment.config import load_matrix

from conftest import WORLDS

DEC, BUILD = 1500.0, 12600.0
RTTS = (10.0, 2000.0)


def _config(tmp_path: Path, name: str, agent: str, networks: tuple[float, ...] = RTTS, tasks: int | None = None) -> Path:
    nets = "".join(f"[[experiment.network]]\nrtt_ms = {r}\ndecision_ms = {DEC}\nbuild_ms = {BUILD}\n" for r in networks)
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(f'[experiment]\nid = "{name}"\nworkloads = ["toolpro_memos"]\nconditions = ["I0-program-replay"]\n'
                   + (f"tasks_per_workload = {tasks}\n" if tasks else "") + nets
                   + f'[[experiment.agents]]\nname = "program"\n{agent}\n[[experiment.agents]]\nname = "program"\n'
                   'mode = "step"\n')
    return cfg


def _run(cfg: Path, out: Path) -> pd.DataFrame:
    assert main(["run", str(cfg), "--out", str(out)]) == 0
    return pd.read_parquet(out / "results.parquet")


def _plan_calls(df: pd.DataFrame) -> dict[str, int]:
    """Calls of each task's plan: what the always-stepwise runs made."""
    step = df[df["agent_spec"].str.contains('"mode":"step"')]
    return dict(zip(step["task_id"], step["round_trips"]))


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    tmp = tmp_path_factory.mktemp("cold")
    out = tmp / "cold"
    return out, _run(_config(tmp, "cold", 'mode = "profile"\nbuild_ms = 12600'), out)


def test_a_cold_start_measures_two_steps_and_decides_for_the_calls_left(cold) -> None:
    _out, df = cold
    calls = _plan_calls(df)
    runs = df[df["policy_start"] == "cold"]
    assert len(runs) == 16 * len(RTTS) and set(runs["outcome"]) == {"completed"}
    assert runs["duplicate_effects"].sum() == 0  # the program ran only the calls the steps had not made
    chose = set()
    for r in runs.itertuples():
        rtt = json.loads(r.network)["rtt_ms"]
        assert r.policy_step_ms == rtt + DEC and r.policy_build_ms == BUILD  # measured on the clock; the prior
        left = calls[r.task_id] - 2
        program = (left - 1) * (rtt + DEC) - BUILD > 0
        assert r.mode == ("program" if program else "step"), (r.task_id, rtt)
        assert (r.measured_build_ms == BUILD) if program else pd.isna(r.measured_build_ms)
        # 2 steps, then one program call and the end, or every call stepwise and the end
        turns, trips = (4, 3) if program else (calls[r.task_id] + 1, calls[r.task_id])
        assert (r.model_turns, r.round_trips) == (turns, trips)
        assert r.virtual_latency_s == pytest.approx((turns * DEC + trips * rtt + program * BUILD) / 1000)
        chose.add((rtt, r.mode))
    assert chose == {(r, m) for r in RTTS for m in ("step", "program")}  # both choices, at both RTTs


def test_profile_averages_what_cold_starts_measured_per_deployment(cold, tmp_path: Path, capsys) -> None:
    out, _df = cold
    assert main(["profile", str(out), "--out", str(tmp_path / "p.json")]) == 0
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["version"] == 1
    got = {json.loads(e["network"])["rtt_ms"]: (e["world"], e["model"], e["step_ms"], e["build_ms"], e["runs"])
           for e in doc["profiles"]}
    assert got == {r: ("memos", "none", r + DEC, BUILD, 16) for r in RTTS}
    assert "RTT + DEC 3500 ms per step" in capsys.readouterr().out


def test_a_warm_start_decides_before_its_first_call_from_its_deployment_s_profile(cold, tmp_path: Path) -> None:
    out, cold_df = cold
    assert main(["profile", str(out), "--out", str(tmp_path / "p.json")]) == 0
    df = _run(_config(tmp_path, "warm", 'mode = "profile"\nprofile = "p.json"'), tmp_path / "warm")
    calls = _plan_calls(df)
    runs = df[df["policy_start"] == "warm"]
    assert len(runs) == 16 * len(RTTS) and set(runs["outcome"]) == {"completed"}
    for r in runs.itertuples():
        rtt = json.loads(r.network)["rtt_ms"]
        assert r.policy_step_ms == rtt + DEC  # the profile's, for this network
        program = (calls[r.task_id] - 1) * (rtt + DEC) - BUILD > 0
        assert r.mode == ("program" if program else "step")
        if program:
            assert (r.model_turns, r.round_trips) == (2, 1)  # no stepwise bootstrap
    # with the calls the cold start spent measuring, a warm start chooses programs at least as often
    assert (runs["mode"] == "program").sum() > (cold_df[cold_df["policy_start"] == "cold"]["mode"] == "program").sum()
    # the profile is in the run key: another profile file, other run ids
    spec = json.loads(runs["agent_spec"].iloc[0])
    assert len(spec["profile"]["sha256"]) == 64 and len(spec["profile"]["entries"]) == len(RTTS)
    p = json.loads((tmp_path / "p.json").read_text())
    p["profiles"][0]["runs"] = 99
    (tmp_path / "p.json").write_text(json.dumps(p))
    again = load_matrix(_config(tmp_path, "warm", 'mode = "profile"\nprofile = "p.json"'), WORLDS)
    assert not {c.run_id for c in again.cells} & set(runs["run_id"])


def test_observations_carry_the_virtual_clock_only_under_a_network(tmp_path: Path) -> None:
    """Each observation's clock is decisions x DEC + round trips x RTT + programs x BUILD at its delivery."""
    import asyncio
    from contextlib import ExitStack

    from aft_bench.episode.episode import run_episode
    from aft_bench.experiment.build import resolve_cell

    base = ('[experiment]\nid = "clock"\nworkloads = ["toolpro_memos"]\nconditions = ["I0-program-replay"]\n'
            'tasks_per_workload = 1\n[[experiment.agents]]\nname = "program"\nmode = "{mode}"\n')
    net = f"[experiment.network]\nrtt_ms = 10\ndecision_ms = {DEC}\nbuild_ms = {BUILD}\n"
    for mode, network in (("step", True), ("program", True), ("step", False)):
        cfg = tmp_path / f"{mode}{network}.toml"
        cfg.write_text(base.format(mode=mode) + (net if network else ""))
        m = load_matrix(cfg, WORLDS)
        clocks: list[float | None] = []
        with ExitStack() as stack:
            setup, agent, _ = resolve_cell(m, m.cells[0], None, stack)
            act = agent.act

            async def spy(obs, act=act):
                if obs is not None:
                    clocks.append(obs.clock_ms)
                return await act(obs)

            agent.act = spy  # type: ignore[method-assign]
            asyncio.run(run_episode(setup, agent))
        if not network:
            assert clocks and all(c is None for c in clocks)
        elif mode == "step":
            assert len(clocks) == 5 and clocks == [k * (10.0 + DEC) for k in range(1, 6)]
        else:
            assert clocks == [10.0 + DEC + BUILD]  # one decision, one round trip, one program built


@pytest.mark.parametrize(("agent", "networks", "problem"), [
    ('mode = "profile"\nbuild_ms = 12600', (), "measures the virtual clock: give the experiment a network"),
    ('mode = "profile"', RTTS, "needs build_ms (a cold start's prior) or profile"),
    ('mode = "profile"\nbuild_ms = 1\nrtt_ms = 2', RTTS, "measures RTT and DEC itself"),
    ('mode = "step"\nprofile = "p.json"', RTTS, "a profile is a warm start of mode"),
    ('mode = "profile"\nprofile = "missing.json"', RTTS, "missing.json"),
    ('mode = "profile"\nprofile = "bad.json"', RTTS, "not a profile file of version 1"),
    ('mode = "profile"\nprofile = "p.json"', (10.0, 100.0), "no entry for world 'memos' under network"),
])
def test_a_policy_that_cannot_run_is_refused_at_load_naming_why(tmp_path: Path, capsys, agent: str,
                                                                networks: tuple[float, ...], problem: str) -> None:
    (tmp_path / "bad.json").write_text('{"version": 0}')
    net = json.dumps({"build_ms": BUILD, "decision_ms": DEC, "rtt_ms": 10.0}, separators=(",", ":"), sort_keys=True)
    (tmp_path / "p.json").write_text(json.dumps({"version": 1, "profiles": [
        {"world": "memos", "model": "none", "network": net, "step_ms": 1510.0, "build_ms": BUILD, "runs": 3}]}))
    cfg = _config(tmp_path, "bad", agent, networks=networks or (1.0,))
    if not networks:
        text = cfg.read_text()
        cfg.write_text(text.split("[[experiment.network]]")[0] + text.split("build_ms = 12600.0\n", 1)[1])
    assert main(["run", str(cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert problem in err and str(cfg) in err
    assert not (tmp_path / "o").exists()  # nothing was started


def test_a_network_axis_lists_each_profile_once_and_keeps_old_run_ids(tmp_path: Path, capsys) -> None:
    cfg = _config(tmp_path, "twice", 'mode = "program"', networks=(10.0, 10.0))
    assert main(["run", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "experiment.network" in (err := capsys.readouterr().err) and "network profile is listed twice" in err
    single = load_matrix(Path("configs/toolpro_workflows.toml"), WORLDS)
    assert all(c.network is None and "network" not in c.key() for c in single.cells)
    axis = load_matrix(_config(tmp_path, "axis", 'mode = "program"'), WORLDS)
    assert len(axis.cells) == 2 * 16 * len(RTTS) and {json.loads(c.network)["rtt_ms"] for c in axis.cells} == set(RTTS)


@pytest.mark.parametrize("column", ["policy_start", "policy_step_ms", "policy_build_ms", "measured_build_ms"])
def test_editing_a_policy_label_fails_the_audit(cold, tmp_path: Path, capsys, column: str) -> None:
    """The policy's columns come from the trace (policy_decision, policy_measured): the audit re-judges them."""
    import shutil

    out, _df = cold
    d = tmp_path / "r"
    shutil.copytree(out, d, ignore=shutil.ignore_patterns(".runner.lock"))
    df = pd.read_parquet(d / "results.parquet")
    row = df.index[df["measured_build_ms"].notna()][0]
    df[column] = df[column].astype(object)
    df.loc[row, column] = "warm" if column == "policy_start" else float(df.loc[row, column]) + 1
    df.to_parquet(d / "results.parquet", index=False)
    assert main(["audit", str(d)]) == 1
    failed = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("FAIL")]
    assert any("re-judged" in ln and df.loc[row, "run_id"] in ln for ln in failed), failed


@pytest.mark.parametrize(("name", "cells"), [("toolpro_profile", 17 * 5), ("toolpro_profile_jitter", 15 * 5)])
def test_the_committed_warm_start_profile_is_what_the_cold_config_measures(tmp_path: Path, name: str,
                                                                           cells: int) -> None:
    """configs/NAME.profile.json (read by configs/NAME_warm.toml) equals a fresh measurement of configs/NAME.toml's
    runs."""
    root = Path(__file__).resolve().parent.parent
    assert main(["run", str(root / "configs" / f"{name}.toml"), "--out", str(tmp_path / "c")]) == 0
    assert main(["profile", str(tmp_path / "c"), "--out", str(tmp_path / "p.json")]) == 0
    fresh = json.loads((tmp_path / "p.json").read_text())["profiles"]
    assert json.loads((root / "configs" / f"{name}.profile.json").read_text())["profiles"] == fresh
    assert len(load_matrix(root / "configs" / f"{name}_warm.toml", WORLDS).cells) == cells


def test_the_virtual_clock_without_jitter_is_the_count_formula_and_with_jitter_a_seeded_draw() -> None:
    from aft_bench.episode.clock import VirtualClock

    exact = VirtualClock({"rtt_ms": 0.1, "decision_ms": 1 / 3, "build_ms": 7.0}, "0:t")
    for programs in (0, 0, 1, 1, 3):
        exact.decision()
        exact.round_trip(programs)
    assert exact.now_ms == 5 * (1 / 3) + 5 * 0.1 + 3 * 7.0 and exact.programs == 3

    def draws(seed: str, n: int = 4000) -> list[float]:
        clock = VirtualClock({"rtt_ms": 0.0, "decision_ms": 1.0, "build_ms": 0.0, "jitter": 0.5}, seed)
        out, last = [], 0.0
        for _ in range(n):
            clock.decision()
            out.append(clock.now_ms - last)
            last = clock.now_ms
        return out

    a, b = draws("3:memos-w-08"), draws("3:memos-w-08")
    assert a == b and a != draws("4:memos-w-08")  # the seed and the task fix the clock; another seed, another one
    mean = sum(a) / len(a)
    cv = (sum((x - mean) ** 2 for x in a) / len(a)) ** 0.5 / mean
    assert abs(mean - 1) < 0.05 and abs(cv - 0.5) < 0.05 and min(a) > 0


def test_a_jittered_network_changes_the_clock_not_the_run_ids_of_a_network_without_it(tmp_path: Path) -> None:
    plain = load_matrix(_config(tmp_path, "plain", 'mode = "program"', networks=(10.0,)), WORLDS)
    cfg = _config(tmp_path, "jit", 'mode = "program"', networks=(10.0,))
    cfg.write_text(cfg.read_text().replace("build_ms = 12600.0\n", "build_ms = 12600.0\njitter = 0.5\n", 1))
    jit = load_matrix(cfg, WORLDS)
    assert '"jitter"' not in plain.cells[0].network and '"jitter":0.5' in jit.cells[0].network
    assert not {c.run_id for c in plain.cells} & {c.run_id for c in jit.cells}
    df = _run(cfg, tmp_path / "o")
    step = df[df["agent_spec"].str.contains('"mode":"step"')]
    formula = (step["model_turns"] * DEC + step["round_trips"] * 10.0) / 1000
    assert (step["virtual_latency_s"] != formula.round(6)).all()  # the draws, not the formula
    assert (abs(step["virtual_latency_s"] / formula - 1) < 0.5).all()


def test_a_deployment_where_no_program_ran_has_no_build_and_a_warm_start_there_uses_its_prior(tmp_path: Path,
                                                                                            capsys) -> None:
    """At RTT 10 with N = 5 no cold start consolidates: the profile has RTT + DEC but no BUILD for it, a warm start
    without build_ms is refused there, and with build_ms it decides with that prior."""
    cfg = tmp_path / "short.toml"
    cfg.write_text('[experiment]\nid = "short"\nworkloads = ["toolpro_memos"]\nconditions = ["I0-program-replay"]\n'
                   f'tasks_per_workload = 1\n[[experiment.network]]\nrtt_ms = 10\ndecision_ms = {DEC}\n'
                   f'build_ms = {BUILD}\n[[experiment.agents]]\nname = "program"\nmode = "profile"\nbuild_ms = 12600\n')
    _run(cfg, tmp_path / "c")
    assert main(["profile", str(tmp_path / "c"), "--out", str(tmp_path / "p.json")]) == 0
    (entry,) = json.loads((tmp_path / "p.json").read_text())["profiles"]
    assert entry["build_ms"] is None and entry["step_ms"] == 10 + DEC and json.loads(entry["network"])["rtt_ms"] == 10
    assert "BUILD not measured" in capsys.readouterr().out
    warm = cfg.read_text().replace('build_ms = 12600\n', 'profile = "p.json"\n')
    cfg.write_text(warm)
    assert main(["run", str(cfg), "--out", str(tmp_path / "w")]) == 2
    assert "measured no BUILD" in capsys.readouterr().err
    cfg.write_text(warm + "build_ms = 1000\n")
    row = _run(cfg, tmp_path / "w").iloc[0]
    assert (row["policy_start"], row["policy_build_ms"], row["mode"]) == ("warm", 1000.0, "program")  # 4 x 1510 > 1000


def test_on_a_network_axis_runs_pair_within_their_network(tmp_path: Path) -> None:
    """program_latency (policy against stepwise) on two networks: one pair per task and network, never a pair
    across networks (known negative: without network among the pair keys, two runs share every key)."""
    from aft_bench.analysis.analyze import Options, analyze
    from aft_bench.analysis.pairs import match_pairs
    from aft_bench.experiment.comparisons import load_comparisons

    cfg = tmp_path / "lat.toml"
    nets = "".join(f"[[experiment.network]]\nrtt_ms = {r}\ndecision_ms = {DEC}\nbuild_ms = {BUILD}\n" for r in RTTS)
    cfg.write_text('[experiment]\nid = "lat"\ncomparisons = ["program_latency"]\n' + nets
                   + '[[experiment.agents]]\nname = "program"\nmode = "policy"\nrtt_ms = 1000\ndecision_ms = 1500\n'
                   'build_ms = 12600\n[[experiment.agents]]\nname = "program"\nmode = "step"\n')
    df = _run(cfg, tmp_path / "o")
    comp = next(c for c in load_comparisons() if c.id == "program_latency")
    pairs = match_pairs(df, comp)
    assert len(pairs) == 16 * len(RTTS)
    assert {json.loads(n)["rtt_ms"] for n in pairs["network"]} == set(RTTS)
    by_run = df.set_index("run_id")["network"]
    assert (pairs["run_id_treatment"].map(by_run) == pairs["run_id_control"].map(by_run)).all()
    import aft_bench.analysis.pairs as pairs_module

    keys = [k for k in pairs_module.PAIR_KEYS if k != "network"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pairs_module, "PAIR_KEYS", keys)
        with pytest.raises(Exception, match="share a pair key"):
            match_pairs(df, comp)
    tables = analyze(tmp_path / "o", Options(resamples=200, permutations=200))
    (row,) = [r for r in tables["comparisons"] if r["comparison"] == "program_latency"]
    assert row["pairs"] == 16 * len(RTTS)
    written = pd.read_parquet(tmp_path / "o" / "analysis" / "pairs.parquet")
    assert (written["comparison"] == "program_latency").sum() == 16 * len(RTTS) and written["network"].notna().all()


def _single(tmp_path: Path, name: str, agent: str, rtt: float = 10.0, condition: str = "I0-program-replay") -> Path:
    """A config with one [experiment.network] table (not an axis) and one agent."""
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(f'[experiment]\nid = "{name}"\nworkloads = ["toolpro_memos"]\nconditions = ["{condition}"]\n'
                   f'[experiment.network]\nrtt_ms = {rtt}\ndecision_ms = {DEC}\nbuild_ms = {BUILD}\n'
                   f'[[experiment.agents]]\nname = "program"\n{agent}\n')
    return cfg


def test_a_warm_start_and_a_profile_need_runs_that_record_their_network(cold, tmp_path: Path, capsys) -> None:
    """Under one [experiment.network] table a run does not record its network, so a profile measured there could
    be read under any other: both the profile of such runs and a warm start under such a table are refused."""
    out, _df = cold
    assert main(["profile", str(out), "--out", str(tmp_path / "p.json")]) == 0
    assert main(["run", str(_single(tmp_path, "w", 'mode = "profile"\nprofile = "p.json"')), "--out",
                 str(tmp_path / "w")]) == 2
    assert "a warm start reads the profile measured under its own network" in capsys.readouterr().err
    _run(_single(tmp_path, "c", 'mode = "profile"\nbuild_ms = 12600'), tmp_path / "c")
    assert main(["profile", str(tmp_path / "c"), "--out", str(tmp_path / "q.json")]) == 2
    assert "do not record their network" in capsys.readouterr().err and not (tmp_path / "q.json").exists()


def test_the_profile_file_is_part_of_the_config_s_identity(cold, tmp_path: Path, capsys) -> None:
    """Another profile file: another config hash (so the lock and the results directory refuse it), while a
    config that reads no file keeps its hash."""
    out, _df = cold
    assert main(["profile", str(out), "--out", str(tmp_path / "p.json")]) == 0
    cfg = _config(tmp_path, "warm", 'mode = "profile"\nprofile = "p.json"')
    before = load_matrix(cfg, WORLDS).config_hash
    _run(cfg, tmp_path / "w")
    doc = json.loads((tmp_path / "p.json").read_text())
    doc["profiles"][0]["step_ms"] += 1
    (tmp_path / "p.json").write_text(json.dumps(doc))
    assert load_matrix(cfg, WORLDS).config_hash != before
    assert main(["run", str(cfg), "--out", str(tmp_path / "w")]) == 2
    assert "different config or inputs" in capsys.readouterr().err
    plain = Path("configs/toolpro_workflows.toml")
    from aft_bench.common.canonical import digest

    m = load_matrix(plain, WORLDS)
    assert m.config_hash == digest(m.resolved())  # no file read: the hash of the experiment alone, as before


def test_a_cold_start_without_programs_on_offer_stays_stepwise(tmp_path: Path) -> None:
    """At RTT 2000 a cold start would consolidate, but the interface (I0) offers no run_program: it finishes
    stepwise, every run completed, and its decision says step."""
    cfg = tmp_path / "noprog.toml"
    cfg.write_text('[experiment]\nid = "noprog"\nworkloads = ["toolpro_memos"]\nconditions = ["I0"]\n'
                   f'[[experiment.network]]\nrtt_ms = 2000\ndecision_ms = {DEC}\nbuild_ms = {BUILD}\n'
                   '[[experiment.agents]]\nname = "program"\nmode = "profile"\nbuild_ms = 12600\n')
    df = _run(cfg, tmp_path / "o")
    assert set(df["outcome"]) == {"completed"} and set(df["mode"]) == {"step"} and set(df["policy_start"]) == {"cold"}


def test_a_plan_no_longer_than_the_cold_start_still_records_its_decision(tmp_path: Path) -> None:
    cfg = tmp_path / "long.toml"
    cfg.write_text('[experiment]\nid = "long"\nworkloads = ["toolpro_memos"]\nconditions = ["I0-program-replay"]\n'
                   f'tasks_per_workload = 1\n[[experiment.network]]\nrtt_ms = 10\ndecision_ms = {DEC}\n'
                   f'build_ms = {BUILD}\n[[experiment.agents]]\nname = "program"\nmode = "profile"\n'
                   'build_ms = 12600\ncold_steps = 50\n')
    row = _run(cfg, tmp_path / "o").iloc[0]
    assert (row["outcome"], row["mode"], row["policy_start"], row["policy_step_ms"]) == ("completed", "step", "cold",
                                                                                         10 + DEC)


def test_cold_steps_belong_to_profile_mode(tmp_path: Path, capsys) -> None:
    cfg = _config(tmp_path, "cs", 'mode = "program"\ncold_steps = 3')
    assert main(["run", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "cold_steps is the cold start of mode" in capsys.readouterr().err


def test_repetitions_of_a_jittered_run_draw_their_own_clock(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "reps", 'mode = "program"', networks=(10.0,), tasks=2)
    cfg.write_text(cfg.read_text().replace("build_ms = 12600.0\n", "build_ms = 12600.0\njitter = 0.5\n", 1)
                   .replace("tasks_per_workload = 2\n", "tasks_per_workload = 2\nrepetitions = 2\n"))
    df = _run(cfg, tmp_path / "o")
    by = df.pivot_table(index=["task_id", "agent_spec"], columns="rep", values="virtual_latency_s")
    assert (by[0] != by[1]).all()
