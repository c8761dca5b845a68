"""Measure a scorecard: for each example call of each writing tool, a fresh server and folder per treatment; the
example's set-up calls, the call with its answer lost at the gateway, then (bare) the byte-identical re-issue, (key)
the re-issue with the gateway's idempotency key, (verify) a check of the real state and a re-issue only if the
effect is not there. The outcome is read from the probed state, never from the server's word."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from aft_bench.runtime.gateway import Gateway, GatewayFault, GatewaySchedule, WorldFailed
from aft_bench.runtime.trace import Trace
from aft_bench.world import snapshot
from aft_bench.world.external import Example, ExternalWorld, ToolOverlay

CLASSES = ("duplicate", "false_failure", "silent_success", "safe", "no_effect", "unmeasured")
TREATMENTS = ("bare", "key", "verify")
KEY = "scorecard-1"


@dataclass(frozen=True)
class Outcome:
    """One treatment of one example: its class and the evidence that decides it."""

    treatment: str
    cls: str
    realized: int | None  # how often the effect was realized from the state before the call (None: no identity)
    first: dict[str, Any] | None  # the server's real answer to the lost call
    reissue: dict[str, Any] | None  # the server's answer to the re-issue (None: it never reached the server)
    delivered: dict[str, Any] | None  # what the client got for the re-issue
    changes: dict[str, Any]  # what the re-issue changed in the real state
    verified: bool | None = None  # the verify treatment: whether the effect was found after the lost answer


@dataclass(frozen=True)
class ToolCard:
    tool: str
    example: int
    args: dict[str, Any]
    note: str
    annotations: dict[str, Any]
    overlay: dict[str, Any]
    outcomes: tuple[Outcome, ...]
    contradictions: tuple[str, ...] = ()

    def outcome(self, treatment: str) -> Outcome | None:
        return next((o for o in self.outcomes if o.treatment == treatment), None)


@dataclass(frozen=True)
class Scorecard:
    world: str
    package: str
    version: str
    server: dict[str, Any]
    protocol: str | None
    tools: tuple[ToolCard, ...]
    untested: tuple[str, ...] = field(default=())  # writing tools with no example

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _answer(trace: Trace, inv: str, kind: str) -> dict[str, Any] | None:
    for e in trace.events():
        if e.kind == kind and e.data.get("inv") == inv:
            return dict(e.data["answer"]) if e.data.get("answer") is not None else None
    return None


def classify(realized: int | None, reissue: dict[str, Any] | None, changed: bool) -> str:
    """The class of a re-issue from the real state: a second effect is a duplicate; otherwise an error answer is a
    false failure, a success that changed nothing a silent success, and a re-issue that never reached the server
    (or whose effect was found first) safe."""
    if realized is None:
        return "unmeasured"
    if realized == 0:
        return "no_effect"
    if realized >= 2:
        return "duplicate"
    if reissue is None:
        return "safe"
    if reissue.get("isError"):
        return "false_failure"
    return "silent_success" if not changed else "safe"


def _run_example(world: ExternalWorld, tool: str, overlay: ToolOverlay, ex: Example, treatment: str) -> Outcome:
    occurrence = 1 + sum(1 for c in ex.before if c.tool == tool)
    trace = Trace()
    gw = Gateway(world, trace, GatewaySchedule(id="scorecard", faults=(
        GatewayFault(kind="response_loss", tool=tool, occurrence=occurrence),)), keys=treatment == "key")
    gw.open()
    try:
        for call in ex.before:
            gw.invoke(call.tool, call.args)
        before = gw.final_state()
        key = KEY if treatment == "key" else None
        lost = gw.invoke(tool, ex.args, key)
        if lost.transport != "dropped":
            raise WorldFailed(f"world '{world.id}': {tool}: the lost answer was not lost ({lost.transport})")
        first = _answer(trace, lost.inv, "server_answer")
        verified = None
        reissue_inv = None
        if treatment == "verify":
            verified = gw.verify(tool, ex.args)
        if not verified:
            mid = gw.final_state()
            again = gw.invoke(tool, ex.args, key)
            reissue_inv = again.inv
            after = gw.final_state()
            changes = snapshot.diff(mid, after)
            delivered = again.answer.to_dict() if again.answer is not None else None
        else:
            after, changes, delivered = gw.final_state(), {}, None
        reissue = _answer(trace, reissue_inv, "server_answer") if reissue_inv else None
        realized = (snapshot.realized(overlay.identity, before, after, ex.args)
                    if overlay.identity is not None else None)
    finally:
        gw.close()
    return Outcome(treatment, classify(realized, reissue, bool(changes)), realized, first, reissue,
                   gw._normal(delivered) if delivered else None, changes, verified)


def contradictions(annotations: dict[str, Any], overlay: ToolOverlay, bare: Outcome | None) -> tuple[str, ...]:
    """Where the server's declared annotations disagree with what was measured (MCP's defaults when absent:
    not read-only, not idempotent, destructive)."""
    if bare is None or bare.cls in ("unmeasured", "no_effect"):
        return ()
    out = []
    idem = bool(annotations.get("idempotentHint", False))
    if idem and bare.cls == "duplicate":
        out.append("idempotentHint=true, but the re-issue made a second effect")
    if not idem and bare.cls != "duplicate":
        out.append("idempotentHint=false (or absent), but the re-issue made no second effect")
    if annotations.get("readOnlyHint") and bare.realized:
        out.append("readOnlyHint=true, but the call changed the state")
    return tuple(out)


def measure(world: ExternalWorld, treatments: tuple[str, ...] = TREATMENTS,
            progress: Callable[[str], None] | None = None) -> Scorecard:
    """The scorecard of `world`'s server: every example of every writing tool under each treatment."""
    probe = Gateway(world, Trace())
    probe.open()
    try:
        listed = {str(t.get("name")): t for t in probe.listed}
        srv = probe.server
        assert srv is not None
        info, protocol = dict(srv.server_info), srv.protocol
    finally:
        probe.close()
    cards = []
    untested = []
    for name in world.writes():
        overlay = world.tools[name]
        if not overlay.examples:
            untested.append(name)
            continue
        annotations = dict(listed.get(name, {}).get("annotations") or {})
        for i, ex in enumerate(overlay.examples):
            outcomes = []
            for t in treatments:
                if t == "verify" and overlay.identity is None:
                    continue
                if progress is not None:
                    progress(f"{name} #{i + 1} {t}")
                outcomes.append(_run_example(world, name, overlay, ex, t))
            bare = next((o for o in outcomes if o.treatment == "bare"), None)
            cards.append(ToolCard(name, i, ex.args, ex.note, annotations,
                                  overlay.model_dump(mode="json", include={"effect", "idempotent", "destructive"}),
                                  tuple(outcomes), contradictions(annotations, overlay, bare)))
    return Scorecard(world.id, world.server.package, world.server.version, info, protocol, tuple(cards),
                     tuple(untested))
