"""The stage pipeline: every invocation passes REQUEST_ACCEPTED -> BACKEND_STARTED -> EFFECT_COMMITTED ->
RESPONSE_GENERATED -> RESPONSE_DELIVERED | RESPONSE_DROPPED, with faults acting at the boundaries.

The pipeline is the runtime between backend and interface. It holds process-local invocation state (lost on
a state-loss fault) and, only if the interface made it durable, a durable copy that survives. It records
every stage, commit, fault and recovery relation in the oracle trace. It never repairs a weak caller: it
applies exactly the guards the request carries.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from aft_bench.common import crashpoints
from aft_bench.common.canonical import canonical_json, word_json
from aft_bench.runtime.faults import Injector, PlannedFault
from aft_bench.runtime.stages import Stage
from aft_bench.runtime.trace import Trace
from aft_bench.world.backend import Backend, BackendError, Guards, ResolvedOp, effect_identity
from aft_bench.world.manifest import VERSION
from aft_bench.world.store import Store

Transport = Literal["delivered", "dropped", "interrupted", "lost"]


@dataclass(frozen=True)
class Request:
    """One request as it crosses the wire. `intent` names the logical action it belongs to."""

    op: str
    args: dict[str, Any]
    principal: str = "agent"
    intent: str = "task"
    request_id: str | None = None
    guards: Guards = Guards()


@dataclass(frozen=True)
class Delivery:
    """What reaches the caller: a response, or a transport outcome without one."""

    invocation: str | None
    transport: Transport
    response: dict[str, Any] | None = None


@dataclass
class Invocation:
    """Runtime-local state of one invocation (what a state-loss fault discards)."""

    inv: str
    request: Request
    resolved: ResolvedOp | None
    effect_id: str | None
    status: str = "accepted"  # accepted|running|suspended|committed|failed|responded
    units_done: int = 0
    response: dict[str, Any] | None = None
    commit_status: str | None = None
    _fixed_json: str | None = field(default=None, repr=False, compare=False)

    def snapshot(self) -> Invocation:
        """A copy for the durable store; fields are replaced, never mutated in place, so shallow suffices. The
        fixed parts' JSON is made here first, so this record and every later copy share it (made on the copy,
        each checkpoint serialized them again)."""
        self._fixed()
        return copy.copy(self)

    def to_json(self) -> str:
        """Canonical JSON of the whole record; the parts fixed at admission are serialized once (durable
        checkpoints happen at every stage and work unit)."""
        return (f'{{"commit_status":{word_json(self.commit_status)},{self._fixed()},'
                f'"response":{canonical_json(self.response)},"status":{word_json(self.status)},'
                f'"units_done":{int(self.units_done)}}}')

    def _fixed(self) -> str:
        """The members fixed at admission (effect id, invocation id, request, resolved operation), as JSON."""
        if self._fixed_json is None:
            r, g, p = self.request, self.request.guards, self.resolved
            request = {"op": r.op, "args": r.args, "principal": r.principal, "intent": r.intent,
                       "request_id": r.request_id,
                       "guards": {"idempotency_key": g.idempotency_key, "expected_version": g.expected_version,
                                  "authority_at_commit": g.authority_at_commit}}
            resolved = None if p is None else {
                "op_name": p.op_name, "args": p.args, "business_args": p.business_args, "targets": p.targets,
                "parts": p.parts, "work_units": p.work_units}
            self._fixed_json = (f'"effect_id":{canonical_json(self.effect_id)},"inv":{canonical_json(self.inv)},'
                                f'"request":{canonical_json(request)},"resolved":{canonical_json(resolved)}')
        return self._fixed_json

    @classmethod
    def from_json(cls, text: str) -> Invocation:
        d = json.loads(text)
        req = d["request"]
        request = Request(req["op"], req["args"], req["principal"], req["intent"], req["request_id"],
                          Guards(**req["guards"]))
        p = d["resolved"]
        resolved = None if p is None else ResolvedOp(p["op_name"], p["args"], p["business_args"],
                                                     tuple(p["targets"]), tuple(p["parts"]), p["work_units"])
        return cls(d["inv"], request, resolved, d["effect_id"], d["status"], d["units_done"], d["response"],
                   d["commit_status"])


class StoredInvocations(MutableMapping[str, Invocation]):
    """Durable invocation state, kept in the store's durable table (so it survives what the store survives)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._last: dict[str, str] = {}

    def __getitem__(self, inv: str) -> Invocation:
        data = self.store.durable_get(inv)
        if data is None:
            raise KeyError(inv)
        return Invocation.from_json(data)

    def __setitem__(self, inv: str, value: Invocation) -> None:
        data = value.to_json()
        if self._last.get(inv) != data:  # skip a durable write when nothing changed since the last one
            self.store.durable_put(inv, data)
            self._last[inv] = data

    def __delitem__(self, inv: str) -> None:
        raise TypeError("durable invocation state is never deleted during a run")

    def __iter__(self) -> Iterator[str]:
        return iter(self.store.durable_keys())

    def __len__(self) -> int:
        return len(self.store.durable_keys())


@dataclass
class Runtime:
    """Process-local invocation table, plus the durable copy the interface may have asked for."""

    durable: MutableMapping[str, Invocation]  # the store's durable table (written only when durable_state)
    durable_state: bool = False
    local: dict[str, Invocation] = field(default_factory=dict)

    def checkpoint(self, inv: Invocation) -> None:
        self.local[inv.inv] = inv
        if self.durable_state:
            self.durable[inv.inv] = inv.snapshot()

    def lose_local(self) -> list[str]:
        lost = sorted(self.local)
        self.local.clear()
        return lost


class Pipeline:
    """Executes requests against a backend through the stages, injecting planned faults and tracing all."""

    def __init__(self, backend: Backend, trace: Trace, injector: Injector, *, durable_state: bool = False):
        self.backend = backend
        self.trace = trace
        self.injector = injector
        self.runtime = Runtime(durable_state=durable_state, durable=StoredInvocations(backend.store))
        self._n_inv = 0
        self._n_req = 0
        self._request_ids: dict[str, str] = {}
        self._effects: dict[str, list[str]] = {}
        for f in injector.planned:
            trace.append("fault_planned", **f.describe())

    # -- public operations ------------------------------------------------------------------
    def invoke(self, req: Request) -> Delivery:
        """Run a new request through every stage."""
        self._n_inv += 1
        inv_id = f"inv-{self._n_inv:04d}"
        if req.request_id is None:
            self._n_req += 1
            req = replace(req, request_id=f"req-{self._n_req:04d}")
        relation = "new"
        if req.request_id in self._request_ids:
            relation = "retransmission"
            self.trace.append("retransmission", inv=inv_id, request_id=req.request_id,
                              of=self._request_ids[req.request_id])
        self._request_ids.setdefault(req.request_id, inv_id)

        try:
            op = self.backend.operation(req.op)
            resolved: ResolvedOp | None = self.backend.resolve(req.op, req.args)
            error = None
        except BackendError as exc:
            op, resolved, error = None, None, exc
        effect_id = None
        if op is not None and op.is_write and resolved is not None:
            effect_id = effect_identity(req.op, resolved.business_args, req.intent)
            earlier = self._effects.setdefault(effect_id, [])
            if earlier and relation == "new":
                relation = "re_execution"
                self.trace.append("re_execution", inv=inv_id, effect_id=effect_id, of=list(earlier))
            earlier.append(inv_id)

        self.trace.append("invocation", inv=inv_id, request_id=req.request_id, op=req.op, args=req.args,
                          principal=req.principal, intent=req.intent, effect_id=effect_id, relation=relation,
                          guards=_guards(req.guards))
        inv = Invocation(inv_id, req, resolved, effect_id)
        self.runtime.checkpoint(inv)
        if resolved is not None:  # a fault arms only on a call the backend accepted as well-formed
            for f in self.injector.on_new_invocation(req.op, inv_id):
                self.trace.append("fault_armed", fault=f.index, kind=f.kind, inv=inv_id)

        self._stage(inv, Stage.REQUEST_ACCEPTED)
        if error is None and op is not None and not self.backend.authorized(req.principal, op.permission):
            error = BackendError("unauthorized", f"{req.principal} lacks {op.permission}")
        if error is not None:
            return self._respond(inv, {"status": "error", "code": error.code, "detail": error.detail})
        for f in self.injector.due(Stage.REQUEST_ACCEPTED, inv_id):
            self._fire(f, inv)
        return self._execute(inv)

    def resume(self, inv_id: str) -> Delivery:
        """Continue an existing invocation: from its preserved work if suspended, or re-deliver its response."""
        inv = self.runtime.local.get(inv_id)
        if inv is None and inv_id in self.runtime.durable:
            inv = self.runtime.durable[inv_id].snapshot()
            self.runtime.local[inv_id] = inv
            self.trace.append("reconstructed", inv=inv_id, units_done=inv.units_done, status=inv.status)
        if inv is None:
            self.trace.append("resume_failed", inv=inv_id, reason="unknown_invocation")
            return Delivery(inv_id, "delivered", {"status": "error", "code": "unknown_invocation",
                                                  "detail": f"no invocation {inv_id}", "inv": inv_id})
        self.trace.append("continuation", inv=inv_id, status=inv.status, units_done=inv.units_done)
        if inv.status == "suspended":
            return self._execute(inv, continuing=True)
        if inv.response is not None:
            return self._deliver(inv, inv.response)
        return Delivery(inv_id, "delivered", {"status": "error", "code": "not_resumable", "inv": inv_id,
                                              "detail": f"invocation is {inv.status}"})

    def status(self, inv_id: str) -> Delivery:
        """Reconciliation through lifecycle status: what the runtime knows of an invocation."""
        inv = self.runtime.local.get(inv_id) or self.runtime.durable.get(inv_id)
        info: dict[str, Any] = {"inv": inv_id, "lifecycle": "unknown"}
        if inv is not None:
            info = {"inv": inv_id, "lifecycle": inv.status, "units_done": inv.units_done,
                    "units_total": inv.resolved.work_units if inv.resolved else 0,
                    "committed": inv.commit_status == "committed", "effect_id": inv.effect_id}
        self.trace.append("reconciliation", via="status", **info)
        return Delivery(inv_id, "delivered", {"status": "ok", "result": info})

    def verify(self, op: str, args: dict[str, Any], idempotency_key: str | None = None) -> Delivery:
        """Verification: authoritative state evidence for an operation's postcondition (and, given a key,
        whether that key's effect committed)."""
        try:
            resolved = self.backend.resolve(op, args)
        except BackendError as exc:
            self.trace.append("verification", op=op, args=args, error=exc.code)
            return Delivery(None, "delivered", {"status": "error", "code": exc.code, "detail": exc.detail})
        evidence = self.backend.evidence(resolved)
        if idempotency_key is not None:
            evidence["key_committed"] = self.backend.key_committed(idempotency_key)
        self.trace.append("verification", op=op, args=args, evidence=evidence)
        return Delivery(None, "delivered", {"status": "ok", "result": evidence})

    def handles(self) -> Delivery:
        """Recovery handles: the invocations the durable store still knows (empty without durable state)."""
        rows = [
            {"inv": i.inv, "op": i.request.op, "args": i.request.args, "lifecycle": i.status,
             "units_done": i.units_done, "units_total": i.resolved.work_units if i.resolved else 0}
            for i in sorted(self.runtime.durable.values(), key=lambda i: i.inv)
        ]
        self.trace.append("reconciliation", via="handles", count=len(rows))
        return Delivery(None, "delivered", {"status": "ok", "result": {"invocations": rows}})

    # -- stages -----------------------------------------------------------------------------
    def _stage(self, inv: Invocation, stage: Stage, **data: Any) -> None:
        self.trace.append("stage", inv=inv.inv, stage=str(stage), **data)

    def _execute(self, inv: Invocation, continuing: bool = False) -> Delivery:
        assert inv.resolved is not None
        resolved = inv.resolved
        op = self.backend.operation(resolved.op_name)
        if not continuing:
            inv.status = "running"
            self._stage(inv, Stage.BACKEND_STARTED, units=resolved.work_units)
            for f in self.injector.due(Stage.BACKEND_STARTED, inv.inv):
                self._fire(f, inv)
        inv.status = "running"
        self.runtime.checkpoint(inv)
        while inv.units_done < resolved.work_units:
            inv.units_done += 1
            self.trace.append("work_unit", inv=inv.inv, unit=inv.units_done, of=resolved.work_units)
            self.runtime.checkpoint(inv)
            for f in self.injector.due(Stage.BACKEND_STARTED, inv.inv, inv.units_done, resolved.work_units):
                stop = self._fire(f, inv)
                if stop is not None:
                    return stop

        parts_limit = None
        suppressed = False
        for f in self.injector.due(Stage.EFFECT_COMMITTED, inv.inv):
            if f.kind == "partial_completion":
                parts_limit = min(f.parts, max(len(resolved.parts) - 1, 0))
                self._fire(f, inv, parts=parts_limit, parts_total=len(resolved.parts))
            elif f.kind == "false_success":
                suppressed = True
                self._fire(f, inv)

        if not op.is_write:
            result = self.backend.read(resolved)
            self._stage(inv, Stage.EFFECT_COMMITTED, effect=None)
            response = {"status": "ok", "result": result}
        elif suppressed:
            self._stage(inv, Stage.EFFECT_COMMITTED, effect=inv.effect_id, suppressed=True)
            response = {"status": "ok", "result": {"refs": list(resolved.targets)}}
        else:
            crashpoints.hit("before_commit")
            outcome = self.backend.commit(resolved, effect_id=inv.effect_id or "", invocation=inv.inv,
                                          principal=inv.request.principal, guards=inv.request.guards,
                                          parts_limit=parts_limit)
            crashpoints.hit("after_commit")
            inv.commit_status = outcome.status
            if outcome.status == "committed":
                e = outcome.entry or {}
                self._stage(inv, Stage.EFFECT_COMMITTED, effect=inv.effect_id)
                self.trace.append("commit", inv=inv.inv, effect_id=inv.effect_id, op=resolved.op_name,
                                  effect=op.effect, principal=e["principal"], authorized=e["authorized"],
                                  targets=e["targets"], parts_realized=e["parts_realized"],
                                  parts_total=e["parts_total"], ledger_index=e["index"])
                response = {"status": "ok", "result": outcome.result,
                            "parts_done": len(resolved.parts) if parts_limit is not None else len(e["parts_realized"]),
                            "parts_total": len(resolved.parts)}
            elif outcome.status == "replayed":
                self.trace.append("commit_replayed", inv=inv.inv, effect_id=inv.effect_id,
                                  ledger_index=(outcome.entry or {}).get("index"))
                response = {"status": "ok", "result": outcome.result, "replayed": True}
            else:
                self.trace.append("commit_rejected", inv=inv.inv, effect_id=inv.effect_id,
                                  reason=outcome.status, detail=outcome.detail)
                response = {"status": "error", "code": outcome.status, "detail": outcome.detail}
        inv.status = "committed" if response["status"] == "ok" else "failed"
        self.runtime.checkpoint(inv)
        return self._respond(inv, response)

    def _respond(self, inv: Invocation, response: dict[str, Any]) -> Delivery:
        response = {**response, "inv": inv.inv, "op": inv.request.op}
        self._stage(inv, Stage.RESPONSE_GENERATED, response=response)
        dropped = False
        for f in self.injector.due(Stage.RESPONSE_GENERATED, inv.inv):
            if f.kind == "false_failure":
                response = {"status": "error", "code": "internal_error", "detail": "operation failed",
                            "inv": inv.inv, "op": inv.request.op}
            elif f.kind == "response_loss":
                dropped = True
            self._fire(f, inv)
        inv.response = response
        inv.status = "responded" if inv.status in ("committed", "failed", "accepted") else inv.status
        self.runtime.checkpoint(inv)
        if dropped:
            self._stage(inv, Stage.RESPONSE_DROPPED)
            return Delivery(inv.inv, "dropped", None)
        return self._deliver(inv, response)

    def _deliver(self, inv: Invocation, response: dict[str, Any]) -> Delivery:
        self._stage(inv, Stage.RESPONSE_DELIVERED, response=response, observed=_observed(response))
        return Delivery(inv.inv, "delivered", response)

    # -- faults -------------------------------------------------------------------------------
    def _fire(self, f: PlannedFault, inv: Invocation, **extra: Any) -> Delivery | None:
        """Perform a fault's action on the world/runtime and log it as fired; returns a Delivery if it ends the call."""
        self.injector.fire(f)
        resolved = inv.resolved
        data: dict[str, Any] = {"fault": f.index, "kind": f.kind, "stage": str(f.stage), "inv": inv.inv, **extra}
        if f.kind == "permission_drift":
            op = self.backend.operation(inv.request.op)
            perm = f.permission or op.permission
            self.backend.revoke(inv.request.principal, perm)
            self.trace.append("fault_fired", **data)
            self.trace.append("permission_revoked", principal=inv.request.principal, permission=perm)
            return None
        if f.kind == "stale_state":
            ref = resolved.targets[0] if resolved and resolved.targets else None
            self.trace.append("fault_fired", **data, ref=ref)
            if ref is not None:
                w = self.backend.concurrent_write(ref, f.fields)
                self.trace.append("world_write", by="concurrent_writer", fields=f.fields, **w)
            return None
        if f.kind == "transient_interruption":
            inv.status = "suspended"
            self.runtime.checkpoint(inv)
            self.trace.append("fault_fired", **data, unit=inv.units_done)
            return Delivery(inv.inv, "interrupted", None)
        if f.kind == "state_loss":
            if inv.status == "running":
                inv.status = "suspended"
                self.runtime.checkpoint(inv)
            self.trace.append("fault_fired", **data, unit=inv.units_done)
            lost = self.runtime.lose_local()
            self.backend.reopen()  # every in-process handle goes too; the backend's store is reopened
            self.trace.append("state_lost", discarded=lost, durable=sorted(self.runtime.durable))
            return Delivery(inv.inv, "lost", None)
        self.trace.append("fault_fired", **data)
        return None


def _guards(g: Guards) -> dict[str, Any]:
    return {"idempotency_key": g.idempotency_key, "expected_version": g.expected_version,
            "authority_at_commit": g.authority_at_commit}


def _observed(response: dict[str, Any]) -> list[list[Any]]:
    """Record versions a delivered response showed the caller (for the stale-write detector)."""
    result = response.get("result") or {}
    out = []
    if isinstance(result.get("record"), dict) and "ref" in result:
        out.append([result["ref"], result["record"].get(VERSION)])
    for r in result.get("records", []) if isinstance(result.get("records"), list) else []:
        out.append([r.get("ref"), r.get(VERSION)])
    return out
