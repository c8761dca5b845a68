"""The raw pipeline surface: the pipeline's primitives with no mechanism layer, for scripted calibration cases.

A detector's known-positive case must be able to do what no interface condition would let an agent do
(retransmit a request under the same id, attach guards by hand, act as another principal), so calibration
scripts call the pipeline through this surface. Experiments never use it.

Tools: every world operation (arguments plus the reserved `_principal`, `_intent`, `_key`,
`_expect_version`, `_authority`), `retransmit` (the transport resends the last request under its id),
`resume_invocation`, `get_invocation_status` (`invocation_id`), and `verify_effect` (`tool`, `arguments`).
Each observation is the pipeline's delivery as a dict: `invocation`, `transport`, `response`.
"""

from __future__ import annotations

from typing import Any

from aft_bench.interface.tools import Observation, ToolSpec
from aft_bench.runtime.pipeline import Delivery, Pipeline, Request
from aft_bench.world.backend import Guards

RESERVED = ("_principal", "_intent", "_key", "_expect_version", "_authority")
PRIMITIVES = ("retransmit", "resume_invocation", "get_invocation_status", "verify_effect")


class RawSurface:
    """Every world operation, eagerly, plus the pipeline's lifecycle primitives."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self._last: Request | None = None
        self._sent = 0
        self.shown_bytes = 0  # the raw surface shows names only
        self.programs_run = 0  # and runs no programs

    def surface(self) -> list[ToolSpec]:
        ops = sorted(self.pipeline.backend.world.operations)
        self.pipeline.trace.append("surface", tools=ops, full=True)
        return [ToolSpec(name, "", {}, "business") for name in ops]

    def note(self, kind: str, **data: Any) -> None:
        self.pipeline.trace.append(kind, **data)

    def call(self, name: str, args: dict[str, Any]) -> Observation:
        self.pipeline.trace.append("tool_call", tool=name, args=args)
        self._sent += 1
        p = self.pipeline
        if name == "retransmit":
            if self._last is None:
                raise ValueError("retransmit before any call")
            return _shown(p.invoke(self._last))
        if name == "resume_invocation":
            return _shown(p.resume(str(args["invocation_id"])))
        if name == "get_invocation_status":
            return _shown(p.status(str(args["invocation_id"])))
        if name == "verify_effect":
            return _shown(p.verify(str(args["tool"]), dict(args.get("arguments") or {})))
        business = {k: v for k, v in args.items() if k not in RESERVED}
        guards = Guards(args.get("_key"), args.get("_expect_version"), bool(args.get("_authority", False)))
        self._last = Request(name, business, args.get("_principal", "agent"), args.get("_intent", "task"),
                             f"req-s{self._sent:03d}", guards)
        return _shown(p.invoke(self._last))


def _shown(d: Delivery) -> Observation:
    return Observation({"invocation": d.invocation, "transport": d.transport, "response": d.response},
                       lost=d.transport == "lost")
