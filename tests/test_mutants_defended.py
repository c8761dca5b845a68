"""What mutmut found undefended in issue 39's modules (benchmarks/mutants.md, "Issue 39's scope"): each test reads
the exact value a user reads (a printed line, a file's bytes, a decision, a refusal) where a surviving mutant of
`analysis/profile.py`, `serving/record.py`, `viewer/pairs.py`, `viewer/model.py`, `experiment/spend.py` or
`experiment/shipping.py` changed it and no test noticed. Real parts only: real runs of small configs, the real
command line, the real ledger, the real worker-side checks; nothing of the project is mocked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aft_bench.cli.main import main
from aft_bench.experiment.config import load_matrix

from conftest import WORLDS

# --- analysis/profile.py: `aft-bench profile`'s lines, file and refusals ----------------------------------------

DEC, BUILD = 1500.0, 12600.0


def _profile_config(path: Path, rtts: tuple[float, ...] | None, agent: str, tasks: int = 2) -> Path:
    """toolpro_memos under I0-program-replay with one program agent; `rtts` the [[experiment.network]] list in this
    order (None: a single [experiment.network] table at 10 ms, which runs do not record)."""
    if rtts is None:
        nets = f"[experiment.network]\nrtt_ms = 10.0\ndecision_ms = {DEC}\nbuild_ms = {BUILD}\n"
    else:
        nets = "".join(f"[[experiment.network]]\nrtt_ms = {r}\ndecision_ms = {DEC}\nbuild_ms = {BUILD}\n" for r in rtts)
    path.write_text('[experiment]\nid = "prof"\nworkloads = ["toolpro_memos"]\nconditions = ["I0-program-replay"]\n'
                    f'tasks_per_workload = {tasks}\n{nets}[[experiment.agents]]\nname = "program"\n{agent}\n')
    return path


def _net(rtt: float) -> str:
    """A network's key as runs record it (canonical JSON)."""
    return f'{{"build_ms":{BUILD},"decision_ms":{DEC},"rtt_ms":{rtt}}}'


@pytest.fixture(scope="module")
def cold_unsorted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Cold starts on two networks listed 2000 ms first: the results hold the 2000 ms runs first. Two tasks: at 2000
    ms one of them runs a program (BUILD measured), at 10 ms neither does (BUILD not measured)."""
    tmp = tmp_path_factory.mktemp("cold_unsorted")
    out = tmp / "o"
    cfg = _profile_config(tmp / "cold.toml", (2000.0, 10.0), 'mode = "profile"\nbuild_ms = 12600')
    assert main(["run", str(cfg), "--out", str(out)]) == 0
    return out


def test_profile_prints_and_writes_its_entries_sorted_in_the_documented_layout(cold_unsorted: Path, tmp_path: Path,
                                                                                capsys) -> None:
    """The entries come sorted by (world, model, network), whatever order the runs were in, as printed lines and
    as the file: indented by 2, keys sorted, the source folder named, a final newline. Mutants: the groupby's
    `sort=False` / `sort=None` (the 2000 ms entry first); `indent=None` / `3` / dropped, `sort_keys` dropped /
    None / False (other bytes); `"source"` misspelt or `str(None)`."""
    import pandas as pd

    assert [json.loads(n)["rtt_ms"] for n in pd.read_parquet(cold_unsorted / "results.parquet")["network"]] == [
        2000.0, 2000.0, 10.0, 10.0]
    out = tmp_path / "p.json"
    capsys.readouterr()
    assert main(["profile", str(cold_unsorted), "--out", str(out)]) == 0
    assert capsys.readouterr().out == (
        f"memos / none / network {_net(10.0)}: RTT + DEC 1510 ms per step, BUILD not measured (no program ran) "
        f"(2 runs)\n"
        f"memos / none / network {_net(2000.0)}: RTT + DEC 3500 ms per step, BUILD 12600 ms (2 runs)\n"
        f"profile: {out}\n")
    net10, net2000 = json.dumps(_net(10.0)), json.dumps(_net(2000.0))
    assert out.read_text() == (
        '{\n'
        '  "profiles": [\n'
        '    {\n'
        '      "build_ms": null,\n'
        '      "model": "none",\n'
        f'      "network": {net10},\n'
        '      "runs": 2,\n'
        '      "step_ms": 1510.0,\n'
        '      "world": "memos"\n'
        '    },\n'
        '    {\n'
        '      "build_ms": 12600.0,\n'
        '      "model": "none",\n'
        f'      "network": {net2000},\n'
        '      "runs": 2,\n'
        '      "step_ms": 3500.0,\n'
        '      "world": "memos"\n'
        '    }\n'
        '  ],\n'
        f'  "source": {json.dumps(str(cold_unsorted))},\n'
        '  "version": 1\n'
        '}\n')


def test_profile_of_runs_without_the_profile_policy_is_refused_with_this_line(tmp_path: Path, capsys) -> None:
    """Stepwise program runs only: exit 2, this line (the results file, the field, the reason), no file."""
    out = tmp_path / "o"
    assert main(["run", str(_profile_config(tmp_path / "s.toml", (10.0,), 'mode = "step"', tasks=1)), "--out",
                 str(out)]) == 0
    capsys.readouterr()
    assert main(["profile", str(out), "--out", str(tmp_path / "p.json")]) == 2
    assert capsys.readouterr().err == (
        f"aft-bench: error: {out / 'results.parquet'}: field 'policy_start': no run here used the profile-driven "
        f'policy (program agent, mode = "profile") (got None)\n')
    assert not (tmp_path / "p.json").exists()


def test_profile_of_runs_that_do_not_record_their_network_is_refused_with_this_line(tmp_path: Path, capsys) -> None:
    """Cold starts under a single [experiment.network] table: exit 2 and this line, no file."""
    out = tmp_path / "o"
    cfg = _profile_config(tmp_path / "c.toml", None, 'mode = "profile"\nbuild_ms = 12600', tasks=1)
    assert main(["run", str(cfg), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["profile", str(out), "--out", str(tmp_path / "p.json")]) == 2
    assert capsys.readouterr().err == (
        f"aft-bench: error: {out / 'results.parquet'}: field 'network': these runs do not record their network "
        "(a single [experiment.network] table): run the cold starts with [[experiment.network]], a list even of "
        "one, so that a warm start can read the profile of its own network (got None)\n")
    assert not (tmp_path / "p.json").exists()


def test_profile_of_warm_starts_alone_is_refused_naming_the_deployment(tmp_path: Path, capsys) -> None:
    """Warm starts copy their step from the profile they read, so a folder of warm starts alone measured nothing:
    exit 2 and this line, naming the world (the value), the model and the network."""
    cfg = _profile_config(tmp_path / "w.toml", (10.0,), 'mode = "profile"\nprofile = "old.json"', tasks=1)
    old = {"version": 1, "source": "elsewhere", "profiles": [
        {"world": "memos", "model": "none", "network": _net(10.0), "step_ms": 4000.0, "build_ms": BUILD, "runs": 8}]}
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert {c.network for c in load_matrix(cfg, WORLDS).cells} == {_net(10.0)}  # the key the old profile uses
    out = tmp_path / "o"
    assert main(["run", str(cfg), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["profile", str(out), "--out", str(tmp_path / "p.json")]) == 2
    assert capsys.readouterr().err == (
        f"aft-bench: error: {out / 'results.parquet'}: field 'world': no cold start measured a step for this "
        f"world, model 'none' and network {_net(10.0)} (got 'memos')\n")
    assert not (tmp_path / "p.json").exists()


# --- experiment/spend.py: the start rule, the counters the ceiling message prints, the overshoot -----------------
# Costs are binary fractions (sums exact). Each case is a known positive and its known negative: the decision or
# figure a run acts on or prints (runner.py: "spend ceiling reached ($cost of $max, tokens of max; ... the largest
# so far, $peak / peak tokens)", "spend $cost passed the ceiling $max by $overshoot").

def _row(run_id: str | None, cost: float | None = None, prompt: int | None = None, completion: int | None = None
         ) -> dict[str, object]:
    return {"run_id": run_id, "cost_usd": cost, "prompt_tokens": prompt, "completion_tokens": completion}


def _ledgers(rows: list[dict[str, object]], max_cost: float | None, max_tokens: int | None) -> list[object]:
    """The runner's ledger over `rows` and the shared one loop processes get from it (the same rule)."""
    from aft_bench.experiment.executors import context
    from aft_bench.experiment.spend import Spend

    spend = Spend(rows, max_cost, max_tokens)
    return [spend, spend.shared(context())]


def test_spend_counts_each_run_once_and_reads_missing_figures_as_zero() -> None:
    """A row is counted once per run id (the executor's `end` and the runner's `add` both see it); rows without a
    run id each count; a null cost or token count is 0; tokens are prompt + completion; the peak is the largest
    row."""
    from aft_bench.experiment.executors import context
    from aft_bench.experiment.spend import Spend

    rows = [_row("a", 0.25, 100, 20), _row("b", None, None, 7), _row("a", 0.25, 100, 20), _row(None, 0.125, 3, None),
            _row(None, 0.125, 3, None)]
    spend = Spend(rows, None, None)
    assert spend.committed() == (0.5, 133) and (spend.cost, spend.tokens) == (0.5, 133)
    assert (spend.peak_cost, spend.peak_tokens, spend.seen) == (0.25, 120, 4)
    spend.end(_row("b", 0.5, 1, 1))  # already counted: nothing changes
    spend.add(_row("c", 0.0625, 1, 2))
    assert spend.committed() == (0.5625, 136) and (spend.peak_cost, spend.peak_tokens, spend.seen) == (0.25, 120, 5)
    shared = spend.shared(context())  # the loop processes' counters start from the runner's
    assert shared.committed() == (0.5625, 136)
    shared.add(_row("d", 0.5, 200, 0))
    shared.end(_row("e", 0.0, 0, None))  # a reserved tuple's row: counted, with nothing in flight left at 0
    shared.end(None)
    assert shared.committed() == (1.0625, 336)
    assert (shared._peak_cost.value, shared._peak_tokens.value, shared._seen.value, shared._inflight.value) == (
        0.5, 200, 7, 0)


@pytest.mark.parametrize("which", [0, 1], ids=["Spend", "SharedSpend"])
def test_without_a_ceiling_every_tuple_starts(which: int) -> None:
    from aft_bench.experiment.spend import START

    ledger = _ledgers([_row("a", 5.0, 10**6, 10**6)], None, None)[which]
    assert ledger.open() is True
    assert [ledger.begin() for _ in range(5)] == [START] * 5
    assert ledger.overshoot() is None


@pytest.mark.parametrize("which", [0, 1], ids=["Spend", "SharedSpend"])
def test_under_a_ceiling_the_first_tuple_runs_alone_until_one_has_finished(which: int) -> None:
    """Slow start: nothing to reserve by yet, so a second tuple waits (not stops) while the first runs; once its
    row is in, tuples start while committed + reservations (the peak each) stay within the ceiling."""
    from aft_bench.experiment.spend import START, STOP, WAIT

    for max_cost, max_tokens in ((1.0, None), (None, 1000)):
        ledger = _ledgers([], max_cost, max_tokens)[which]
        assert ledger.open() is True
        assert [ledger.begin(), ledger.begin()] == [START, WAIT]
        ledger.end(_row("a", 0.25, 200, 50))  # committed 0.25 / 250 tokens, peak the same
        # n in flight after this one starts: 0.25 + n * 0.25 <= 1.0 (250 + n * 250 <= 1000) for n = 1, 2, 3
        assert [ledger.begin(), ledger.begin(), ledger.begin(), ledger.begin()] == [START, START, START, WAIT]
        for _ in range(3):
            ledger.end(None)  # failed tuples: reservations released, nothing counted
        assert ledger.committed() == (0.25, 250)
        assert ledger.begin() == START
        ledger.end(_row("b", 0.75, 600, 150))  # committed 1.0 / 1000: the ceiling is reached (not passed)
        assert ledger.open() is False and ledger.begin() == STOP
        assert ledger.overshoot() is None


@pytest.mark.parametrize("which", [0, 1], ids=["Spend", "SharedSpend"])
def test_a_reservation_that_would_pass_the_ceiling_stops_or_waits(which: int) -> None:
    """Committed 0.5 of 1.0 with a peak of 0.375: one more tuple (0.875) starts, a second (1.25) waits while the
    first runs and then, with nothing in flight but committed + one reservation still over, the run stops there."""
    from aft_bench.experiment.spend import START, STOP, WAIT

    ledger = _ledgers([_row("a", 0.125), _row("b", 0.375)], 1.0, None)[which]
    assert ledger.open() is True
    assert [ledger.begin(), ledger.begin()] == [START, WAIT]
    ledger.end(_row("c", 0.25))  # committed 0.75, peak 0.375: 0.75 + 0.375 > 1.0
    assert ledger.open() is False and ledger.begin() == STOP
    # tokens alike: 500 of 1000 committed with a peak of 400; 500 + 400 <= 1000, 500 + 2 * 400 > 1000
    ledger = _ledgers([_row("a", None, 100, 0), _row("b", None, 350, 50)], None, 1000)[which]
    assert [ledger.begin(), ledger.begin()] == [START, WAIT]
    ledger.end(_row("c", None, 100, 0))  # 600 + 400 = 1000: within the ceiling
    assert ledger.begin() == START
    ledger.end(_row("d", None, 0, 1))  # 601 + 400 > 1000
    assert ledger.open() is False and ledger.begin() == STOP


@pytest.mark.parametrize("which", [0, 1], ids=["Spend", "SharedSpend"])
def test_unpriced_rows_reserve_nothing(which: int) -> None:
    """Rows of cost 0 (unpriced or free) leave the peak at 0: no reservation, so with committed spend under the
    ceiling every tuple starts; a ceiling of 0 is already reached."""
    from aft_bench.experiment.spend import START, STOP

    ledger = _ledgers([_row("a", None, None, None)], 0.5, None)[which]
    assert [ledger.begin() for _ in range(4)] == [START] * 4
    ledger = _ledgers([_row("a", None, 0, 0), _row("b", None, 0, None)], None, 1)[which]
    assert [ledger.begin() for _ in range(4)] == [START] * 4  # peak tokens 0: tokens reserve nothing
    ledger = _ledgers([], 0.0, None)[which]
    assert ledger.open() is False and ledger.begin() == STOP
    ledger = _ledgers([], None, 0)[which]
    assert ledger.open() is False and ledger.begin() == STOP


def test_the_overshoot_is_what_committed_spend_passed_the_ceiling_by() -> None:
    from aft_bench.experiment.spend import Spend

    assert Spend([_row("a", 0.75), _row("b", 0.5)], 1.0, None).overshoot() == 0.25
    assert Spend([_row("a", 0.75), _row("b", 0.25)], 1.0, None).overshoot() is None  # reached, not passed
    assert Spend([_row("a", 0.75), _row("b", 0.5)], None, 10).overshoot() is None  # no cost ceiling


# --- serving/record.py: a served directory's layout, manifest, sessions, refusals and write errors ---------------

SERVED_TASK = ("response_loss", "rl-01-o1", "I5", "response_loss")


async def _serve_episode(directory: object, agent: dict[str, str] | None = None) -> str:
    """One served episode recorded into an open ServedDirectory by a real MCP client that escalates at once;
    returns its run id."""
    from mcp import Client

    from aft_bench.serving.server import Served, Target, build_server

    served = Served(Target(*SERVED_TASK), WORLDS, directory, agent or {"agent": "a", "model": "m"})
    async with Client(build_server(served)) as client:
        await client.call_tool("report_outcome", {"action": "escalate", "claim": "unknown"})
    assert served.row is not None
    return str(served.row["run_id"])


def _open_fds(path: Path) -> int:
    """How many of this process's file descriptors are open on `path`."""
    import os

    fds = Path("/proc/self/fd")
    n = 0
    for fd in os.listdir(fds):
        try:
            n += os.readlink(fds / fd) == str(path)
        except OSError:
            pass
    return n


def _served_manifest(run_ids: list[str]) -> dict[str, object]:
    from aft_bench.experiment.provenance import code_version, package_versions
    from aft_bench.serving.record import SERVE_HASH

    return {"kind": "served", "config_path": "", "config_hash": SERVE_HASH, "experiment": {"id": "served"},
            "worlds_dir": str(WORLDS), "run_ids": run_ids, "runs": len(run_ids), "code": code_version(),
            "packages": package_versions()}


def test_a_served_directory_is_laid_out_recorded_and_reopened_like_a_run_s(tmp_path: Path) -> None:
    """Opened: manifest (kind served, no run yet), an empty journal, traces/, session 1 recorded (pending 0).
    An episode: its row journaled with the served identity and its session; manifest and results.parquet list
    it. Closed: the journal's file is closed. Reopened: session 2, the manifest still lists the run; `holds` is
    true of that run only. Opened only to check it (serve-matrix's first step): no session is recorded."""
    import asyncio
    import os

    import pandas as pd

    from aft_bench.experiment.journal import read_records, read_rows
    from aft_bench.experiment.provenance import code_version
    from aft_bench.serving.record import SERVE_HASH, ServedDirectory

    out = tmp_path / "served"
    with ServedDirectory(out, WORLDS, session=False):
        pass
    assert not (out / "sessions.jsonl").exists()
    assert json.loads((out / "manifest.json").read_text()) == _served_manifest([])
    with ServedDirectory(out, WORLDS) as directory:
        assert directory.session == 1
        assert read_records(out / "sessions.jsonl") == [{"session": 1, "pid": os.getpid(), "pending": 0}]
        assert (out / "traces").is_dir() and (out / "journal.jsonl").read_text() == ""
        assert json.loads((out / "manifest.json").read_text()) == _served_manifest([])
        rid = asyncio.run(_serve_episode(directory))
        assert directory.holds(rid) is True and directory.holds("another-run") is False
    assert _open_fds(out / "journal.jsonl") == 0
    (row,) = read_rows(out / "journal.jsonl")
    assert (row["run_id"], row["config_hash"], row["lock_hash"], row["code_version"], row["session"]) == (
        rid, SERVE_HASH, None, code_version()["version"], 1)
    assert json.loads((out / "manifest.json").read_text()) == _served_manifest([rid])
    assert list(pd.read_parquet(out / "results.parquet")["run_id"]) == [rid]
    with ServedDirectory(out, WORLDS) as directory:
        assert directory.session == 2
        assert json.loads((out / "manifest.json").read_text()) == _served_manifest([rid])
        assert directory.holds(rid) is True and directory.holds("another-run") is False
    assert [r["session"] for r in read_records(out / "sessions.jsonl")] == [1, 2]


def test_an_abandoned_episode_s_leftovers_go_to_its_session_s_quarantine(tmp_path: Path) -> None:
    from aft_bench.serving.record import ServedDirectory

    out = tmp_path / "served"
    with ServedDirectory(out, WORLDS):
        pass
    with ServedDirectory(out, WORLDS) as directory:
        (out / "traces" / "r-1.jsonl").write_text("partial\n")
        (out / "traces" / "r-2.jsonl").write_text("another run's\n")
        directory.quarantine("r-1")
    assert (out / "quarantine" / "session-2" / "traces" / "r-1.jsonl").read_text() == "partial\n"
    assert sorted(p.name for p in (out / "traces").iterdir()) == ["r-2.jsonl"]


def test_serve_matrix_into_a_config_s_run_directory_is_refused_with_this_line(tmp_path: Path, capsys) -> None:
    """A directory holding a config's runs (its manifest has no kind): exit 2 before any client starts."""
    cfg = tmp_path / "m.toml"
    cfg.write_text('[experiment]\nid = "m"\ncomparisons = ["duplicate_effects"]\ntasks_per_workload = 1\n'
                   'seeds = [0]\n')
    out = tmp_path / "runs"
    assert main(["run", str(cfg), "--out", str(out), "--worlds", str(WORLDS)]) == 0
    before = (out / "journal.jsonl").read_bytes()
    capsys.readouterr()
    assert main(["serve-matrix", str(cfg), "--out", str(out), "--worlds", str(WORLDS), "--client-cmd",
                 "false"]) == 2
    assert capsys.readouterr().err == (
        f"aft-bench: error: {out / 'manifest.json'}: field 'kind': this directory holds a config's runs, not "
        "served episodes; use a new --out (got None)\n")
    assert (out / "journal.jsonl").read_bytes() == before and not (out / "logs").exists()


@pytest.mark.parametrize(("text", "problem"), [
    ('{"kind": "bundle", "run_ids": []}',
     "field 'kind': this directory holds a config's runs, not served episodes; use a new --out (got 'bundle')"),
    ("[]", "field 'kind': this directory holds a config's runs, not served episodes; use a new --out (got None)"),
    ('{"kind": "served", "run_ids": [', ("field '<syntax>': not a valid aft-bench manifest (truncated or edited?) "
                                         "(got 'line 1 column 32')")),
])
def test_a_directory_whose_manifest_is_not_a_served_one_is_refused_naming_it(tmp_path: Path, text: str,
                                                                             problem: str) -> None:
    """Refused with the manifest's path, field and value; refused for its kind, the directory is left unlocked
    (opened again at once). (Refused as unreadable, the lock is held until the refused object is collected: the
    command exits then, so only a caller in a long-lived process could see it; not asserted here.)"""
    from aft_bench.common.errors import InputError
    from aft_bench.experiment.rundir import RunDirectory
    from aft_bench.serving.record import ServedDirectory

    out = tmp_path / "d"
    out.mkdir()
    (out / "manifest.json").write_text(text)
    with pytest.raises(InputError) as err, ServedDirectory(out, WORLDS):
        pass
    assert str(err.value) == f"{out / 'manifest.json'}: {problem}"
    if "'kind'" in problem:
        with RunDirectory(out):
            pass


def test_a_directory_that_cannot_be_written_says_so_and_keeps_what_was_recorded(tmp_path: Path) -> None:
    """An OSError while opening (traces/ is a file) or recording (results.parquet is a folder) is one line naming
    the directory and the error; the row is journaled first, so it is held."""
    import asyncio

    from aft_bench.common.errors import OutputError
    from aft_bench.experiment.journal import read_rows
    from aft_bench.serving.record import ServedDirectory

    src = tmp_path / "src"
    with ServedDirectory(src, WORLDS) as directory:
        asyncio.run(_serve_episode(directory))
    (row,) = read_rows(src / "journal.jsonl")

    out = tmp_path / "out"
    with ServedDirectory(out, WORLDS, session=False):
        pass
    (out / "traces").rmdir()
    (out / "traces").write_text("")
    with pytest.raises(OutputError) as err, ServedDirectory(out, WORLDS):
        pass
    assert str(err.value) == f"cannot write {out}: File exists; results recorded earlier are intact"
    (out / "traces").unlink()
    (out / "results.parquet").mkdir()
    with ServedDirectory(out, WORLDS) as directory:  # the failed opening left it unlocked
        with pytest.raises(OutputError) as err:
            directory.record(row)
        assert str(err.value) == f"cannot write {out}: Is a directory; results recorded earlier are intact"
        assert directory.holds(row["run_id"]) is True
    assert [r["run_id"] for r in read_rows(out / "journal.jsonl")] == [row["run_id"]]


# --- viewer/pairs.py: where the viewer's pairs come from, and what it says about it ------------------------------

MATCHED_HERE = "matched here (no current analysis)"


def _copy(smoke_results: Path, dest: Path) -> Path:
    import shutil

    shutil.copytree(smoke_results, dest, ignore=shutil.ignore_patterns(".runner.lock"))
    return dest


def _by_pair(items: list[dict[str, object]]) -> list[dict[str, object]]:
    return sorted(items, key=lambda p: (str(p["comparison"]), str(p["run_id_treatment"])))


def _analysis_pairs(d: Path) -> list[dict[str, object]]:
    """The analysis's pairs of the experiment's own comparisons (its manifest's), as the viewer reads them."""
    from aft_bench.viewer.model import Viewer

    items, where = Viewer(d).all_pairs()
    assert where == "analysis/pairs.parquet"
    own = {c["id"] for c in json.loads((d / "manifest.json").read_text())["comparisons"]}
    return _by_pair([p for p in items if p["comparison"] in own])


def _cut_runs(d: Path, run_ids: set[str]) -> None:
    """Those runs taken out of the journal and results.parquet (as if never recorded)."""
    from aft_bench.episode.row import write_parquet
    from aft_bench.experiment.journal import read_rows

    rows = read_rows(d / "journal.jsonl")
    lines = (d / "journal.jsonl").read_text().splitlines(keepends=True)
    (d / "journal.jsonl").write_text("".join(ln for ln in lines if not any(r in ln for r in run_ids)))
    write_parquet([r for r in rows if r["run_id"] not in run_ids], d / "results.parquet")


def test_without_an_analysis_the_viewer_matches_the_manifest_s_comparisons_as_the_analysis_did(
        smoke_results: Path, tmp_path: Path) -> None:
    """The smoke runs without their analysis folder: the viewer pairs the eight comparisons the manifest records
    (not the two secondary discovery comparisons the shipped file adds and the analysis paired too), each pair
    as the analysis formed it: the same run ids, values and cluster, a missing catalog size None (not "<NA>")."""
    import shutil

    from aft_bench.viewer.model import Viewer

    d = _copy(smoke_results, tmp_path / "d")
    expected = _analysis_pairs(d)
    assert {str(p["comparison"]) for p in expected} == {
        "discovery_context", "discovery_recall", "resume_recovery", "durable_recovery", "duplicate_effects",
        "unsafe_commits", "terminal_verification", "partial_verification"} and len(expected) == 22
    shutil.rmtree(d / "analysis")
    got = Viewer(d).pair_list()
    assert got["source"] == MATCHED_HERE
    assert _by_pair(got["pairs"]) == expected
    assert sorted({p["catalog_size"] for p in got["pairs"]}, key=str) == ["10", "50", None]
    assert all(p["cluster"] == p["task_id"] for p in got["pairs"])


def test_an_analysis_without_its_meta_is_not_current(smoke_results: Path, tmp_path: Path) -> None:
    """pairs.parquet without meta.json (an analysis interrupted before its meta): the pairs are matched here."""
    from aft_bench.viewer.model import Viewer

    d = _copy(smoke_results, tmp_path / "d")
    expected = _analysis_pairs(d)
    (d / "analysis" / "meta.json").unlink()
    items, where = Viewer(d).all_pairs()
    assert where == MATCHED_HERE and _by_pair(items) == expected


def test_a_stale_analysis_is_not_used_and_unpaired_comparisons_are_named(smoke_results: Path, tmp_path: Path) -> None:
    """Results changed since the analysis (one run of duplicate_effects and one of unsafe_commits taken out): the
    analysis is stale, so pairs are matched here; those two comparisons cannot be paired and the note names both,
    each with its reason, in comparison order; the other six are paired as before."""
    from aft_bench.experiment.journal import read_rows
    from aft_bench.viewer.model import Viewer

    d = _copy(smoke_results, tmp_path / "d")
    expected = [p for p in _analysis_pairs(d) if p["comparison"] not in ("duplicate_effects", "unsafe_commits")]
    rows = read_rows(d / "journal.jsonl")
    lost = next(r for r in rows if (r["workload"], r["condition"], r["task_id"]) == ("response_loss", "I5", "rl-01-o1"))
    guard = next(r for r in rows if (r["workload"], r["condition"], r["task_id"]) == (
        "stale_drift", "I5-guards", "sd-01-stale-c1"))
    _cut_runs(d, {lost["run_id"], guard["run_id"]})
    items, where = Viewer(d).all_pairs()
    assert where == (
        f"{MATCHED_HERE}; not paired: duplicate_effects: <results>: field 'pairs of duplicate_effects': 1 runs have "
        "no partner (first keys shown) (got [{'task_id': 'rl-01-o1', 'fault': 'response_loss', 'fault_seed': 0, "
        "'catalog_size': nan, 'model': 'none', 'rep': 0, 'missing': 'I5'}]); unsafe_commits: <results>: field "
        "'pairs of unsafe_commits': 1 runs have no partner (first keys shown) (got [{'task_id': 'sd-01-stale-c1', "
        "'fault': 'stale_state', 'fault_seed': 0, 'catalog_size': nan, 'model': 'none', 'rep': 0, 'missing': "
        "'I5-guards'}])")
    assert _by_pair(items) == expected


def test_an_unreadable_analysis_meta_is_refused_naming_it(smoke_results: Path, tmp_path: Path) -> None:
    from aft_bench.common.errors import InputError
    from aft_bench.viewer.model import Viewer

    d = _copy(smoke_results, tmp_path / "d")
    meta = d / "analysis" / "meta.json"
    meta.write_text(meta.read_text()[:20])
    with pytest.raises(InputError) as err:
        Viewer(d).pair_list()
    assert str(err.value).startswith(f"{meta}: field '<syntax>': not a valid analysis meta.json (truncated or "
                                     "edited?) (got 'line ")


def test_a_directory_without_runs_has_no_pairs_and_says_none(smoke_results: Path, tmp_path: Path) -> None:
    """Planned runs, none recorded yet (no results.parquet, an empty journal, no analysis)."""
    import shutil

    from aft_bench.viewer.model import Viewer

    d = _copy(smoke_results, tmp_path / "d")
    shutil.rmtree(d / "analysis")
    (d / "results.parquet").unlink()
    (d / "journal.jsonl").write_text("")
    assert Viewer(d).pair_list() == {"comparisons": [], "pairs": [], "source": "none"}


def test_runs_of_a_config_without_comparisons_are_paired_by_the_shipped_ones(tmp_path: Path) -> None:
    """A config naming workloads and conditions, not comparisons (its manifest lists none): response_loss and
    stale_drift under I5 and I5-effects. Of the shipped comparisons only duplicate_effects has both arms here;
    unsafe_commits (stale_drift, I5 against I5-guards) has one and is passed over without a word, as are those
    of workloads not run (discovery_context, the first, among them): one pair, the plain note."""
    from aft_bench.viewer.model import Viewer

    cfg = tmp_path / "w.toml"
    cfg.write_text('[experiment]\nid = "w"\nworkloads = ["response_loss", "stale_drift"]\n'
                   'conditions = ["I5", "I5-effects"]\ntasks_per_workload = 1\nseeds = [0]\n')
    d = tmp_path / "d"
    assert main(["run", str(cfg), "--out", str(d), "--worlds", str(WORLDS)]) == 0
    assert json.loads((d / "manifest.json").read_text())["comparisons"] == []
    got = Viewer(d).pair_list()
    assert got["source"] == MATCHED_HERE
    assert [(p["comparison"], p["workload"], p["task_id"], p["catalog_size"]) for p in got["pairs"]] == [
        ("duplicate_effects", "response_loss", "rl-01-o1", None)]
    assert got["comparisons"] == ["duplicate_effects"]


def test_aligning_two_hundred_polls_keeps_the_common_run_side_by_side() -> None:
    """Arms of 200 and more turns (an agent polling an invocation; the llm agent's max_turns has no upper bound):
    the control's extra first turn stands against a gap and the 200 polls side by side after it. difflib's
    autojunk would treat a turn that fills more than 1 % of an arm of 200 as junk and pair the polls off by one."""
    from aft_bench.viewer.pairs import align

    def turns(*steps: str) -> list[dict[str, str]]:
        return [{"action": "terminal", "tool": s[4:]} if s.startswith("end:") else {"action": "tool_call", "tool": s}
                for s in steps]

    polls = ["get_invocation_status"] * 200
    got = align(turns(*polls, "end:escalate"), turns("get_order", *polls, "end:finish"))
    assert got == [[None, 0]] + [[k, k + 1] for k in range(201)]


# --- viewer/model.py: the data every page shows (the API's answers and the bundle's files) -----------------------
# Expected values are read from the directory's own files (results.parquet, manifest.json, the analysis JSON,
# sessions.jsonl, the traces) or from the judge's row, never from the viewer.

RUN_PAGE = {"row", "verification", "events", "setup", "turns", "invocations", "faults", "labels", "commit_reasons",
            "state", "extras"}
COUNTED = ("workload", "condition", "outcome", "fault", "agent", "model", "backend")


def _results(d: Path) -> Any:
    """results.parquet as pandas reads it."""
    import pandas as pd

    return pd.read_parquet(d / "results.parquet")


def test_the_status_of_a_complete_directory_has_no_notes(smoke_results: Path, tmp_path: Path) -> None:
    from aft_bench.viewer.model import Viewer
    from aft_bench.viewer.source import content_key

    d = _copy(smoke_results, tmp_path / "d")
    assert Viewer(d).status() == {"directory": str(d), "key": content_key(d), "runs": 36, "planned": 36, "notes": [],
                                  "has_analysis": True}


def test_the_status_names_a_torn_journal_rows_not_compacted_and_missing_traces(smoke_results: Path,
                                                                               tmp_path: Path) -> None:
    """results.parquet written without the last run (the journal holds 36), that run's line torn off at the
    journal's end as a crash mid-write leaves it, and the first run's trace deleted: three notes, in this order."""
    from aft_bench.episode.row import write_parquet
    from aft_bench.experiment.journal import read_rows
    from aft_bench.viewer.model import Viewer

    d = _copy(smoke_results, tmp_path / "d")
    rows = read_rows(d / "journal.jsonl")
    write_parquet(rows[:-1], d / "results.parquet")
    with (d / "journal.jsonl").open("a") as fh:
        fh.write('{"run_id": "torn')
    (d / "traces" / f"{rows[0]['run_id']}.jsonl").unlink()
    status = Viewer(d).status()
    assert (status["runs"], status["planned"]) == (35, 36)
    assert status["notes"] == [
        "journal.jsonl ends in a torn line (a run interrupted mid-write): that run is pending",
        "journal.jsonl holds 36 rows, results.parquet 35: 1 not compacted yet",
        f"1 of 35 runs have no trace file (e.g. {rows[0]['run_id']})"]


def test_the_experiment_page_shows_the_manifest_counts_sessions_and_analysis_as_recorded(smoke_results: Path,
                                                                                        tmp_path: Path) -> None:
    from aft_bench.experiment.journal import read_records
    from aft_bench.viewer.model import MANIFEST_FIELDS, TABLES, Viewer

    d = _copy(smoke_results, tmp_path / "d")
    v = Viewer(d)
    page = v.experiment()
    manifest = json.loads((d / "manifest.json").read_text())
    df = _results(d)
    analysis = {"meta": json.loads((d / "analysis" / "meta.json").read_text()),
                **{t: json.loads((d / "analysis" / f"{t}.json").read_text()) for t in TABLES}}
    assert page == {
        "manifest": {k: manifest[k] for k in MANIFEST_FIELDS if k in manifest},
        "counts": {c: {str(k): int(n) for k, n in df[c].value_counts().items()} for c in COUNTED},
        "runs": 36, "planned": 36, "pending": [], "pending_count": 0, "failures": [],
        "sessions": read_records(d / "sessions.jsonl"), "analysis": analysis, "analysis_stale": False,
        "figures": [], "status": v.status()}
    assert set(page["manifest"]) == set(MANIFEST_FIELDS)  # a config run's manifest has them all
    assert v.facets() == {"facets": v.runs.facets(), "order": ["workload", "condition", "agent", "model", "fault",
                                                              "backend", "server", "outcome", "task_id", "catalog_size",
                                                              "y_goal", "y_correct", "fault_fired", "recovered",
                                                              "duplicate_effects", "unsafe_commits",
                                                              "unauthorized_effects", "stale_writes",
                                                              "unintended_effects", "residual_effects",
                                                              "incorrect_claim", "claim_correct", "terminal_action",
                                                              "terminal_claim", "mode"]}


def test_the_experiment_page_lists_the_report_s_figures(smoke_results: Path, tmp_path: Path, capsys) -> None:
    from aft_bench.viewer.model import Viewer

    d = _copy(smoke_results, tmp_path / "d")
    assert main(["report", str(d)]) == 0
    pngs = sorted(p.name for p in (d / "report").iterdir() if p.suffix == ".png")
    assert pngs  # the report draws at least one figure
    assert Viewer(d).experiment()["figures"] == pngs


def test_pending_tuples_and_failures_of_a_partial_directory(smoke_results: Path, tmp_path: Path) -> None:
    """Two runs not recorded (cut from journal and results), one of them with a failure record; a failure of a run
    recorded since, and one of no run (a dead worker): the pending tuples in plan order, the one never attempted
    saying so; the failures shown are those of no run and of runs not recorded, in file order."""
    from aft_bench.experiment.journal import read_rows
    from aft_bench.viewer.model import Viewer

    d = _copy(smoke_results, tmp_path / "d")
    rows = read_rows(d / "journal.jsonl")
    planned = json.loads((d / "manifest.json").read_text())["run_ids"]
    first, second = sorted((rows[3]["run_id"], rows[20]["run_id"]), key=planned.index)
    _cut_runs(d, {first, second})
    records = [{"run_id": None, "session": 1, "error": "BrokenProcessPool", "message": "a worker process died"},
               {"run_id": rows[0]["run_id"], "session": 1, "error": "OSError", "message": "disk full"},
               {"run_id": second, "session": 1, "error": "TimeoutError", "message": "backend timed out"}]
    (d / "failures.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    page = Viewer(d).experiment()
    assert page["pending"] == [
        {"run_id": first, "error": None, "message": "not attempted yet"},
        {"run_id": second, "session": 1, "error": "TimeoutError", "message": "backend timed out"}]
    assert (page["pending_count"], page["runs"], page["planned"]) == (2, 34, 36)
    assert page["failures"] == [records[0], records[2]]


def test_the_experiment_page_says_whether_its_analysis_is_current(smoke_results: Path, tmp_path: Path) -> None:
    """No analysis: none shown, staleness unknown (None). Results changed since: stale. No results.parquet (the
    journal only): the analysis is shown, staleness unknown. An analysis made before one of its tables existed:
    that table None. An unreadable table or meta: refused naming the file."""
    import shutil

    from aft_bench.common.errors import InputError
    from aft_bench.experiment.journal import read_rows
    from aft_bench.viewer.model import Viewer

    d = _copy(smoke_results, tmp_path / "d")
    (d / "analysis" / "lomo.json").unlink()
    page = Viewer(d).experiment()
    assert page["analysis"]["lomo"] is None and page["analysis"]["trials"] is not None
    assert page["analysis_stale"] is False
    (d / "results.parquet").unlink()
    page = Viewer(d).experiment()
    assert page["analysis_stale"] is None and page["analysis"]["primary"] is not None and page["runs"] == 36
    _cut_runs(d, {read_rows(d / "journal.jsonl")[0]["run_id"]})
    assert Viewer(d).experiment()["analysis_stale"] is True
    for name in ("trials", "meta"):
        bad = _copy(smoke_results, tmp_path / name)
        (bad / "analysis" / f"{name}.json").write_text("{")
        with pytest.raises(InputError) as err:
            Viewer(bad).experiment()
        assert str(err.value) == (f"{bad / 'analysis' / f'{name}.json'}: field '<syntax>': not a valid analysis "
                                  f"{name}.json (truncated or edited?) (got 'line 1 column 2')")
    shutil.rmtree(d / "analysis")
    page = Viewer(d).experiment()
    assert page["analysis"] == {} and page["analysis_stale"] is None


def test_every_run_page_verifies_its_trace_and_shows_its_state_labels_and_reasons(smoke_results: Path,
                                                                                  tmp_path: Path) -> None:
    """Each of the 36 runs: the page's parts; its trace verified against the row's recorded head; the terminal
    state the trace's terminal_state event holds, diffed against s0 (the task's world, hash-checked: no note);
    every label the trace can derive agreeing with the row; and the unsafe commits flagged by reason exactly as
    many as the row counts (duplicates, unauthorized, stale, unintended), some of each kind among the runs."""
    from aft_bench.viewer.model import Viewer

    d = _copy(smoke_results, tmp_path / "d")
    v = Viewer(d)
    kinds = {"duplicate": "duplicate_effects", "unauthorized": "unauthorized_effects", "stale": "stale_writes",
             "unintended": "unintended_effects"}
    seen = dict.fromkeys(kinds, 0)
    changed = 0
    for rid in v.runs.ids():
        page = v.run(rid)
        assert page is not None and set(page) == RUN_PAGE
        row = page["row"]
        trace = d / "traces" / f"{rid}.jsonl"
        assert page["verification"] == {"ok": True, "head": row["trace_head"], "recorded_head": row["trace_head"],
                                        "error": None, "path": str(trace)}
        events = [json.loads(ln) for ln in trace.read_text().splitlines()]
        final = next(e["data"]["state"] for e in reversed(events) if e["kind"] == "terminal_state")
        assert page["state"]["terminal"] == final and page["state"]["note"] is None
        assert isinstance(page["state"]["diff"], list)
        changed += bool(page["state"]["diff"])
        derived = [lb for lb in page["labels"] if lb["derived"] is not None]
        assert {lb["label"] for lb in derived} == {"duplicate_effects", "unauthorized_effects", "stale_writes",
                                                   "unintended_effects", "unsafe_commits", "residual_effects",
                                                   "context_tokens"}
        assert all(lb["agrees"] is True for lb in derived), (rid, derived)
        commits = {e["seq"] for e in events if e["kind"] == "commit"}
        assert set(page["commit_reasons"]) <= {str(s) for s in commits}
        for why, label in kinds.items():
            n = sum(why in reasons for reasons in page["commit_reasons"].values())
            assert n == row[label], (rid, why)
            seen[why] += n
    assert min(seen.values()) > 0 and changed > 0


def test_a_run_page_of_a_missing_or_cut_trace_says_so(smoke_results: Path, tmp_path: Path) -> None:
    """No trace file: no events, no state, the note "no trace". A trace cut before its end: unverified, its
    readable events shown, no terminal state and so no diff."""
    from aft_bench.viewer.model import Viewer

    d = _copy(smoke_results, tmp_path / "d")
    gone, cut = Viewer(d).runs.ids()[:2]
    (d / "traces" / f"{gone}.jsonl").unlink()
    lines = (d / "traces" / f"{cut}.jsonl").read_text().splitlines(keepends=True)
    (d / "traces" / f"{cut}.jsonl").write_text("".join(lines[:5]))
    v = Viewer(d)
    page = v.run(gone)
    assert page is not None and set(page) == RUN_PAGE
    assert page["verification"]["error"] == f"trace file missing: {gone}.jsonl" and page["events"] == []
    assert page["state"] == {"terminal": None, "diff": None, "note": "no trace"}
    page = v.run(cut)
    assert page is not None and page["verification"]["ok"] is False and len(page["events"]) == 5
    assert page["state"]["terminal"] is None and page["state"]["diff"] is None
    assert v.run("no-such-run") is None


def test_the_pair_list_and_a_pair_page(smoke_results: Path, tmp_path: Path) -> None:
    """The comparisons the pairs belong to, sorted; one comparison's pairs alone; a pair page found by either
    run, with its parts and both run ids; no page for a run in no pair of that comparison."""
    import pandas as pd

    from aft_bench.viewer.model import Viewer

    d = _copy(smoke_results, tmp_path / "d")
    v = Viewer(d)
    pd_pairs = pd.read_parquet(d / "analysis" / "pairs.parquet")
    everything = v.pair_list()
    assert everything["comparisons"] == sorted(set(pd_pairs["comparison"]))
    assert everything["source"] == "analysis/pairs.parquet" and len(everything["pairs"]) == len(pd_pairs)
    dup = v.pair_list("duplicate_effects")
    expected = pd_pairs[pd_pairs["comparison"] == "duplicate_effects"]
    assert sorted((p["run_id_treatment"], p["run_id_control"]) for p in dup["pairs"]) == sorted(
        zip(expected["run_id_treatment"], expected["run_id_control"]))
    assert dup["comparisons"] == everything["comparisons"] and dup["source"] == "analysis/pairs.parquet"
    p = dup["pairs"][0]
    for rid in (p["run_id_treatment"], p["run_id_control"]):
        page = v.pair("duplicate_effects", rid)
        assert page is not None
        assert set(page) == {"pair", "source", "labels", "alignment", "treatment", "control"}
        assert (page["pair"], page["source"], page["treatment"], page["control"]) == (
            p, "analysis/pairs.parquet", p["run_id_treatment"], p["run_id_control"])
    other = next(r for r in v.runs.ids() if r not in (p["run_id_treatment"], p["run_id_control"]) and
                 all(r not in (q["run_id_treatment"], q["run_id_control"]) for q in dup["pairs"]))
    assert v.pair("duplicate_effects", other) is None


# --- experiment/shipping.py: what a Dask worker is sent, what it checks, what it sends home ----------------------
# On a LocalCluster of processes the worker's side runs in other processes, where neither a test nor mutmut sees
# it; here the cluster's worker is a thread of this process (processes=False, over TCP as --scheduler requires),
# so `ShippedInputs.setup`, `prepare`, `verdict`, `play` and `_database_bytes` run where they can be checked.

SHIP_CONFIG = ('[experiment]\nid = "ship"\ncomparisons = ["duplicate_effects"]\ntasks_per_workload = 1\n'
               'seeds = [0]\nbackends = ["memory", "sqlite"]\n')
CLOCK = ["wall_s", "latency_s"]


def test_a_run_on_a_cluster_whose_worker_is_in_this_process_lands_the_local_rows_traces_and_databases(
        tmp_path: Path) -> None:
    """Four tuples (two on SQLite): every row equal to a local run's but for the clock, every trace byte for byte,
    every SQLite database holding the same tables and rows (its write-ahead log folded in on the worker: no -wal
    beside it); the worker's copy of the inputs is removed when the run ends."""
    pytest.importorskip("distributed", reason="the optional extra aft-bench[dask] is not installed")
    import sqlite3

    import pandas as pd
    from distributed import LocalCluster

    from aft_bench.experiment import shipping
    from aft_bench.experiment.runner import run_matrix

    cfg = tmp_path / "ship.toml"
    cfg.write_text(SHIP_CONFIG)
    matrix = load_matrix(cfg, WORLDS)
    local = tmp_path / "local"
    run_matrix(matrix, local)
    d = tmp_path / "dask"
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp", host="127.0.0.1",
                      dashboard_address=None) as here:
        assert main(["run", str(cfg), "--out", str(d), "--executor", "dask", "--scheduler", here.scheduler_address,
                     "--worlds", str(WORLDS)]) == 0
        token = shipping.bundle(matrix).token
        assert shipping.verdict(token) is None  # this process's worker holds the inputs, accepted
        folder = shipping._PREPARED[token].folder
        assert (folder / "ship.toml").read_text() == SHIP_CONFIG
    assert token not in shipping._PREPARED and not folder.exists()  # the plugin's teardown removed its copy
    a = pd.read_parquet(local / "results.parquet").drop(columns=CLOCK + ["trace_head"])
    b = pd.read_parquet(d / "results.parquet").drop(columns=CLOCK + ["trace_head"])
    pd.testing.assert_frame_equal(a, b)
    assert sorted(p.name for p in (d / "traces").iterdir()) == sorted(c.run_id + ".jsonl" for c in matrix.cells)
    sqlite_runs = [c.run_id for c in matrix.cells if c.backend == "sqlite"]
    assert len(sqlite_runs) == 2 and sorted(p.name for p in (d / "db").iterdir()) == sorted(
        r + ".sqlite" for r in sqlite_runs)

    def content(path: Path) -> dict[str, list[tuple]]:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
            return {t: sorted(db.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables}

    for rid in sqlite_runs:
        assert content(d / "db" / f"{rid}.sqlite") == content(local / "db" / f"{rid}.sqlite")


def test_the_fingerprint_names_the_first_difference_in_words() -> None:
    """Version first, then tokenizer, then inputs (the first differing input by name, and how many more)."""
    from aft_bench.experiment.shipping import Fingerprint

    mine = Fingerprint("1.0", "gpt-4o via litellm 1.2", (("code:a.py", "h1"), ("code:b.py", "h2"), ("world:x", "h3")))
    assert mine.difference(mine) is None
    assert mine.difference(Fingerprint("1.1", "gpt-4 via litellm 1.3", ())) == (
        "aft-bench 1.1 on the worker, 1.0 on the driver")
    assert mine.difference(Fingerprint("1.0", "gpt-4 via litellm 1.2", ())) == (
        "tokenizer gpt-4 via litellm 1.2 on the worker, gpt-4o via litellm 1.2 on the driver")
    assert mine.difference(Fingerprint("1.0", "gpt-4o via litellm 1.2", (("code:a.py", "h1"), ("code:b.py", "XX"),
                                                                          ("world:x", "h3")))) == (
        "input code:b.py hashes differently on the worker")
    assert mine.difference(Fingerprint("1.0", "gpt-4o via litellm 1.2", (("code:b.py", "h2"), ("world:y", "h4")))) == (
        "input code:a.py hashes differently on the worker (and 2 more)")  # a.py and world:x missing, world:y extra
    assert mine.difference(Fingerprint("1.0", "gpt-4o via litellm 1.2", (("code:a.py", "h1"), ("code:b.py", "h2"),
                                                                          ("world:x", "XX"), ("world:y", "h4")))) == (
        "input world:x hashes differently on the worker (and 1 more)")  # world:y only on the worker


def test_a_worker_without_litellm_installed_names_it_in_its_tokenizer(tmp_path: Path, monkeypatch) -> None:
    """aft-bench requires litellm, but a worker installed without its dependencies has none: its fingerprint says
    "via litellm absent", which differs from the driver's and so refuses the worker, naming both."""
    from importlib import metadata

    from aft_bench.experiment.shipping import Fingerprint
    from aft_bench.interface import tokens

    cfg = tmp_path / "ship.toml"
    cfg.write_text(SHIP_CONFIG)
    matrix = load_matrix(cfg, WORLDS)
    driver = Fingerprint.of(matrix)

    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    worker = Fingerprint.of(matrix)
    assert worker.tokenizer == f"{tokens.TOKENIZER_MODEL} via litellm absent"
    assert driver.difference(worker) == (f"tokenizer {tokens.TOKENIZER_MODEL} via litellm absent on the worker, "
                                         f"{driver.tokenizer} on the driver")


def test_a_bundle_leaves_out_python_caches_in_the_worlds_folder(tmp_path: Path) -> None:
    """A worlds folder someone ran Python in holds __pycache__ folders: they are not inputs and are not shipped."""
    import shutil

    from aft_bench.experiment.shipping import bundle

    worlds = tmp_path / "worlds"
    shutil.copytree(WORLDS, worlds)
    (worlds / "__pycache__").mkdir()
    (worlds / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    cfg = tmp_path / "ship.toml"
    cfg.write_text(SHIP_CONFIG)
    names = [name for name, _ in bundle(load_matrix(cfg, worlds)).worlds]
    assert names == [name for name, _ in bundle(load_matrix(cfg, WORLDS)).worlds]
    assert not any("__pycache__" in n for n in names)


def test_a_bundle_carries_the_config_every_world_file_and_the_driver_s_fingerprint(tmp_path: Path) -> None:
    from importlib import metadata

    import aft_bench
    from aft_bench.common.canonical import digest
    from aft_bench.experiment import freeze
    from aft_bench.experiment.shipping import Fingerprint, bundle
    from aft_bench.interface import tokens

    cfg = tmp_path / "ship.toml"
    cfg.write_text(SHIP_CONFIG)
    matrix = load_matrix(cfg, WORLDS)
    shipped = bundle(matrix)
    litellm = metadata.version("litellm")
    expected = Fingerprint(str(aft_bench.__version__), f"{tokens.TOKENIZER_MODEL} via litellm {litellm}",
                           tuple(sorted(freeze.inputs(matrix).items())))
    assert shipped.expected == expected == Fingerprint.of(matrix)
    assert shipped.token == digest([expected.version, expected.tokenizer, list(expected.inputs)])[:16]
    assert (shipped.config_name, shipped.config) == ("ship.toml", SHIP_CONFIG.encode())
    files = sorted(p for p in WORLDS.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert [name for name, _ in shipped.worlds] == [p.relative_to(WORLDS).as_posix() for p in files]
    assert all(data == (WORLDS / name).read_bytes() for name, data in shipped.worlds)


def test_a_worker_refuses_inputs_it_cannot_rebuild_or_run_and_says_why(tmp_path: Path, monkeypatch) -> None:
    """What `verdict` answers the driver on a worker: inputs never shipped; inputs whose fingerprint differs from
    this worker's; a config this worker cannot load; an agent whose key variable this worker lacks. A refused
    worker plays nothing: each attempt comes back refused, with the reason."""
    import asyncio
    import dataclasses

    import aft_bench
    from aft_bench.experiment import shipping

    assert shipping.verdict("no-such-token") == "the inputs were not shipped to this worker"
    cfg = tmp_path / "ship.toml"
    cfg.write_text(SHIP_CONFIG)
    matrix = load_matrix(cfg, WORLDS)
    good = shipping.bundle(matrix)
    rid = matrix.cells[0].run_id
    assert shipping._play("tcp://w:1", "no-such-token", 0, rid, 1) == shipping.Returned(
        rid, 1, "tcp://w:1", "refused", {"message": "the inputs were not shipped to this worker"})

    other = dataclasses.replace(good, token="t-other", expected=dataclasses.replace(good.expected, version="0.0.1"))
    broken = dataclasses.replace(good, token="t-broken", config=b"[experiment]\nid = 1\n")
    llm_cfg = SHIP_CONFIG + ('[[experiment.agents]]\nname = "llm"\nmodel = "openai/gpt-4o-mini"\n'
                             'api_base = "http://127.0.0.1:9/v1"\napi_key_env = "AFT_SHIP_TEST_KEY"\n')
    monkeypatch.setenv("AFT_SHIP_TEST_KEY", "k")
    (tmp_path / "llm.toml").write_text(llm_cfg)
    keyed = dataclasses.replace(shipping.bundle(load_matrix(tmp_path / "llm.toml", WORLDS)), token="t-keyed")
    monkeypatch.delenv("AFT_SHIP_TEST_KEY")
    plugins = [shipping.ShippedInputs(b) for b in (other, broken, keyed)]
    try:
        for plugin in plugins:
            assert plugin.name == f"aft-bench-inputs-{plugin.bundle.token}"
            asyncio.run(plugin.setup(None))
        assert shipping.verdict("t-other") == f"aft-bench {aft_bench.__version__} on the worker, 0.0.1 on the driver"
        assert shipping.verdict("t-broken").startswith(
            "cannot rebuild the shipped inputs: InputError: ")
        assert "field 'experiment.id'" in shipping.verdict("t-broken")
        assert shipping.verdict("t-keyed") == ("agent llm cannot run here: api_key_env names AFT_SHIP_TEST_KEY, which "
                                               "is not set in the environment")
        got = shipping._play("tcp://w:1", "t-other", 0, rid, 2)
        assert (got.kind, got.data, got.trace, got.database) == (
            "refused", {"message": shipping.verdict("t-other")}, None, None)
        folders = [shipping._PREPARED[p.bundle.token].folder for p in plugins]
        assert all((f / "worlds").is_dir() for f in folders)
    finally:
        for plugin in plugins:
            plugin.teardown(None)
    assert not any(f.exists() for f in folders) and shipping.verdict("t-other") == (
        "the inputs were not shipped to this worker")
    plugins[0].teardown(None)  # twice: nothing left to remove


def test_a_worker_refuses_a_cell_that_is_not_the_run_asked_for(tmp_path: Path) -> None:
    """The driver names each attempt by cell index and run id; a worker whose matrix disagrees (an index out of
    range, another run at that index) refuses it, naming both."""
    import asyncio

    from aft_bench.experiment import shipping

    cfg = tmp_path / "ship.toml"
    cfg.write_text(SHIP_CONFIG)
    matrix = load_matrix(cfg, WORLDS)
    plugin = shipping.ShippedInputs(shipping.bundle(matrix))
    token = plugin.bundle.token
    asyncio.run(plugin.setup(None))
    try:
        first, second = matrix.cells[0].run_id, matrix.cells[1].run_id
        n = len(matrix.cells)
        for index, rid in ((1, first), (n, first), (-1, first)):
            got = shipping._play("tcp://w:1", token, index, rid, 1)
            assert (got.run_id, got.attempt, got.worker, got.kind, got.data) == (
                rid, 1, "tcp://w:1", "refused", {"message": f"cell {index} is not run {rid} on this worker"})
        got = shipping._play("tcp://w:1", token, 1, second, 3)
        assert (got.run_id, got.attempt, got.kind, got.data["run_id"], got.database) == (second, 3, "row", second,
                                                                                         None)
        assert got.trace is not None and json.loads(got.trace.splitlines()[0])["kind"] == "run_start"
    finally:
        plugin.teardown(None)


# ==================================================================================================================
# The full run's survivors (issue 39, part 5): what the mutmut run over the six modules with the tests above still
# found undefended (benchmarks/mutants.md, "Issue 39's scope"). Same rules: the exact value a user reads, real
# parts, a Dask worker in this process so that mutmut's stats see the worker's side.
# ==================================================================================================================

# --- viewer/pairs.py and viewer/model.py: a pair page ------------------------------------------------------------

LABEL_COLUMNS = ["fault_fired", "outcome", "y_goal", "y_correct", "recovered", "duplicate_effects", "unsafe_commits",
                 "unauthorized_effects", "stale_writes", "unintended_effects", "residual_effects", "terminal_action",
                 "terminal_claim", "claim_correct", "incorrect_claim", "context_tokens", "recall", "tool_calls",
                 "model_turns", "mode", "program_attempts", "replayed_writes", "fallbacks", "policy_start",
                 "policy_step_ms", "policy_build_ms", "measured_build_ms"]


def test_a_pair_page_lists_every_label_with_both_arms_values_and_which_differ(smoke_results: Path,
                                                                             tmp_path: Path) -> None:
    """duplicate_effects on rl-05-o2: the control (I5) committed the order twice, the treatment did not. The page's
    label table has every label column in schema order, each arm's value as recorded, and `differs` true exactly
    for the five that differ (a label equal in both arms, or null in both, does not differ)."""
    import pandas as pd

    from aft_bench.viewer.model import Viewer

    d = _copy(smoke_results, tmp_path / "d")
    pairs = pd.read_parquet(d / "analysis" / "pairs.parquet")
    p = pairs[(pairs["comparison"] == "duplicate_effects") & (pairs["task_id"] == "rl-05-o2")].iloc[0]
    results = pd.read_parquet(d / "results.parquet").set_index("run_id")
    page = Viewer(d).pair("duplicate_effects", p["run_id_control"])
    assert page is not None and (page["treatment"], page["control"]) == (p["run_id_treatment"], p["run_id_control"])
    labels = page["labels"]
    assert [lb["label"] for lb in labels] == LABEL_COLUMNS
    assert all(set(lb) == {"label", "treatment", "control", "differs"} for lb in labels)
    assert [lb["label"] for lb in labels if lb["differs"]] == ["outcome", "y_correct", "duplicate_effects",
                                                               "unsafe_commits", "context_tokens"]
    by = {lb["label"]: lb for lb in labels}
    assert by["outcome"] == {"label": "outcome", "treatment": "completed", "control": "unsafely_committed",
                             "differs": True}
    assert by["duplicate_effects"] == {"label": "duplicate_effects", "treatment": 0, "control": 1, "differs": True}
    assert by["tool_calls"] == {"label": "tool_calls", "treatment": 5, "control": 5, "differs": False}
    assert by["policy_start"] == {"label": "policy_start", "treatment": None, "control": None, "differs": False}
    for lb in labels:  # every value as results.parquet records it
        for arm in ("treatment", "control"):
            want = results.loc[p[f"run_id_{arm}"], lb["label"]]
            assert (lb[arm] is None and pd.isna(want)) or lb[arm] == want, (lb, arm)


def test_a_pair_whose_run_is_not_in_the_results_has_no_page(smoke_results: Path, tmp_path: Path) -> None:
    """An analysis pairs.parquet naming a control run the results do not hold (edited by hand, the analysis still
    current): the pair is listed, but asked for by its treatment run there is no page (the server's 404), not a
    page built from nothing."""
    import pandas as pd

    from aft_bench.viewer.model import Viewer

    d = _copy(smoke_results, tmp_path / "d")
    path = d / "analysis" / "pairs.parquet"
    pairs = pd.read_parquet(path)
    i = pairs.index[(pairs["comparison"] == "duplicate_effects") & (pairs["task_id"] == "rl-01-o1")][0]
    treatment = pairs.loc[i, "run_id_treatment"]
    pairs.loc[i, "run_id_control"] = "no-such-run"
    pairs.to_parquet(path, index=False)
    v = Viewer(d)
    assert v.pair_list()["source"] == "analysis/pairs.parquet"  # still current: meta names results.parquet only
    assert v.run(treatment) is not None and v.run("no-such-run") is None
    assert v.pair("duplicate_effects", treatment) is None
    assert v.pair("duplicate_effects", "no-such-run") is None


# --- viewer/model.py: a run page, refresh, the runs query, scorecards --------------------------------------------

def test_a_run_page_of_a_trace_without_its_run_start_says_s0_cannot_be_checked(smoke_results: Path,
                                                                               tmp_path: Path) -> None:
    """A trace whose first line (run_start, which holds the s0 hash) is gone: the rest is shown, unverified, and the
    state section says the s0 hash differs (none to compare), with no diff."""
    from aft_bench.viewer.model import Viewer

    d = _copy(smoke_results, tmp_path / "d")
    rid = Viewer(d).runs.ids()[0]
    trace = d / "traces" / f"{rid}.jsonl"
    lines = trace.read_text().splitlines(keepends=True)
    assert json.loads(lines[0])["kind"] == "run_start"
    trace.write_text("".join(lines[1:]))
    page = Viewer(d).run(rid)
    assert page is not None and page["verification"]["ok"] is False and len(page["events"]) == len(lines) - 1
    assert page["state"]["note"] == "the world or task changed since the run (s0 hash differs)"
    assert page["state"]["diff"] is None and page["state"]["terminal"] is not None


def test_refresh_reloads_only_when_the_results_changed(smoke_results: Path, tmp_path: Path) -> None:
    import pandas as pd

    from aft_bench.viewer.model import Viewer

    d = _copy(smoke_results, tmp_path / "d")
    v = Viewer(d)
    assert v.refresh() is False and len(v.runs) == 36
    df = pd.read_parquet(d / "results.parquet")
    df.iloc[:30].to_parquet(d / "results.parquet", index=False)
    assert v.refresh() is True and len(v.runs) == 30
    assert v.refresh() is False and len(v.runs) == 30


def test_the_runs_query_filters_sorts_and_pages_as_asked(smoke_results: Path) -> None:
    """`?workload=response_loss&sort=tool_calls&desc=1&size=2`: the response_loss runs counted from
    results.parquet, the first page of two, most tool calls first."""
    import pandas as pd

    from aft_bench.viewer.model import Viewer

    df = pd.read_parquet(smoke_results / "results.parquet")
    mine = df[df["workload"] == "response_loss"]
    got = Viewer(smoke_results).query({"workload": "response_loss", "sort": "tool_calls", "desc": "1", "size": "2"})
    assert (got["total"], got["runs"], got["page"], got["size"]) == (len(mine), 36, 0, 2)
    assert [r["tool_calls"] for r in got["rows"]] == sorted(mine["tool_calls"], reverse=True)[:2]
    assert {r["workload"] for r in got["rows"]} == {"response_loss"}


def _card(version: str, bare: str, contradictions: list[str], **extra: Any) -> dict[str, Any]:
    """A scorecard as `aft-bench scorecard` writes it, of one tool with one example (the viewer shows what the file
    says, so it is written here by hand)."""
    outcome = {"treatment": "bare", "cls": bare, "realized": 1, "first": None, "delivered": None, "changes": {},
               "reissue": {"content": [{"type": "text", "text": "[]"}], "isError": False}}
    card = {"world": "memory", "package": "@modelcontextprotocol/server-memory", "version": version,
            "server": {"name": "memory-server", "version": "0.6.3"}, "protocol": "2025-06-18",
            "tools": [{"tool": "create_entities", "example": 0, "args": {}, "note": "", "overlay": {},
                       "annotations": {"readOnlyHint": False}, "outcomes": [outcome, {**outcome, "treatment": "key",
                                                                                      "cls": "safe"}],
                       "contradictions": contradictions}],
            "untested": ["delete_entities"]}
    card.update(extra)
    return card


def test_the_scorecards_page_shows_each_card_its_rows_and_what_changed_per_world(tmp_path: Path) -> None:
    """scorecards/ holding three versions of the memory server, one card of another world (no server info, no
    untested list), a JSON file that is not a scorecard and two truncated ones: the cards in file order with the rows
    the command prints, each world's consecutive versions compared, and the bad files named in the notes (the
    error's first line, which names what the file should be, cut at 160 characters), never shown as cards."""
    from aft_bench.scorecard.render import rows
    from aft_bench.viewer.model import Viewer

    d = tmp_path / "d"
    cards = d / "scorecards"
    cards.mkdir(parents=True)
    a = _card("2026.8.31", "silent_success", ["idempotentHint=false (or absent)"])
    b = _card("2026.9.1", "duplicate", [])
    c = _card("2026.9.2", "duplicate", [])
    git = _card("2026.10.19", "safe", [], world="git", server=None, untested=None)
    for name, card in (("memory-1.json", a), ("memory-2.json", b), ("memory-3.json", c), ("git.json", git)):
        (cards / name).write_text(json.dumps(card))
    (cards / "notes.json").write_text('{"not": "a scorecard"}')
    long_name = "t" * 150 + ".json"
    (cards / long_name).write_text("{")
    (cards / "b.json").write_text("{")
    (cards / "readme.txt").write_text("not json")
    (d / "journal.jsonl").write_text("")
    got = Viewer(d).scorecards()

    def shown(file: str, card: dict[str, Any]) -> dict[str, Any]:
        return {"file": file, "world": card["world"], "package": card["package"], "version": card["version"],
                "server": card["server"] or {}, "protocol": card["protocol"], "rows": rows(card),
                "untested": card["untested"] or []}

    assert got["cards"] == [shown("git.json", git), shown("memory-1.json", a), shown("memory-2.json", b),
                            shown("memory-3.json", c)]
    assert got["cards"][0]["server"] == {} and got["cards"][0]["untested"] == []
    assert got["cards"][1]["rows"][0]["bare"] == "silent_success"
    assert got["changes"] == [
        {"world": "memory", "from": "2026.8.31", "to": "2026.9.1", "lines": [
            ("create_entities (bare): silent success in 2026.8.31 -> DUPLICATE in 2026.9.1 (re-issue answered "
             "'[]' -> '[]')"),
            "create_entities (annotations): idempotentHint=false (or absent) -> agree"]},
        {"world": "memory", "from": "2026.9.1", "to": "2026.9.2", "lines": []}]
    problem, short = (f"{cards / name}: field '<syntax>': not a valid aft-bench scorecard (truncated or edited?) "
                      "(got 'line 1 column 2')" for name in (long_name, "b.json"))
    assert len(problem) > 160 and "not a valid aft-bench scorecard" in short[:160]
    assert got["notes"] == [f"b.json: not a scorecard ({short[:160]})", "notes.json: not a scorecard ('tools')",
                            f"{long_name}: not a scorecard ({problem[:160]})"]


def test_a_folder_without_scorecards_has_none(tmp_path: Path) -> None:
    from aft_bench.viewer.model import Viewer

    d = tmp_path / "d"
    d.mkdir()
    (d / "journal.jsonl").write_text("")
    (d / "scorecards.json").write_text("{}")  # beside the folder, not in it
    assert Viewer(d).scorecards() == {"cards": [], "changes": [], "notes": []}


# --- experiment/spend.py: releasing one reservation ---------------------------------------------------------------

@pytest.mark.parametrize("which", [0, 1], ids=["Spend", "SharedSpend"])
def test_a_failed_tuple_releases_its_own_reservation_only(which: int) -> None:
    """Committed 0.25 of 1.0 with a peak of 0.25: three tuples start (0.25 + 3 * 0.25 = 1.0), a fourth waits. One
    of the three fails: its reservation alone is released, so one more starts and the next waits again."""
    from aft_bench.experiment.executors import context
    from aft_bench.experiment.spend import START, WAIT, Spend

    spend = Spend([{"run_id": "a", "cost_usd": 0.25}], 1.0, None)
    ledger = [spend, spend.shared(context())][which]
    assert [ledger.begin() for _ in range(4)] == [START, START, START, WAIT]
    ledger.end(None)
    assert [ledger.begin(), ledger.begin()] == [START, WAIT]


@pytest.mark.parametrize("which", [0, 1], ids=["Spend", "SharedSpend"])
def test_a_peak_of_one_token_is_reserved_too(which: int) -> None:
    """Nine rows of one token each under a ceiling of 10 tokens: one tuple starts (9 + 1 = 10), a second waits
    (9 + 2 > 10), although committed tokens alone are under the ceiling."""
    from aft_bench.experiment.executors import context
    from aft_bench.experiment.spend import START, WAIT, Spend

    spend = Spend([{"run_id": f"r{i}", "prompt_tokens": 1} for i in range(9)], None, 10)
    ledger = [spend, spend.shared(context())][which]
    assert [ledger.begin(), ledger.begin()] == [START, WAIT]


@pytest.mark.parametrize("which", [0, 1], ids=["Spend", "SharedSpend"])
def test_with_tuples_in_flight_the_run_stops_once_committed_spend_and_one_reservation_pass_the_ceiling(
        which: int) -> None:
    """Three tuples in flight under a ceiling of 1.0 (committed 0.25, peak 0.25); one finishes at 0.5: committed
    0.75 and a peak of 0.5 leave no room even with nothing in flight, so the next start is STOP (the run ends its
    queue), not WAIT for the two still running."""
    from aft_bench.experiment.executors import context
    from aft_bench.experiment.spend import START, STOP, WAIT, Spend

    spend = Spend([{"run_id": "a", "cost_usd": 0.25}], 1.0, None)
    ledger = [spend, spend.shared(context())][which]
    assert [ledger.begin() for _ in range(4)] == [START, START, START, WAIT]
    ledger.end({"run_id": "b", "cost_usd": 0.5})
    assert ledger.begin() == STOP


# --- experiment/shipping.py: what a worker announces and sends home ----------------------------------------------

def test_a_worker_announces_each_start_and_sends_home_its_row_or_its_failure(tmp_path: Path) -> None:
    """On a Dask worker in this process: `play` announces the start on the topic the driver subscribes to, with the
    task's key and the worker's address (how the driver notices an attempt run twice), and returns the row with its
    run id, attempt number and worker. An exception outside the episode (here the temporary folder cannot be made)
    comes back as a failure record: run id, attempt, worker, the exception's class and its message, credentials
    redacted and cut at 2000 characters."""
    pytest.importorskip("distributed", reason="the optional extra aft-bench[dask] is not installed")
    import time

    from distributed import Client, LocalCluster

    from aft_bench.experiment import shipping

    cfg = tmp_path / "ship.toml"
    cfg.write_text(SHIP_CONFIG)
    matrix = load_matrix(cfg, WORLDS)
    shipped = shipping.bundle(matrix)
    index = next(i for i, c in enumerate(matrix.cells) if c.backend == "sqlite")
    rid = matrix.cells[index].run_id
    missing = tmp_path / "gone" / ("sk-" + "A" * 32)
    for _ in range(11):
        missing = missing / ("x" * 200)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp", host="127.0.0.1",
                      dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.register_plugin(shipping.ShippedInputs(shipped))
        (address,) = client.scheduler_info()["workers"]
        key = f"aft-bench-{rid}-attempt-3-test"
        got = client.submit(shipping.play, shipped.token, index, rid, 3, "starts", key, key=key,
                            pure=False).result(timeout=20)
        assert (got.run_id, got.attempt, got.worker, got.kind, got.data["run_id"]) == (rid, 3, address, "row", rid)
        assert got.trace is not None and got.database is not None
        deadline = time.monotonic() + 10
        while not client.get_events("starts") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [msg for _ts, msg in client.get_events("starts")] == [{"key": key, "worker": address}]

        saved = shipping.scratch_dir  # the worker's scratch folder (in this process: processes=False) gone
        shipping.scratch_dir = lambda: missing  # type: ignore[assignment]
        try:
            failed = client.submit(shipping.play, shipped.token, index, rid, 4, "starts", "k4", key="k4",
                                   pure=False).result(timeout=20)
        finally:
            shipping.scratch_dir = saved  # type: ignore[assignment]
    message = f"[Errno 2] No such file or directory: '{missing}/aft-bench-{rid}-".replace("sk-" + "A" * 32,
                                                                                          "[redacted]")
    assert len(message) > 2000
    assert failed == shipping.Returned(rid, 4, address, "failure", {"run_id": rid, "error": "FileNotFoundError",
                                                                    "message": message[:2000]})


def test_a_worker_s_copy_of_the_inputs_is_one_named_folder_and_its_teardown_survives_it_being_gone(
        tmp_path: Path) -> None:
    """The worker unpacks a bundle into one temporary folder named after the input set (what an operator finds in
    the worker's temp folder), holding exactly the config and worlds/. If that folder is removed under a live
    worker (a temp cleaner), the plugin's teardown still forgets the input set instead of raising."""
    import asyncio
    import shutil

    from aft_bench.experiment import shipping

    cfg = tmp_path / "ship.toml"
    cfg.write_text(SHIP_CONFIG)
    plugin = shipping.ShippedInputs(shipping.bundle(load_matrix(cfg, WORLDS)))
    token = plugin.bundle.token
    asyncio.run(plugin.setup(None))
    folder = shipping._PREPARED[token].folder
    try:
        assert folder.name.startswith(f"aft-bench-inputs-{token}-")
        assert sorted(p.name for p in folder.iterdir()) == ["ship.toml", "worlds"]
        shutil.rmtree(folder)
    finally:
        plugin.teardown(None)
    assert shipping.verdict(token) == "the inputs were not shipped to this worker" and not folder.exists()


# --- analysis/profile.py: the figures a warm start reads ---------------------------------------------------------

def test_a_profile_keeps_six_decimals_of_the_mean_step_and_build(tmp_path: Path) -> None:
    """Three cold starts measuring 1000, 1000 and 1001 ms a step and 12600, 12600, 12601 ms to build, and a warm
    start (its copied step and build left out): the entry's means, rounded to six decimals, over the three."""
    import pandas as pd

    from aft_bench.analysis.profile import profiles

    net = '{"build_ms":12600.0,"decision_ms":1500.0,"rtt_ms":10.0}'
    df = pd.DataFrame({"world": ["memos"] * 4, "model": ["none"] * 4, "network": [net] * 4,
                       "policy_start": ["cold", "cold", "cold", "warm"],
                       "policy_step_ms": [1000.0, 1000.0, 1001.0, 4000.0],
                       "measured_build_ms": [12600.0, 12600.0, 12601.0, 9000.0]})
    assert profiles(df, tmp_path / "results.parquet") == [
        {"world": "memos", "model": "none", "network": net, "step_ms": 1000.333333, "build_ms": 12600.333333,
         "runs": 3}]


def test_an_episode_that_fails_on_a_worker_comes_home_as_its_failure_record(tmp_path: Path, monkeypatch) -> None:
    """An llm agent whose provider refuses the connection (no retries): the episode raises, and the worker sends
    back the attempt's failure record (the run, its key, the provider error), named by run id, attempt and worker,
    with no trace or database."""
    import asyncio

    from aft_bench.experiment import shipping

    monkeypatch.setenv("AFT_SHIP_TEST_KEY", "k")
    cfg = tmp_path / "llm.toml"
    cfg.write_text('[experiment]\nid = "ship_llm"\ncomparisons = ["duplicate_effects"]\ntasks_per_workload = 1\n'
                   'seeds = [0]\n[[experiment.agents]]\nname = "llm"\nmodel = "openai/gpt-4o-mini"\n'
                   'api_base = "http://127.0.0.1:9/v1"\napi_key_env = "AFT_SHIP_TEST_KEY"\nretries = 0\n')
    matrix = load_matrix(cfg, WORLDS)
    plugin = shipping.ShippedInputs(shipping.bundle(matrix))
    asyncio.run(plugin.setup(None))
    try:
        assert shipping.verdict(plugin.bundle.token) is None
        cell = matrix.cells[0]
        got = shipping._play("tcp://w:1", plugin.bundle.token, 0, cell.run_id, 2)
    finally:
        plugin.teardown(None)
    assert (got.run_id, got.attempt, got.worker, got.kind, got.trace, got.database) == (
        cell.run_id, 2, "tcp://w:1", "failure", None, None)
    assert got.data == {"run_id": cell.run_id, **cell.key(), "error": "ProviderError",
                        "message": "connection refused at 127.0.0.1:9 after 1 attempt(s) on openai/gpt-4o-mini "
                                   "(InternalServerError)"}


def test_a_worker_plays_each_attempt_in_a_temporary_folder_named_after_its_run(tmp_path: Path) -> None:
    """The attempt's private folder is made under the worker's scratch folder (in the temp folder), named
    aft-bench-RUN-...: where it cannot be made, the error names that path."""
    import asyncio

    from aft_bench.experiment import shipping

    cfg = tmp_path / "ship.toml"
    cfg.write_text(SHIP_CONFIG)
    matrix = load_matrix(cfg, WORLDS)
    plugin = shipping.ShippedInputs(shipping.bundle(matrix))
    asyncio.run(plugin.setup(None))
    rid = matrix.cells[0].run_id
    saved = shipping.scratch_dir
    shipping.scratch_dir = lambda: tmp_path / "gone"  # type: ignore[assignment]
    try:
        with pytest.raises(FileNotFoundError) as err:
            shipping._play("tcp://w:1", plugin.bundle.token, 0, rid, 1)
    finally:
        shipping.scratch_dir = saved  # type: ignore[assignment]
        plugin.teardown(None)
    made = Path(err.value.filename)
    assert made.parent == tmp_path / "gone" and made.name.startswith(f"aft-bench-{rid}-")


# --- viewer/pairs.py: pairs the viewer forms or reads ------------------------------------------------------------

def test_runs_of_one_condition_have_no_pairs_and_the_plain_note(tmp_path: Path) -> None:
    """Runs of I5 alone: every comparison lacks an arm, so none is paired and none is named as unpaired."""
    from aft_bench.viewer.model import Viewer

    cfg = tmp_path / "one.toml"
    cfg.write_text('[experiment]\nid = "one"\nworkloads = ["response_loss"]\nconditions = ["I5"]\n'
                   'tasks_per_workload = 1\nseeds = [0]\n')
    d = tmp_path / "d"
    assert main(["run", str(cfg), "--out", str(d), "--worlds", str(WORLDS)]) == 0
    assert Viewer(d).pair_list() == {"comparisons": [], "pairs": [], "source": "matched here (no current analysis)"}


def test_an_analysis_written_under_pandas_2_shows_a_missing_catalog_size_as_none(smoke_results: Path,
                                                                                tmp_path: Path) -> None:
    """pandas 2 wrote a missing catalog size into pairs.parquet as the text "<NA>" (or "nan"); such an analysis,
    still current, is shown with no catalog size there, the others as recorded."""
    import pandas as pd

    from aft_bench.viewer.model import Viewer

    d = _copy(smoke_results, tmp_path / "d")
    path = d / "analysis" / "pairs.parquet"
    pairs = pd.read_parquet(path)
    sizes = [None if pd.isna(x) else str(x) for x in pairs["catalog_size"]]
    assert sizes.count(None) >= 2 and {"10", "50"} <= set(sizes)
    missing = [i for i, s in enumerate(sizes) if s is None]
    written = ["<NA>" if i in missing[::2] else "nan" if i in missing else s for i, s in enumerate(sizes)]
    pairs["catalog_size"] = pd.Series(written, dtype=object)
    pairs.to_parquet(path, index=False)
    assert set(pd.read_parquet(path)["catalog_size"]) == {"10", "50", "<NA>", "nan"}
    got = Viewer(d).pair_list()
    assert got["source"] == "analysis/pairs.parquet"
    assert [p["catalog_size"] for p in got["pairs"]] == sizes
