"""Refactors must not move a label: fresh runs of the three canonical configs equal the stored expectation
(key columns + labels, no run ids), their `primary.csv` is byte-identical, and calibration prints the same
table. A deliberate label change rewrites the expectation with `tests/expected/update.py`."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import pytest

from aft_bench.cli.main import main
from aft_bench.experiment.config import load_matrix
from aft_bench.experiment.runner import run_matrix

from conftest import ROOT, WORLDS

EXPECTED = ROOT / "tests" / "expected"
sys.path.insert(0, str(EXPECTED))
from update import table  # noqa: E402


def _diff(config: str, got: str) -> str:
    want = gzip.decompress((EXPECTED / f"{config}.csv.gz").read_bytes()).decode()
    if got == want:
        return ""
    g, w = got.splitlines(), want.splitlines()
    if len(g) != len(w):
        return f"{config}: {len(g) - 1} runs, expected {len(w) - 1}"
    bad = [f"  got  {a}\n  want {b}" for a, b in zip(g, w) if a != b]
    return f"{config}: {len(bad)} rows differ, first:\n{w[0]}\n" + "\n".join(bad[:3])


def _check(config: str, out: Path) -> None:
    assert main(["analyze", str(out)]) == 0
    assert not _diff(config, table(out)), _diff(config, table(out))
    assert (out / "analysis" / "primary.csv").read_bytes() == (EXPECTED / f"{config}.primary.csv").read_bytes()


@pytest.mark.parametrize("config, workers", [("smoke", 1), ("sqlite_replication", 2)])
def test_config_labels_and_primary_table_unchanged(config: str, workers: int, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    run_matrix(load_matrix(ROOT / "configs" / f"{config}.toml", WORLDS), out, workers=workers)
    _check(config, out)


def test_paper_deterministic_labels_and_primary_table_unchanged(paper, capsys) -> None:
    _check("paper_deterministic", paper[0])


def test_calibration_prints_the_same_table(capsys) -> None:
    assert main(["calibrate", "--worlds", str(WORLDS)]) == 0
    assert capsys.readouterr().out == (EXPECTED / "calibrate.txt").read_text()


def test_a_changed_label_is_caught(tmp_path: Path) -> None:
    """The comparison itself can fail: flip one label of the stored smoke expectation's text."""
    want = gzip.decompress((EXPECTED / "smoke.csv.gz").read_bytes()).decode()
    tampered = want.replace(",completed,", ",unresolved,", 1)
    assert tampered != want and _diff("smoke", tampered)
