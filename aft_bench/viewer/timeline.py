"""A run's trace as a timeline: its hash chain verified against the recorded head, the events grouped into agent
turns, each invocation's stages, the faults planned / armed / fired, and the terminal state. A trace that fails
verification is reported as failed, with the events that could still be read, never repaired."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aft_bench.common.errors import TraceIntegrityError
from aft_bench.runtime.trace import Event, read_events, verify

SETUP_KINDS = ("run_start", "cell", "fault_planned")
ACTION_KINDS = ("tool_call", "program_submitted", "terminal")  # what the agent decided (one per turn)
PROGRAM_KINDS = ("program_submitted", "program_completed", "program_failed", "program_fallback", "program_rejected",
                 "program_output", "write_replayed")


def event_dict(e: Event) -> dict[str, Any]:
    data = dict(e.data)
    if e.kind == "terminal_state":  # the whole state is shown once, under "state"
        data = {"hash": data.get("hash"), "state": "(shown under terminal state)"}
    return {"seq": e.seq, "kind": e.kind, "data": data}


def load(path: Path, recorded_head: str | None) -> tuple[list[Event], dict[str, Any]]:
    """The trace's events and its verification: {ok, head, recorded_head, error}. Unreadable lines stop the
    read at the last good one; the verdict says why."""
    result: dict[str, Any] = {"ok": False, "head": None, "recorded_head": recorded_head, "error": None,
                              "path": str(path)}
    if not path.is_file():
        result["error"] = f"trace file missing: {path.name}"
        return [], result
    try:
        events = read_events(path)
    except TraceIntegrityError as exc:
        result["error"] = str(exc)
        return _readable_prefix(path), result
    try:
        result["head"] = verify(events, recorded_head, where=path.name)
        result["ok"] = True
    except TraceIntegrityError as exc:
        result["error"] = str(exc)
    return events, result


def _readable_prefix(path: Path) -> list[Event]:
    """The events before the first unreadable line of a damaged trace (shown, marked unverified)."""
    import json
    from types import MappingProxyType

    out: list[Event] = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            raw = json.loads(line)
            out.append(Event(raw["seq"], raw["kind"], MappingProxyType(raw["data"]), raw["prev"], raw["hash"]))
        except (ValueError, KeyError, TypeError):
            break
    return out


def turns(events: list[Event]) -> tuple[list[int], list[dict[str, Any]]]:
    """(setup event seqs, agent turns). A turn is the model calls behind one action, the action (a tool call,
    a program or the terminal decision) and every event it caused until the next turn begins."""
    setup: list[int] = []
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    for e in events:
        if cur is None and e.kind in SETUP_KINDS + ("surface",) and not out:
            setup.append(e.seq)
            continue
        starts = cur is None or (cur["action"] is not None and (e.kind == "model_call" or e.kind in ACTION_KINDS))
        if e.kind in ("terminal_state", "sealed"):
            starts = False
        if starts:
            cur = {"n": len(out) + 1, "action": None, "tool": None, "args": None, "events": [], "model_calls": [],
                   "invocations": [], "faults_fired": [], "tokens": 0, "cost_usd": 0.0, "latency_s": 0.0,
                   "retries": 0}
            out.append(cur)
        assert cur is not None
        cur["events"].append(e.seq)
        d = e.data
        if e.kind == "model_call":
            cur["model_calls"].append(e.seq)
            cur["tokens"] += int(d.get("prompt_tokens", 0) or 0) + int(d.get("completion_tokens", 0) or 0)
            cur["cost_usd"] += float(d.get("cost_usd") or 0.0)
            cur["latency_s"] += float(d.get("latency_s") or 0.0)
            cur["retries"] += int(d.get("retries", 0) or 0)
        elif e.kind in ACTION_KINDS and cur["action"] is None:
            cur["action"] = e.kind
            cur["tool"] = d.get("tool") if e.kind == "tool_call" else ("program" if e.kind == "program_submitted"
                                                                        else d.get("action"))
            cur["args"] = d.get("args") if e.kind == "tool_call" else dict(d)
            cur["seq"] = e.seq
        elif e.kind == "invocation":
            cur["invocations"].append(d.get("inv"))
        elif e.kind == "fault_fired":
            cur["faults_fired"].append(e.seq)
        elif e.kind == "stage" and d.get("stage") in ("RESPONSE_DELIVERED", "RESPONSE_DROPPED"):
            cur["result"] = {"stage": d.get("stage"), "response": d.get("response")}
    return setup, out


def invocations(events: list[Event]) -> list[dict[str, Any]]:
    """Each invocation with its request, its stages in order, its commit and the faults that touched it."""
    by: dict[str, dict[str, Any]] = {}
    for e in events:
        inv = e.data.get("inv") if isinstance(e.data.get("inv"), str) else None
        if e.kind == "invocation" and inv:
            by[inv] = {"inv": inv, "seq": e.seq, "op": e.data.get("op"), "args": e.data.get("args"),
                       "effect_id": e.data.get("effect_id"), "relation": e.data.get("relation"),
                       "request_id": e.data.get("request_id"), "guards": e.data.get("guards"),
                       "principal": e.data.get("principal"), "stages": [], "work_units": 0, "commits": [],
                       "faults": [], "events": [e.seq]}
            continue
        if inv is None or inv not in by:
            continue
        rec = by[inv]
        rec["events"].append(e.seq)
        if e.kind == "stage":
            rec["stages"].append({"stage": e.data.get("stage"), "seq": e.seq})
        elif e.kind == "work_unit":
            rec["work_units"] += 1
        elif e.kind in ("commit", "commit_replayed", "commit_rejected"):
            rec["commits"].append({"kind": e.kind, "seq": e.seq, "ledger_index": e.data.get("ledger_index")})
        elif e.kind in ("fault_armed", "fault_fired"):
            rec["faults"].append({"kind": e.kind, "seq": e.seq, "fault": e.data.get("fault"),
                                  "fault_kind": e.data.get("kind")})
    return list(by.values())


def faults(events: list[Event]) -> list[dict[str, Any]]:
    """Every planned fault with the events that armed and fired it (None when it never did)."""
    out: dict[Any, dict[str, Any]] = {}
    for e in events:
        if e.kind == "fault_planned":
            out[e.data.get("fault")] = {"fault": e.data.get("fault"), "kind": e.data.get("kind"),
                                        "op": e.data.get("op"), "stage": e.data.get("stage"),
                                        "occurrence": e.data.get("occurrence"), "unit": e.data.get("unit"),
                                        "planned": e.seq, "armed": None, "fired": None, "inv": None}
        elif e.kind in ("fault_armed", "fault_fired") and e.data.get("fault") in out:
            rec = out[e.data.get("fault")]
            key = "armed" if e.kind == "fault_armed" else "fired"
            if rec[key] is None:
                rec[key] = e.seq
                rec["inv"] = rec["inv"] or e.data.get("inv")
    return list(out.values())


def terminal_state(events: list[Event]) -> dict[str, Any] | None:
    for e in reversed(events):
        if e.kind == "terminal_state":
            return dict(e.data.get("state") or {})
    return None


def extras(events: list[Event], row: dict[str, Any]) -> dict[str, Any]:
    """What served and program runs add: the MCP client and its late calls; programs, attempts, replays."""
    out: dict[str, Any] = {}
    if row.get("client") is not None or row.get("agent") == "mcp":
        terminal = next((e.seq for e in events if e.kind == "terminal"), None)
        late = [e.seq for e in events if e.kind == "tool_call" and terminal is not None and e.seq > terminal]
        late += [e.seq for e in events if e.kind in ("late_call", "tool_error") and "late" in str(dict(e.data))]
        out["served"] = {"client": row.get("client"), "late_calls": sorted(set(late))}
    programs = [e for e in events if e.kind in PROGRAM_KINDS]
    if programs or row.get("mode") in ("program", "fallback"):
        out["program"] = {"mode": row.get("mode"), "program_attempts": row.get("program_attempts"),
                          "replayed_writes": row.get("replayed_writes"), "fallbacks": row.get("fallbacks"),
                          "virtual_latency_s": row.get("virtual_latency_s"), "round_trips": row.get("round_trips"),
                          "events": [e.seq for e in programs],
                          "sources": [{"seq": e.seq, "source": e.data.get("source"), "chars": e.data.get("chars"),
                                       "attempt": e.data.get("attempt")}
                                      for e in programs if e.kind == "program_submitted"]}
    return out
