"""The in-memory resettable backend: executes a world's operations on plain-dict state, knows nothing of interfaces.

It offers effect semantics as optional guards on a commit (idempotency key, expected version, authority at
the commit point); whoever calls it decides whether to use them. It always records the truth of every commit
(effect identity, authority at commit, versions crossed) in a ledger that is part of its state.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from aft_bench.canonical import canonical_json, digest
from aft_bench.world import VERSION, Operation, World

PY_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,)}


class BackendError(Exception):
    """A business-level rejection (unknown record, bad arguments); becomes an error response, not a crash."""

    def __init__(self, code: str, detail: str) -> None:
        self.code = code
        self.detail = detail
        super().__init__(f"{code}: {detail}")


@dataclass(frozen=True)
class Guards:
    """Effect semantics a caller may request at the commit point. All off = a legacy write."""

    idempotency_key: str | None = None
    expected_version: int | None = None
    authority_at_commit: bool = False


@dataclass(frozen=True)
class Plan:
    """A resolved invocation: which records it touches, its parts and how much work it takes."""

    op_name: str
    args: dict[str, Any]
    business_args: dict[str, Any]
    targets: tuple[str, ...]
    parts: tuple[str, ...]
    work_units: int


@dataclass(frozen=True)
class CommitOutcome:
    status: Literal["committed", "replayed", "precondition_failed", "unauthorized"]
    entry: dict[str, Any] | None = None
    detail: str = ""
    result: dict[str, Any] = field(default_factory=dict)


def effect_identity(op_name: str, business_args: dict[str, Any], intent: str) -> str:
    """Logical effect identity: operation + canonical business arguments + the intent it belongs to."""
    return "eff-" + digest({"op": op_name, "args": business_args, "intent": intent})[:16]


def _ref(coll: str, key: str) -> str:
    return f"{coll}/{key}"


class MemoryBackend:
    """Resettable in-memory backend over a World; `reset` restores s0 exactly."""

    def __init__(self, world: World, overrides: dict[str, Any] | None = None) -> None:
        self.world = world
        self._overrides = copy.deepcopy(overrides)
        self.state: dict[str, Any] = world.initial_state(overrides)

    # -- state ---------------------------------------------------------------------------
    def reset(self) -> None:
        self.state = self.world.initial_state(self._overrides)

    def snapshot(self) -> dict[str, Any]:
        """A detached copy of the state (a JSON round trip: the state is plain JSON data)."""
        return json.loads(canonical_json(self.state))

    def state_hash(self) -> str:
        return digest(self.state)

    def snapshot_and_hash(self) -> tuple[dict[str, Any], str]:
        """Terminal state and its canonical hash from one serialization."""
        text = canonical_json(self.state)
        return json.loads(text), hashlib.sha256(text.encode("utf-8")).hexdigest()

    def record(self, ref: str) -> dict[str, Any] | None:
        coll, key = ref.split("/", 1)
        rec = self.state["records"].get(coll, {}).get(key)
        return copy.deepcopy(rec) if rec is not None else None

    def authorized(self, principal: str, permission: str) -> bool:
        return permission in self.state["permissions"].get(principal, [])

    # -- planning ------------------------------------------------------------------------
    def operation(self, op_name: str) -> Operation:
        op = self.world.operations.get(op_name)
        if op is None:
            raise BackendError("unknown_operation", op_name)
        return op

    def plan(self, op_name: str, args: dict[str, Any]) -> Plan:
        """Check arguments and resolve targets; raises BackendError on bad arguments or missing records."""
        op = self.operation(op_name)
        for name, spec in op.args.items():
            if name not in args:
                raise BackendError("invalid_arguments", f"missing argument '{name}'")
            val = args[name]
            if not isinstance(val, PY_TYPES[spec.type]) or (spec.type != "bool" and isinstance(val, bool)):
                raise BackendError("invalid_arguments", f"argument '{name}' must be {spec.type}")
        extra = sorted(set(args) - set(op.args))
        if extra:
            raise BackendError("invalid_arguments", f"unknown argument(s) {extra}")
        business = {k: args[k] for k, spec in sorted(op.args.items()) if spec.business}
        records = self.state["records"][op.collection]
        targets: tuple[str, ...] = ()
        parts: tuple[str, ...] = ("effect",)
        units = op.work_units
        if op.key is not None:
            key = args[op.key]
            if key not in records:
                raise BackendError("not_found", _ref(op.collection, key))
            targets = (_ref(op.collection, key),)
            if op.work_units_field is not None:
                units = int(records[key].get(op.work_units_field, units))
        if op.kind == "update_many":
            where = self._bind(op.where, args)
            keys = sorted(k for k, r in records.items() if all(r.get(f) == v for f, v in where.items()))
            if not keys:
                raise BackendError("not_found", f"no {op.collection} record matches {where}")
            targets = tuple(_ref(op.collection, k) for k in keys)
            parts = targets
        return Plan(op_name, dict(args), business, targets, parts, units)

    @staticmethod
    def _bind(template: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
        return {f: (args[v[1:]] if isinstance(v, str) and v.startswith("$") else v) for f, v in template.items()}

    # -- reads ---------------------------------------------------------------------------
    def read(self, plan: Plan) -> dict[str, Any]:
        """Execute a READ: one record (`read`) or the records matching `where` (`list`)."""
        op = self.operation(plan.op_name)
        if op.kind == "read":
            return {"record": self.record(plan.targets[0]), "ref": plan.targets[0]}
        where = self._bind(op.where, plan.args)
        rows = self.state["records"][op.collection]
        found = [
            {"ref": _ref(op.collection, k), **copy.deepcopy(r)}
            for k, r in sorted(rows.items())
            if all(r.get(f) == v for f, v in where.items())
        ]
        return {"records": found}

    def evidence(self, plan: Plan) -> dict[str, Any]:
        """Authoritative state evidence for a write's own postcondition: do its intended values hold now?

        State-level only: it says whether a matching record exists, not which invocation made it.
        """
        op = self.operation(plan.op_name)
        values = self._bind(op.set, plan.args)
        if not op.is_write:
            return {"holds": True, "parts_done": 0, "parts_total": 0}
        if op.kind in ("create", "job"):
            coll = op.creates or op.collection
            want = {**values, "source": plan.targets[0]} if op.kind == "job" else values
            found = any(all(r.get(f) == v for f, v in want.items()) for r in self.state["records"][coll].values())
            return {"holds": found, "parts_done": int(found), "parts_total": 1}
        done = sum(1 for ref in plan.targets if all((self.record(ref) or {}).get(f) == v for f, v in values.items()))
        return {"holds": done == len(plan.targets), "parts_done": done, "parts_total": len(plan.targets)}

    def key_committed(self, key: str) -> bool:
        """Effect-level evidence: has a write under this idempotency key committed?"""
        return key in self.state["idempotency"]

    # -- faults acting on the world (called by the harness, never by an agent) -------------
    def concurrent_write(self, ref: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Another writer changes a record: fields set, version bumped. Not an agent effect."""
        coll, key = ref.split("/", 1)
        rec = self.state["records"][coll][key]
        before = rec[VERSION]
        rec.update(copy.deepcopy(fields))
        rec[VERSION] = before + 1
        return {"ref": ref, "version_before": before, "version_after": rec[VERSION]}

    def revoke(self, principal: str, permission: str) -> None:
        perms = self.state["permissions"].get(principal, [])
        self.state["permissions"][principal] = [p for p in perms if p != permission]

    # -- writes --------------------------------------------------------------------------
    def commit(
        self,
        plan: Plan,
        *,
        effect_id: str,
        invocation: str,
        principal: str,
        guards: Guards = Guards(),
        parts_limit: int | None = None,
    ) -> CommitOutcome:
        """The commit point of a WRITE: check requested guards, apply, append to the ledger."""
        op = self.operation(plan.op_name)
        key = guards.idempotency_key
        if key is not None and key in self.state["idempotency"]:
            prior = self.state["ledger"][self.state["idempotency"][key]]
            return CommitOutcome("replayed", copy.deepcopy(prior), "idempotency key already committed",
                                 copy.deepcopy(prior["result"]))
        authorized = self.authorized(principal, op.permission)
        if guards.authority_at_commit and not authorized:
            return CommitOutcome("unauthorized", None, f"{principal} lacks {op.permission} at commit")
        if guards.expected_version is not None and plan.targets:
            current = self.state["records"][op.collection][plan.targets[0].split("/", 1)[1]][VERSION]
            if current != guards.expected_version:
                return CommitOutcome("precondition_failed", None,
                                     f"{plan.targets[0]} is at version {current}, expected {guards.expected_version}")
        parts = plan.parts if parts_limit is None else plan.parts[:parts_limit]
        targets, realized, result = self._apply(op, plan, parts)
        entry = {
            "index": len(self.state["ledger"]),
            "effect_id": effect_id,
            "op": plan.op_name,
            "effect": op.effect,
            "business_args": plan.business_args,
            "invocation": invocation,
            "principal": principal,
            "authorized": authorized,
            "idempotency_key": key,
            "targets": targets,
            "parts_total": len(plan.parts),
            "parts_realized": realized,
            "compensated": False,
            "result": result,
        }
        self.state["ledger"].append(entry)
        if key is not None:
            self.state["idempotency"][key] = entry["index"]
        if op.compensates is not None and op.key is not None:
            self._compensate(op, plan)
        return CommitOutcome("committed", copy.deepcopy(entry), "", copy.deepcopy(result))

    def _apply(self, op: Operation, plan: Plan, parts: tuple[str, ...]) -> tuple[list, list, dict]:
        """Apply the primitive; returns (targets with versions, effect parts realized, result)."""
        values = self._bind(op.set, plan.args)
        if op.kind in ("create", "job"):
            coll = op.creates or op.collection
            self.state["counters"][coll] += 1
            key = f"{op.key_prefix}{self.state['counters'][coll]}"
            if op.kind == "job":
                values = {**values, "source": plan.targets[0]}
            self.state["records"][coll][key] = {**values, VERSION: 1}
            ref = _ref(coll, key)
            touched = [{"ref": ref, "version_before": 0, "version_after": 1}]
            if op.kind == "job":
                touched = [self._touch(plan.targets[0], {})] + touched
            return touched, ["effect"], {"ref": ref, "record": self.record(ref)}
        touched, realized = [], []
        for ref in (plan.targets if op.kind == "update" else parts):
            t = self._touch(ref, values)
            touched.append(t)
            if t["changed"]:
                realized.append("effect" if op.kind == "update" else ref)
        return touched, realized, {"refs": [t["ref"] for t in touched]}

    def _touch(self, ref: str, values: dict[str, Any]) -> dict[str, Any]:
        coll, key = ref.split("/", 1)
        rec = self.state["records"][coll][key]
        before = rec[VERSION]
        changed = any(rec.get(f) != v for f, v in values.items())
        if changed:
            rec.update(copy.deepcopy(values))
            rec[VERSION] = before + 1
        return {"ref": ref, "version_before": before, "version_after": rec[VERSION], "changed": changed}

    def _compensate(self, op: Operation, plan: Plan) -> None:
        target = plan.targets[0] if plan.targets else None
        for e in self.state["ledger"]:
            if e["op"] == op.compensates and any(t["ref"] == target for t in e["targets"]):
                e["compensated"] = True
