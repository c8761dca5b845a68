"""Who re-issued a call in a served episode: the model (a new turn asked for it) or the client framework (it sent
the call again on its own, with no model turn between). Read from what two processes wrote with the machine's
one monotonic clock: the served episode's wire log (`wire/<run_id>.jsonl`: every tools/call as it arrived) and
the offline model's log (`fake-llm.jsonl`: every request and reply), and from the episode's trace, which says
what each call changed in the real state."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

from aft_bench.common.canonical import canonical_json
from aft_bench.runtime.trace import read_events


@dataclass(frozen=True)
class ModelCall:
    """A tool call the model asked for in one reply (`t`: when the reply was made)."""

    t: float
    call_id: str
    tool: str
    args: Any


@dataclass(frozen=True)
class WireCall:
    """One tools/call as the served episode received it, and who made it."""

    n: int
    t: float
    tool: str
    args: Any
    by: str  # "model": a model call not yet sent asked for it; "framework": none did
    call_id: str | None  # the model call it carries (the one a framework re-issue repeats)
    repeats: int | None  # the earlier wire call it repeats (same tool and call), if any
    after_s: float | None  # seconds since the call it repeats was sent
    identical: bool | None  # the same arguments as the call it repeats
    changed: bool | None  # whether it changed the real state (None: it reached no server or is not traced)


def model_calls(log: Iterable[dict[str, Any]]) -> list[ModelCall]:
    """Every tool call in the model's replies (chat completions), oldest first."""
    out = []
    for rec in log:
        reply = rec.get("reply") or {}
        for choice in reply.get("choices") or []:
            for call in (choice.get("message") or {}).get("tool_calls") or []:
                fn = call.get("function") or {}
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except ValueError:
                    args = fn.get("arguments")
                out.append(ModelCall(float(rec["t"]), str(call.get("id")), str(fn.get("name")), args))
    return sorted(out, key=lambda m: m.t)


def told(log: Iterable[dict[str, Any]], call_id: str, since: float = float("-inf")) -> str | None:
    """What the model was first shown, after `since` (when the call was sent), as the result of its call `call_id`
    (None: never shown). `since` keeps a neighbour tuple's call of the same id (ids start again per tuple) out."""
    for rec in sorted((r for r in log if float(r.get("t", 0.0)) > since), key=lambda r: float(r.get("t", 0.0))):
        request = rec.get("request")
        for m in (request.get("messages") or []) if isinstance(request, dict) else []:
            if m.get("role") == "tool" and m.get("tool_call_id") == call_id:
                content = m.get("content")
                if isinstance(content, list):
                    content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
                return str(content)
    return None


def attribute(wire: list[dict[str, Any]], calls: list[ModelCall], changed: dict[int, bool] | None = None
              ) -> list[WireCall]:
    """Each wire call's maker: the oldest model call of that tool made before it and not yet sent is the model's;
    a wire call with none left is the framework's, a repeat of the last wire call that carried that tool."""
    taken: set[str] = set()
    last: dict[str, WireCall] = {}
    out: list[WireCall] = []
    for w in sorted(wire, key=lambda w: (float(w["t"]), int(w["n"]))):
        t, tool, args = float(w["t"]), str(w["tool"]), w.get("args")
        mine = next((m for m in calls if m.t <= t and m.tool == tool and m.call_id not in taken), None)
        prior = last.get(tool)
        if mine is not None:
            taken.add(mine.call_id)
            same = prior is not None and canonical_json(prior.args) == canonical_json(args)
            call = WireCall(int(w["n"]), t, tool, args, "model", mine.call_id, prior.n if same and prior else None,
                            round(t - prior.t, 3) if same and prior else None, True if same else None,
                            (changed or {}).get(int(w["n"])))
        else:
            call = WireCall(int(w["n"]), t, tool, args, "framework", prior.call_id if prior else None,
                            prior.n if prior else None, round(t - prior.t, 3) if prior else None,
                            canonical_json(prior.args) == canonical_json(args) if prior else None,
                            (changed or {}).get(int(w["n"])))
        last[tool] = call
        out.append(call)
    return out


def changes_by_wire(wire: list[dict[str, Any]], trace: Path) -> dict[int, bool]:
    """For each wire call that reached the real server, whether it changed the state: the k-th wire call of a tool
    is the k-th invocation of it the gateway traced (a call the interface refused never reaches it)."""
    events = read_events(trace)
    invs: dict[str, list[str]] = {}
    effects: dict[str, bool] = {}
    for e in events:
        if e.kind == "invocation":
            invs.setdefault(str(e.data.get("tool")), []).append(str(e.data.get("inv")))
        elif e.kind == "effect":
            effects[str(e.data.get("inv"))] = any(any(d.get(k) for k in ("added", "removed", "changed"))
                                                  for d in (e.data.get("changes") or {}).values())
    seen: dict[str, int] = {}
    out: dict[int, bool] = {}
    for w in sorted(wire, key=lambda w: int(w["n"])):
        tool = str(w["tool"])
        k = seen.get(tool, 0)
        seen[tool] = k + 1
        if k < len(invs.get(tool, [])) and invs[tool][k] in effects:
            out[int(w["n"])] = effects[invs[tool][k]]
    return out


def shares(wires: list[list[dict[str, Any]]], log: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Each tuple's share of a model log that tuples played one after another wrote together: what lies after the
    last wire call of the tuple before it and before the first wire call of the tuple after it (a tuple's call ids,
    `call_1` and so on, start again in the next one, so a record of another tuple would be taken for its own)."""
    order = sorted(range(len(wires)), key=lambda i: float(wires[i][0]["t"]) if wires[i] else float("inf"))
    out: list[list[dict[str, Any]]] = [[] for _ in wires]
    for k, i in enumerate(order):
        if not wires[i]:
            continue
        lo = float(wires[order[k - 1]][-1]["t"]) if k and wires[order[k - 1]] else float("-inf")
        hi = float(wires[order[k + 1]][0]["t"]) if k + 1 < len(order) and wires[order[k + 1]] else float("inf")
        out[i] = [r for r in log if lo < float(r["t"]) < hi]
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def summary(calls: list[WireCall], log: list[dict[str, Any]]) -> dict[str, Any]:
    """A tuple's re-issues: how many by the framework and by the model, after how long, with the same arguments,
    the state changes the framework's caused, and what the model was shown for each call that was sent again (the
    framework's re-send answered, or the timeout that made the model ask again; None: it was shown nothing)."""
    framework = [c for c in calls if c.by == "framework"]
    model = [c for c in calls if c.by == "model" and c.repeats is not None]
    by_n = {c.n: c for c in calls}
    repeated = {by_n[c.repeats].call_id for c in model if c.repeats in by_n}  # what the model saw before asking again
    resent = sorted({c.call_id for c in framework} | repeated - {None})
    return {"wire_calls": len(calls), "framework_reissues": len(framework), "model_reissues": len(model),
            "framework_after_s": [c.after_s for c in framework],
            "framework_identical": all(c.identical for c in framework) if framework else None,
            "framework_changes": sum(1 for c in framework if c.changed),
            "model_told": {cid: told(log, cid, min(c.t for c in calls if c.call_id == cid)) for cid in resent},
            "calls": [asdict(c) for c in calls]}
