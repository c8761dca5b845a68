"""Scorecards in the viewer (issue 42), in a real browser: a results folder's scorecards/ shown as the command
prints them (classes per treatment, the re-issue's answer, the annotations' verdict), what changed between two
versions of one server, and a file that is not a scorecard named instead of breaking the page; the same in the
static bundle."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from aft_bench.scorecard.card import measure
from aft_bench.viewer.bundle import write_bundle
from aft_bench.viewer.model import Viewer
from aft_bench.world.external import load_external
from test_viewer_browser import CHROMIUM, Served, open_page, playwright_api

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason=f"no Chromium at {CHROMIUM}: apt-get install -y chromium (CI installs it)")


@pytest.fixture(scope="module")
def folder(smoke_results: Path, tmp_path_factory) -> Path:
    """The smoke results with two scorecards of the memory server: one measured now, one a later 'version' in which
    create_entities duplicates (written by hand: the viewer shows what the files say), and one broken file."""
    out = tmp_path_factory.mktemp("sc") / "results"
    shutil.copytree(smoke_results, out)
    cards = out / "scorecards"
    cards.mkdir()
    card = measure(load_external(ROOT / "worlds" / "memory"), ("bare", "key")).to_dict()
    (cards / "memory-2026.8.31.json").write_text(json.dumps(card))
    later = json.loads(json.dumps(card))
    later["version"] = "2026.9.1"
    for t in later["tools"]:
        if t["tool"] == "create_entities":
            t["outcomes"][0].update(cls="duplicate", realized=2)
            t["contradictions"] = []
    (cards / "memory-2026.9.1.json").write_text(json.dumps(later))
    (cards / "notes.json").write_text('{"not": "a scorecard"}')
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def _check(browser, url: str) -> None:
    pg = browser.new_page(viewport={"width": 1280, "height": 900})
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    open_page(pg, url + "#/scorecards")
    first = pg.locator('[data-testid="scorecard-memory-2026.8.31"]')
    row = first.locator('tr[data-tool="create_entities"]')
    assert row.locator('[data-col="bare"]').inner_text() == "silent success"
    assert row.locator('[data-col="key"]').inner_text() == "safe"
    assert row.locator('[data-col="reissue"]').inner_text() == "'[]'"
    assert "idempotentHint=false, but the re-issue made no second effect" in row.locator('[data-col="contradictions"]').inner_text()
    later = pg.locator('[data-testid="scorecard-memory-2026.9.1"] tr[data-tool="create_entities"]')
    assert later.locator('[data-col="bare"]').inner_text() == "DUPLICATE"
    changes = pg.locator('[data-testid="changes-memory"]').inner_text()
    assert "2026.8.31 → 2026.9.1" in changes and "create_entities (bare): silent success in 2026.8.31 -> DUPLICATE" \
        in changes
    assert "notes.json: not a scorecard" in pg.inner_text("#app")
    assert pg.get_attribute("nav a[data-nav=scorecards]", "class") == "active"
    pg.close()


def test_the_served_viewer_shows_the_scorecards(browser, folder: Path) -> None:
    s = Served(Viewer(folder))
    try:
        _check(browser, s.url)
    finally:
        s.stop()


def test_the_bundle_shows_them_too_and_a_folder_without_scorecards_says_how(browser, folder: Path,
                                                                             smoke_results: Path,
                                                                             tmp_path: Path) -> None:
    write_bundle(Viewer(folder), tmp_path / "site")
    _check(browser, (tmp_path / "site" / "index.html").as_uri())
    s = Served(Viewer(smoke_results))
    try:
        pg = browser.new_page()
        pg.errors = []
        open_page(pg, s.url + "#/scorecards")
        assert "No scorecards in this folder" in pg.inner_text('[data-testid="no-scorecards"]')
        pg.close()
    finally:
        s.stop()
