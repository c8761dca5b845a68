"""What people consume, built from an atlas folder's recorded cells alone (so a resumed atlas publishes the same
bytes as an uninterrupted one): `dataset.jsonl`, `cards/SERVER/RELEASE.json`, `drift.json`, `atlas.sarif`,
`badges/SERVER.json`, `evidence/SERVER.json`, `index.json` (what the viewer's Atlas page shows) and `summary.md`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aft_bench.atlas import badges, dataset
from aft_bench.atlas.sarif import DEFAULT_CLASSES, sarif
from aft_bench.common.files import write_atomic

OUTPUTS = ("dataset.jsonl", "drift.json", "atlas.sarif", "index.json", "summary.md")


def _json(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)


def index(atlas_id: str, cells: list[dict[str, Any]], drift: list[dict[str, Any]], planned: int) -> dict[str, Any]:
    """Per server, its releases in publication order with each tool's verdict; the findings; the drift."""
    servers: dict[str, dict[str, Any]] = {}
    for c in cells:
        s = servers.setdefault(c["server"], {"server": c["server"], "registry": c["registry"],
                                             "package": c["package"], "releases": []})
        s["releases"].append({"release": c["release"], "status": c["status"], "reason": c["reason"],
                              "tools": dataset.verdicts(c) if c["status"] == "measured" else {}})
    return {"atlas": atlas_id, "planned_cells": planned, "findings": dataset.findings(cells),
            "servers": list(servers.values()), "drift": drift}


def summary(doc: dict[str, Any], command: str) -> str:
    f = doc["findings"]
    c, h = f["classes"], f["hints"]
    lines = [f"# Atlas `{doc['atlas']}`", "",
             f"{f['cells']} of {doc['planned_cells']} server-releases recorded on {f['servers']} servers "
             f"({f['measured_cells']} measured, {f['cells'] - f['measured_cells']} untestable). Made by `{command}`.",
             "", f"Of **{f['writing_tools']} writing tools on {f['measured_servers']} servers** (each server's newest "
             "measured release; a writing tool is one whose example changed the real state), a call re-issued after "
             "its answer was lost is:", "",
             "| duplicate | false failure | silent success | safe | untestable tools |", "|---:|---:|---:|---:|---:|",
             f"| {c['duplicate']} | {c['false_failure']} | {c['silent_success']} | {c['safe']} | "
             f"{f['untestable_tools']} |", "", "Their annotations, against that behaviour:", "",
             "| hint | contradicted | undeclared | true |", "|---|---:|---:|---:|"]
    for hint, n in h.items():
        lines.append(f"| `{hint}` | {n['contradicted']} | {n['undeclared']} | {n['true']} |")
    if f["claims"]:
        lines += ["", "What servers' own documentation claims, against the measurement:", "",
                  "| server | release | tool | claims | measured | truth | source |", "|---|---|---|---|---|---|---|"]
        for cl in f["claims"]:
            lines.append(f"| {cl['server']} | {cl['release']} | `{cl['tool']}` | "
                         f"{'idempotent' if cl['idempotent'] else 'not idempotent'} | {cl['class'] or 'untestable'} | "
                         f"{cl['truth']} | {cl['source'].replace('|', '/')} |")
    changed = [d for d in doc["drift"] if d["what"] != "present"]
    tools = {(d["server"], d["tool"]) for d in changed}
    lines += ["", f"Drift: {len(changed)} changes between consecutive releases, on {len(tools)} tools.", ""]
    for d in changed:
        lines.append(f"- {d['server']} `{d['tool']}` {d['from']} → {d['to']}: {d['what']} {d['old']} → {d['new']}")
    lines += ["", "| server | release | status | tools (bare class) |", "|---|---|---|---|"]
    for s in doc["servers"]:
        for r in s["releases"]:
            shown = ", ".join(f"{t}: {v['class'] or 'untestable'}" for t, v in r["tools"].items()) or r["reason"][:120]
            lines.append(f"| {s['server']} | {r['release']} | {r['status']} | {shown.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def publish(out: Path, atlas_id: str, planned: list[tuple[str, str, int]], command: str,
            classes: tuple[str, ...] = DEFAULT_CLASSES) -> dict[str, Any]:
    """Write every output from the cells recorded under `out`; returns the index document."""
    cells = dataset.load_cells(out, planned)
    drift = dataset.drift(cells)
    _write(out / "dataset.jsonl", "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n"
                                          for r in dataset.rows(cells)))
    for c in cells:
        if c["card"] is not None:
            _write(out / "cards" / c["server"] / f"{c['release']}.json", _json(c["card"]))
    by_server: dict[str, list[dict[str, Any]]] = {}
    for c in cells:
        by_server.setdefault(c["server"], []).append(c)
    for server, cs in by_server.items():
        _write(out / "badges" / f"{server}.json", _json(badges.badge(cs)))
        _write(out / "evidence" / f"{server}.json", _json(badges.evidence(cs)))
    _write(out / "drift.json", _json(drift))
    _write(out / "atlas.sarif", _json(sarif(cells, classes)))
    doc = index(atlas_id, cells, drift, len(planned))
    _write(out / "index.json", _json(doc))
    _write(out / "summary.md", summary(doc, command))
    return doc
