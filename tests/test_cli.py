"""The command line: bad input exits 2 naming file/field/value and writes nothing; good input validates."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aft_bench.cli.main import main

from conftest import ROOT, WORLDS


def _tree(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


def test_validate_every_shipped_file(capsys) -> None:
    paths = [WORLDS / "payments", WORLDS / "exports", WORLDS / "calibration" / "cases.toml",
             *sorted(WORLDS.glob("*/faults/*.toml"))]
    assert main(["validate", *map(str, paths)]) == 0
    assert capsys.readouterr().out.count("ok  ") == len(paths)


@pytest.mark.parametrize(
    "name, content, field, value",
    [
        ("f.toml", 'id = "x"\n[[faults]]\nkind = "response_loss"\nop = "x"\nunit = [3, 1]\n', "faults.0.unit", "[3, 1]"),
        ("f.toml", 'id = "x"\n[[faults]]\nkind = "response_loss"\n', "faults.0.op", "<missing>"),
        ("f.toml", 'id = "x"\n[[faults]]\nkind = "response_loss"\nop = "x"\nwhen = 3\n', "faults.0.when", "3"),
        ("f.toml", 'id = "x"\nfaults = [\n', "<syntax>", "not valid TOML"),
    ],
)
def test_bad_input_exits_2_and_names_the_problem(tmp_path: Path, capsys, name, content, field, value) -> None:
    p = tmp_path / name
    p.write_text(content)
    before = _tree(tmp_path)
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err
    assert str(p) in err and f"field '{field}'" in err
    assert value in err
    assert _tree(tmp_path) == before


def test_fault_schedule_of_a_world_is_checked_against_its_operations(tmp_path: Path, capsys) -> None:
    w = tmp_path / "payments"
    (w / "faults").mkdir(parents=True)
    (w / "world.toml").write_text((WORLDS / "payments" / "world.toml").read_text())
    f = w / "faults" / "x.toml"
    f.write_text('id = "x"\n[[faults]]\nkind = "response_loss"\nop = "charge_paymnet"\n')
    assert main(["validate", str(f)]) == 2
    err = capsys.readouterr().err
    assert "faults.0.op" in err and "charge_paymnet" in err


def test_verify_trace_command(tmp_path: Path, capsys) -> None:
    from aft_bench.runtime.trace import Trace

    p = tmp_path / "t.jsonl"
    t = Trace(p)
    t.append("x", a=1)
    head = t.seal().hash
    assert main(["verify-trace", str(p), "--head", head]) == 0
    p.write_text(p.read_text().replace('"a":1', '"a":2'))
    assert main(["verify-trace", str(p)]) == 1
    assert "modified" in capsys.readouterr().err


def test_console_script_entry_point_runs() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "aft_bench.cli", "catalog", "--size", "10", "--required",
                          "upload_file"], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    assert len(out.stdout.splitlines()) == 10 and "upload_file:" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "aft_bench.cli", "catalog", "--size", "0"],
                         capture_output=True, text=True, env=env, cwd=ROOT)
    assert bad.returncode == 2 and "catalog size" in bad.stderr


def test_a_reader_that_goes_away_is_not_an_error() -> None:
    """`aft-bench ... | head`: the closed pipe ends the command quietly (141, as SIGPIPE would), no error line."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "aft_bench.cli", "catalog", "--size", "1000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == ""


def test_readme_documents_every_result_column_and_the_two_commands() -> None:
    """The README's column table is the row model, row for row, in order."""
    from aft_bench.episode.row import SCHEMA

    first_screen = "\n".join((ROOT / "README.md").read_text().splitlines()[:20])
    assert "make reproduce" in first_screen and "make test" in first_screen
    text = (ROOT / "docs" / "analysis.md").read_text()  # the reference page that holds the column table
    table = text.split("<!-- columns:begin -->")[1].split("<!-- columns:end -->")[0].strip().splitlines()
    assert table[2:] == [f"| `{c.name}` | {c.type} | {c.meaning} |" for c in SCHEMA.values()]
