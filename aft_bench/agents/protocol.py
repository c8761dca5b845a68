"""The one agent protocol: every agent, deterministic or model-driven, is driven by the same episode loop.

An agent is started with the brief (the task as an agent sees it) and the tool surface, returns one action
per `act` (a tool call, or an end with its terminal claim), is told when its process-local state was lost,
and reports its usage. The protocol is async so that model and network agents are natural; a synchronous
agent costs one un-suspended `await` per step.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal, Protocol, Sequence, get_args

from aft_bench.interface.tools import Observation, ToolSpec
from aft_bench.tasks.task import Brief

TerminalAction = Literal["finish", "abort", "refuse", "escalate", "budget_exhausted", "none"]
Claim = Literal["success", "failure", "unknown"]
ACTIONS = ("finish", "abort", "refuse", "escalate")  # the terminal actions an agent may choose
CLAIMS: tuple[str, ...] = get_args(Claim)


@dataclass(frozen=True)
class Call:
    """Call one tool of the surface."""

    tool: str
    args: dict[str, Any]


@dataclass(frozen=True)
class End:
    """End the episode: finish | abort | refuse | escalate (or `none`: the agent stopped without deciding)."""

    action: TerminalAction
    claim: Claim | None


Action = Call | End


@dataclass(frozen=True)
class Usage:
    """What an agent consumed; usages add (`a + b`), so per-call usage sums to per-episode usage.

    `cost_usd` is None when a provider's price is unknown: never a guess, and unknown stays unknown in a sum.
    """

    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    retries: int = 0  # provider calls repeated after a transient failure
    invalid_tool_calls: int = 0  # malformed model actions: bad JSON, unknown tool, schema-invalid arguments
    latency_s: float = 0.0  # wall time spent waiting for the provider
    model_bytes: int = 0  # bytes exchanged with the model: each request as sent and each reply
    retry_wait_s: float = 0.0  # seconds waited before retries (what the provider asked, else backoff)

    def __add__(self, other: Usage) -> Usage:
        mine, theirs = self.__dict__, other.__dict__  # field by field, in declaration order (one per model call)
        return Usage(*[None if (a := mine[n]) is None or (b := theirs[n]) is None else a + b for n in _USAGE_FIELDS])


_USAGE_FIELDS = tuple(f.name for f in fields(Usage))


class Agent(Protocol):
    """An agent on the one episode loop. It never sees the task's criteria, the faults or the trace."""

    async def start(self, brief: Brief, surface: Sequence[ToolSpec]) -> None:
        """Begin an episode with what the agent may see."""

    async def act(self, observation: Observation | None) -> Action:
        """The next action, given what the previous call showed (None before the first call)."""

    async def restart(self, surface: Sequence[ToolSpec]) -> None:
        """The agent's process lost its local state: forget everything but the brief; the surface is shown anew."""

    def usage(self) -> Usage:
        """Usage so far in this episode."""

    def take_records(self) -> list[dict[str, Any]]:
        """Per-call accounting since the last take (model id, request hash, tokens, latency, cost, retries),
        which the loop writes to the trace; agents without a model return []."""
