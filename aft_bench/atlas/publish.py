"""What people consume, built from an atlas folder's recorded cells alone (so a resumed atlas publishes the same
bytes as an uninterrupted one): `dataset.jsonl`, `cards/SERVER/RELEASE.json`, `drift.json`, `atlas.sarif`,
`badges/SERVER.json`, `evidence/SERVER.json`, `index.json` (what the viewer's Atlas page shows) and `summary.md`."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from aft_bench.atlas import badges, dataset
from aft_bench.atlas.sarif import DEFAULT_CLASSES, sarif
from aft_bench.common.files import write_atomic
from aft_bench.common.secrets import json_text

OUTPUTS = ("dataset.jsonl", "drift.json", "atlas.sarif", "index.json", "summary.md")


def _write(path: Path, value: Any) -> None:
    """JSON redacted string by string (its shape kept), or a text redacted as text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(value, str):
        write_atomic(path, value)
    else:
        write_atomic(path, json_text(value), redacted=True)


def md(text: Any) -> str:
    """A server's words (a tool's name, a reason) as inert Markdown: one line, no markup, no table break."""
    one = " ".join(str(text).split())
    return re.sub(r"([\\`*_{}\[\]()<>#!|~])", r"\\\1", one)


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


def summary(doc: dict[str, Any]) -> str:
    f = doc["findings"]
    c, h = f["classes"], f["hints"]
    lines = [f"# Atlas `{doc['atlas']}`", "",
             f"{f['cells']} of {doc['planned_cells']} server-releases recorded on {f['servers']} servers "
             f"({f['measured_cells']} measured, {f['cells'] - f['measured_cells']} untestable).",
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
            lines.append(f"| {cl['server']} | {cl['release']} | {md(cl['tool'])} | "
                         f"{'idempotent' if cl['idempotent'] else 'not idempotent'} | {cl['class'] or 'untestable'} | "
                         f"{cl['truth']} | {md(cl['source'])} |")
    changed = doc["drift"]
    tools = {(d["server"], d["tool"]) for d in changed}
    lines += ["", f"Drift: {len(changed)} changes between consecutive measured releases, on {len(tools)} tools.", ""]
    for d in changed:
        lines.append(f"- {d['server']} {md(d['tool'])} {d['from']} → {d['to']}: {d['what']} {d['old']} → {d['new']}")
    lines += ["", "| server | release | status | tools (bare class) |", "|---|---|---|---|"]
    for s in doc["servers"]:
        for r in s["releases"]:
            shown = ", ".join(f"{md(t)}: {v['class'] or 'untestable'}" for t, v in r["tools"].items()) or \
                md(r["reason"][:160])
            lines.append(f"| {s['server']} | {r['release']} | {r['status']} | {shown} |")
    return "\n".join(lines) + "\n"


def publish(out: Path, atlas_id: str, planned: list[tuple[str, str, int, str]], version: int,
            classes: tuple[str, ...] = DEFAULT_CLASSES) -> dict[str, Any]:
    """Write every output from the cells recorded under `out` (stale ones left out); returns the index document.
    The per-server folders are made afresh, so a server removed from the atlas leaves nothing behind."""
    cells = dataset.load_cells(out, planned, version)
    drift = dataset.drift(cells)
    out.mkdir(parents=True, exist_ok=True)  # JSON lines, each redacted value by value: written as they are
    write_atomic(out / "dataset.jsonl", "".join(json_text(r, indent=None) for r in dataset.rows(cells)), redacted=True)
    for sub in ("cards", "badges", "evidence"):
        shutil.rmtree(out / sub, ignore_errors=True)
    for c in cells:
        if c["card"] is not None:
            _write(out / "cards" / c["server"] / f"{c['release']}.json", c["card"])
    by_server: dict[str, list[dict[str, Any]]] = {}
    for c in cells:
        by_server.setdefault(c["server"], []).append(c)
    for server, cs in by_server.items():
        _write(out / "badges" / f"{server}.json", badges.badge(cs))
        _write(out / "evidence" / f"{server}.json", badges.evidence(cs))
    _write(out / "drift.json", drift)
    _write(out / "atlas.sarif", sarif(cells, classes))
    doc = index(atlas_id, cells, drift, len(planned))
    _write(out / "index.json", doc)
    _write(out / "summary.md", summary(doc))
    return doc
