"""The viewer's Atlas page: one self-contained HTML file (the viewer's stylesheet inlined, no script, no request)
that opens from disk, built from an atlas folder's `index.json`: the findings, every server with each tool's class
and annotation truth per release (the tool's timeline), the untestable cells and tools with their reasons, and the
drift. Every text a server chose (tool names, reasons) is escaped."""

from __future__ import annotations

import html
from importlib import resources
from pathlib import Path
from typing import Any

from aft_bench.common.files import write_atomic

CLASS_COLOR = {"duplicate": "#fdecea", "false_failure": "#fff1e0", "silent_success": "#fff8c4", "safe": "#dff3e7",
               "no_effect": "#eef1f4", None: "#f1f3f5"}
EXTRA_CSS = """
.atlas td.cls { white-space:nowrap; } .atlas td.cls small { display:block; color:var(--muted); white-space:normal; }
.atlas .reason { overflow-wrap:anywhere; max-width:40em; }
.atlas section { margin-bottom:1.6em; }
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _hints(hints: dict[str, str]) -> str:
    short = {"readOnlyHint": "readOnly", "idempotentHint": "idempotent"}
    return ", ".join(f"{short.get(h, h)} {v}" for h, v in hints.items() if v != "unmeasured")


def _findings(doc: dict[str, Any]) -> str:
    f = doc["findings"]
    c = f["classes"]
    rows = "".join(f"<tr><td><code>{_e(h)}</code></td><td class=num>{n['contradicted']}</td><td class=num>"
                   f"{n['undeclared']}</td><td class=num>{n['true']}</td></tr>" for h, n in f["hints"].items())
    return (f"<p class=summary data-testid=atlas-summary>{f['cells']} of {doc['planned_cells']} server-releases "
            f"recorded on {f['servers']} servers ({f['measured_cells']} measured). Of {f['writing_tools']} writing "
            f"tools on {f['measured_servers']} servers (newest measured release), a call re-issued after its answer "
            "was lost is:</p><div class=scroll><table data-testid=atlas-findings><tr><th>duplicate</th><th>false "
            "failure</th><th>silent success</th><th>safe</th><th>untestable</th></tr>"
            f"<tr><td class=num>{c['duplicate']}</td><td class=num>{c['false_failure']}</td><td class=num>"
            f"{c['silent_success']}</td><td class=num>{c['safe']}</td><td class=num>{f['untestable_tools']}</td>"
            "</tr></table></div><h3>Annotations against the behaviour</h3><div class=scroll><table "
            "data-testid=atlas-hints><tr><th>hint</th><th>contradicted</th><th>undeclared</th><th>true</th></tr>"
            f"{rows}</table></div>")


def _server(s: dict[str, Any]) -> str:
    releases = s["releases"]
    tools = sorted({t for r in releases for t in r["tools"]})
    head = "".join(f"<th>{_e(r['release'])}</th>" for r in releases)
    body = []
    for t in tools:
        cells = []
        for r in releases:
            v = r["tools"].get(t)
            if r["status"] != "measured":
                cells.append("<td class=cls>untestable release</td>")
            elif v is None:
                cells.append("<td class=cls><small>not measured</small></td>")
            elif v["status"] != "measured":
                cells.append(f"<td class=cls title=\"{_e(v['reason'])}\">untestable<small>{_e(v['reason'])}</small>"
                             "</td>")
            else:
                cells.append(f"<td class=cls style=\"background:{CLASS_COLOR.get(v['class'], '#fff')}\">"
                             f"{_e((v['class'] or '').replace('_', ' '))}<small>{_e(_hints(v['hints']))}</small></td>")
        body.append(f"<tr data-testid=\"atlas-tool\"><th><code>{_e(t)}</code></th>{''.join(cells)}</tr>")
    untestable = "".join(f"<li><b>{_e(r['release'])}</b>: <span class=reason>{_e(r['reason'])}</span></li>"
                         for r in releases if r["status"] != "measured")
    table = (f"<div class=scroll><table><tr><th>tool</th>{head}</tr>{''.join(body)}</table></div>" if tools else
             "<p class=muted>No tool measured in any release.</p>")
    return (f"<section data-testid=\"atlas-server\" data-server=\"{_e(s['server'])}\"><h2>{_e(s['server'])} "
            f"<span class=muted>{_e(s['registry'])} <code>{_e(s['package'])}</code></span></h2>{table}"
            + (f"<ul class=muted>{untestable}</ul>" if untestable else "") + "</section>")


def _drift(doc: dict[str, Any]) -> str:
    items = "".join(f"<li><b>{_e(d['server'])}</b> <code>{_e(d['tool'])}</code> {_e(d['from'])} → {_e(d['to'])}: "
                    f"{_e(d['what'])} {_e(d['old'])} → {_e(d['new'])}</li>" for d in doc["drift"])
    return f"<ul data-testid=atlas-drift>{items}</ul>" if items else "<p class=muted>No change between releases.</p>"


def page(doc: dict[str, Any]) -> str:
    css = resources.files("aft_bench.viewer").joinpath("static/app.css").read_text(encoding="utf-8")
    servers = "".join(_server(s) for s in doc["servers"])
    return ("<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width,"
            f"initial-scale=1\"><title>Atlas {_e(doc['atlas'])}: aft-bench</title><style>{css}{EXTRA_CSS}</style>"
            f"</head><body><header><span class=brand>aft-bench</span><nav><a class=active>Atlas</a></nav></header>"
            f"<main id=app class=atlas><h1>Atlas <span class=sub>{_e(doc['atlas'])}</span></h1>{_findings(doc)}"
            f"<h2>Drift</h2>{_drift(doc)}{servers}</main></body></html>\n")


def write_page(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, page(doc))
