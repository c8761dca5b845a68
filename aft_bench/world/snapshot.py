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


def values(args: Any, path: str) -> list[Any]:
    """Every value a dotted argument path names (`a.*.b`: each item's b; `a.0.b`: the first item's)."""
    found = [args]
    for part in path.split("."):
        nxt: list[Any] = []
        for v in found:
            if part == "*" and isinstance(v, list):
                nxt += v
            elif isinstance(v, list) and part.isdigit() and int(part) < len(v):
                nxt.append(v[int(part)])
            elif isinstance(v, Mapping) and part in v:
                nxt.append(v[part])
        found = nxt
    return [x for v in found for x in (v if isinstance(v, list) else [v])]


def _one(args: Mapping[str, Any], path: str | None) -> Any:
    got = values(args, path) if path else []
    return got[0] if len(got) == 1 else None


def _keys(ident: Identity, args: Mapping[str, Any]) -> list[str] | None:
    if ident.key_arg is None:
        return None
    if isinstance(ident.key_arg, str):
        return [record_key(x) for x in values(args, ident.key_arg)]
    columns = [values(args, p) for p in ident.key_arg]
    return ["|".join(str(x) for x in row) for row in zip(*columns)]


def _matches(ident: Identity, rec: Mapping[str, Any], args: Mapping[str, Any]) -> bool:
    return all(rec.get(fld) == _one(args, arg) for fld, arg in ident.match.items())


def _names(key: str, want: str, recs: Mapping[str, Any]) -> bool:
    """Whether the snapshot key `key` is the record `want` or a repeat of it: a probe keeps a second record under
    one key as `want#2`, and only beside `want` itself. So a record whose own name ends in `#<digits>` (a branch
    `issue#12`) is itself, never a repeat of a record `issue` that is not there."""
    return key == want or (key.startswith(want + "#") and key[len(want) + 1:].isdigit() and want in recs)


def _field(ident: Identity, snap: Snapshot, args: Mapping[str, Any]) -> str | None:
    rec = records(snap, ident.collection).get(record_key(_one(args, ident.record_arg)))
    value = rec.get(ident.field or "") if isinstance(rec, Mapping) else None
    return value if isinstance(value, str) else None


def _text_count(ident: Identity, snap: Snapshot, args: Mapping[str, Any]) -> int:
    text = _one(args, ident.text_of)
    value = _field(ident, snap, args)
    return value.count(text) if isinstance(text, str) and text and value is not None else 0


MAX_EDITS = 8  # how many repetitions of one edit are looked for


def _edits_realized(ident: Identity, s0: Snapshot, s: Snapshot, args: Mapping[str, Any]) -> int:
    """k such that applying the call's replacements k times to the s0 text gives the text now (0 if none)."""
    before, after = _field(ident, s0, args), _field(ident, s, args)
    pairs = list(zip(values(args, ident.replace_old or ""), values(args, ident.replace_new or "")))
    if before is None or after is None or not pairs:
        return 0
    text = before
    for k in range(1, MAX_EDITS + 1):
        for old, new in pairs:
            if not isinstance(old, str) or not isinstance(new, str) or old not in text:
                return 0
            text = text.replace(old, new, 1)
        if text == after:
            return k
    return 0


def holds(ident: Identity, snap: Snapshot, args: Mapping[str, Any], s0: Snapshot | None = None) -> bool:
    """The call's effect is present in `snap` (an edit's against `s0`, the state it was made on)."""
    if ident.text_of is not None:
        return _text_count(ident, snap, args) > 0
    if ident.replace_old is not None:
        return s0 is not None and _edits_realized(ident, s0, snap, args) > 0
    recs = records(snap, ident.collection)
    keys = _keys(ident, args)
    if keys is not None:
        return bool(keys) and all(any(_names(k, want, recs) and _matches(ident, r, args) for k, r in recs.items())
                                  for want in keys)
    return any(_matches(ident, r, args) for r in recs.values())


def realized(ident: Identity, s0: Snapshot, s: Snapshot, args: Mapping[str, Any]) -> int:
    """How many times the call's effect was realized between s0 and s: new matching records (per key, for a key
    form), new appearances of the text, or repetitions of the edit."""
    if ident.text_of is not None:
        return max(0, _text_count(ident, s, args) - _text_count(ident, s0, args))
    if ident.replace_old is not None:
        return _edits_realized(ident, s0, s, args)
    old, new = records(s0, ident.collection), records(s, ident.collection)
    fresh = {k: r for k, r in new.items() if k not in old or old[k] != r}
    keys = _keys(ident, args)
    if keys is None:
        return sum(1 for r in fresh.values() if _matches(ident, r, args))
    return max((sum(1 for k, r in fresh.items() if _names(k, want, new) and _matches(ident, r, args))
                for want in keys), default=0)
