"""A scorecard as a terminal table, Markdown and JSON; two scorecards (two versions of one server) compared; and
the classes a CI gate fails on."""

from __future__ import annotations

import json
from typing import Any

LABEL = {"duplicate": "DUPLICATE", "false_failure": "false failure", "silent_success": "silent success",
         "safe": "safe", "no_effect": "no effect", "unmeasured": "unmeasured"}
FAIL_ON = ("duplicate", "false-failure", "silent-success", "annotation", "undeclared")
HOW = ("Whether a re-issue made a second effect is read from the real state (the tool's identity where the world "
       "gives one, else the probe's diffs: the lost call changed the state, and the re-issue changed it again). "
       "Where it made none, its answer decides what a client was told: `isError`, or a failure phrase in its text "
       "that the first answer did not have, is a false failure; anything else a silent success. The signal column "
       "says which evidence decided each row.")


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
                    "reissues": {w: _text(o.get("reissue")) for w, o in sorted(by.items())},
                    "signal": bare.get("signal") or "",
                    "changes": ", ".join(sorted(bare.get("changes") or {})) or "nothing",
                    "annotations": _annotations(t["annotations"]),
                    "contradictions": list(t["contradictions"]), "undeclared": list(t.get("undeclared") or ()),
                    "note": t["note"]})
    return out


def _many(card: dict[str, Any], tool: str) -> bool:
    return sum(1 for t in card["tools"] if t["tool"] == tool) > 1


def _annotations(a: dict[str, Any]) -> str:
    keys = ("readOnlyHint", "idempotentHint", "destructiveHint")
    shown = [f"{k.removesuffix('Hint')}={str(a[k]).lower()}" for k in keys if k in a]
    return " ".join(shown) or "none"


def installed(card: dict[str, Any]) -> str:
    """What the install says of the version the card names."""
    if "installed" not in card:
        return ""
    if card["installed"] is None:
        return "the installed version could not be read from the install"
    return f"installed {card['installed']}"


def _protocol(card: dict[str, Any]) -> str:
    return str(card["protocol"]) if card.get("protocol") else "not stated"


def table(card: dict[str, Any]) -> str:
    head = (f"{card['package']} {card['version']} ({installed(card) + ', ' if installed(card) else ''}server says "
            f"{card['server'].get('name')} {card['server'].get('version')}, protocol {_protocol(card)}): "
            f"world {card['world']}")
    lines = [head, "", f"{'tool':<22} {'re-issued bare':<16} {'with key':<16} {'verify':<16} annotations"]
    for r in rows(card):
        flag = "  <- " + "; ".join(r["contradictions"]) if r["contradictions"] else ""
        lines.append(f"{r['tool']:<22} {LABEL.get(r['bare'], '-'):<16} {LABEL.get(r['key'], '-'):<16} "
                     f"{LABEL.get(r['verify'], '-'):<16} {r['annotations']}{flag}")
        undeclared = f"; undeclared: {', '.join(r['undeclared'])}" if r["undeclared"] else ""
        lines.append(f"{'':<22} re-issue answered {r['reissue']}; it changed {r['changes']}; "
                     f"decided by {r['signal'] or '-'}{undeclared}")
    if card["untested"]:
        lines.append(f"no example (not measured): {', '.join(card['untested'])}")
    return "\n".join(lines)


def markdown(card: dict[str, Any]) -> str:
    phrases = ", ".join(f'"{p}"' for p in card.get("failure_phrases") or ())
    out = [f"# Scorecard: {card['package']} {card['version']}", "",
           f"World `{card['world']}`; {installed(card) or 'the install was not read'}; the server says it is "
           f"{card['server'].get('name')} {card['server'].get('version')} (protocol {_protocol(card)}). Each "
           "tool's example call had its answer lost at the gateway after the server answered, then was "
           "re-issued with byte-identical arguments (bare), with the gateway's idempotency key (key), or after a "
           f"check of the real state (verify). {HOW}" + (f" Failure phrases: {phrases}." if phrases else ""), "",
           "| tool | bare re-issue | with key | verify | signal | re-issue answered | annotations | disagrees | "
           "undeclared |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows(card):
        out.append(f"| `{r['tool']}` | {LABEL.get(r['bare'], '-')} | {LABEL.get(r['key'], '-')} | "
                   f"{LABEL.get(r['verify'], '-')} | {r['signal'].replace('|', '/')} | "
                   f"{r['reissue'].replace('|', '/')} | {r['annotations']} | "
                   f"{'; '.join(r['contradictions']) or 'no'} | {', '.join(r['undeclared']) or '-'} |")
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
                was, now = (r["reissues"].get(what, "(not measured)") for r in (x, y))  # that treatment's answers
                lines.append(f"{tool} ({what}): {LABEL.get(x[what], '-')} in {old['version']} -> "
                             f"{LABEL.get(y[what], '-')} in {new['version']} (re-issue answered {was} -> {now})")
        if x["contradictions"] != y["contradictions"]:
            lines.append(f"{tool} (annotations): {'; '.join(x['contradictions']) or 'agree'} -> "
                         f"{'; '.join(y['contradictions']) or 'agree'}")
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
        if "undeclared" in fail_on:
            out += [f"{r['tool']}: {h} undeclared" for h in r["undeclared"]]
    return out
