"""The evidence of a results folder: the audit re-judges every run, resume checks finished evidence, redaction
hides credentials, and the command line keeps its error contract on what the fuzz suite cannot generate."""

from __future__ import annotations

import fcntl
import importlib
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from doc_commands import DocRunner

from aft_bench.cli.main import main
from aft_bench.common.secrets import redact
from aft_bench.episode.row import SCHEMA

from conftest import ROOT, WORLDS

SMOKE = ROOT / "configs" / "smoke.toml"
cli = importlib.import_module("aft_bench.cli.main")  # the module (the package re-exports its `main`)
# the profile-driven policy's labels are null in every smoke run: test_profile_policy.py tampers with them
POLICY = ("policy_start", "policy_step_ms", "policy_build_ms", "measured_build_ms")
LABELS = [c.name for c in SCHEMA.values() if c.group == "label" and c.name != "model_turns" and c.name not in POLICY]


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".runner.lock"))
    return dst


def _changed(value: object) -> object:
    """A different value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value / 2 if value else 0.5
    if value is None:
        return None
    return "completed" if value != "completed" else "unsafe_commit"


@pytest.mark.parametrize("column", LABELS)
def test_editing_any_label_of_a_finished_run_fails_the_audit_naming_run_and_column(
        smoke_results: Path, tmp_path: Path, column: str, capsys) -> None:
    d = _copy(smoke_results, tmp_path / "r")
    df = pd.read_parquet(d / "results.parquet")
    row = next(i for i, v in enumerate(df[column]) if _changed(None if pd.isna(v) else v) is not None)
    rid = df.loc[row, "run_id"]
    df[column] = df[column].astype(object)
    df.loc[row, column] = _changed(df.loc[row, column].item() if hasattr(df.loc[row, column], "item")
                                   else df.loc[row, column])
    df.to_parquet(d / "results.parquet", index=False)
    assert main(["audit", str(d)]) == 1
    out = capsys.readouterr().out
    failed = [ln for ln in out.splitlines() if ln.startswith("FAIL")]
    assert failed and all(rid in ln and column in ln for ln in failed if "journal" in ln or "re-judged" in ln), out
    assert any("re-judged" in ln for ln in failed), out


def _forge(d: Path, rid: str, column: str, value: object) -> None:
    """Edit one label in the journal (recomputing its checksum, as a forger would) and in results.parquet."""
    from aft_bench.experiment.journal import encode, read_rows

    rows = read_rows(d / "journal.jsonl")
    for r in rows:
        if r["run_id"] == rid:
            r[column] = value
    (d / "journal.jsonl").write_text("".join(encode(r) for r in rows))
    df = pd.read_parquet(d / "results.parquet")
    df.loc[df["run_id"] == rid, column] = value
    df.to_parquet(d / "results.parquet", index=False)


def test_a_consistent_forgery_of_journal_and_table_is_caught_by_re_judging(smoke_results: Path, tmp_path: Path,
                                                                          capsys) -> None:
    d = _copy(smoke_results, tmp_path / "r")
    df = pd.read_parquet(d / "results.parquet")
    rid = df.loc[df["duplicate_effects"] > 0, "run_id"].iloc[0]
    _forge(d, rid, "duplicate_effects", 0)
    assert main(["audit", str(d)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"PASS\s+results = journal, value for value", out)  # the forgery is self-consistent ...
    assert re.search(rf"FAIL\s+labels re-judged .*{rid} \(duplicate_effects\)", out)  # ... but not with the trace


def test_an_untouched_folder_passes_every_audit_check(smoke_results: Path, capsys) -> None:
    assert main(["audit", str(smoke_results)]) == 0
    out = capsys.readouterr().out
    assert "labels re-judged" in out and "36 runs re-judged" in out and "FAIL" not in out


def test_a_deleted_trace_stops_the_resume_and_rerun_missing_runs_it_again(smoke_results: Path, tmp_path: Path,
                                                                         capsys) -> None:
    d = _copy(smoke_results, tmp_path / "r")
    victim = sorted((d / "traces").glob("*.jsonl"))[5]
    rid = victim.stem
    old_row = next(ln for ln in (d / "journal.jsonl").read_text().splitlines() if rid in ln)
    victim.unlink()
    argv = ["run", str(SMOKE), "--out", str(d), "--worlds", str(WORLDS), "--workers", "1"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert rid in err and "trace missing" in err and "--rerun-missing" in err
    assert main([*argv, "--rerun-missing"]) == 0
    assert "1 finished run(s) without intact evidence moved back to pending" in capsys.readouterr().err
    assert victim.exists()
    kept = (d / "quarantine" / "session-2" / "journal.before-retraction.jsonl").read_text()
    assert old_row in kept  # nothing recorded is lost: the retracted row is kept
    journal = (d / "journal.jsonl").read_text().splitlines()
    assert sum(rid in ln for ln in journal) == 1 and len(journal) == 36
    assert main(["audit", str(d)]) == 0


def test_a_held_folder_without_manifest_is_reported_as_held_by_another_runner(tmp_path: Path, capsys) -> None:
    """The loser of a simultaneous start sees only the winner's lock file: it must say another runner holds it."""
    out = tmp_path / "out"
    out.mkdir()
    with open(out / ".runner.lock", "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        assert main(["run", str(SMOKE), "--out", str(out), "--worlds", str(WORLDS)]) == 2
    assert "another aft-bench runner is writing this directory" in capsys.readouterr().err


def test_workers_are_capped_at_cores_times_four_and_the_run_count(capsys, monkeypatch) -> None:
    monkeypatch.setattr(cli.os, "cpu_count", lambda: 2)
    n, note = cli._workers(10_000, 4816)
    assert n == 8 and "capped at 8" in note
    assert cli._workers(10_000, 3)[0] == 3
    assert cli._workers(2, 4816) == (2, "")
    assert capsys.readouterr().err == ""  # the note is printed after the run, never before an error


def test_the_workers_note_never_precedes_an_error(tmp_path: Path, capsys) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "someone-elses.txt").write_text("x")
    assert main(["run", str(SMOKE), "--out", str(out), "--workers", "999", "--worlds", str(WORLDS)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "capped" not in err


def test_a_world_reference_must_stay_inside_the_worlds_folder(tmp_path: Path, capsys) -> None:
    worlds = tmp_path / "worlds"
    shutil.copytree(WORLDS, worlds)
    wl = worlds / "workloads" / "state_loss.toml"
    text = wl.read_text()
    for ref in ("../../payments", str(WORLDS / "payments")):
        wl.write_text(re.sub(r'(?m)^world = ".*"$', f"world = {json.dumps(ref)}", text, count=1))
        assert main(["list", "workloads", "--worlds", str(worlds)]) == 2
        err = capsys.readouterr().err
        assert "inside the worlds directory" in err and str(wl.parent.parent) in err


def test_an_unforeseen_error_is_one_line_and_a_redacted_log(monkeypatch, capsys) -> None:
    monkeypatch.setenv("AFT_TEST_API_KEY", "sk-canary-0123456789abcdef")

    def boom(args: object) -> int:
        raise RuntimeError("exploded near sk-canary-0123456789abcdef")

    monkeypatch.setattr(cli, "cmd_summarize", boom)
    assert main(["summarize", "anywhere"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "internal error: RuntimeError" in err and "Traceback" not in err
    log = Path(err.rsplit("full log: ", 1)[1].strip())
    text = log.read_text()
    assert "Traceback" in text and "sk-canary" not in text and "sk-canary" not in err
    log.unlink()


def test_redaction_by_variable_name_and_by_key_shape(monkeypatch) -> None:
    monkeypatch.setenv("GH_PAT", "ghpat-value-1")
    monkeypatch.setenv("BASIC_AUTH", "abcd")
    monkeypatch.setenv("DB_PASSWORD", "hunter22")
    monkeypatch.setenv("PATH_EXTRA", "/opt/bin")  # PATH is not PAT
    monkeypatch.setenv("AUTHOR", "someone")  # AUTHOR is not AUTH
    monkeypatch.setenv("SHORT_TOKEN", "abc")  # under four characters: an ordinary word
    text = ("pat ghpat-value-1 auth abcd pw hunter22 path /opt/bin by someone abc "
            "openai sk-proj-ABCDEFGHIJKLMNOPQRSTUV github ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123 "
            "aws AKIAABCDEFGHIJKLMNOP header Bearer abcdefghijklmnopqrstu hash " + "ab12" * 16)
    out = redact(text)
    for secret in ("ghpat-value-1", "abcd ", "hunter22", "sk-proj-", "ghp_", "AKIAABCD", "abcdefghijklmnopqrstu"):
        assert secret not in out, secret
    for kept in ("/opt/bin", "someone", " abc ", "ab12" * 16):
        assert kept in out, kept


def test_validate_recognises_every_shipped_data_file_by_content(capsys) -> None:
    files = sorted({*WORLDS.rglob("*.toml"), *(ROOT / "configs").glob("*.toml")})
    assert main(["validate", *map(str, files)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(files) and all(ln.startswith("ok  ") for ln in out)
    kinds = {ln.split(": ")[1] for ln in out}
    assert {"world manifest", "task file", "workload", "fault schedule", "calibration cases", "experiment config",
            "CI expectations", "comparisons", "conditions", "catalog vocabulary"} <= kinds


def _readme_commands() -> list[str]:
    """Every `aft-bench` line of the README and of the docs pages, in reading order."""
    text = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    return [ln.split("  #")[0].split(" # ")[0].strip() for b in blocks for ln in b.splitlines()
            if ln.startswith("aft-bench ")]


def test_every_command_line_of_the_readme_runs(smoke_results: Path, tmp_path: Path, capsys) -> None:
    """Each `aft-bench ...` line of the README, on the shipped files: run as written (results/pd is the smoke
    results, optional [..] parts dropped); the full paper matrix, the freeze of the committed lock and a server
    waiting for its client run as --help (test_serve.py drives real servers)."""
    runner = DocRunner(smoke_results, tmp_path)
    commands = _readme_commands()
    assert len(commands) >= 12 and {c.split()[1] for c in commands} >= {"run", "validate", "audit", "check"}
    for line in commands:
        argv, code, captured = runner.run(line, capsys)
        if argv[0] == "check":  # a gate verdict, not an error: the smoke matrix is not the CI matrix
            assert code in (0, 1) and "bound" in captured.err + captured.out, (line, captured.err)
        else:
            assert code == 0, (line, captured.err)
