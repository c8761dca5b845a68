"""Provider etiquette: the harness waits as long as a provider asks (Retry-After in seconds, milliseconds or as
an HTTP date, or the common rate-limit reset headers), traces every wait and counts it in the row; with
`adaptive = true` one AIMD limiter per endpoint halves the calls in flight on a rate limit."""

from __future__ import annotations

import asyncio
import email.utils
import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from aft_bench.agents.endpoints import Aimd
from aft_bench.agents.fake_llm import FakeModel, index_tasks, serve
from aft_bench.agents.llm import asked_wait
from aft_bench.cli.main import main

from conftest import WORLDS

NOW = 1_800_000_000.0


def _exc(headers: dict[str, str] | None) -> SimpleNamespace:
    return SimpleNamespace(litellm_response_headers=headers)


@pytest.mark.parametrize(("headers", "expected"), [
    ({"Retry-After": "2"}, 2.0),
    ({"retry-after": "0.5"}, 0.5),
    ({"Retry-After": email.utils.formatdate(NOW + 7, usegmt=True)}, 7.0),
    ({"Retry-After": email.utils.formatdate(NOW - 30, usegmt=True)}, 0.0),  # a date in the past: no wait
    ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),  # the finer header first
    ({"x-ratelimit-reset-requests": "6m0s", "x-ratelimit-reset-tokens": "20ms"}, 360.0),  # the longest reset
    ({"x-ratelimit-reset-tokens": "1.5s"}, 1.5),
    ({"ratelimit-reset": "3"}, 3.0),
    ({"Retry-After": "soon"}, None),  # nothing usable: exponential backoff instead
    ({"x-ratelimit-reset-requests": "6 parsecs"}, None),
    ({"content-type": "application/json"}, None),
    (None, None),
])
def test_the_wait_a_provider_asks_for(headers: dict[str, str] | None, expected: float | None) -> None:
    got = asked_wait(_exc(headers), now=NOW)
    assert got == (pytest.approx(expected, abs=1.0) if expected is not None else None)


def test_aimd_halves_once_per_congestion_event_and_climbs_back_by_one() -> None:
    async def play() -> Aimd:
        gate = Aimd(8, slow_start=False)
        epochs = [await gate.acquire() for _ in range(8)]
        for e in epochs[:5]:  # a burst of 429s answered together: one halving, not five
            gate.release(e, rate_limited=True)
        assert gate.limit == 4
        for e in epochs[5:]:
            gate.release(e, rate_limited=False)
        for _ in range(4):  # a window of successes at limit 4 adds one
            gate.release(await gate.acquire(), rate_limited=False)
        assert gate.limit == 5
        one = Aimd(1, slow_start=False)
        one.release(await one.acquire(), rate_limited=True)
        assert one.limit == 1  # never below one
        return gate

    gate = asyncio.run(play())
    assert [h[1] for h in gate.history] == [8, 4, 5]


def _config(tmp_path: Path, port: int, concurrency: int, adaptive: bool, tasks: int) -> Path:
    cfg = tmp_path / f"c{int(adaptive)}.toml"
    cfg.write_text('[experiment]\nid = "etiquette"\nworkloads = ["response_loss"]\nconditions = ["I5", "I4"]\n'
                   f'tasks_per_workload = {tasks}\n[[experiment.agents]]\nname = "llm"\n'
                   f'model = "openai/fake-capability"\napi_base = "http://127.0.0.1:{port}/v1"\n'
                   f'concurrency = {concurrency}\nretries = 20\nadaptive = {str(adaptive).lower()}\n')
    return cfg


def test_no_call_is_retried_before_the_time_the_provider_asked(tmp_path: Path) -> None:
    model = FakeModel(index_tasks([WORLDS]), latency_s=0.05, max_inflight=2, retry_after_s=0.6)
    srv = serve(model)
    try:
        out = tmp_path / "o"
        assert main(["run", str(_config(tmp_path, srv.server_port, 6, False, 3)), "--out", str(out)]) == 0
    finally:
        srv.shutdown()
    limited = [(t, h) for t, h, status in model.arrivals if status == 429]
    assert len(limited) >= 5  # the provider's limit was hit
    for t, h in limited:  # the same request again: never sooner than asked (the clock resolution aside)
        later = [t2 for t2, h2, _ in model.arrivals if h2 == h and t2 > t]
        assert later and min(later) - t >= 0.6 - 0.02
    df = pd.read_parquet(out / "results.parquet")
    assert df["retries"].sum() == len(limited) and df["retry_wait_s"].sum() == pytest.approx(0.6 * len(limited))
    waits = [w for p in (out / "traces").glob("*.jsonl") for ln in p.read_text().splitlines()
             if '"kind":"model_call"' in ln for w in json.loads(ln)["data"].get("waits", [])]
    assert len(waits) == len(limited)
    assert {(w["reason"], w["status"], w["seconds"]) for w in waits} == {("retry_after", 429, 0.6)}


def test_adaptive_concurrency_meets_the_provider_s_limit(tmp_path: Path, capsys) -> None:
    """The same config at fixed and at adaptive concurrency against a provider that takes 3 calls at once.

    The provider answers in 150 ms, long beside the harness's own time per call: at 50 ms a loaded machine issued
    too slowly to keep 16 calls in flight, the fixed arm met the limit less often, and the ratio depended on
    the load (0.22-0.35 at 50 ms, 0.12-0.19 at 150 ms, with both cores busy)."""
    counts = {}
    for adaptive in (False, True):
        model = FakeModel(index_tasks([WORLDS]), latency_s=0.15, max_inflight=3, retry_after_s=0.15)
        srv = serve(model)
        try:
            out = tmp_path / f"o{adaptive}"
            cfg = _config(tmp_path, srv.server_port, 16, adaptive, 8)
            if adaptive:
                assert main(["run", str(cfg), "--out", str(out)]) == 0
            else:  # at fixed concurrency one call can lose to the others past its 20 retries (16-20 in a row were
                #    seen with the other core busy, on this code and before): its tuple stays pending, as designed,
                #    and is resumed as a user would; every 429 of every attempt counts
                assert any(main(["run", str(cfg), "--out", str(out)]) == 0 for _ in range(3))
        finally:
            srv.shutdown()
        counts[adaptive] = sum(1 for *_, status in model.arrivals if status == 429)
        assert len(pd.read_parquet(out / "results.parquet")) == 16
        sessions = [json.loads(ln) for ln in (out / "sessions.jsonl").read_text().splitlines()]
        limits = [r["endpoint_limits"] for r in sessions if "endpoint_limits" in r]
        assert len(limits) == int(adaptive)  # only an adaptive run has a limiter to record
        if adaptive:
            history = next(iter(limits[0].values()))
            assert _slow_start_then_down(history)
            assert main(["summarize", str(out)]) == 0
            assert main(["run", str(cfg), "--out", str(out)]) == 0  # a resume with nothing left to do
            assert [r["session"] for r in map(json.loads, (out / "sessions.jsonl").read_text().splitlines())
                    if "pid" in r] == [1, 2]  # the limit record does not count as a session
    assert "adaptive limit of openai http://127.0.0.1:" in capsys.readouterr().out
    assert counts[False] > 0 and counts[True] * 3 <= counts[False], counts


@pytest.mark.parametrize("tool_choice", [None, "required", "get_order"])
def test_the_request_text_reuses_the_tools_text_and_equals_the_sorted_json(tool_choice: str | None) -> None:
    """The request hash in the trace is of `json.dumps(request, sort_keys=True)`; the cached tools text must give
    exactly those bytes, and a described tool (a new schema) must rebuild it."""
    from aft_bench.agents.llm import LLMAgent, Params

    agent = LLMAgent(Params(model="openai/m", api_base="offline", tool_choice=tool_choice))
    agent._tools = {"b": {"name": "b", "parameters": {"z": 1, "a": [1, 2]}}, "a": {"name": "a"}}
    agent._messages = [{"role": "user", "content": 'héllo "x" \\ ü'}]
    request = agent._request()
    assert agent._request_text(request, agent._tool_list()[1]) == json.dumps(request, sort_keys=True).encode()
    before = agent._tool_list()[1]
    agent._tools["a"] = {"name": "a", "description": "now described"}
    assert agent._tool_list()[1] != before and "now described" in agent._tool_list()[1]


def test_the_request_text_built_from_cached_messages_equals_the_sorted_json_through_whole_episodes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each message's text is encoded once and reused on later calls; over every comparison of the offline config
    (restarts, reminders, described tools, litellm handling the same message lists) every request's text must
    still be exactly `json.dumps(request, sort_keys=True)`, the bytes the trace's request hash was always of."""
    from aft_bench.agents.llm import LLMAgent

    cached = LLMAgent._request_text
    checked: list[int] = []

    def checking(self: LLMAgent, request: dict, tools_text: str) -> bytes:
        text = cached(self, request, tools_text)
        assert text == json.dumps(request, sort_keys=True).encode()
        checked.append(len(self._messages))
        return text

    monkeypatch.setattr(LLMAgent, "_request_text", checking)
    root = Path(__file__).resolve().parent.parent
    assert main(["run", str(root / "configs" / "llm_offline.toml"), "--out", str(tmp_path / "out")]) == 0
    rows = pd.read_parquet(tmp_path / "out" / "results.parquet")
    assert len(checked) == rows["model_calls"].sum() and max(checked) >= 6  # conversations grew past a few turns
    restarted = [f for f in (tmp_path / "out" / "traces").iterdir() if '"kind":"agent_restart"' in f.read_text()]
    assert restarted  # a conversation started over (a new message list) after state loss was among them


def test_the_slow_start_doubles_from_one_call_until_the_first_rate_limit_then_adds_one() -> None:
    async def play() -> Aimd:
        gate = Aimd(8)
        assert gate.limit == 1
        for expected in (2, 4, 8, 8):  # a window of `limit` successes doubles it, up to the ceiling
            for _ in range(gate.limit):
                gate.release(await gate.acquire(), rate_limited=False)
            assert gate.limit == expected
        gate.release(await gate.acquire(), rate_limited=True)
        assert gate.limit == 4
        for _ in range(4):  # the slow start is over: a window now adds one
            gate.release(await gate.acquire(), rate_limited=False)
        assert gate.limit == 5
        early = Aimd(16)
        for _ in range(2):  # 1 -> 2 -> 4
            for _ in range(early.limit):
                early.release(await early.acquire(), rate_limited=False)
        stale = await early.acquire()
        early.release(await early.acquire(), rate_limited=True)  # 4 -> 2, and no more doubling
        early.release(stale, rate_limited=True)  # a second 429 of that epoch does not halve again
        for _ in range(2):
            early.release(await early.acquire(), rate_limited=False)
        assert early.limit == 3
        return gate

    gate = asyncio.run(play())
    assert [h[1] for h in gate.history] == [1, 2, 4, 8, 4, 5]


def _hold_five_and_halve(gates: dict) -> None:
    """In another process: grow the shared endpoint limit through its slow start to 8 (seven successes), take five
    slots and answer one with a rate limit."""
    from aft_bench.agents import endpoints

    if gates:
        endpoints.use(gates)
    gate = endpoints.limiter("openai", "http://h/v1", 8)

    async def take() -> list[int]:
        for _ in range(7):
            gate.release(await gate.acquire(), rate_limited=False)
        return [await gate.acquire() for _ in range(5)]

    epochs = asyncio.run(take())
    gate.release(epochs[0], rate_limited=True)


@pytest.mark.parametrize("shared", [True, False])
def test_loop_processes_share_one_limit_per_endpoint(shared: bool) -> None:
    """The counters the runner makes are the ones a loop process uses: its calls in flight and its halving are
    the runner's too (known negative: a process with its own limiter leaves the runner's untouched)."""
    from aft_bench.agents import endpoints
    from aft_bench.experiment.executors import context

    endpoints.forget()
    try:
        ctx = context()
        gates = endpoints.shared(ctx, {("openai", "http://h/v1"): 8})
        endpoints.use(gates)
        proc = ctx.Process(target=_hold_five_and_halve, args=(gates if shared else {},))
        proc.start()
        proc.join(30)
        assert proc.exitcode == 0
        gate = endpoints.limiter("openai", "http://h/v1", 8)
        if shared:
            assert (gate.inflight, gate.limit) == (4, 4) and [h[1] for h in gate.history] == [1, 2, 4, 8, 4]
            assert endpoints.snapshot() == {"openai http://h/v1": [[0.0, 1], *[list(h) for h in gate.history[1:]]]}
        else:
            assert (gate.inflight, gate.limit) == (0, 1) and [h[1] for h in gate.history] == [1]
    finally:
        endpoints.forget()


def test_adaptive_concurrency_over_two_loop_processes_is_one_limit(tmp_path: Path) -> None:
    """`--loops 2` against a provider that takes 3 calls at once: the two loops hold one limit between them,
    recorded once for the session, and it comes down to the provider's."""
    model = FakeModel(index_tasks([WORLDS]), latency_s=0.05, max_inflight=3, retry_after_s=0.05)
    srv = serve(model)
    try:
        out = tmp_path / "o"
        cfg = _config(tmp_path, srv.server_port, 16, True, 8)
        assert main(["run", str(cfg), "--out", str(out), "--loops", "2"]) == 0
    finally:
        srv.shutdown()
    assert len(pd.read_parquet(out / "results.parquet")) == 16
    limits = [r["endpoint_limits"] for r in map(json.loads, (out / "sessions.jsonl").read_text().splitlines())
              if "endpoint_limits" in r]
    assert len(limits) == 1 and len(limits[0]) == 1
    history = next(iter(limits[0].values()))
    assert _slow_start_then_down(history)


def _slow_start_then_down(history: list) -> bool:
    """A limit's record against a provider taking 3 calls: from one call, doubled after each window of successes
    (the last step perhaps capped by the ceiling) until the first rate limit it sees, then only +1 steps and
    halvings (never below 1). A 429 needs more than the provider's 3 calls in flight, so the limit was at least 4
    before the first decrease. What holds whatever the timing: on a busy machine the calls in flight lag behind
    the limit (it doubled to 16 first once), and a 429 of an earlier epoch ends the slow start without a halving
    (1, 2, 4, 5, 6, then 3 was seen), so neither how far it doubled nor when it first halves is bounded."""
    limits = [h[1] for h in history]
    slow = True
    first_down = None
    for i, (a, b) in enumerate(zip(limits, limits[1:]), start=1):
        if b < a:
            if b != max(1, a // 2):
                return False
            slow = False
            first_down = i if first_down is None else first_down
        elif slow and (b == 2 * a or a < b < 2 * a):
            slow = b == 2 * a  # a step capped by the ceiling ends the doubling
        elif b == a + 1:
            slow = False
        else:
            return False
    return limits[0] == 1 and first_down is not None and limits[first_down - 1] >= 4