"""Measure a scorecard: for each example call of each writing tool, a fresh server and folder per treatment; the
example's set-up calls, the call with its answer lost at the gateway, then (bare) the byte-identical re-issue, (key)
the re-issue with the gateway's idempotency key, (verify) a check of the real state and a re-issue only if the
effect is not there. Whether the re-issue made a second effect is read from the probed state, never from the
server's word; where it made none, its answer decides what a client was told (`answers.failure_signal`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from aft_bench.runtime.gateway import Gateway, GatewayFault, GatewaySchedule, WorldFailed
from aft_bench.runtime.trace import Trace
from aft_bench.world import snapshot
from aft_bench.scorecard.answers import failure_signal, resolve
from aft_bench.world.external import Example, ExternalWorld, ToolOverlay, installed_version

CLASSES = ("duplicate", "false_failure", "silent_success", "safe", "no_effect")
TREATMENTS = ("bare", "key", "verify")
KEY = "scorecard-1"
MEASURED_HINTS = ("readOnlyHint", "idempotentHint")  # the annotations a scorecard's measurement speaks to


@dataclass(frozen=True)
class Outcome:
    """One treatment of one example: its class and the evidence that decides it."""

    treatment: str
    cls: str
    realized: int | None  # how often the identity's effect was realized from the state before the call (None: none)
    first: dict[str, Any] | None  # the server's real answer to the lost call
    reissue: dict[str, Any] | None  # the server's answer to the re-issue (None: it never reached the server)
    delivered: dict[str, Any] | None  # what the client got for the re-issue
    changes: dict[str, Any]  # what the re-issue changed in the real state
    verified: bool | None = None  # the verify treatment: whether the effect was found after the lost answer
    signal: str = ""  # what decided the class: the state's evidence, then the answer's (isError, a phrase)
    effect: dict[str, Any] = field(default_factory=dict)  # what the lost call changed in the real state


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
    undeclared: tuple[str, ...] = ()  # the measured annotations the server does not declare (MCP's defaults apply)

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
    installed: str | None = None  # the version read from the install itself (None: it could not be read)
    failure_phrases: tuple[str, ...] = ()  # the phrases an answer's text was read with

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _answer(trace: Trace, inv: str, kind: str) -> dict[str, Any] | None:
    for e in trace.events():
        if e.kind == kind and e.data.get("inv") == inv:
            return dict(e.data["answer"]) if e.data.get("answer") is not None else None
    return None


def classify(realized: int | None, effect: bool, again: bool, reissue: dict[str, Any] | None,
             failure: str | None, first_failure: str | None = None) -> tuple[str, str]:
    """The class of a re-issue and what decided it. The state first: the identity's count where the tool has one
    and it held, else the diffs (`effect`: the lost call changed the state; `again`: the re-issue changed it
    again); two effects are a duplicate, none is no effect. With one, the answer: not sent is safe, a failure a
    client reads (`failure`) a false failure, else a silent success."""
    if realized is not None and realized >= 2:
        return "duplicate", f"state: the effect is there {realized} times"
    if realized == 1:
        once = "state: the effect is there once" + ("; the re-issue changed something else" if again else "")
    else:
        why = "" if realized is None else "the identity never held; "
        if not effect and not again:
            failed = f" (its answer: {first_failure})" if first_failure else ""
            return "no_effect", f"state: {why}the call changed nothing{failed}"
        if effect and again:
            return "duplicate", f"state: {why}the re-issue changed it again"
        once = f"state: {why}{'the call' if effect else 'only the re-issue'} changed it"
    if reissue is None:
        return "safe", f"{once}; the re-issue was not sent"
    if failure is not None:
        return "false_failure", f"{once}; answer: {failure}"
    return "silent_success", f"{once}; answer: success"


def _run_example(world: ExternalWorld, tool: str, overlay: ToolOverlay, ex: Example, treatment: str) -> Outcome:
    occurrence = 1 + sum(1 for c in ex.before if c.tool == tool)
    trace = Trace()
    gw = Gateway(world, trace, GatewaySchedule(id="scorecard", faults=(
        GatewayFault(kind="response_loss", tool=tool, occurrence=occurrence),)), keys=treatment == "key")
    gw.open()
    try:
        earlier = []
        for call in ex.before:
            d = gw.invoke(call.tool, resolve(call.args, earlier) if earlier else call.args)
            earlier.append(d.answer.to_dict() if d.answer is not None else None)
        try:
            args = resolve(ex.args, earlier)
        except LookupError as exc:
            raise WorldFailed(f"world '{world.id}': {tool}: {exc}", f"tools.{tool}.examples") from None
        before = gw.final_state()
        key = KEY if treatment == "key" else None
        lost = gw.invoke(tool, args, key)
        if lost.transport != "dropped":
            raise WorldFailed(f"world '{world.id}': {tool}: the lost answer was not lost ({lost.transport})")
        first = _answer(trace, lost.inv, "server_answer")
        mid = gw.final_state()
        effect = snapshot.diff(before, mid)
        verified = None
        reissue_inv = None
        if treatment == "verify":  # the identity where there is one, else: did the state change since the call
            verified = gw.verify(tool, args) if overlay.identity is not None else bool(effect)
        changes: dict[str, Any] = {}
        delivered = None
        if not verified:
            again = gw.invoke(tool, args, key)
            reissue_inv = again.inv
            changes = snapshot.diff(mid, gw.final_state())
            delivered = again.answer.to_dict() if again.answer is not None else None
        after = gw.final_state()
        reissue = _answer(trace, reissue_inv, "server_answer") if reissue_inv else None
        realized = (snapshot.realized(overlay.identity, before, after, args)
                    if overlay.identity is not None else None)
    finally:
        gw.close()
    failure = failure_signal(reissue, first, world.answers.failure)
    cls, signal = classify(realized, bool(effect), bool(changes), reissue, failure,
                           failure_signal(first, None, world.answers.failure))
    return Outcome(treatment, cls, realized, first, reissue, gw._normal(delivered) if delivered else None, changes,
                   verified, signal, effect)


def _changed(o: Outcome) -> bool:
    return bool(o.effect) or bool(o.changes) or bool(o.realized)


def contradictions(annotations: dict[str, Any], bare: Outcome | None) -> tuple[str, ...]:
    """Where an annotation the server declares disagrees with what was measured; an absent one contradicts
    nothing (it is `undeclared`)."""
    if bare is None or bare.cls in ("unmeasured", "no_effect"):
        return ()
    out = []
    if "idempotentHint" in annotations:
        idem = bool(annotations["idempotentHint"])
        if idem and bare.cls == "duplicate":
            out.append("idempotentHint=true, but the re-issue made a second effect")
        if not idem and bare.cls != "duplicate":
            out.append("idempotentHint=false, but the re-issue made no second effect")
    if annotations.get("readOnlyHint") and _changed(bare):
        out.append("readOnlyHint=true, but the call changed the state")
    return tuple(out)


def undeclared(annotations: dict[str, Any], bare: Outcome | None) -> tuple[str, ...]:
    """The annotations the measurement speaks to that the server leaves undeclared (for a measured tool)."""
    if bare is None:
        return ()
    return tuple(h for h in MEASURED_HINTS if h not in annotations)


def measure(world: ExternalWorld, treatments: tuple[str, ...] = TREATMENTS,
            progress: Callable[[str], None] | None = None) -> Scorecard:
    """The scorecard of `world`'s server: every example of every tool under each treatment."""
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
    for name in sorted(world.tools):  # every tool with an example (a read's is measured too); a write without one
        overlay = world.tools[name]  # is listed as not measured
        if not overlay.examples:
            if overlay.is_write:
                untested.append(name)
            continue
        annotations = dict(listed.get(name, {}).get("annotations") or {})
        for i, ex in enumerate(overlay.examples):
            outcomes = []
            for t in treatments:
                if progress is not None:
                    progress(f"{name} #{i + 1} {t}")
                outcomes.append(_run_example(world, name, overlay, ex, t))
            bare = next((o for o in outcomes if o.treatment == "bare"), None)
            cards.append(ToolCard(name, i, ex.args, ex.note, annotations,
                                  overlay.model_dump(mode="json", include={"effect", "idempotent", "destructive"}),
                                  tuple(outcomes), contradictions(annotations, bare),
                                  undeclared(annotations, bare)))
    return Scorecard(world.id, world.server.package, world.server.version, info, protocol, tuple(cards),
                     tuple(untested), installed_version(world), tuple(world.answers.failure))
