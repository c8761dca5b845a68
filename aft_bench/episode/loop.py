"""The one episode loop, shared by the runner, calibration, the baselines and every agent kind.

Budgets, process-local state loss and terminal handling live here and nowhere else. The loop has no config
and no side effects of its own: everything it does goes through the agent and the surface.
"""

from __future__ import annotations

from dataclasses import dataclass

from aft_bench.agents.protocol import Agent, End, Usage
from aft_bench.interface.tools import Observation, Surface
from aft_bench.tasks.task import Brief


@dataclass(frozen=True)
class Played:
    """How an episode ended: the terminal decision, agent turns (one per action), tool calls made, usage."""

    terminal: End
    turns: int
    tool_calls: int
    usage: Usage


async def play(agent: Agent, surface: Surface, brief: Brief, budget: int) -> Played:
    """Drive `agent` over `surface` until it ends or its tool-call budget runs out.

    A call whose observation says the process lost its local state restarts the agent (it is shown the
    surface again); the next `act` still receives that observation, so the agent learns what happened.
    """
    await agent.start(brief, surface.surface())
    observation: Observation | None = None
    turns = calls = 0
    while True:
        action = await agent.act(observation)
        for record in agent.take_records():  # the model calls behind this action, in the trace before it acts
            surface.note(record.pop("kind", "model_call"), **record)
        turns += 1
        if isinstance(action, End):
            terminal = action
            break
        if calls >= budget:
            terminal = End("budget_exhausted", None)
            break
        calls += 1
        observation = surface.call(action.tool, action.args)
        if observation.lost:
            surface.note("agent_restart")
            await agent.restart(surface.surface())
    return Played(terminal, turns, calls, agent.usage())
