"""The one episode loop, shared by the runner, calibration, the baselines and every agent kind.

Budgets, process-local state loss and terminal handling live here and nowhere else. The loop has no config
and no side effects of its own: everything it does goes through the agent and the surface.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from aft_bench.agents.protocol import Agent, End, Usage
from aft_bench.episode.clock import VirtualClock
from aft_bench.interface.tools import Observation, Surface
from aft_bench.tasks.task import Brief


@dataclass(frozen=True)
class Played:
    """How an episode ended: the terminal decision, agent turns (one per action), tool calls made, usage."""

    terminal: End
    turns: int
    tool_calls: int
    usage: Usage
    traffic_bytes: int = 0  # agent <-> tool server: schemas shown, call arguments, results
    model_bytes: int = 0  # agent <-> model: requests and replies, or for an agent without a model the schemas a
    #                       model would be sent with each decision
    clock_ms: float | None = None  # the virtual clock at the end (under a network profile)


async def play(agent: Agent, surface: Surface, brief: Brief, budget: int,
               clock: VirtualClock | None = None) -> Played:
    """Drive `agent` over `surface` until it ends or its tool-call budget runs out.

    A call whose observation says the process lost its local state restarts the agent (it is shown the
    surface again); the next `act` still receives that observation, so the agent learns what happened.
    Under a network profile (`clock`) every observation carries ToolPro's virtual clock at its delivery:
    decisions so far x DEC + round trips x RTT + programs run x BUILD; its reading at the end is the row's
    `virtual_latency_s`.
    """
    shown = surface.surface()
    traffic = surface.shown_bytes
    await agent.start(brief, shown)
    observation: Observation | None = None
    turns = calls = model = 0
    before = agent.usage()
    while True:
        action = await agent.act(observation)
        for record in agent.take_records():  # the model calls behind this action, in the trace before it acts
            surface.note(record.pop("kind", "model_call"), **record)
        turns += 1
        if clock is not None:
            clock.decision()
        now = agent.usage()
        sent = now.model_bytes - before.model_bytes
        # an agent with a model (or one that counts what it would send) reports its bytes, a turn answered from
        # an earlier reply included; any other decision is counted as the surface's schemas sent again
        model += sent if sent or now.model_calls else surface.shown_bytes
        before = now
        if isinstance(action, End):
            terminal = action
            break
        if calls >= budget:
            terminal = End("budget_exhausted", None)
            break
        calls += 1
        observation = surface.call(action.tool, action.args)
        traffic += _size(action.args) + _size(observation.content)
        if clock is not None:
            clock.round_trip(surface.programs_run)
            observation = replace(observation, clock_ms=clock.now_ms)
        if observation.lost:
            surface.note("agent_restart")
            shown = surface.surface()
            traffic += surface.shown_bytes
            await agent.restart(shown)
    return Played(terminal, turns, calls, agent.usage(), traffic, model, clock.now_ms if clock is not None else None)


# json.dumps with options builds an encoder per call; this is the same encoder, built once
_COMPACT = json.JSONEncoder(separators=(",", ":"), default=str)


def _size(value: object) -> int:
    """Bytes of a value on the wire (text as UTF-8, anything else as compact JSON)."""
    if value is None:
        return 0
    text = value if isinstance(value, str) else _COMPACT.encode(value)
    return len(text.encode("utf-8"))
