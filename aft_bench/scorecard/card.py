"""Measure a scorecard: for each example call of each writing tool, a fresh server and folder per treatment; the
example's set-up calls, the call with its answer lost at the gateway, then (bare) the byte-identical re-issue, (key)
the re-issue with the gateway's idempotency key, (verify) a check of the real state and a re-issue only if the
effect is not there. Whether the re-issue made a second effect is read from the probed state, never from the
server's word; where it made none, its answer decides what a client was told (`answers.failure_signal`)."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
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


@dataclass(frozen=True)
class _Lost:
    """An example played up to its lost call: the call's arguments, the state before and after it, what it
    changed there, and the server's real answer to it."""

    args: dict[str, Any]
    before: dict[str, Any]
    mid: dict[str, Any]
    effect: dict[str, Any]
    first: dict[str, Any] | None


@dataclass(frozen=True)
class _Reissued:
    """What one re-issue did: the server's answer (None: it never reached the server), what the client got, and
    what it changed in the real state."""

    reissue: dict[str, Any] | None
    delivered: dict[str, Any] | None
    changes: dict[str, Any]


Closer = Callable[[Callable[[], None]], object]


def _now(close: Callable[[], None]) -> None:
    close()


def _open(world: ExternalWorld, tool: str, ex: Example, keys: bool) -> tuple[Gateway, Trace]:
    """A fresh server and folder behind a gateway that loses the answer to the example's call of `tool`."""
    occurrence = 1 + sum(1 for c in ex.before if c.tool == tool)
    trace = Trace()
    gw = Gateway(world, trace, GatewaySchedule(id="scorecard", faults=(
        GatewayFault(kind="response_loss", tool=tool, occurrence=occurrence),)), keys=keys)
    gw.open()
    return gw, trace


def _lose(gw: Gateway, trace: Trace, tool: str, ex: Example, key: str | None) -> _Lost:
    """The example's set-up calls, then its call, whose answer the gateway loses."""
    world = gw.world
    earlier = []
    for call in ex.before:
        d = gw.invoke(call.tool, resolve(call.args, earlier) if earlier else call.args)
        earlier.append(d.answer.to_dict() if d.answer is not None else None)
    try:
        args = resolve(ex.args, earlier)
    except LookupError as exc:
        raise WorldFailed(f"world '{world.id}': {tool}: {exc}", f"tools.{tool}.examples") from None
    before = gw.final_state()
    lost = gw.invoke(tool, args, key)
    if lost.transport != "dropped":
        raise WorldFailed(f"world '{world.id}': {tool}: the lost answer was not lost ({lost.transport})")
    mid = gw.final_state()
    return _Lost(args, before, mid, snapshot.diff(before, mid), _answer(trace, lost.inv, "server_answer"))


def _reissue(gw: Gateway, trace: Trace, tool: str, lost: _Lost, key: str | None) -> _Reissued:
    again = gw.invoke(tool, lost.args, key)
    changes = snapshot.diff(lost.mid, gw.final_state())
    delivered = again.answer.to_dict() if again.answer is not None else None
    return _Reissued(_answer(trace, again.inv, "server_answer"), gw._normal(delivered) if delivered else None,
                     changes)


def _verified(gw: Gateway, tool: str, overlay: ToolOverlay, lost: _Lost) -> bool | None:
    """The verify treatment's check: the identity where there is one, else did the state change since the call."""
    return gw.verify(tool, lost.args) if overlay.identity is not None else bool(lost.effect)


def _outcome(world: ExternalWorld, overlay: ToolOverlay, treatment: str, lost: _Lost, done: _Reissued | None,
             after: dict[str, Any], verified: bool | None = None) -> Outcome:
    reissue = done.reissue if done is not None else None
    changes = done.changes if done is not None else {}
    realized = (snapshot.realized(overlay.identity, lost.before, after, lost.args)
                if overlay.identity is not None else None)
    failure = failure_signal(reissue, lost.first, world.answers.failure)
    cls, signal = classify(realized, bool(lost.effect), bool(changes), reissue, failure,
                           failure_signal(lost.first, None, world.answers.failure))
    return Outcome(treatment, cls, realized, lost.first, reissue, done.delivered if done is not None else None,
                   changes, verified, signal, lost.effect)


def _run_example(world: ExternalWorld, tool: str, overlay: ToolOverlay, ex: Example, treatment: str,
                 close: Closer = _now) -> Outcome:
    """One treatment of one example on a server and folder of its own."""
    gw, trace = _open(world, tool, ex, treatment == "key")
    try:
        key = KEY if treatment == "key" else None
        lost = _lose(gw, trace, tool, ex, key)
        verified = _verified(gw, tool, overlay, lost) if treatment == "verify" else None
        done = _reissue(gw, trace, tool, lost, key) if not verified else None
        after = gw.final_state()
    finally:
        close(gw.close)
    return _outcome(world, overlay, treatment, lost, done, after, verified)


def _run_shared(world: ExternalWorld, tool: str, overlay: ToolOverlay, ex: Example,
                treatments: tuple[str, ...], close: Closer = _now) -> list[Outcome]:
    """Every treatment of one example from one server and folder: after the lost call, the keyed re-issue (the
    gateway answers it from its record; it never reaches the server), the verify treatment's check (a probe read),
    then the bare re-issue, which is also the verify treatment's where its check found no effect. A server that
    answers the same calls the same way gives what one server per treatment gives (`shared=False`), for a third
    of the starts."""
    gw, trace = _open(world, tool, ex, "key" in treatments)
    out: dict[str, Outcome] = {}
    try:
        lost = _lose(gw, trace, tool, ex, KEY if "key" in treatments else None)
        if "key" in treatments:
            keyed = _reissue(gw, trace, tool, lost, KEY)
            out["key"] = _outcome(world, overlay, "key", lost, keyed, gw.final_state())
        verified = _verified(gw, tool, overlay, lost) if "verify" in treatments else None
        if verified:
            out["verify"] = _outcome(world, overlay, "verify", lost, None, gw.final_state(), verified)
        if "bare" in treatments or ("verify" in treatments and not verified):
            bare = _reissue(gw, trace, tool, lost, None)
            after = gw.final_state()
            out["bare"] = _outcome(world, overlay, "bare", lost, bare, after)
            if "verify" in treatments and not verified:
                out["verify"] = _outcome(world, overlay, "verify", lost, bare, after, verified)
    finally:
        close(gw.close)
    return [out[t] for t in treatments]


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


def _treated(world: ExternalWorld, name: str, i: int, ex: Example, treatments: tuple[str, ...], shared: bool,
             progress: Callable[[str], None] | None, close: Closer) -> list[Outcome]:
    """One example's outcomes under each treatment."""
    overlay = world.tools[name]
    if shared:
        if progress is not None:
            progress(f"{name} #{i + 1} {', '.join(treatments)}")
        return _run_shared(world, name, overlay, ex, treatments, close)
    outcomes = []
    for t in treatments:
        if progress is not None:
            progress(f"{name} #{i + 1} {t}")
        outcomes.append(_run_example(world, name, overlay, ex, t, close))
    return outcomes


def measure(world: ExternalWorld, treatments: tuple[str, ...] = TREATMENTS,
            progress: Callable[[str], None] | None = None, shared: bool = False) -> Scorecard:
    """The scorecard of `world`'s server: every example of every tool under each treatment, each on a server of
    its own, or (`shared`) all of an example's treatments from one server (`_run_shared`)."""
    probe = Gateway(world, Trace())
    probe.open()
    try:
        listed = {str(t.get("name")): t for t in probe.listed}
        srv = probe.server
        assert srv is not None
        info, protocol = dict(srv.server_info), srv.protocol
    finally:
        probe.close()
    cards: list[ToolCard] = []
    untested = []
    closed: list[Future[None]] = []
    # a measured server is stopped and its folder removed on a thread of its own while the next one starts (a
    # server may take half a second to exit); leaving this block waits for every one, and a failure is raised
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="scorecard-close") as closing:
        def close(fn: Callable[[], None]) -> None:
            closed.append(closing.submit(fn))

        for name in sorted(world.tools):  # every tool with an example (a read's is measured too); a write without
            overlay = world.tools[name]  # one is listed as not measured
            if not overlay.examples and overlay.is_write:
                untested.append(name)
            annotations = dict(listed.get(name, {}).get("annotations") or {})
            for i, ex in enumerate(overlay.examples):
                outcomes = _treated(world, name, i, ex, treatments, shared, progress, close)
                bare = next((o for o in outcomes if o.treatment == "bare"), None)
                cards.append(ToolCard(name, i, ex.args, ex.note, annotations,
                                      overlay.model_dump(mode="json", include={"effect", "idempotent", "destructive"}),
                                      tuple(outcomes), contradictions(annotations, bare),
                                      undeclared(annotations, bare)))
    for f in closed:
        f.result()
    return Scorecard(world.id, world.server.package, world.server.version, info, protocol, tuple(cards),
                     tuple(untested), installed_version(world), tuple(world.answers.failure))
