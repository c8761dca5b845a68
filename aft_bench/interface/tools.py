"""What crosses the agent-tool boundary: tool specs, observations, and the `Surface` protocol that both the
mechanism interface and the raw calibration surface implement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


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
    """What one tool call shows the agent; `lost` means the agent's process lost its local state."""

    content: Any
    lost: bool = False


class Surface(Protocol):
    """The tools an agent can use in one episode, over that episode's pipeline."""

    shown_bytes: int  # bytes of the schemas the last `surface()` showed (for traffic accounting)

    def surface(self) -> list[ToolSpec]:
        """The tools whose schemas the agent is shown now (recorded in the trace)."""

    def call(self, name: str, args: dict[str, Any]) -> Observation:
        """One tool call by the agent (recorded in the trace before anything else happens)."""

    def note(self, kind: str, **data: Any) -> None:
        """Record an episode event that is not a tool call (e.g. the agent's restart) in the trace."""
