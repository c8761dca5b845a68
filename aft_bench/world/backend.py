"""The backend: executes a world's operations on a store (in-memory dict or SQLite); knows nothing of interfaces.

It offers effect semantics as optional guards on a commit (idempotency key, expected version, authority at
the commit point); whoever calls it decides whether to use them. It always records the truth of every commit
(effect identity, authority at commit, versions crossed) in a ledger that is part of its state.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

from aft_bench.common.canonical import canonical_pair, digest
from aft_bench.common.jsoncopy import deep_copy
from aft_bench.world.manifest import VERSION, Operation, World
from aft_bench.world.store import MemoryStore, Store

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
class ResolvedOp:
    """A resolved operation: which records it touches, its parts and how much work it takes."""

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


class _Rejected(Exception):
    """Raised inside a commit transaction to roll it back with a rejection outcome."""

    def __init__(self, outcome: CommitOutcome) -> None:
        self.outcome = outcome


class Backend:
    """A world's operations over a store (in-memory dict or SQLite); `reset` restores s0 exactly.

    The backend knows nothing of interfaces: effect semantics are optional guards on `commit`, and it
    always records the truth of every commit (effect identity, authority at commit, versions crossed)
    in a ledger that is part of its state.
    """

    def __init__(self, world: World, overrides: dict[str, Any] | None = None, store: Store | None = None) -> None:
        self.world = world
        self._overrides = deep_copy(overrides)
        self.store: Store = store if store is not None else MemoryStore()
        self.reset()

    # -- state ---------------------------------------------------------------------------
    def reset(self) -> None:
        s0 = self.world.initial_state(self._overrides)
        self.s0_hash = digest(s0)  # equal to state_hash() right after loading, without reading the store back
        self.store.load(s0)

    def reopen(self) -> None:
        """Drop every in-process handle on the store and open it again (process-local state loss)."""
        self.store.reopen()

    @property
    def state(self) -> dict[str, Any]:
        """The whole state as a dict (live for the memory store, a snapshot for SQLite)."""
        return self.store.view()

    def snapshot(self) -> dict[str, Any]:
        """A detached copy of the state (a JSON round trip: the state is plain JSON data)."""
        return canonical_pair(self.store.view())[1]

    def state_hash(self) -> str:
        return hashlib.sha256(self.store.snapshot_text().encode("utf-8")).hexdigest()

    def snapshot_and_hash(self) -> tuple[dict[str, Any], str, str]:
        """Terminal state, its canonical JSON text and that text's hash, from one serialization."""
        text, state = canonical_pair(self.store.view())  # what snapshot_text() is, and a copy parsed from it
        return state, text, hashlib.sha256(text.encode("utf-8")).hexdigest()

    def record(self, ref: str) -> dict[str, Any] | None:
        coll, key = ref.split("/", 1)
        return self.store.get(coll, key)

    def authorized(self, principal: str, permission: str) -> bool:
        return permission in self.store.permissions(principal)

    # -- resolving ------------------------------------------------------------------------
    def operation(self, op_name: str) -> Operation:
        op = self.world.operations.get(op_name)
        if op is None:
            raise BackendError("unknown_operation", op_name)
        return op

    def resolve(self, op_name: str, args: dict[str, Any]) -> ResolvedOp:
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
        targets: tuple[str, ...] = ()
        parts: tuple[str, ...] = ("effect",)
        units = op.work_units
        if op.key is not None:
            key = args[op.key]
            rec = self.store.get(op.collection, key) if isinstance(key, str) else None
            if rec is None:
                raise BackendError("not_found", _ref(op.collection, str(key)))
            targets = (_ref(op.collection, key),)
            if op.work_units_field is not None:
                units = int(rec.get(op.work_units_field, units))
        if op.kind == "update_many":
            where = self._bind(op.where, args)
            keys = [k for k, r in self.store.scan(op.collection) if all(r.get(f) == v for f, v in where.items())]
            if not keys:
                raise BackendError("not_found", f"no {op.collection} record matches {where}")
            targets = tuple(_ref(op.collection, k) for k in keys)
            parts = targets
        return ResolvedOp(op_name, dict(args), business, targets, parts, units)

    @staticmethod
    def _bind(template: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
        return {f: (args[v[1:]] if isinstance(v, str) and v.startswith("$") else v) for f, v in template.items()}

    # -- reads ---------------------------------------------------------------------------
    def read(self, resolved: ResolvedOp) -> dict[str, Any]:
        """Execute a READ: one record (`read`) or the records matching `where` (`list`)."""
        op = self.operation(resolved.op_name)
        if op.kind == "read":
            return {"record": self.record(resolved.targets[0]), "ref": resolved.targets[0]}
        where = self._bind(op.where, resolved.args)
        found = [
            {"ref": _ref(op.collection, k), **deep_copy(r)}
            for k, r in self.store.scan(op.collection)
            if all(r.get(f) == v for f, v in where.items())
        ]
        return {"records": found}

    def evidence(self, resolved: ResolvedOp) -> dict[str, Any]:
        """Authoritative state evidence for a write's own postcondition: do its intended values hold now?

        State-level only: it says whether a matching record exists, not which invocation made it.
        """
        op = self.operation(resolved.op_name)
        values = self._bind(op.set, resolved.args)
        if not op.is_write:
            return {"holds": True, "parts_done": 0, "parts_total": 0}
        if op.kind in ("create", "job"):
            coll = op.creates or op.collection
            want = {**values, "source": resolved.targets[0]} if op.kind == "job" else values
            found = any(all(r.get(f) == v for f, v in want.items()) for _, r in self.store.scan(coll))
            return {"holds": found, "parts_done": int(found), "parts_total": 1}
        done = sum(1 for ref in resolved.targets if all((self.record(ref) or {}).get(f) == v for f, v in values.items()))
        return {"holds": done == len(resolved.targets), "parts_done": done, "parts_total": len(resolved.targets)}

    def key_committed(self, key: str) -> bool:
        """Effect-level evidence: has a write under this idempotency key committed?"""
        return self.store.by_key(key) is not None

    # -- faults acting on the world (called by the harness, never by an agent) -------------
    def concurrent_write(self, ref: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Another writer changes a record: fields set, version bumped. Not an agent effect."""
        coll, key = ref.split("/", 1)
        with self.store.transaction():
            before, after, _ = self.store.write(coll, key, fields, force=True)  # type: ignore[misc]
        return {"ref": ref, "version_before": before, "version_after": after}

    def revoke(self, principal: str, permission: str) -> None:
        with self.store.transaction():
            self.store.revoke(principal, permission)

    # -- writes --------------------------------------------------------------------------
    def commit(
        self,
        resolved: ResolvedOp,
        *,
        effect_id: str,
        invocation: str,
        principal: str,
        guards: Guards = Guards(),
        parts_limit: int | None = None,
    ) -> CommitOutcome:
        """The commit point of a WRITE: one transaction that checks the requested guards, applies the effect
        and appends it to the ledger. Its commit is the EFFECT_COMMITTED stage."""
        try:
            with self.store.transaction():
                return self._commit(resolved, effect_id, invocation, principal, guards, parts_limit)
        except _Rejected as r:
            return r.outcome

    def _commit(self, resolved: ResolvedOp, effect_id: str, invocation: str, principal: str, guards: Guards,
                parts_limit: int | None) -> CommitOutcome:
        op = self.operation(resolved.op_name)
        key = guards.idempotency_key
        if key is not None:
            prior = self.store.by_key(key)
            if prior is not None:
                prior = deep_copy(prior)
                raise _Rejected(CommitOutcome("replayed", prior, "idempotency key already committed", prior["result"]))
        authorized = self.authorized(principal, op.permission)
        if guards.authority_at_commit and not authorized:
            raise _Rejected(CommitOutcome("unauthorized", None, f"{principal} lacks {op.permission} at commit"))
        parts = resolved.parts if parts_limit is None else resolved.parts[:parts_limit]
        targets, realized, result = self._apply(op, resolved, parts, guards.expected_version)
        entry = {
            "index": len(self.store.ledger()),
            "effect_id": effect_id,
            "op": resolved.op_name,
            "effect": op.effect,
            "business_args": resolved.business_args,
            "invocation": invocation,
            "principal": principal,
            "authorized": authorized,
            "idempotency_key": key,
            "targets": targets,
            "parts_total": len(resolved.parts),
            "parts_realized": realized,
            "compensated": False,
            "result": result,
        }
        self.store.append(entry)
        if op.compensates is not None and op.key is not None and resolved.targets:
            self.store.compensate(op.compensates, resolved.targets[0])
        return CommitOutcome("committed", deep_copy(entry), "", deep_copy(result))

    def _apply(self, op: Operation, resolved: ResolvedOp, parts: tuple[str, ...],
               expected_version: int | None) -> tuple[list, list, dict]:
        """Apply the primitive; returns (targets with versions, effect parts realized, result)."""
        values = self._bind(op.set, resolved.args)
        if op.kind in ("create", "job"):
            coll = op.creates or op.collection
            key = f"{op.key_prefix}{self.store.bump_counter(coll)}"
            if op.kind == "job":
                values = {**values, "source": resolved.targets[0]}
            self.store.insert(coll, key, {**values, VERSION: 1})
            ref = _ref(coll, key)
            touched = [{"ref": ref, "version_before": 0, "version_after": 1}]
            if op.kind == "job":
                touched = [self._touch(resolved.targets[0], {}, None)] + touched
            return touched, ["effect"], {"ref": ref, "record": self.record(ref)}
        touched, realized = [], []
        for ref in (resolved.targets if op.kind == "update" else parts):
            t = self._touch(ref, values, expected_version if op.kind == "update" else None)
            touched.append(t)
            if t["changed"]:
                realized.append("effect" if op.kind == "update" else ref)
        return touched, realized, {"refs": [t["ref"] for t in touched]}

    def _touch(self, ref: str, values: dict[str, Any], expected_version: int | None) -> dict[str, Any]:
        coll, key = ref.split("/", 1)
        out = self.store.write(coll, key, values, expected_version)
        if out is None:
            current = (self.store.get(coll, key) or {}).get(VERSION)
            raise _Rejected(CommitOutcome("precondition_failed", None,
                                          f"{ref} is at version {current}, expected {expected_version}"))
        before, after, changed = out
        return {"ref": ref, "version_before": before, "version_after": after, "changed": changed}


def MemoryBackend(world: World, overrides: dict[str, Any] | None = None) -> Backend:  # noqa: N802
    """The in-memory resettable backend (a Backend over a MemoryStore)."""
    return Backend(world, overrides)
