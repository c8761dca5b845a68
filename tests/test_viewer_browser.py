"""The viewer in a real browser: headless Chromium from the OS packages (/usr/bin/chromium, no browser download),
driven by Playwright. The served app and the static bundle (opened from file://) each show the experiment, a
filtered runs table, a run and a pair, checked against results.parquet; screenshots go to the test's artifact
folder (AFT_BENCH_ARTIFACTS, else pytest's tmp). A known negative: the app served with a broken asset path
fails the same page check."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from aft_bench.common.net import listen
from aft_bench.viewer.bundle import write_bundle
from aft_bench.viewer.model import Viewer
from aft_bench.viewer.server import STATIC, build_app

CHROMIUM = os.environ.get("AFT_BENCH_CHROMIUM", "/usr/bin/chromium")
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e .[test])")
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason=f"no Chromium at {CHROMIUM}: apt-get install -y chromium (CI installs it)")


class Served:
    """The viewer app served by uvicorn on 127.0.0.1 in a background thread."""

    def __init__(self, viewer: Viewer, static: Path = STATIC) -> None:
        import uvicorn

        self.sock = listen("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        self.server = uvicorn.Server(uvicorn.Config(build_app(viewer, static), log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    root = os.environ.get("AFT_BENCH_ARTIFACTS")
    folder = Path(root) / "viewer" if root else tmp_path_factory.mktemp("viewer-screens")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def served(smoke_results: Path) -> Iterator[str]:
    s = Served(Viewer(smoke_results))
    yield s.url
    s.stop()


@pytest.fixture(scope="module")
def bundled(smoke_results: Path, tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("bundle") / "site"
    write_bundle(Viewer(smoke_results), out)
    return (out / "index.html").as_uri()


@pytest.fixture()
def page(browser) -> Iterator[object]:
    pg = browser.new_page(viewport={"width": 1280, "height": 900})
    pg.errors = []  # type: ignore[attr-defined]
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))  # type: ignore[attr-defined]
    yield pg
    pg.close()


def open_page(pg, url: str, shot: Path | None = None) -> None:
    """Go to `url` and wait until the app rendered; fails when it never does or shows an error."""
    pg.goto(url)
    pg.wait_for_function("['ready','error'].includes(document.getElementById('app').dataset.state)", timeout=8000)
    state = pg.get_attribute("#app", "data-state")
    if shot is not None:
        pg.screenshot(path=str(shot), full_page=True)
    assert state == "ready", pg.inner_text("#app")[:300]
    assert not pg.errors, pg.errors


def check_pages(pg, base: str, results: Path, shots: Path) -> None:
    """The four pages, each checked against results.parquet and DIR/analysis."""
    df = pd.read_parquet(results / "results.parquet")
    shots.mkdir(parents=True, exist_ok=True)
    # experiment: counts and the pending count
    open_page(pg, f"{base}#/experiment", shots / "experiment.png")
    planned = len(json.loads((results / "manifest.json").read_text())["run_ids"])
    assert pg.inner_text("[data-testid=runs-count]") == str(len(df))
    assert pg.inner_text("[data-testid=pending-count]") == str(planned - len(df))
    primary = json.loads((results / "analysis" / "primary.json").read_text())
    assert pg.locator("[data-testid=table-primary] tr[data-row]").count() == len(primary)
    # runs: filter by workload through the drop-down, then by outcome
    open_page(pg, f"{base}#/runs", shots / "runs.png")
    assert pg.inner_text("[data-testid=total]") == str(len(df))
    pg.select_option("select[data-filter=workload]", "response_loss")
    pg.wait_for_function("location.hash.includes('workload=response_loss') && "
                         "document.getElementById('app').dataset.state === 'ready'")
    sub = df[df["workload"] == "response_loss"]
    assert pg.inner_text("[data-testid=total]") == str(len(sub))
    shown = {r.get_attribute("data-run"): r.locator("td[data-col=outcome]").inner_text()
             for r in pg.locator("[data-testid=runs] tr[data-run]").all()}
    assert shown == dict(zip(sub["run_id"], sub["outcome"]))
    pg.screenshot(path=str(shots / "runs-filtered.png"), full_page=True)
    # run: outcome, labels and the fault-fired event of the run with the duplicate charge
    dup = df[df["duplicate_effects"] > 0].iloc[0]
    pg.click(f"[data-testid=runs] tr[data-run='{dup['run_id']}'] a")
    pg.wait_for_function(f"location.hash === '#/run/{dup['run_id']}' && "
                         "document.getElementById('app').dataset.state === 'ready'")
    pg.screenshot(path=str(shots / "run.png"), full_page=True)
    assert pg.inner_text("[data-testid=outcome]") == dup["outcome"]
    assert "trace verified" in pg.inner_text("[data-testid=verification]")
    for label in ("outcome", "duplicate_effects", "unsafe_commits", "y_goal", "fault_fired", "incorrect_claim"):
        value = dup[label]
        expect = str(value).lower() if isinstance(value, (bool,)) or str(value) in ("True", "False") else str(value)
        assert pg.get_attribute(f"[data-testid=labels] tr[data-label={label}] td[data-value]", "data-value") == expect
    assert pg.locator("[data-testid=faults] tr[data-fired=yes]").count() >= 1
    assert pg.locator("[data-testid=timeline] .ev[data-kind=fault_fired]").count() >= 1
    assert pg.locator("[data-testid=timeline] .ev.unsafe [data-testid=reasons]").first.inner_text() == "[duplicate] "
    # pair: the duplicate-effects pair of that run, with the label that differs highlighted
    pairs = pd.read_parquet(results / "analysis" / "pairs.parquet")
    p = pairs[(pairs["comparison"] == "duplicate_effects") & (pairs["run_id_control"] == dup["run_id"])].iloc[0]
    open_page(pg, f"{base}#/pairs?comparison=duplicate_effects")
    assert pg.inner_text("[data-testid=pair-count]") == str(int((pairs["comparison"] == "duplicate_effects").sum()))
    pg.click(f"tr[data-pair='duplicate_effects/{p['run_id_treatment']}'] a")
    pg.wait_for_function("location.hash.startsWith('#/pair/') && document.getElementById('app').dataset.state === 'ready'")
    pg.screenshot(path=str(shots / "pair.png"), full_page=True)
    assert float(pg.inner_text("[data-testid=utility-diff]")) == p["utility_diff"]
    assert pg.inner_text("[data-testid=cluster]") == p["task_id"]
    differs = {r.get_attribute("data-label") for r in pg.locator("[data-testid=pair-labels] tr.differs").all()}
    assert "duplicate_effects" in differs and "completed" not in differs
    assert pg.locator("[data-testid=aligned] .turn").count() >= 2


def test_served_app_shows_what_the_results_hold(page, served: str, smoke_results: Path, artifacts: Path) -> None:
    check_pages(page, served, smoke_results, artifacts / "served")


def test_static_bundle_opens_from_disk_and_shows_the_same(page, bundled: str, smoke_results: Path,
                                                          artifacts: Path) -> None:
    assert bundled.startswith("file://")
    check_pages(page, bundled, smoke_results, artifacts / "bundle")


def test_known_negative_a_broken_asset_path_fails_the_page_check(page, smoke_results: Path, tmp_path: Path,
                                                                   artifacts: Path) -> None:
    broken = tmp_path / "static"
    shutil.copytree(STATIC, broken)
    html = (broken / "index.html").read_text().replace('src="static/app.js"', 'src="static/app-missing.js"')
    (broken / "index.html").write_text(html)
    s = Served(Viewer(smoke_results), broken)
    try:
        with pytest.raises(Exception) as caught:  # noqa: PT011 - a timeout or an assertion: the check failed
            check_pages(page, s.url, smoke_results, artifacts / "broken")
        assert "Timeout" in type(caught.value).__name__ or isinstance(caught.value, AssertionError)
    finally:
        s.stop()


def test_a_trace_that_fails_verification_is_shown_failed(page, smoke_results: Path, tmp_path: Path,
                                                         artifacts: Path) -> None:
    d = tmp_path / "r"
    shutil.copytree(smoke_results, d, ignore=shutil.ignore_patterns(".runner.lock"))
    rid = pd.read_parquet(d / "results.parquet")["run_id"].iloc[0]
    trace = d / "traces" / f"{rid}.jsonl"
    trace.write_text(trace.read_text().replace('"tool_call"', '"tool_cal1"', 1))
    s = Served(Viewer(d))
    try:
        open_page(page, f"{s.url}#/run/{rid}", artifacts / "failed-trace.png")
        badge = page.locator("[data-testid=verification]")
        assert "FAILED" in badge.inner_text() and "failed" in (badge.get_attribute("class") or "")
    finally:
        s.stop()


def test_the_report_links_each_comparison_to_its_pairs_in_the_bundle(page, smoke_results: Path, tmp_path: Path,
                                                                       artifacts: Path) -> None:
    """report.html names `aft-bench view` for each comparison's pairs; in the bundle those links open its pages."""
    from aft_bench.analysis.report import render

    d = tmp_path / "r"
    shutil.copytree(smoke_results, d, ignore=shutil.ignore_patterns(".runner.lock"))
    render(d)
    write_bundle(Viewer(d), tmp_path / "site")
    report = tmp_path / "site" / "report" / "report.html"
    comparisons = sorted({r["comparison"] for r in json.loads((d / "analysis" / "primary.json").read_text())})
    page.goto(report.as_uri())
    page.screenshot(path=str(artifacts / "report-in-bundle.png"), full_page=True)
    linked = {a.get_attribute("data-comparison") for a in page.locator("a.aft-pairs").all()}
    assert set(comparisons) <= linked
    page.click(f"a.aft-pairs[data-comparison={comparisons[0]}]")
    page.wait_for_function("document.getElementById('app') && document.getElementById('app').dataset.state === 'ready'")
    assert page.url.endswith(f"#/pairs?comparison={comparisons[0]}")
    pairs = pd.read_parquet(d / "analysis" / "pairs.parquet")
    assert page.inner_text("[data-testid=pair-count]") == str(int((pairs["comparison"] == comparisons[0]).sum()))


# --- the Experiment page: the answer first, and nothing drawn over anything else --------------------------------
# Every text run inside the app (clipped to the scroll boxes it sits in) against every other text run, and against
# every block's box (table, image, figure, preformatted JSON, heading, paragraph, note) that does not contain it.
OVERLAPS_JS = """() => {
  const clipOf = (el) => {
    let c = {l: -1e9, t: -1e9, r: 1e9, b: 1e9};
    for (let a = el; a && a !== document.body; a = a.parentElement) {
      const cs = getComputedStyle(a);
      if (cs.overflowX !== 'visible' || cs.overflowY !== 'visible') {
        const q = a.getBoundingClientRect();
        c = {l: Math.max(c.l, q.left), t: Math.max(c.t, q.top), r: Math.min(c.r, q.right), b: Math.min(c.b, q.bottom)};
      }
    }
    return c;
  };
  const cut = (q, c) => ({l: Math.max(q.left ?? q.l, c.l), t: Math.max(q.top ?? q.t, c.t),
                          r: Math.min(q.right ?? q.r, c.r), b: Math.min(q.bottom ?? q.b, c.b)});
  const meets = (a, b) => Math.min(a.r, b.r) - Math.max(a.l, b.l) > 2 && Math.min(a.b, b.b) - Math.max(a.t, b.t) > 2;
  const app = document.getElementById('app');
  const texts = [];
  const walk = document.createTreeWalker(app, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const n = walk.currentNode;
    if (!n.textContent.trim()) continue;
    const range = document.createRange();
    range.selectNodeContents(n);
    const clip = clipOf(n.parentElement);
    for (const q of range.getClientRects()) {
      const box = cut(q, clip);
      if (box.r - box.l > 1 && box.b - box.t > 1) texts.push({box, node: n, text: n.textContent.trim().slice(0, 40)});
    }
  }
  const found = [];
  for (let i = 0; i < texts.length && found.length < 10; i++)
    for (let j = i + 1; j < texts.length; j++)
      if (texts[i].node !== texts[j].node && meets(texts[i].box, texts[j].box)) {
        found.push(`text "${texts[i].text}" over text "${texts[j].text}"`); break;
      }
  const blocks = app.querySelectorAll('table, img, figure, pre, h1, h2, h3, p, .note');
  for (const el of blocks) {
    if (found.length >= 10) break;
    const box = cut(el.getBoundingClientRect(), clipOf(el.parentElement));
    if (box.r - box.l <= 1 || box.b - box.t <= 1) continue;
    const hit = texts.find((t) => !el.contains(t.node) && meets(box, t.box));
    if (hit) found.push(`<${el.tagName.toLowerCase()} ${el.dataset.testid || el.className || ''}> over text "${hit.text}"`);
  }
  return found;
}"""

# the layout this page had until issue 37: manifest and counts side by side in fixed-minimum grid columns, the
# manifest's JSON unwrapped, so a long value ran under the counts
OLD_LAYOUT = (".meta { grid-template-columns: repeat(auto-fit, minmax(360px, 1fr)) !important; }"
              ".meta > * { min-width: auto !important; }"
              "table.kv { table-layout: auto !important; width: auto !important; }"
              "table.kv th { width: auto !important; white-space: nowrap !important; }"
              "table.kv td { overflow-wrap: normal !important; }"
              "table.kv pre { white-space: pre !important; overflow-wrap: normal !important; }")


@pytest.fixture(scope="module")
def long_manifest_bundle(smoke_results: Path, tmp_path_factory) -> str:
    """The smoke results with a manifest value as long as the paper matrix's (its list of comparisons)."""
    d = tmp_path_factory.mktemp("long") / "r"
    shutil.copytree(smoke_results, d, ignore=shutil.ignore_patterns(".runner.lock"))
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["experiment"]["comparisons"] = [f"a_rather_long_comparison_name_number_{i}_" + "x" * 60 for i in range(4)]
    (d / "manifest.json").write_text(json.dumps(manifest))
    from aft_bench.analysis.report import render

    render(d)
    write_bundle(Viewer(d), d.parent / "site")
    return (d.parent / "site" / "index.html").as_uri()


def _as_shown(v: object) -> str:
    """A number as the Experiment page's comparison tables print it (the report's format)."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:.4f}"
    return str(int(v)) if isinstance(v, float) else str(v)


@pytest.mark.parametrize("width", [1280, 1440, 1920, 420])
def test_the_experiment_page_opens_on_the_comparisons_and_nothing_overlaps(browser, long_manifest_bundle: str,
                                                                           smoke_results: Path, artifacts: Path,
                                                                           width: int) -> None:
    pg = browser.new_page(viewport={"width": width, "height": 900})
    pg.errors = []  # type: ignore[attr-defined]
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    try:
        open_page(pg, f"{long_manifest_bundle}#/experiment", artifacts / f"experiment-{width}.png")
        assert pg.evaluate(OVERLAPS_JS) == []
        # the answer comes first: the primary table and its figure above the pending tuples and the manifest
        tops = {name: pg.locator(sel).first.bounding_box()["y"] for name, sel in (
            ("primary", "[data-testid=table-primary]"), ("figure", "figure img"), ("pending", "#pending"),
            ("manifest", "[data-testid=manifest]"))}
        assert tops["primary"] < tops["figure"] < tops["pending"] < tops["manifest"], tops
        if width >= 1280:  # a researcher at a desktop width sees the primary table without scrolling
            assert tops["primary"] < 900
        # the numbers are analysis/'s, row by row
        for family, pcol in (("primary", "p_adjusted"), ("secondary", "p_raw")):
            rows = [r for r in json.loads((smoke_results / "analysis" / f"{family}.json").read_text())
                    if family == "primary" or r["pairs"]]
            shown = pg.locator(f"[data-testid=table-{family}] tr[data-row]")
            assert shown.count() == len(rows)
            for r in rows:
                tr = pg.locator(f"[data-testid=table-{family}] tr[data-row='{r['comparison']}']")
                for col in dict.fromkeys(("pairs", "clusters", "utility_diff", "p_raw", pcol)):
                    td = tr.locator(f"td[data-col={col}]")
                    assert json.loads(td.get_attribute("data-value")) == r[col], (family, r["comparison"], col)
                    assert td.inner_text() == _as_shown(r[col]), (family, r["comparison"], col)
                assert json.loads(tr.locator("td[data-col=ci]").get_attribute("data-value")) == [r["ci_low"], r["ci_high"]]
                assert tr.locator("td[data-col=criterion_met] b").inner_text() == _as_shown(r["criterion_met"])
                fired = json.loads(tr.locator("td[data-col=faults_fired]").get_attribute("data-value"))
                assert fired == [r["treatment_fault_fired_share"], r["control_fault_fired_share"]]
                link = tr.locator("td[data-col=comparison] a").get_attribute("href")
                assert link == f"#/pairs?comparison={r['comparison']}"
    finally:
        pg.close()


def test_known_negative_the_old_side_by_side_layout_fails_the_overlap_check(page, long_manifest_bundle: str,
                                                                            artifacts: Path) -> None:
    open_page(page, f"{long_manifest_bundle}#/experiment")
    page.add_style_tag(content=OLD_LAYOUT)
    page.screenshot(path=str(artifacts / "experiment-old-layout.png"), full_page=True)
    found = page.evaluate(OVERLAPS_JS)
    assert any("counts" in f or "manifest" in f for f in found), found
