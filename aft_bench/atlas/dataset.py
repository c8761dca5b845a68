"""The atlas's dataset, read from its recorded cells alone: one row per server × release × tool × example ×
treatment (a tool or a release that could not be measured is one row, untestable, with its reason), each tool's
verdict per release (its bare class, the truth of each annotation the measurement speaks to), and the drift: the
releases where a tool's verdict changed. Nothing here reads a clock or the order cells were measured in, so a
resumed atlas gives the same bytes as an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from aft_bench.scorecard.card import MEASURED_HINTS

# a tool with several examples shows its worst: the order a client would fix them in
WORST = ("duplicate", "false_failure", "silent_success", "safe", "no_effect")
WRITING = ("duplicate", "false_failure", "silent_success", "safe")  # the bare classes of a call that changed state


def load_cells(out: Path, planned: Iterable[tuple[str, str, int, str]], version: int) -> list[dict[str, Any]]:
    """The recorded cells of `planned` (server, release, its place in version order, the entry's key), in atlas
    order; a cell not recorded, or recorded by another entry or record shape, is left out (the caller says how
    many are recorded)."""
    cells = []
    for server, release, order, key in planned:
        p = out / "cells" / server / f"{release}.json"
        try:
            rec = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and rec.get("cell") == version and rec.get("entry") == key:
            cells.append({**rec, "order": order})
    return cells


def _bare(tool_card: dict[str, Any]) -> dict[str, Any] | None:
    return next((o for o in tool_card["outcomes"] if o["treatment"] == "bare"), None)


def hint_truth(tool_cards: list[dict[str, Any]]) -> dict[str, str]:
    """Per measured hint: `contradicted` (an example's behaviour disagrees), `undeclared` (the server leaves it
    out: MCP's default applies), `true` (declared, and the behaviour agrees), or `unmeasured` (no example changed
    the state)."""
    out = {}
    for hint in MEASURED_HINTS:
        said = [c for c in tool_cards if (_bare(c) or {}).get("cls") in WRITING]
        if not said:
            out[hint] = "unmeasured"
        elif any(x.startswith(f"{hint}=") for c in said for x in c["contradictions"]):
            out[hint] = "contradicted"
        elif any(hint in c["undeclared"] for c in said):
            out[hint] = "undeclared"
        else:
            out[hint] = "true"
    return out


def verdicts(cell: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each tool of a cell: its status, its class (the worst bare class of its examples) and its hints' truth."""
    out: dict[str, dict[str, Any]] = {}
    by_tool: dict[str, list[dict[str, Any]]] = {}
    for tc in (cell.get("card") or {}).get("tools", []):
        by_tool.setdefault(tc["tool"], []).append(tc)
    for name, st in cell.get("tools", {}).items():
        cards = by_tool.get(name, [])
        classes = [(_bare(c) or {}).get("cls", "unmeasured") for c in cards]
        cls = min(classes, key=lambda c: WORST.index(c) if c in WORST else len(WORST)) if classes else None
        out[name] = {"status": st["status"], "reason": st["reason"], "class": cls if st["status"] == "measured"
                     else None, "hints": hint_truth(cards) if st["status"] == "measured" else {},
                     "annotations": dict(cards[0]["annotations"]) if cards else {}}
        claim = (cell.get("claims") or {}).get(name)
        if claim is not None:
            out[name]["claim"] = {**claim, "truth": claim_truth(claim, out[name]["class"])}
    return out


def claim_truth(claim: dict[str, Any], cls: str | None) -> str:
    """A documented idempotency claim against the bare class: a duplicate contradicts `idempotent = true`, any
    other writing class contradicts `idempotent = false`; no write measured checks nothing."""
    if cls not in WRITING:
        return "unmeasured"
    return "contradicted" if (cls == "duplicate") == bool(claim["idempotent"]) else "consistent"


def rows(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The dataset's rows, in atlas order (server, release by publication, tool, example, treatment)."""
    out = []
    for cell in cells:
        head = {"server": cell["server"], "registry": cell["registry"], "package": cell["package"],
                "release": cell["release"]}
        if cell["status"] != "measured":
            out.append({**head, "tool": None, "example": None, "treatment": None, "status": "untestable",
                        "reason": cell["reason"], "class": None, "signal": None, "annotations": None,
                        "contradictions": [], "undeclared": []})
            continue
        card_tools = {}
        for tc in cell["card"]["tools"]:
            card_tools.setdefault(tc["tool"], []).append(tc)
        for name, st in cell["tools"].items():
            if st["status"] != "measured":
                out.append({**head, "tool": name, "example": None, "treatment": None, "status": "untestable",
                            "reason": st["reason"], "class": None, "signal": None, "annotations": None,
                            "contradictions": [], "undeclared": []})
                continue
            for tc in card_tools.get(name, []):
                for o in tc["outcomes"]:
                    out.append({**head, "tool": name, "example": tc["example"], "treatment": o["treatment"],
                                "status": "measured", "reason": "", "class": o["cls"], "signal": o["signal"],
                                "annotations": tc["annotations"], "contradictions": list(tc["contradictions"]),
                                "undeclared": list(tc["undeclared"])})
    return out


def drift(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per server and tool, each step between the consecutive releases where the tool was measured (a release
    where it was untestable is stepped over, not a break) where its class or a hint's truth changed:
    {server, tool, from, to, what, old, new}, in atlas order."""
    seen: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
    out = []
    for c in sorted(cells, key=lambda c: (c["server"], c["order"])):
        if c["status"] != "measured":
            continue
        for tool, v in sorted(verdicts(c).items()):
            if v["status"] != "measured":
                continue
            last = seen.get((c["server"], tool))
            seen[(c["server"], tool)] = (c["release"], v)
            if last is None:
                continue
            step = {"server": c["server"], "tool": tool, "from": last[0], "to": c["release"]}
            if last[1]["class"] != v["class"]:
                out.append({**step, "what": "class", "old": last[1]["class"], "new": v["class"]})
            for hint in MEASURED_HINTS:
                ha, hb = last[1]["hints"].get(hint), v["hints"].get(hint)
                if ha != hb:
                    out.append({**step, "what": hint, "old": ha, "new": hb})
    order = {s: i for i, s in enumerate(dict.fromkeys(c["server"] for c in cells))}
    return sorted(out, key=lambda d: order[d["server"]])


def findings(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The atlas's table, over each server's newest measured release: writing tools by bare class, those untestable,
    and each hint's truth among the writing tools."""
    newest: dict[str, dict[str, Any]] = {}
    for c in cells:
        if c["status"] == "measured" and (c["server"] not in newest or c["order"] > newest[c["server"]]["order"]):
            newest[c["server"]] = c
    classes = dict.fromkeys(WRITING, 0)
    hints = {h: {"contradicted": 0, "undeclared": 0, "true": 0} for h in MEASURED_HINTS}
    untestable = 0
    claims: list[dict[str, Any]] = []
    for c in newest.values():
        for tool, v in verdicts(c).items():
            if "claim" in v:
                claims.append({"server": c["server"], "release": c["release"], "tool": tool, **v["claim"],
                               "class": v["class"]})
            if v["status"] != "measured":
                untestable += 1
            elif v["class"] in WRITING:
                classes[v["class"]] += 1
                for h in MEASURED_HINTS:
                    if v["hints"][h] in hints[h]:
                        hints[h][v["hints"][h]] += 1
    return {"servers": len({c["server"] for c in cells}), "measured_servers": len(newest),
            "cells": len(cells), "measured_cells": sum(1 for c in cells if c["status"] == "measured"),
            "writing_tools": sum(classes.values()), "classes": classes, "untestable_tools": untestable,
            "hints": hints, "claims": claims}
