"""Shared fixtures: the repository's worlds, loaded once."""

from __future__ import annotations

from pathlib import Path

import pytest

from aft_bench.calibration import WorldSet
from aft_bench.tasks import Step, Task
from aft_bench.world import World

ROOT = Path(__file__).resolve().parent.parent
WORLDS = ROOT / "worlds"


@pytest.fixture(scope="session")
def worlds() -> WorldSet:
    return WorldSet(WORLDS)


@pytest.fixture(scope="session")
def payments(worlds: WorldSet) -> World:
    return worlds.world("payments")


@pytest.fixture(scope="session")
def exports(worlds: WorldSet) -> World:
    return worlds.world("exports")


def task_of(worlds: WorldSet, ref: str) -> tuple[World, Task]:
    return worlds.task(ref, WORLDS, "test")


def steps(*raw: dict) -> tuple[Step, ...]:
    return tuple(Step.model_validate(s) for s in raw)
