"""Per server: a badge document in the shields.io endpoint shape (its newest measured release's worst re-issue
class), and the annotation evidence a store review asks for (each hint the server declares, or leaves out, beside
the behaviour observed and the state change that witnesses it)."""

from __future__ import annotations

from typing import Any

from aft_bench.atlas.dataset import WORST, verdicts
from aft_bench.scorecard.card import MEASURED_HINTS

COLORS = {"duplicate": "red", "false_failure": "orange", "silent_success": "yellow", "safe": "brightgreen",
          "no_effect": "lightgrey"}


def newest(cells: list[dict[str, Any]]) -> dict[str, Any] | None:
    measured = [c for c in cells if c["status"] == "measured"]
    return max(measured, key=lambda c: c["order"]) if measured else None


def badge(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """shields.io's endpoint document for one server's cells."""
    cell = newest(cells)
    if cell is None:
        return {"schemaVersion": 1, "label": "lost-answer re-issue", "message": "untestable", "color": "lightgrey"}
    counts: dict[str, int] = {}
    for v in verdicts(cell).values():
        if v["status"] == "measured" and v["class"] != "no_effect":
            counts[v["class"]] = counts.get(v["class"], 0) + 1
    if not counts:
        return {"schemaVersion": 1, "label": "lost-answer re-issue", "message": f"{cell['release']}: no write measured",
                "color": "lightgrey"}
    rank = {c: i for i, c in enumerate(WORST)}  # a class this code does not know (a redacted one) ranks last
    shown = [f"{n} {c.replace('_', ' ')}" for c, n in sorted(counts.items(), key=lambda x: (rank.get(x[0], 99), x[0]))]
    worst = min(counts, key=lambda c: (rank.get(c, 99), c))
    return {"schemaVersion": 1, "label": "lost-answer re-issue", "message": f"{cell['release']}: {', '.join(shown)}",
            "color": COLORS.get(worst, "lightgrey")}


def _observed(o: dict[str, Any]) -> str:
    if o["cls"] == "no_effect":
        return "the call changed nothing in the state"
    again = "the re-issue made a second effect" if o["cls"] == "duplicate" else "the re-issue made no second effect"
    return f"the call changed the state; {again}"


def evidence(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Each measured tool of the newest measured release: per hint the server's word (or its absence), the behaviour
    observed and the state changes that witness it (what the lost call changed, what the re-issue changed)."""
    cell = newest(cells)
    if cell is None:
        return {"server": cells[0]["server"] if cells else None, "release": None, "tools": []}
    tools = []
    said = verdicts(cell)
    for tc in cell["card"]["tools"]:
        bare = next((o for o in tc["outcomes"] if o["treatment"] == "bare"), None)
        if bare is None:
            continue
        hints = []
        for hint in MEASURED_HINTS:
            declared = tc["annotations"].get(hint)
            contradicted = any(x.startswith(f"{hint}=") for x in tc["contradictions"])
            truth = ("unmeasured" if bare["cls"] == "no_effect" and hint == "idempotentHint" else
                     "contradicted" if contradicted else "undeclared" if declared is None else "consistent")
            hints.append({"hint": hint, "declared": declared, "truth": truth})
        tools.append({"tool": tc["tool"], "example": tc["example"], "args": tc["args"], "hints": hints,
                      "class": bare["cls"], "observed": _observed(bare), "signal": bare["signal"],
                      "effect": bare["effect"], "reissue_changes": bare["changes"],
                      **({"claim": said[tc["tool"]]["claim"]} if "claim" in said.get(tc["tool"], {}) else {})})
    return {"server": cell["server"], "package": cell["package"], "release": cell["release"],
            "measured": "each example on a fresh server and folder: the call with its answer lost, then re-issued "
                        "byte for byte; the state read by the world's probe, never from the server's answers",
            "tools": tools, "untestable": {n: s["reason"] for n, s in said.items()
                                          if s["status"] != "measured"}}
