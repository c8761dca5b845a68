"""Shared fixtures: the repository's worlds, loaded once."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from aft_bench.experiment.calibration import WorldSet
from aft_bench.experiment.config import load_matrix
from aft_bench.experiment.runner import run_matrix
from aft_bench.interface import tokens
from aft_bench.tasks.task import Step, Task
from aft_bench.world.manifest import World

ROOT = Path(__file__).resolve().parent.parent
WORLDS = ROOT / "worlds"

# Load the tokenizer once, at collection: nearly every session runs episodes, and processes forked after
# collection (mutation testing) then start with it loaded instead of paying ~3 s each.
tokens.warm()


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


@pytest.fixture(scope="session")
def paper(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    """One run of configs/paper_deterministic.toml (4,200 runs), shared by every test that reads it."""
    out = tmp_path_factory.mktemp("paper") / "out"
    run_matrix(load_matrix(ROOT / "configs" / "paper_deterministic.toml", WORLDS), out, workers=2)
    return out, pd.read_parquet(out / "results.parquet")


@pytest.fixture(scope="session")
def smoke_results(tmp_path_factory) -> Path:
    """One run of configs/smoke.toml (36 runs), analyzed; copy it before changing anything in it."""
    from aft_bench.analysis.analyze import Options, analyze

    out = tmp_path_factory.mktemp("smoke_results") / "out"
    run_matrix(load_matrix(ROOT / "configs" / "smoke.toml", WORLDS), out, workers=1)
    analyze(out, Options(resamples=200, permutations=500))
    return out


# --- offline by default: a socket to anything but this machine fails the test that opened it ----------------------
_LOOPBACK = ("127.", "::1", "localhost")


def _guard_connect(original):  # type: ignore[no-untyped-def]
    def connect(self, address):  # type: ignore[no-untyped-def]
        host = address[0] if isinstance(address, tuple) else None
        if host is not None and not str(host).startswith(_LOOPBACK):
            raise OSError(f"test tried to reach {address!r}: the test suite stays on 127.0.0.1")
        return original(self, address)
    return connect


@pytest.fixture(autouse=True, scope="session")
def _loopback_only():
    import socket

    saved = socket.socket.connect, socket.socket.connect_ex
    socket.socket.connect = _guard_connect(saved[0])  # type: ignore[method-assign]
    socket.socket.connect_ex = _guard_connect(saved[1])  # type: ignore[method-assign]
    yield
    socket.socket.connect, socket.socket.connect_ex = saved  # type: ignore[method-assign]
