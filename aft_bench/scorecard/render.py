"""A scorecard as a terminal table, Markdown and JSON; two scorecards (two versions of one server) compared; and
the classes a CI gate fails on."""

from __future__ import annotations

import json
from typing import Any

LABEL = {"duplicate": "DUPLICATE", "false_failure": "false failure", "silent_success": "silent success",
         "safe": "safe", "no_effect": "no effect (example broken?)", "unmeasured": "unmeasured (no identity)"}
FAIL_ON = ("duplicate", "false-failure", "silent-success", "annotation")


def _text(answer: dict[str, Any] | None, width: int = 60) -> str:
    if answer is None:
        return "(not sent to the server)"
    text = " ".join(str(b.get("text", "")) for b in answer.get("content", []) if b.get("type") == "text")
    text = " ".join(text.split())
    mark = "isError " if answer.get("isError") else ""
    return mark + (repr(text[:width] + ("..." if len(text) > width else "")))


def rows(card: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per tool example: its classes per treatment, its evidence, its annotations' verdict."""
    out = []
    for t in card["tools"]:
        by = {o["treatment"]: o for o in t["outcomes"]}
        bare = by.get("bare") or {}
        out.append({"tool": t["tool"] + (f" #{t['example'] + 1}" if _many(card, t["tool"]) else ""),
                    "bare": bare.get("cls"), "key": (by.get("key") or {}).get("cls"),
                    "verify": (by.get("verify") or {}).get("cls"),
                    "realized": bare.get("realized"), "reissue": _text(bare.get("reissue")),
                    "changes": ", ".join(sorted(bare.get("changes") or {})) or "nothing",
                    "annotations": _annotations(t["annotations"]),
                    "contradictions": list(t["contradictions"]), "note": t["note"]})
    return out


def _many(card: dict[str, Any], tool: str) -> bool:
    return sum(1 for t in card["tools"] if t["tool"] == tool) > 1


def _annotations(a: dict[str, Any]) -> str:
    keys = ("readOnlyHint", "idempotentHint", "destructiveHint")
    shown = [f"{k.removesuffix('Hint')}={str(a[k]).lower()}" for k in keys if k in a]
    return " ".join(shown) or "none"


def table(card: dict[str, Any]) -> str:
    head = (f"{card['package']} {card['version']} (server {card['server'].get('name')} "
            f"{card['server'].get('version')}, protocol {card['protocol']}): world {card['world']}")
    lines = [head, "", f"{'tool':<22} {'re-issued bare':<16} {'with key':<10} {'verify':<16} annotations"]
    for r in rows(card):
        flag = "  <- " + "; ".join(r["contradictions"]) if r["contradictions"] else ""
        lines.append(f"{r['tool']:<22} {LABEL.get(r['bare'], '-'):<16} {LABEL.get(r['key'], '-'):<10} "
                     f"{LABEL.get(r['verify'], '-'):<16} {r['annotations']}{flag}")
        lines.append(f"{'':<22} re-issue answered {r['reissue']}; it changed {r['changes']}; effects "
                     f"realized {r['realized']}")
    if card["untested"]:
        lines.append(f"no example (not measured): {', '.join(card['untested'])}")
    return "\n".join(lines)


def markdown(card: dict[str, Any]) -> str:
    out = [f"# Scorecard: {card['package']} {card['version']}", "",
           f"World `{card['world']}`; the server says it is {card['server'].get('name')} "
           f"{card['server'].get('version')} (protocol {card['protocol']}). Each writing tool's example call had its "
           "answer lost at the gateway after the server answered, then was re-issued with byte-identical arguments "
           "(bare), with the gateway's idempotency key (key), or after a check of the real state (verify). Classes "
           "are read from the real state, never from the server's answer.", "",
           "| tool | bare re-issue | with key | verify | effects | re-issue answered | annotations | disagrees |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows(card):
        out.append(f"| `{r['tool']}` | {LABEL.get(r['bare'], '-')} | {LABEL.get(r['key'], '-')} | "
                   f"{LABEL.get(r['verify'], '-')} | {r['realized']} | {r['reissue'].replace('|', '/')} | "
                   f"{r['annotations']} | {'; '.join(r['contradictions']) or 'no'} |")
    if card["untested"]:
        out += ["", f"Writing tools with no example (not measured): {', '.join(card['untested'])}."]
    return "\n".join(out) + "\n"


def to_json(card: dict[str, Any]) -> str:
    return json.dumps(card, indent=2, sort_keys=True) + "\n"


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What changed between two scorecards of one world, tool by tool (classes and contradictions)."""
    a = {r["tool"]: r for r in rows(old)}
    b = {r["tool"]: r for r in rows(new)}
    lines = []
    for tool in sorted(set(a) | set(b)):
        x, y = a.get(tool), b.get(tool)
        if x is None or y is None:
            lines.append(f"{tool}: only in {old['version'] if y is None else new['version']}")
            continue
        for what in ("bare", "key", "verify"):
            if x[what] != y[what]:
                lines.append(f"{tool} ({what}): {LABEL.get(x[what], '-')} in {old['version']} -> "
                             f"{LABEL.get(y[what], '-')} in {new['version']} (re-issue answered {x['reissue']} -> "
                             f"{y['reissue']})")
        if x["contradictions"] != y["contradictions"]:
            lines.append(f"{tool} (annotations): {x['contradictions'] or 'agree'} -> {y['contradictions'] or 'agree'}")
    return lines


def failures(card: dict[str, Any], fail_on: tuple[str, ...]) -> list[str]:
    """The tools that show a class (or an annotation contradiction) the gate was told to fail on."""
    out = []
    for r in rows(card):
        if "duplicate" in fail_on and r["bare"] == "duplicate":
            out.append(f"{r['tool']}: a re-issued call made a second effect")
        if "false-failure" in fail_on and r["bare"] == "false_failure":
            out.append(f"{r['tool']}: a re-issued call failed although its effect exists")
        if "silent-success" in fail_on and r["bare"] == "silent_success":
            out.append(f"{r['tool']}: a re-issued call succeeded without doing anything")
        if "annotation" in fail_on:
            out += [f"{r['tool']}: {c}" for c in r["contradictions"]]
    return out
