"""Pure functions over an external world's snapshots: what changed between two, whether a tool call's effect
holds in one, and how many times it was realized since s0. The gateway's verification and the judge's labels
both read effects this way, so the answer an agent can ask for and the label it is judged by cannot drift."""

from __future__ import annotations

from typing import Any, Mapping

from aft_bench.world.external import WORKSPACE, Identity

Snapshot = Mapping[str, Any]


def records(snap: Snapshot, collection: str) -> Mapping[str, Any]:
    return (snap.get("records") or {}).get(collection) or {}


def diff(before: Snapshot, after: Snapshot) -> dict[str, dict[str, list[str]]]:
    """Per collection, the record keys added, removed and changed (only collections with a change)."""
    out: dict[str, dict[str, list[str]]] = {}
    colls = set(before.get("records") or {}) | set(after.get("records") or {})
    for coll in sorted(colls):
        a, b = records(before, coll), records(after, coll)
        added = sorted(set(b) - set(a))
        removed = sorted(set(a) - set(b))
        changed = sorted(k for k in set(a) & set(b) if a[k] != b[k])
        if added or removed or changed:
            out[coll] = {"added": added, "removed": removed, "changed": changed}
    return out


ROOT_MARK = WORKSPACE + "/"


def record_key(value: Any) -> str:
    """An argument naming a record, as the snapshot keys it: a path inside the resource becomes relative."""
    text = str(value)
    return text[len(ROOT_MARK):] if text.startswith(ROOT_MARK) else text


def _keys(ident: Identity, args: Mapping[str, Any]) -> list[str] | None:
    if ident.key_arg is None:
        return None
    v = args.get(ident.key_arg)
    return [record_key(x) for x in v] if isinstance(v, list) else [record_key(v)]


def _matches(ident: Identity, rec: Mapping[str, Any], args: Mapping[str, Any]) -> bool:
    return all(rec.get(fld) == args.get(arg) for fld, arg in ident.match.items())


def _base(key: str) -> str:
    """A probe keeps a second record under the same key as `key#2`: the key it repeats."""
    head, sep, tail = key.rpartition("#")
    return head if sep and tail.isdigit() else key


def _text_count(ident: Identity, snap: Snapshot, args: Mapping[str, Any]) -> int:
    text = args.get(ident.text_of or "")
    rec = records(snap, ident.collection).get(record_key(args.get(ident.record_arg or "")))
    if not isinstance(text, str) or not text or not isinstance(rec, Mapping):
        return 0
    value = rec.get(ident.field or "")
    return value.count(text) if isinstance(value, str) else 0


def holds(ident: Identity, snap: Snapshot, args: Mapping[str, Any]) -> bool:
    """The call's effect is present in `snap`."""
    if ident.text_of is not None:
        return _text_count(ident, snap, args) > 0
    recs = records(snap, ident.collection)
    keys = _keys(ident, args)
    if keys is not None:
        return all(any(_base(k) == want and _matches(ident, r, args) for k, r in recs.items()) for want in keys)
    return any(_matches(ident, r, args) for r in recs.values())


def realized(ident: Identity, s0: Snapshot, s: Snapshot, args: Mapping[str, Any]) -> int:
    """How many times the call's effect was realized between s0 and s: new matching records (per key, for a key
    form), or new appearances of the text."""
    if ident.text_of is not None:
        return max(0, _text_count(ident, s, args) - _text_count(ident, s0, args))
    old, new = records(s0, ident.collection), records(s, ident.collection)
    fresh = {k: r for k, r in new.items() if k not in old or old[k] != r}
    keys = _keys(ident, args)
    if keys is None:
        return sum(1 for r in fresh.values() if _matches(ident, r, args))
    return max((sum(1 for k, r in fresh.items() if _base(k) == want and _matches(ident, r, args))
                for want in keys), default=0)
