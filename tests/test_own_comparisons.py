"""An experiment's own comparisons are its answer (issue 50): a researcher's world (the reference memory server,
started for real, under a name of their own), a workload over it and two comparisons in a `comparisons.toml`
beside it, named by a config of their own, run, analyze and report from the researcher's folder with the shipped
worlds still visible and no shipped file changed; Holm across exactly those two, nothing else on the page."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT

EXE = str(Path(sys.executable).with_name("aft-bench"))
MEMORY = ROOT / "worlds" / "memory" / "world.toml"
SHIPPED = [ROOT / "configs", ROOT / "worlds"]

pytestmark = pytest.mark.skipif(not (ROOT / ".worlds" / "node").is_dir(),
                                reason="needs the reference servers: make worlds (CI runs it)")

COMPARISONS = """
[[comparisons]]
id = "graph_key_duplicates"
treatment = "GW-key"
control = "GW-bare"
workload = "graph_loss"
endpoint = "duplicate_effects"
direction = "lower"
test = "two_sided"

[[comparisons]]
id = "graph_verify_claims"
treatment = "GW-verify"
control = "GW-bare"
workload = "graph_loss"
endpoint = "incorrect_claim"
direction = "lower"
test = "two_sided"
"""


def _tree_hash(folders: list[Path]) -> str:
    h = hashlib.sha256()
    for folder in folders:
        for p in sorted(folder.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def _own_folder(tmp_path: Path) -> Path:
    """A researcher's folder: worlds/graph (the memory server as their world), worlds/workloads/graph_loss.toml
    (three of the memory tasks on it), worlds/comparisons.toml, and graph.toml naming both comparisons."""
    import tomllib

    home = tmp_path / "mine"
    (home / "worlds" / "graph").mkdir(parents=True)
    (home / "worlds" / "workloads").mkdir()
    world = MEMORY.read_text().replace('id = "memory"', 'id = "graph"', 1)
    (home / "worlds" / "graph" / "world.toml").write_text(world)
    wl = tomllib.loads((ROOT / "worlds" / "workloads" / "memory_response_loss.toml").read_text())
    tasks = wl["tasks"][:3]
    lines = ['[workload]\nid = "graph_loss"\nworld = "graph"\ndescription = "Three graph tasks, answer lost."\n',
             '[[variants]]\nid = "response_loss"\nfaults = [{ kind = "response_loss" }]\n']
    for t in tasks:
        lines.append("[[tasks]]\n" + "".join(f"{k} = {json.dumps(v) if not isinstance(v, list) else _toml(v)}\n"
                                            for k, v in {**t, "world": "graph"}.items()))
    (home / "worlds" / "workloads" / "graph_loss.toml").write_text("\n".join(lines))
    (home / "worlds" / "comparisons.toml").write_text(COMPARISONS)
    (home / "graph.toml").write_text('[experiment]\nid = "graph_exp"\nworlds = ["worlds"]\n'
                                     'comparisons = ["graph_key_duplicates", "graph_verify_claims"]\nseeds = [0]\n')
    return home


def _toml(v: object) -> str:
    """A list of tables or strings as an inline TOML value (JSON's syntax, keys bare)."""
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return json.dumps(v)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_a_researchers_own_comparisons_run_analyze_and_report_alone(tmp_path: Path) -> None:
    before = _tree_hash(SHIPPED)
    home = _own_folder(tmp_path)
    ok = _cli("validate", "graph.toml", cwd=home)
    assert ok.returncode == 0, ok.stderr
    run = _cli("run", "graph.toml", "--out", "out", cwd=home)
    assert run.returncode == 0, run.stderr
    analyzed = _cli("analyze", "out", cwd=home)
    assert analyzed.returncode == 0, analyzed.stderr
    printed = analyzed.stdout.splitlines()
    assert printed[0] == "primary: Holm across its 2 comparisons"
    named = [line.split()[0] for line in printed[3:5]]
    assert named == ["graph_key_duplicates", "graph_verify_claims"] and printed[5].startswith("p values:")
    assert "not computed" not in analyzed.stdout and "incomplete" not in analyzed.stdout
    rows = pd.read_parquet(home / "out" / "results.parquet")
    assert set(rows["server"]) == {"@modelcontextprotocol/server-memory 2026.8.31"}  # what ran, not "memory"
    table = pd.read_csv(home / "out" / "analysis" / "comparisons.csv")
    assert table["comparison"].tolist() == named and set(table["family"]) == {"primary"}
    assert (table["pairs"] == 3).all()  # three tasks, one seed: one pair each
    raw = sorted(table["p_raw"])  # Holm across the two and nothing else
    assert table["p_adjusted"].max() == pytest.approx(min(1.0, max(2 * raw[0], raw[1])))
    # the researcher's manifest records the plan, and the comparisons' definitions are part of the config's identity
    manifest = json.loads((home / "out" / "manifest.json").read_text())
    assert manifest["families"] == [{"name": "primary", "comparisons": named, "adjust": "holm"}]
    report = _cli("report", "out", cwd=home)
    assert report.returncode == 0, report.stderr
    md = (home / "out" / "report" / "report.md").read_text()
    assert "## Comparisons: primary" in md and "paper (reference)" not in md and "Table 3" not in md
    assert "graph_key_duplicates" in md and "discovery_context" not in md and "Not computed" not in md
    assert _tree_hash(SHIPPED) == before  # nothing shipped was edited
    experiment_page_opens_on(home / "out", named, tmp_path, 9, "@modelcontextprotocol/server-memory 2026.8.31")


def experiment_page_opens_on(out: Path, named: list[str], tmp_path: Path, servers: int, server: str) -> None:
    """In a real browser, the static bundle's Experiment page: the experiment's family first, its comparisons
    alone in it (no paper comparison, no empty row), above the pending tuples; no text over other text; the runs
    table names the server each of its `servers` rows ran."""
    from test_viewer_browser import CHROMIUM, OVERLAPS_JS, open_page, playwright_api

    from aft_bench.viewer.bundle import write_bundle
    from aft_bench.viewer.model import Viewer

    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install -y chromium (CI installs it)")
    write_bundle(Viewer(out), tmp_path / "site")
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            for width in (1280, 420):
                pg = browser.new_page(viewport={"width": width, "height": 900})
                pg.errors = []  # type: ignore[attr-defined]
                pg.on("pageerror", lambda e, pg=pg: pg.errors.append(str(e)))  # type: ignore[attr-defined]
                open_page(pg, (tmp_path / "site" / "index.html").as_uri() + "#/experiment")
                assert pg.evaluate(OVERLAPS_JS) == []
                assert pg.locator("#app h2").first.inner_text() == "Comparisons: primary"
                rows = pg.locator("[data-testid=table-primary] tr[data-row]")
                assert [rows.nth(i).get_attribute("data-row") for i in range(rows.count())] == named
                assert pg.locator("[data-testid=table-secondary]").count() == 0
                assert "discovery_context" not in pg.inner_text("#app").split("Manifest and counts")[0]
                top = pg.locator("[data-testid=table-primary]").bounding_box()["y"]
                assert top < pg.locator("#pending").bounding_box()["y"] and (width < 1280 or top < 900)
                if width == 1280:  # the runs table names the server that ran each row
                    open_page(pg, (tmp_path / "site" / "index.html").as_uri() + "#/runs")
                    cells = pg.locator("[data-testid=runs] td[data-col=server]")
                    assert cells.count() == servers and set(cells.all_inner_texts()) == {server}
                pg.close()
        finally:
            browser.close()


def test_what_the_researchers_comparisons_name_is_checked_against_what_the_run_sees(tmp_path: Path) -> None:
    home = _own_folder(tmp_path)
    (home / "worlds" / "comparisons.toml").write_text(COMPARISONS.replace('workload = "graph_loss"',
                                                                          'workload = "graph_gone"', 1))
    bad = _cli("validate", "graph.toml", cwd=home)
    assert bad.returncode == 2 and "field 'experiment.comparisons.0': unknown workload" in bad.stderr
    assert "graph_gone" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    (home / "worlds" / "comparisons.toml").write_text(COMPARISONS.replace("graph_key_duplicates", "duplicate_effects"))
    (home / "graph.toml").write_text((home / "graph.toml").read_text().replace("graph_key_duplicates",
                                                                               "duplicate_effects"))
    twice = _cli("validate", "graph.toml", cwd=home)
    assert twice.returncode == 2 and "comparisons.toml: field 'comparisons.0.id'" in twice.stderr
    assert "already defined at" in twice.stderr and "configs/comparisons.toml" in twice.stderr
    (home / "worlds" / "comparisons.toml").write_text(COMPARISONS.replace('test = "two_sided"',
                                                                          'test = "two_sided"\nfamily = "primary"', 1))
    old = _cli("validate", "graph.toml", cwd=home)
    assert old.returncode == 2 and "[experiment.families]" in old.stderr


CLIENT = """
import asyncio, os
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

async def main():
    async with streamable_http_client(os.environ["AFT_BENCH_MCP_URL"]) as (r, w, *_), ClientSession(r, w) as s:
        await s.initialize()
        await s.list_tools()
        await s.call_tool("report_outcome", {"action": "escalate", "claim": "unknown"})

asyncio.run(main())
"""


def test_serve_matrix_serves_the_researchers_own_worlds_and_records_their_plan(tmp_path: Path) -> None:
    """The same config played by an external MCP client: each tuple's server sees the config's own worlds beside
    the shipped ones, and the served folder's manifest carries the config's comparisons, so `analyze` computes
    those two and nothing else."""
    home = _own_folder(tmp_path)
    (home / "graph.toml").write_text((home / "graph.toml").read_text() + "tasks_per_workload = 1\n")
    (home / "client.py").write_text(CLIENT)
    done = _cli("serve-matrix", "graph.toml", "--out", "served", "--agent", "escalator",
                "--client-cmd", f"{sys.executable} client.py", cwd=home)
    assert done.returncode == 0, done.stdout[-800:] + done.stderr[-800:]
    assert done.stdout.count("recorded as run") == 3  # one task under GW-key, GW-verify and GW-bare
    manifest = json.loads((home / "served" / "manifest.json").read_text())
    assert [c["id"] for c in manifest["comparisons"]] == ["graph_key_duplicates", "graph_verify_claims"]
    analyzed = _cli("analyze", "served", cwd=home)
    assert analyzed.returncode == 0, analyzed.stderr
    lines = analyzed.stdout.splitlines()
    assert lines[0] == "primary: Holm across its 2 comparisons"
    assert [x.split()[0] for x in lines[3:5]] == ["graph_key_duplicates", "graph_verify_claims"]
