"""Config fuzzing: hundreds of generated malformed configs each give one clear error line and exit 2,
with no traceback and nothing written."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from aft_bench.cli.main import main

from conftest import WORLDS

BASE = {
    "id": '"fz"',
    "comparisons": '["resume_recovery", "duplicate_effects"]',
    "seeds": "[0]",
    "tasks_per_workload": "2",
}
FIELDS = ["id", "description", "workloads", "comparisons", "conditions", "seeds", "workload_seeds",
          "repetitions", "agents", "backends", "backend", "tasks_per_workload", "catalog_sizes"]
WRONG_VALUES = ['"text"', "3", "-1", "0", "1.5", "true", "[]", '["x", 1]', "[[1]]", "{ a = 1 }",
                "1979-05-27", '"I9"', "[1e400]", "[-1e9]", "9999999999999"]
HUGE = {"repetitions": "100000000", "seeds": None, "catalog_sizes": "[1000000000]", "tasks_per_workload": "0"}


def _render(fields: dict[str, str], extra_top: str = "") -> str:
    body = "\n".join(f"{k} = {v}" for k, v in fields.items())
    return f"{extra_top}[experiment]\n{body}\n"


def _cases() -> list[tuple[str, str]]:
    rng = random.Random(20261129)
    cases: list[tuple[str, str]] = []
    for f in FIELDS:  # wrong types and bad values for every field
        for v in WRONG_VALUES:
            fields = {**BASE, f: v}
            if f == "backend":
                fields.pop("backends", None)
            cases.append((f"wrong {f}={v}", _render(fields)))
    for i in range(20):  # unknown keys, at the top and inside [experiment]
        key = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(3, 12)))
        if key in FIELDS:
            continue
        cases.append((f"unknown {key}", _render({**BASE, key: "1"})))
        cases.append((f"unknown top {key}", _render(BASE, extra_top=f"{key} = 1\n")))
    for bad in ('[{ name = "nope" }]', '[{ name = "deterministic", max_attempts = "3" }]', '[{ nme = "x" }]',
                '[{ name = "deterministic", api_key = "secret-value-123" }]', '[{ name = "scripted" }]',
                '[{ name = 3 }]', '[{ name = [1] }]', '[{ name = "deterministic" }, { name = "deterministic" }]'):
        cases.append((f"bad agents {bad}", _render({**BASE, "agents": bad})))
    cases.append(("empty matrix", _render({"id": '"fz"'})))
    cases.append(("empty comparisons", _render({**BASE, "comparisons": "[]"})))
    cases.append(("no experiment table", 'id = "fz"\n'))
    cases.append(("empty file", ""))
    seeds = "[" + ", ".join(str(i) for i in range(100_001)) + "]"
    for f, v in HUGE.items():
        cases.append((f"huge {f}", _render({**BASE, f: v if v is not None else seeds})))
    valid = _render(BASE)
    for i in range(30):  # bad TOML: syntax broken at a random place
        pos = rng.randrange(len(valid))
        junk = rng.choice(['"', "[", "[[", "=", "= =", "\\", "]]]", "\x00", "{", "'''"])
        cases.append((f"bad toml {i}", valid[:pos] + junk + valid[pos:] + "\n[experiment]\n"))
    return cases


def _malformed(cases: list[tuple[str, str]], tmp: Path) -> list[tuple[str, str]]:
    """Drop generated texts that happen to be valid configs (e.g. any string is a valid description)."""
    from aft_bench.experiment.config import load_matrix

    kept = []
    for name, text in cases:
        path = tmp / "probe.toml"
        path.write_text(text)
        try:
            load_matrix(path, WORLDS)
        except Exception:  # noqa: BLE001 - anything but success counts as malformed; the test judges how it fails
            kept.append((name, text))
    return kept


def _build() -> list[tuple[str, str]]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return _malformed(_cases(), Path(tmp))


CASES = _build()


def test_there_are_at_least_200_cases() -> None:
    assert len(CASES) >= 200


@pytest.mark.parametrize("name, text", CASES, ids=[c[0] for c in CASES])
def test_malformed_config_is_one_clear_error_and_exit_2(tmp_path: Path, capsys, name: str, text: str) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    out = tmp_path / "out"
    code = main(["run", str(cfg), "--out", str(out), "--worlds", str(WORLDS)])
    err = capsys.readouterr().err
    assert code == 2, (name, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("aft-bench: error: ") and str(cfg) in lines[0], (name, err)
    assert "Traceback" not in err
    assert not out.exists()
