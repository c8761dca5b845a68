"""`aft-bench calibrate`: every detector calibrated, baselines hold, and a broken detector case fails the run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from aft_bench.cli.main import main
from aft_bench.experiment.calibration import DETECTORS, baselines, load_cases

from conftest import WORLDS


def test_every_detector_has_a_positive_and_a_negative_case() -> None:
    cases = load_cases(WORLDS / "calibration" / "cases.toml")
    for name in DETECTORS:
        polarities = {c.positive for c in cases if c.detector == name}
        assert polarities == {True, False}, name


def test_calibrate_passes_and_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--worlds", str(WORLDS)]) == 0
    out = capsys.readouterr().out
    assert "positive fired" in out and "negative silent" in out
    for name in DETECTORS:
        assert name in out
    assert f"{len(DETECTORS)} calibrated, 0 failing" in out


def test_baselines_do_nothing_never_completes_and_oracle_is_correct(worlds) -> None:
    rows = baselines(worlds)
    assert rows and all(r.ok for r in rows)
    assert all(r.nothing_outcome != "completed" for r in rows if r.needs_write)
    assert sum(r.oracle_outcome == "completed" for r in rows) >= len(rows) - 1


def _copy_worlds(tmp_path: Path) -> Path:
    dst = tmp_path / "worlds"
    shutil.copytree(WORLDS, dst)
    return dst


def test_detector_missing_its_positive_fails_calibration(tmp_path: Path, capsys) -> None:
    dst = _copy_worlds(tmp_path)
    cases = dst / "calibration" / "cases.toml"
    text = cases.read_text()
    # Turn the duplicate positive into a run that cannot duplicate (idempotency key on both calls).
    broken = text.replace(
        '{ call = "charge_payment", args = { order_id = "o1", amount = 50, note = "retry" } },',
        '{ retransmit = true },', 1)
    broken = broken.replace(
        '{ call = "charge_payment", args = { order_id = "o1", amount = 50, note = "" } },\n  { retransmit = true },',
        '{ call = "charge_payment", args = { order_id = "o1", amount = 50, note = "" }, key = "z" },\n  { retransmit = true },', 1)
    assert broken != text
    cases.write_text(broken)
    assert main(["calibrate", "--worlds", str(dst)]) == 1
    captured = capsys.readouterr()
    assert "duplicate_effect" in captured.err and "positive missed" in captured.err


def test_detector_firing_on_its_negative_fails_calibration(tmp_path: Path, capsys) -> None:
    dst = _copy_worlds(tmp_path)
    cases = dst / "calibration" / "cases.toml"
    text = cases.read_text()
    broken = text.replace(', expect_version = 1 },\n  { end = "abort", claim = "failure" },',
                          ' },\n  { end = "abort", claim = "failure" },', 1)
    assert broken != text
    cases.write_text(broken)
    assert main(["calibrate", "--worlds", str(dst)]) == 1
    assert "stale_write (negative fired)" in capsys.readouterr().err


def test_unknown_detector_in_cases_is_bad_input(tmp_path: Path, capsys) -> None:
    dst = _copy_worlds(tmp_path)
    cases = dst / "calibration" / "cases.toml"
    cases.write_text(cases.read_text().replace('detector = "stale_write"', 'detector = "stale_wrte"', 1))
    assert main(["calibrate", "--worlds", str(dst)]) == 2
    err = capsys.readouterr().err
    assert "cases.toml" in err and "cases.4.detector" in err and "stale_wrte" in err


def test_a_missed_positive_marks_only_its_own_detector(tmp_path: Path) -> None:
    """The table is per detector: a positive case that does not fire fails that detector and no other."""
    from aft_bench.experiment.calibration import detector_table, run_cases
    from aft_bench.tasks.worldset import WorldSet

    cases = tmp_path / "cases.toml"
    cases.write_text('''
[[cases]]
detector = "duplicate_effect"
positive = true
note = "a single charge: nothing to duplicate, so this 'positive' must be reported as missed"
task = "payments/charge-o1"
steps = [{ call = "charge_payment", args = { order_id = "o1", amount = 50, note = "" } },
         { end = "finish", claim = "success" }]

[[cases]]
detector = "y_goal"
positive = true
note = "the same charge reaches the goal"
task = "payments/charge-o1"
steps = [{ call = "charge_payment", args = { order_id = "o1", amount = 50, note = "" } },
         { end = "finish", claim = "success" }]
''')
    rows = {r.detector: r for r in detector_table(run_cases(WorldSet(WORLDS), cases))}
    assert rows["duplicate_effect"].positive_fired is False and rows["duplicate_effect"].negative_silent is None
    assert rows["y_goal"].positive_fired is True and rows["y_goal"].negative_silent is None
    assert all(r.positive_fired is None for name, r in rows.items() if name not in ("duplicate_effect", "y_goal"))


def _case_file(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "cases.toml"
    p.write_text(body)
    return p


STEPS = 'steps = [{ end = "finish", claim = "success" }]\n'


@pytest.mark.parametrize("body, message", [
    ('[[cases]]\ndetector = "y_goal"\npositive = true\ntask = "payments/nope"\n' + STEPS,
     "field 'cases.0.task': unknown task"),
    ('[[cases]]\ndetector = "y_goal"\npositive = true\ntask = "payments/charge-o1"\n'
     'faults = [{ kind = "response_loss" }]\n' + STEPS, "field 'cases.0.faults.0.op': Field required"),
    ('[[cases]]\ndetector = "y_goal"\npositive = true\ntask = "payments/charge-o1"\n'
     'faults = [{ kind = "response_loss", op = "launch" }]\n' + STEPS,
     "field 'cases.0.faults.0.op': unknown operation"),
])
def test_a_bad_case_names_the_cases_file_and_the_case_field(tmp_path: Path, body: str, message: str) -> None:
    from aft_bench.common.errors import InputError
    from aft_bench.experiment.calibration import run_cases
    from aft_bench.tasks.worldset import WorldSet

    path = _case_file(tmp_path, body)
    with pytest.raises(InputError) as exc:
        run_cases(WorldSet(WORLDS), path)
    assert str(exc.value).startswith(f"{path}: {message}"), str(exc.value)


def test_a_case_runs_with_its_own_seed_and_keeps_its_episode(tmp_path: Path) -> None:
    from aft_bench.experiment.calibration import run_cases
    from aft_bench.tasks.worldset import WorldSet

    path = _case_file(tmp_path, '[[cases]]\ndetector = "y_goal"\npositive = false\ntask = "payments/charge-o1"\n'
                                'seed = 7\n' + STEPS)
    (result,) = run_cases(WorldSet(WORLDS), path)
    assert result.run.events[0].kind == "run_start" and result.run.events[0].data["seed"] == 7
    assert result.run.labels.y_goal is False and result.fired is False and result.ok


def test_one_detectors_firing_negative_does_not_fail_another_detector() -> None:
    from aft_bench.experiment.calibration import Case, CaseResult, detector_table

    def res(detector: str, positive: bool, fired: bool) -> CaseResult:
        case = Case(detector=detector, positive=positive, task="payments/charge-o1", steps=({"end": "finish"},))
        return CaseResult(case, fired, None)  # type: ignore[arg-type]

    rows = {r.detector: r for r in detector_table([res("y_goal", True, True), res("y_goal", False, True),
                                                   res("duplicate_effect", True, True),
                                                   res("duplicate_effect", False, False)])}
    assert (rows["y_goal"].positive_fired, rows["y_goal"].negative_silent) == (True, False)
    assert (rows["duplicate_effect"].positive_fired, rows["duplicate_effect"].negative_silent) == (True, True)
    assert rows["unsafe_commit"].positive_fired is None


def test_a_task_already_satisfied_at_s0_needs_no_write_and_its_do_nothing_completion_is_fine(tmp_path: Path) -> None:
    """The do-nothing baseline may complete a task whose goal holds before any write (here: through the task's
    own initial records); it is flagged only where a write is needed."""
    from aft_bench.tasks.worldset import WorldSet

    worlds = _copy_worlds(tmp_path)
    tasks = worlds / "payments" / "tasks.toml"
    tasks.write_text(tasks.read_text() + '''
[[tasks]]
id = "already-gold"
world = "payments"
spec = "Make sure customer c9 is gold."
state = { records = { customers = { c9 = { name = "Nine", email = "n@example.org", tier = "gold" } } } }
target_ops = ["set_customer_tier"]
goal = [{ record = "customers/c9", field = "tier", equals = "gold" }]
oracle = [{ end = "finish", claim = "success" }]
''')
    rows = {r.task: r for r in baselines(WorldSet(worlds))}
    done = rows["payments/already-gold"]
    assert (done.needs_write, done.nothing_outcome, done.ok) == (False, "completed", True)
    assert rows["payments/charge-o1"].needs_write is True
