"""What crosses the agent-tool boundary: tool specs, observations, and the `Surface` protocol that both the
mechanism interface and the raw calibration surface implement."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

MAX_ARGS_CHARS = 64 * 1024  # a tool call's arguments, as JSON: larger ones are refused wherever they arrive


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]
    role: str  # business | lifecycle | discovery

    def schema(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def card(self) -> str:
        return f"{self.name}: {self.description.split('. ')[0].rstrip('.')}."


@dataclass(frozen=True)
class Observation:
    """What one tool call shows the agent; `lost` means the agent's process lost its local state. `dropped`
    marks the timeout shown for a response lost after it was generated (a transport fact: a server that withholds
    the response instead, `serve --response-loss transport`, reads it; agents see only `content`)."""

    content: Any
    lost: bool = False
    dropped: bool = False
    clock_ms: float | None = None  # ToolPro's virtual clock when it was delivered (under a network profile)


class Surface(Protocol):
    """The tools an agent can use in one episode, over that episode's pipeline."""

    shown_bytes: int  # bytes of the schemas the last `surface()` showed (for traffic accounting)
    programs_run: int  # tool programs accepted by validation so far (each pays BUILD on the virtual clock)

    def surface(self) -> list[ToolSpec]:
        """The tools whose schemas the agent is shown now (recorded in the trace)."""

    def call(self, name: str, args: dict[str, Any]) -> Observation:
        """One tool call by the agent (recorded in the trace before anything else happens)."""

    def note(self, kind: str, **data: Any) -> None:
        """Record an episode event that is not a tool call (e.g. the agent's restart) in the trace."""


def described_schema(obs: Observation) -> dict[str, Any] | None:
    """A tool schema shown by describe_tool (text `OK: {...}` or a structured result), if any."""
    c = obs.content
    if isinstance(c, str):
        head, _, rest = c.partition(": ")
        if head != "OK":
            return None
        try:
            c = {"status": "ok", "result": json.loads(rest)}
        except ValueError:
            return None
    result = c.get("result") if isinstance(c, dict) and c.get("status") == "ok" else None
    if isinstance(result, dict) and {"name", "parameters"} <= set(result):
        return result
    return None
