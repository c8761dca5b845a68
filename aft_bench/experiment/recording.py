"""`run --record CASSETTE` / `--replay CASSETTE`: the run's `llm` agents talk to a recording proxy or to a cassette
on 127.0.0.1 instead of their endpoint (a route in the environment, inherited by loop processes; not part of any
agent spec, so the run ids are the live run's). Replayed rows name the cassette's hash."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aft_bench.agents.cassette import Cassette, load, serve_player, serve_recorder
from aft_bench.agents.llm import OFFLINE, ROUTE_ENV
from aft_bench.agents.registry import AgentSpec
from aft_bench.common.errors import InputError
from aft_bench.experiment.config import Matrix


def _bases(matrix: Matrix) -> list[str]:
    """The api_base of every `llm` agent of the matrix (each must name an OpenAI-compatible endpoint)."""
    out = []
    for spec in (AgentSpec.parse(s) for s in dict.fromkeys(c.agent_spec for c in matrix.cells)):
        if spec.name != "llm":
            continue
        base = spec.params.get("api_base")
        if not base:
            raise InputError("--record/--replay", "api_base", spec.model, "a cassette stands between the agent and "
                             "an OpenAI-compatible endpoint: give the agent an api_base (or 'offline')")
        out.append(str(base))
    if not out:
        raise InputError("--record/--replay", "experiment.agents", "", "no llm agent in this config: nothing to "
                         "record or replay")
    return sorted(set(out))


@contextmanager
def recorded_models(matrix: Matrix, record: Path | None, replay: Path | None) -> Iterator[dict[str, Any]]:
    """Route the matrix's model calls through a recorder (saved to `record` on exit, even after an error) or a
    player of `replay`; yields the columns every row of the run carries (the replayed cassette's hash)."""
    if record is None and replay is None:
        yield {}
        return
    if record is not None and replay is not None:
        raise InputError("--record", "--record", str(record), "give --record or --replay, not both")
    bases = _bases(matrix)
    if replay is not None:
        cassette, digest = load(replay)
        server = serve_player(cassette)
        routes = {b: f"http://127.0.0.1:{server.server_port}/r{i}" for i, b in enumerate(bases)}
        extra = {"cassette": digest}
    else:
        assert record is not None
        if record.exists() or not record.parent.is_dir():
            raise InputError(record, "--record", str(record), "must be a new file in an existing folder")
        from aft_bench.agents.fake_llm import offline_base

        cassette = Cassette()
        upstream = {f"r{i}": (offline_base() if b == OFFLINE else b) for i, b in enumerate(bases)}
        server = serve_recorder(cassette, upstream)
        routes = {b: f"http://127.0.0.1:{server.server_port}/r{i}" for i, b in enumerate(bases)}
        extra = {}
    before = os.environ.get(ROUTE_ENV)
    os.environ[ROUTE_ENV] = json.dumps(routes)
    try:
        yield extra
    finally:
        if before is None:
            os.environ.pop(ROUTE_ENV, None)
        else:
            os.environ[ROUTE_ENV] = before
        server.shutdown()
        if record is not None:
            digest = cassette.save(record)
            print(f"cassette: {record} ({len(cassette.entries)} requests, hash {digest})")
