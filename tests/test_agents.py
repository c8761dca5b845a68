"""Agents named in configs: the registry, `[[experiment.agents]]` tables, the agent spec in run ids and rows,
clear errors for unknown agents and parameters, and `aft-bench list agents`."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from aft_bench.agents.registry import AGENTS, AgentSpec, agent_spec
from aft_bench.cli import main
from aft_bench.common.errors import InputError
from aft_bench.experiment.config import load_matrix
from aft_bench.experiment.runner import run_matrix

from conftest import WORLDS

BASE = '[experiment]\nid = "a"\ncomparisons = ["duplicate_effects"]\ntasks_per_workload = 2\n'


def _config(tmp_path: Path, agents: str = "") -> Path:
    cfg = tmp_path / "a.toml"
    cfg.write_text(BASE + agents)
    return cfg


def test_a_config_without_agents_runs_the_deterministic_agent_with_its_defaults(tmp_path: Path) -> None:
    plain = load_matrix(_config(tmp_path), WORLDS)
    explicit = load_matrix(_config(tmp_path, '[[experiment.agents]]\nname = "deterministic"\nmax_attempts = 3\n'),
                           WORLDS)
    assert [c.run_id for c in plain.cells] == [c.run_id for c in explicit.cells]
    assert {c.agent_spec for c in plain.cells} == {'{"max_attempts":3,"name":"deterministic"}'}
    assert {(c.agent, c.model) for c in plain.cells} == {("deterministic", "none")}


def test_two_configurations_of_one_agent_never_share_a_run_id_and_still_pair(tmp_path: Path, capsys) -> None:
    cfg = _config(tmp_path, '[[experiment.agents]]\nname = "deterministic"\n'
                            '[[experiment.agents]]\nname = "deterministic"\nmax_attempts = 1\n')
    matrix = load_matrix(cfg, WORLDS)
    ids = [c.run_id for c in matrix.cells]
    assert len(ids) == len(set(ids)) == 2 * len(load_matrix(_config(tmp_path), WORLDS).cells)
    run_matrix(matrix, tmp_path / "out", workers=1)
    df = pd.read_parquet(tmp_path / "out" / "results.parquet")
    assert df["agent_spec"].nunique() == 2
    assert main(["analyze", str(tmp_path / "out")]) == 0
    pairs = pd.read_parquet(tmp_path / "out" / "analysis" / "pairs.parquet")
    assert len(pairs[pairs["comparison"] == "duplicate_effects"]) == 2 * 2  # 2 tasks x 2 agent specs


@pytest.mark.parametrize("table, field, value", [
    ('name = "gpt-agent"\n', "experiment.agents.0.name", "gpt-agent"),
    ('name = "deterministic"\ntemperature = 0.2\n', "experiment.agents.0.temperature", 0.2),
    ('name = "deterministic"\nmax_attempts = 0\n', "experiment.agents.0.max_attempts", 0),
    ('name = "scripted"\n', "experiment.agents.0.name", "scripted"),
    ('max_attempts = 2\n', "experiment.agents.0", {"max_attempts": 2}),
])
def test_a_bad_agent_table_is_one_clear_error(tmp_path: Path, capsys, table: str, field: str, value) -> None:
    cfg = _config(tmp_path, "[[experiment.agents]]\n" + table)
    with pytest.raises(InputError) as exc:
        load_matrix(cfg, WORLDS)
    assert (exc.value.field, exc.value.value) == (field, value)
    assert main(["run", str(cfg), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err and not (tmp_path / "out").exists()


def test_the_old_controllers_field_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(InputError) as exc:
        load_matrix(_config(tmp_path, 'controllers = ["deterministic"]\n'), WORLDS)
    assert exc.value.field == "experiment.controllers"


def test_the_same_spec_twice_is_refused(tmp_path: Path) -> None:
    cfg = _config(tmp_path, '[[experiment.agents]]\nname = "deterministic"\n'
                            '[[experiment.agents]]\nname = "deterministic"\nmax_attempts = 3\n')
    with pytest.raises(InputError, match="twice"):
        load_matrix(cfg, WORLDS)


def test_spec_round_trips_through_its_json() -> None:
    spec = agent_spec({"name": "deterministic", "max_attempts": 2})
    assert AgentSpec.parse(spec.json) == spec and spec.params == {"max_attempts": 2} and spec.model == "none"


def test_list_agents_shows_each_kind_with_its_parameters(capsys) -> None:
    assert main(["list", "agents"]) == 0
    text = capsys.readouterr().out
    assert "deterministic" in text and "max_attempts=3" in text and "scripted" in text
    assert main(["list", "agents", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [a["name"] for a in data] == list(AGENTS)
    det = next(a for a in data if a["name"] == "deterministic")
    assert det["params"] == [{"name": "max_attempts", "type": "int", "default": 3,
                              "description": "sends of one step before it ends 'unknown'"}]


def test_usages_add_field_by_field_and_an_unknown_cost_stays_unknown_on_either_side() -> None:
    from dataclasses import fields

    from aft_bench.agents.protocol import Usage

    a = Usage(*range(1, 10))
    b = Usage(*range(10, 100, 10))
    assert a + b == Usage(*(x + y for x, y in zip(range(1, 10), range(10, 100, 10))))
    assert [f.name for f in fields(Usage)][3] == "cost_usd"
    for left, right in ((Usage(cost_usd=None), Usage(cost_usd=0.5)), (Usage(cost_usd=0.5), Usage(cost_usd=None))):
        total = left + right + Usage(model_calls=2)
        assert total.cost_usd is None and total.model_calls == 2  # never a guess, and nothing else lost
    assert (Usage(cost_usd=0.25) + Usage(cost_usd=0.5)).cost_usd == 0.75


def test_the_controller_s_state_replace_is_dataclasses_replace_and_refuses_unknown_fields() -> None:
    import dataclasses

    from aft_bench.agents.deterministic import State, replace

    s = State("t", (), {"a": {}}, frozenset({"a"}), versions={"x": 1})
    for changes in ({}, {"step": 3}, {"phase": "sent", "attempt": 2, "baseline": False}, {"versions": {"y": 2}}):
        new = replace(s, **changes)
        assert new == dataclasses.replace(s, **changes) and type(new) is State and new is not s
    assert s.step == 0 and s.phase == "begin"  # the original is untouched
    with pytest.raises(TypeError, match="nope"):
        replace(s, nope=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        replace(s, step=1).step = 2  # still frozen
