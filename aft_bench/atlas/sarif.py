"""The atlas as SARIF 2.1.0, the format code-scanning dashboards read: one result per server release and tool whose
re-issue after a lost answer shows a class the user names (or whose annotations the measurement contradicts), with
the evidence that decided it. A tool has no source line, so each result's location is logical: the package at its
release and the tool."""

from __future__ import annotations

import json
from typing import Any

from aft_bench import __version__
from aft_bench.atlas.dataset import verdicts
from aft_bench.common.canonical import digest

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
RULES = {
    "duplicate": ("error", "A call re-issued after its answer was lost made a second effect in the real state."),
    "false_failure": ("warning", "A call re-issued after its answer was lost made no second effect, but its answer "
                      "reported a failure although the first call's effect is there."),
    "silent_success": ("note", "A call re-issued after its answer was lost made no second effect and reported "
                       "success: a client cannot tell whether its call or an earlier one took effect."),
    "annotation": ("warning", "A tool's annotation (readOnlyHint, idempotentHint) disagrees with what its call did "
                   "to the real state."),
}
DEFAULT_CLASSES = ("duplicate", "false_failure", "annotation")


def _rule(rid: str) -> dict[str, Any]:
    level, text = RULES[rid]
    return {"id": rid, "name": rid.replace("_", "-"), "shortDescription": {"text": text.split(":")[0].rstrip(".")},
            "fullDescription": {"text": text}, "defaultConfiguration": {"level": level}}


def _location(cell: dict[str, Any], tool: str) -> dict[str, Any]:
    return {"logicalLocations": [{"name": tool, "fullyQualifiedName": f"{cell['package']}@{cell['release']}/{tool}",
                                  "kind": "function"}]}


def _evidence(tc: dict[str, Any]) -> str:
    bare = next((o for o in tc["outcomes"] if o["treatment"] == "bare"), {})
    return f"args {json.dumps(tc['args'], sort_keys=True, ensure_ascii=False)}; {bare.get('signal', '')}"


def sarif(cells: list[dict[str, Any]], classes: tuple[str, ...] = DEFAULT_CLASSES) -> dict[str, Any]:
    """The SARIF log of `cells` (in atlas order), one result per tool and release showing one of `classes`."""
    results = []
    for cell in cells:
        if cell["status"] != "measured":
            continue
        cards: dict[str, list[dict[str, Any]]] = {}
        for tc in cell["card"]["tools"]:
            cards.setdefault(tc["tool"], []).append(tc)
        for tool, v in verdicts(cell).items():
            if v["status"] != "measured":
                continue
            found = []
            if v["class"] in classes:
                found.append((v["class"], f"{tool} ({cell['package']} {cell['release']}): its re-issue after a lost "
                              f"answer is a {v['class'].replace('_', ' ')}. Evidence: "
                              + " | ".join(_evidence(tc) for tc in cards[tool])))
            said = sorted({x for tc in cards[tool] for x in tc["contradictions"]})
            if "annotation" in classes and said:
                found.append(("annotation", f"{tool} ({cell['package']} {cell['release']}): " + "; ".join(said)))
            for rid, text in found:
                results.append({
                    "ruleId": rid, "ruleIndex": list(RULES).index(rid), "level": RULES[rid][0],
                    "message": {"text": text}, "locations": [_location(cell, tool)],
                    "partialFingerprints": {"aftAtlas/v1": digest([cell["package"], tool, rid])[:32]},
                    "properties": {"server": cell["server"], "registry": cell["registry"],
                                   "release": cell["release"], "class": v["class"], "hints": v["hints"]}})
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": [{
        "tool": {"driver": {"name": "aft-bench atlas", "version": __version__,
                            "rules": [_rule(r) for r in RULES]}},
        "results": results,
        "properties": {"classes": list(classes)}}]}
