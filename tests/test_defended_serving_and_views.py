"""Behaviours that no other test asserted (issue 39, part 4), each pinned to the exact value a user reads:

* two differently named agents served on the same model are counted apart: each gets repetitions 0 and 1 of a
  tuple, never 0..3 between them (the existing test's agents also differed by model, which hid a key by model);
* a Dask worker whose tokenizer differs from the driver's is refused with one line naming both tokenizers (such a
  worker would otherwise write different token counts silently; only the version and input hashes were tested);
* the viewer's pending tuples show their *last* recorded failure, and aligning two arms of unequal length keeps
  every turn of each, in order, with a gap against the longer one's extra turns;
* on a real LocalCluster, agents without a provider endpoint (deterministic, program) beside an LLM agent record
  every row exactly once with a local run's labels, and the per-agent caps the driver is given are exactly the
  configured `concurrency` of the networked agent: the other two have none (they accept no `concurrency`, and
  are bounded by the workers' threads alone).

Real parts throughout: the MCP SDK's client in memory, Dask LocalClusters on 127.0.0.1, the smoke results.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from mcp import Client

from aft_bench.cli.main import main
from aft_bench.experiment.config import load_matrix
from aft_bench.experiment.journal import KEY_COLUMNS, read_records, read_rows
from aft_bench.experiment.runner import run_matrix
from aft_bench.serving.record import ServedDirectory
from aft_bench.serving.server import Served, Target, build_server
from aft_bench.viewer.model import Viewer
from aft_bench.viewer.pairs import align

from conftest import WORLDS

I5 = Target("response_loss", "rl-01-o1", "I5", "response_loss")
CLOCK = ["wall_s", "latency_s"]  # wall-clock columns
# a one-comparison matrix of the deterministic agent: small, so a cluster that wrongly accepts it finishes fast
TINY = '''[experiment]
id = "tiny"
comparisons = ["duplicate_effects"]
tasks_per_workload = 1
seeds = [0]
'''
# the same comparison with two agents that call no provider and one that does, allowed one episode in flight
MIXED = '''[experiment]
id = "mixed_caps"
comparisons = ["duplicate_effects"]
tasks_per_workload = 2
seeds = [0]

[[experiment.agents]]
name = "deterministic"

[[experiment.agents]]
name = "program"

[[experiment.agents]]
name = "llm"
model = "openai/fake-capability"
api_base = "offline"
concurrency = 1
backoff_s = 0.05
'''


# -- 1. served agents on one model -------------------------------------------------------------------------------
async def _serve_one(out: Path, agent: dict[str, str]) -> None:
    """One served episode in memory, played by a real MCP client that escalates at once."""
    with ServedDirectory(out, WORLDS) as directory:
        served = Served(I5, WORLDS, directory, agent)
        async with Client(build_server(served)) as client:
            await client.call_tool("report_outcome", {"action": "escalate", "claim": "unknown"})


def test_two_named_agents_on_one_model_count_their_repetitions_apart(tmp_path: Path) -> None:
    """a, b, a, b on the same target and model: each agent's repetitions are 0 then 1 (a key by model alone would
    number them 0, 1, 2, 3), and no two episodes share a run id."""
    out = tmp_path / "served"
    for agent in ({"agent": "a", "model": "m"}, {"agent": "b", "model": "m"},
                  {"agent": "a", "model": "m"}, {"agent": "b", "model": "m"}):
        asyncio.run(_serve_one(out, agent))
    df = pd.read_parquet(out / "results.parquet")
    names = [json.loads(s)["agent"] for s in df["agent_spec"]]
    assert names == ["a", "b", "a", "b"] and list(df["model"]) == ["m"] * 4
    reps = {name: [int(r) for n, r in zip(names, df["rep"]) if n == name] for name in ("a", "b")}
    assert reps == {"a": [0, 1], "b": [0, 1]}
    assert df["run_id"].nunique() == 4
    assert df["run_id"].iloc[0] != df["run_id"].iloc[1]  # a's and b's first repetitions are different runs


# -- 2. a worker with another tokenizer -------------------------------------------------------------------------
def _one_worker(cluster: Any) -> str:
    """The address of a LocalCluster's only worker."""
    from distributed import Client as DaskClient

    with DaskClient(cluster) as client:
        (address,) = client.scheduler_info(n_workers=-1)["workers"]
    return str(address)


def test_a_worker_with_another_tokenizer_is_refused_with_one_line_naming_both(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The worker counts context with gpt-4's tokenizer, the driver with gpt-4o's: the run stops before any cell
    with exit 1 and exactly this line, and nothing is recorded."""
    pytest.importorskip("distributed", reason="the optional extra aft-bench[dask] is not installed")
    from distributed import LocalCluster

    preload = tmp_path / "other_tokenizer.py"
    preload.write_text("import aft_bench.interface.tokens as tokens\n\ntokens.TOKENIZER_MODEL = 'gpt-4'\n")
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    d = tmp_path / "refused"
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
                      preload=[str(preload)]) as other:
        worker = _one_worker(other)
        code = main(["run", str(cfg), "--out", str(d), "--executor", "dask", "--scheduler", other.scheduler_address,
                     "--worlds", str(WORLDS)])
    err = capsys.readouterr().err.strip()
    litellm = metadata.version("litellm")
    assert code == 1
    assert err == (f"aft-bench: error: dask worker {worker} refused: tokenizer gpt-4 via litellm {litellm} on the "
                   f"worker, gpt-4o via litellm {litellm} on the driver; run the same aft-bench and inputs on every "
                   f"worker")
    assert read_rows(d / "journal.jsonl") == []


# -- 3. the viewer: pending tuples and aligned pairs ------------------------------------------------------------
def test_a_pending_tuple_shows_its_last_failure(smoke_results: Path, tmp_path: Path) -> None:
    """One run's row removed (results.parquet gone, its journal line cut) and two failure records for it, the later
    with another error and message: the pending tuple shows the later record, every field of it."""
    d = tmp_path / "pending"
    shutil.copytree(smoke_results, d, ignore=shutil.ignore_patterns(".runner.lock"))
    (d / "results.parquet").unlink()
    rows = read_rows(d / "journal.jsonl")
    gone = rows[5]
    lines = (d / "journal.jsonl").read_text().splitlines(keepends=True)
    (d / "journal.jsonl").write_text("".join(ln for ln in lines if gone["run_id"] not in ln))
    key = {k: gone[k] for k in KEY_COLUMNS}
    first = {"run_id": gone["run_id"], **key, "error": "RuntimeError", "message": "backend down", "session": 1}
    other = {"run_id": rows[0]["run_id"], **{k: rows[0][k] for k in KEY_COLUMNS}, "error": "OSError",
             "message": "disk full", "session": 1}  # a failure of a run recorded since: not pending
    later = {"run_id": gone["run_id"], **key, "error": "TimeoutError", "message": "backend timed out", "session": 2}
    (d / "failures.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (first, other, later)))
    pending = Viewer(d).pending()
    assert pending == [{"run_id": gone["run_id"], **key, "error": "TimeoutError", "message": "backend timed out",
                        "session": 2}]


def _turn(n: int, action: str, tool: str) -> dict[str, Any]:
    """A turn as viewer.timeline.turns makes it (the fields align reads are `action` and `tool`)."""
    return {"n": n, "action": action, "tool": tool, "args": {}, "events": [], "model_calls": [], "invocations": [],
            "faults_fired": [], "tokens": 0, "cost_usd": 0.0, "latency_s": 0.0, "retries": 0}


def _arm(*steps: str) -> list[dict[str, Any]]:
    """Turns from `tool` names (tool calls) and `end:ACTION` (the terminal decision)."""
    return [_turn(i + 1, "terminal", s[4:]) if s.startswith("end:") else _turn(i + 1, "tool_call", s)
            for i, s in enumerate(steps)]


def _covers_in_order(pairs: list[list[int | None]], left: int, right: int) -> bool:
    """Every index of each arm appears exactly once and in increasing order, and no pair is two gaps."""
    t = [i for i, _ in pairs if i is not None]
    c = [j for _, j in pairs if j is not None]
    return t == list(range(left)) and c == list(range(right)) and all(i is not None or j is not None
                                                                      for i, j in pairs)


@pytest.mark.parametrize(("treatment", "control", "expected"), [
    # the treatment verifies twice more: its extra turns stand against gaps
    (("get_order", "charge_payment", "verify_effect", "get_invocation_status", "end:finish"),
     ("get_order", "charge_payment", "end:finish"),
     [[0, 0], [1, 1], [2, None], [3, None], [4, 2]]),
    # the control is the longer arm
    (("get_order", "end:abort"),
     ("get_order", "charge_payment", "charge_payment", "end:abort"),
     [[0, 0], [None, 1], [None, 2], [1, 3]]),
    # different middles of different lengths: side by side as far as the shorter goes, then gaps
    (("get_order", "charge_payment", "verify_effect", "list_invocations", "end:finish"),
     ("get_order", "resume_invocation", "end:finish"),
     [[0, 0], [1, 1], [2, None], [3, None], [4, 2]]),
    # the longer arm's tail after the last common turn
    (("get_order", "end:finish"),
     ("get_order", "end:finish", "get_order", "verify_effect"),
     [[0, 0], [1, 1], [None, 2], [None, 3]]),
])
def test_aligning_arms_of_unequal_length_keeps_every_turn_of_both(treatment: tuple[str, ...],
                                                                  control: tuple[str, ...],
                                                                  expected: list[list[int | None]]) -> None:
    t, c = _arm(*treatment), _arm(*control)
    got = align(t, c)
    assert got == expected
    assert _covers_in_order(got, len(t), len(c))


def test_real_pairs_of_unequal_length_align_every_turn(smoke_results: Path) -> None:
    """The smoke matrix's pairs whose arms took different numbers of turns (there are some): every turn of each
    arm is in the page's alignment once, in order."""
    v = Viewer(smoke_results)
    uneven = 0
    for p in v.pair_list()["pairs"]:
        page = v.pair(p["comparison"], p["run_id_treatment"])
        t, c = v.run(p["run_id_treatment"]), v.run(p["run_id_control"])
        assert page is not None and t is not None and c is not None
        left, right = len(t["turns"]), len(c["turns"])
        if left != right:
            uneven += 1
            assert _covers_in_order(page["alignment"], left, right), (p["comparison"], p["run_id_treatment"])
    assert uneven > 0


# -- 4. per-agent caps on the cluster for agents without a provider endpoint -----------------------------------
@pytest.mark.parametrize("agent", ["deterministic", "program"])
def test_an_agent_without_a_provider_takes_no_concurrency(agent: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """There is no per-agent cap to give an agent that calls no provider: `concurrency` on it is refused at load,
    exit 2 with one line naming the field, and nothing is written."""
    cfg = tmp_path / "capped.toml"
    cfg.write_text(TINY + f'\n[[experiment.agents]]\nname = "{agent}"\nconcurrency = 2\n')
    d = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(d), "--executor", "dask", "--scheduler", "local:1",
                 "--worlds", str(WORLDS)]) == 2
    assert capsys.readouterr().err.strip() == (f"aft-bench: error: {cfg}: field 'experiment.agents.0.concurrency': "
                                               f"agent '{agent}': Extra inputs are not permitted (got 2)")
    assert not d.exists()


def test_agents_without_a_provider_on_a_local_cluster_record_each_row_once_uncapped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deterministic, program and an LLM agent (offline model, `concurrency = 1`) on a LocalCluster of two: every
    tuple recorded exactly once, every column but the wall clock (and the LLM traces' heads, whose model calls
    carry latencies) equal to a local run's, the deterministic and program traces byte for byte; and the per-agent
    caps the driver was given are exactly {the LLM agent: 1}: the agents without a provider have none, and the
    deterministic agent had more than one attempt in flight. The run records its caps nowhere (no session record,
    no log line), so they are read from the driver by a subclass that only records its arguments and its count of
    attempts in flight."""
    pytest.importorskip("distributed", reason="the optional extra aft-bench[dask] is not installed")
    from aft_bench.experiment import distributed

    caps: list[dict[str, int]] = []
    peaks: dict[str, int] = {}  # agent spec -> most of its attempts the driver had in flight at once

    class RecordingDriver(distributed.Driver):
        """The real driver; its `limits` argument and its own count of each agent's attempts in flight noted."""

        def __init__(self, client: Any, matrix: Any, pending: list[int], out: Path, token: str,
                     limits: dict[str, int], *rest: Any) -> None:
            caps.append(dict(limits))
            super().__init__(client, matrix, pending, out, token, limits, *rest)

        def _fill(self, pool: Any) -> None:
            super()._fill(pool)
            for spec, n in self.running.items():
                peaks[spec] = max(peaks.get(spec, 0), n)

    cfg = tmp_path / "mixed.toml"
    cfg.write_text(MIXED)
    matrix = load_matrix(cfg, WORLDS)
    local = tmp_path / "local"
    run_matrix(matrix, local)
    monkeypatch.setattr(distributed, "Driver", RecordingDriver)
    d = tmp_path / "dask"
    assert main(["run", str(cfg), "--out", str(d), "--executor", "dask", "--scheduler", "local:2",
                 "--worlds", str(WORLDS)]) == 0

    specs = {c.agent: c.agent_spec for c in matrix.cells}
    assert sorted(specs) == ["deterministic", "llm", "program"]
    assert caps == [{specs["llm"]: 1}]
    # held to its one slot, while the deterministic agent had more than one at once (the first submission already
    # fills a window of at least 4 from cells in the order det, program, llm, det, ...)
    assert peaks[specs["llm"]] == 1 and peaks[specs["deterministic"]] >= 2

    planned = [c.run_id for c in matrix.cells]
    recorded = [r["run_id"] for r in read_rows(d / "journal.jsonl")]
    assert len(planned) == 12 and sorted(recorded) == sorted(planned)  # each tuple exactly once
    assert read_records(d / "failures.jsonl") == []
    a = pd.read_parquet(local / "results.parquet").drop(columns=CLOCK + ["trace_head"])
    b = pd.read_parquet(d / "results.parquet").drop(columns=CLOCK + ["trace_head"])
    pd.testing.assert_frame_equal(a, b)
    offline = [c.run_id for c in matrix.cells if c.agent != "llm"]
    assert len(offline) == 8
    for rid in offline:
        assert (local / "traces" / f"{rid}.jsonl").read_bytes() == (d / "traces" / f"{rid}.jsonl").read_bytes(), rid
