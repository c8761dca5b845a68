"""The documentation site stays true: the generated reference equals what the code generates and names exactly
what the code has (checked both ways, with known negatives), the site builds with warnings as errors, and every
`aft-bench` line of a `sh` block in the tutorials and guides runs (the top-level pages' lines are run by
tests/test_evidence.py)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from doc_commands import DocRunner

from conftest import ROOT

DOCS = ROOT / "docs"
REF = DOCS / "reference"

_spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
gen = importlib.util.module_from_spec(_spec)
assert _spec.loader is not None
_spec.loader.exec_module(gen)


def _both_ways(in_code: set, in_docs: set) -> tuple[set, set]:
    """(in the code but not in the reference, in the reference but not in the code)."""
    return in_code - in_docs, in_docs - in_code


# --- the generated reference ---------------------------------------------------------------------------------------

def test_the_committed_reference_is_what_the_code_generates(capsys) -> None:
    assert gen.main(["--check"]) == 0, capsys.readouterr().err


def test_the_check_fails_when_a_reference_page_differs(tmp_path: Path, monkeypatch, capsys) -> None:
    shutil.copytree(REF, tmp_path / "reference")
    (tmp_path / "reference" / "columns.md").write_text((REF / "columns.md").read_text() + "| `ghost` | str | |\n")
    monkeypatch.setattr(gen, "OUT", tmp_path / "reference")
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.main(["--check"]) == 1
    assert "columns.md" in capsys.readouterr().err


def test_every_cli_flag_is_in_the_reference_and_nothing_else() -> None:
    code, docs = gen.cli_items(), gen.parse_cli((REF / "cli.md").read_text())
    assert len(code) > 80 and ("aft-bench run", "--out") in code and ("aft-bench catalog review", "--approve") in code
    assert _both_ways(code, docs) == (set(), set())


def test_a_flag_injected_into_or_dropped_from_the_cli_reference_is_caught() -> None:
    text = (REF / "cli.md").read_text()
    forged = text.replace("| `--rerun-missing` |", "| `--resume-harder` | `(switch)` | | made up |\n| `--rerun-missing` |")
    assert _both_ways(gen.cli_items(), gen.parse_cli(forged)) == (set(), {("aft-bench run", "--resume-harder")})
    dropped = "\n".join(ln for ln in text.splitlines() if not ln.startswith("| `--max-cost`"))
    assert _both_ways(gen.cli_items(), gen.parse_cli(dropped)) == ({("aft-bench run", "--max-cost")}, set())


def test_every_config_field_is_in_the_reference_and_nothing_else() -> None:
    code, docs = gen.config_items(), gen.parse_config((REF / "config.md").read_text())
    assert ("[experiment]", "max_cost_usd") in code and ("agent llm", "api_key_env") in code
    assert _both_ways(code, docs) == (set(), set())
    forged = (REF / "config.md").read_text().replace("| `seeds` |", "| `seed_count` | `int` | | | |\n| `seeds` |")
    assert _both_ways(code, gen.parse_config(forged)) == (set(), {("[experiment]", "seed_count")})


def test_every_results_column_is_in_the_reference_in_order() -> None:
    from aft_bench.episode.row import SCHEMA

    docs = gen.parse_columns((REF / "columns.md").read_text())
    assert docs == list(SCHEMA) == gen.column_items()
    forged = (REF / "columns.md").read_text() + "| `ghost_column` | int | label | made up |\n"
    assert _both_ways(set(SCHEMA), set(gen.parse_columns(forged))) == (set(), {"ghost_column"})


def test_every_condition_comparison_workload_and_fault_kind_is_in_the_reference_and_nothing_else() -> None:
    code, docs = gen.data_items(), gen.parse_conditions((REF / "conditions.md").read_text())
    assert {"I0", "I5", "I5-effects", "I5-routed"} <= code["conditions"]
    assert "duplicate_effects" in code["comparisons"] and "response_loss" in code["fault kinds"]
    for kind in code:
        assert _both_ways(code[kind], docs[kind]) == (set(), set()), kind
    forged = (REF / "conditions.md").read_text().replace("| `I5` |", "| `I6` | x |\n| `I5` |", 1)
    assert _both_ways(code["conditions"], gen.parse_conditions(forged)["conditions"]) == (set(), {"I6"})


def test_the_exit_codes_are_mains_contract() -> None:
    assert set(gen.exit_codes()) == {0, 1, 2, 3, 130, 141}
    assert gen.parse_exit_codes((REF / "exit-codes.md").read_text()) == {0, 1, 2, 3, 130, 141}


# --- the site builds with warnings as errors ------------------------------------------------------------------------

def _build(src: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-n", "-q",
                           str(src), str(out)], capture_output=True, text=True, timeout=600)


needs_sphinx = pytest.mark.skipif(
    importlib.util.find_spec("sphinx") is None or importlib.util.find_spec("myst_parser") is None
    or importlib.util.find_spec("furo") is None,
    reason="the docs extra is not installed (pip install -e '.[docs]'; `make docs` installs it, and CI runs it)")


@needs_sphinx
def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    done = _build(DOCS, tmp_path / "html")
    assert done.returncode == 0, done.stderr[-3000:]
    for page in ("index", "tutorials/first-experiment", "howto/add-a-workload", "reference/cli", "guarantees"):
        assert (tmp_path / "html" / f"{page}.html").is_file(), page


@needs_sphinx
def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The known negative of the build: a link to a page or a heading that does not exist is an error."""
    src = tmp_path / "docs"
    shutil.copytree(DOCS, src, ignore=shutil.ignore_patterns("_build", "__pycache__"))
    shutil.copytree(ROOT / "benchmarks", tmp_path / "benchmarks", ignore=shutil.ignore_patterns("*.py"))
    page = src / "howto" / "trials.md"
    page.write_text(page.read_text() + "\nSee [nowhere](../no-such-page.md) and [there](../guarantees.md#no-such-part).\n")
    done = _build(src, tmp_path / "html")
    assert done.returncode != 0
    assert "no-such-page" in done.stderr and "no-such-part" in done.stderr, done.stderr[-3000:]


@needs_sphinx
def test_the_site_builds_without_the_optional_distributed_page(tmp_path: Path) -> None:
    """docs/distributed.md is written elsewhere: while it is absent its links become text and the build passes."""
    src = tmp_path / "docs"
    shutil.copytree(DOCS, src, ignore=shutil.ignore_patterns("_build", "__pycache__", "distributed.md"))
    shutil.copytree(ROOT / "benchmarks", tmp_path / "benchmarks", ignore=shutil.ignore_patterns("*.py"))
    done = _build(src, tmp_path / "html")
    assert done.returncode == 0, done.stderr[-3000:]


# --- every command of the tutorials and guides runs --------------------------------------------------------------

def _sh_lines(pages: list[Path]) -> list[tuple[str, str]]:
    """(page, line) for every `aft-bench ` line of a ```sh block, comments cut as test_evidence cuts them."""
    out = []
    for p in pages:
        for block in re.findall(r"```sh\n(.*?)```", p.read_text(), flags=re.S):
            out += [(str(p.relative_to(ROOT)), ln.split("  #")[0].split(" # ")[0].strip())
                    for ln in block.splitlines() if ln.strip().startswith("aft-bench ")]  # in list items too
    return out


NESTED = sorted(p for p in DOCS.rglob("*.md") if p.parent != DOCS and "_build" not in p.parts)


def test_the_nested_pages_have_runnable_commands_and_the_top_pages_no_indented_ones() -> None:
    lines = _sh_lines(NESTED)
    assert len(lines) >= 20 and {ln.split()[1] for _, ln in lines} >= {"run", "analyze", "report", "audit", "view",
                                                                       "validate", "check", "serve", "freeze"}
    for p in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:  # test_evidence runs only unindented lines there
        for block in re.findall(r"```sh\n(.*?)```", p.read_text(), flags=re.S):
            assert not [ln for ln in block.splitlines() if ln.strip().startswith("aft-bench ")
                        and not ln.startswith("aft-bench ")], p


def test_every_command_line_of_the_tutorials_and_guides_runs(smoke_results: Path, tmp_path: Path, capsys) -> None:
    """As test_evidence runs the README's: results/pd is the smoke results, other results/NAME a fresh folder per
    name, a freeze, the paper matrix and a waiting server run as --help; a gate verdict may be 0 or 1."""
    runner = DocRunner(smoke_results, tmp_path)
    for page, line in _sh_lines(NESTED):
        argv, code, captured = runner.run(line, capsys)
        if argv[0] == "check":
            assert code in (0, 1) and "bound" in captured.err + captured.out, (page, line, captured.err)
        else:
            assert code == 0, (page, line, captured.err)


# --- the README leads to each page in one click ------------------------------------------------------------------

def test_the_readme_links_each_newcomer_job_in_one_click() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    links = set(re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text))
    for target in ("docs/tutorials/first-llm-matrix.md", "docs/tutorials/your-mcp-agent.md",
                   "docs/tutorials/your-mcp-server.md",
                   "docs/howto/freeze-and-audit.md", "docs/howto/add-a-workload.md", "docs/howto/ci-gate.md",
                   "docs/index.md"):
        assert target in links, target
    missing = [t for t in links if not t.startswith("http") and not (ROOT / t).exists()]
    assert not missing or missing == ["docs/distributed.md"], missing
