"""`aft-bench view DIR --bundle OUT`: the same front end as a static site that opens from disk (file://) or any
static host. The data the API would answer is written as `data/<key>.js` files (script tags load from file://
where fetch cannot); the runs table ships as columns and is queried in the page by the same rules."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable

from aft_bench.analysis.report import VIEW_URL
from aft_bench.common import crashpoints
from aft_bench.common.errors import InputError
from aft_bench.common.files import write_folder
from aft_bench.episode.row import SCHEMA
from aft_bench.viewer.model import Viewer, pair_page
from aft_bench.viewer.runs import FACETS, SHOWN
from aft_bench.viewer.server import STATIC

MODULE_TAG = '<script type="module" src="static/app.js"></script>'


def file_key(key: str) -> str:
    """The data file of an API key (the front end's `fileKey`)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", key)


def _script(key: str, data: Any) -> str:
    return f"window.__aft({json.dumps(key)}, {json.dumps(data, separators=(',', ':'), allow_nan=False)});\n"


def index_html(static: Path, directory: Path) -> str:
    """index.html with the app inlined as a module (a module file is refused from file://)."""
    html = (static / "index.html").read_text(encoding="utf-8")
    app = (static / "app.js").read_text(encoding="utf-8")
    if MODULE_TAG not in html or "</script" in app:
        raise RuntimeError("the packaged front end cannot be inlined")
    boot = f"<script>window.AFT_BUNDLE = {json.dumps({'directory': str(directory)})};</script>"
    return html.replace("<!--BUNDLE-->", boot).replace(MODULE_TAG, f'<script type="module">\n{app}</script>')


def _copy_report(report: Path, dest: Path) -> None:
    """DIR/report (if any) inside the bundle, its links to `aft-bench view` turned into links to the bundle's pages."""
    html = report / "report.html"
    if not html.is_file():
        return
    dest.mkdir()
    text = html.read_text(encoding="utf-8").replace(f'href="{VIEW_URL}#', 'href="../index.html#')
    (dest / "report.html").write_text(text, encoding="utf-8")
    for name in ("report.md", *(p.name for p in report.glob("*.png"))):
        if (report / name).is_file():
            shutil.copy(report / name, dest / name)


Progress = Callable[[str, str], Callable[..., Iterable[Any]]]


def _no_progress(label: str, unit: str) -> Callable[..., Iterable[Any]]:
    return lambda items, total=None: items


def write_bundle(viewer: Viewer, out: Path, static: Path = STATIC, progress: Progress = _no_progress) -> dict[str, int]:
    """Write the site into `out` (which must not exist) atomically; returns counts of what it holds. `progress`
    (label, unit) wraps the runs and the pairs as they are written (experiment.progress.progress_for)."""
    if out.exists() or out.is_symlink():
        raise InputError(out, "--bundle", str(out), "already exists; give a new folder")
    if not out.parent.is_dir():
        raise InputError(out, "--bundle", str(out), "its parent folder does not exist")
    counts = {"runs": 0, "pairs": 0}

    def fill(tmp: Path) -> None:
        (tmp / "static").mkdir()
        data = tmp / "data"
        data.mkdir()
        shutil.copy(static / "app.css", tmp / "static" / "app.css")
        (tmp / "index.html").write_text(index_html(static, viewer.directory), encoding="utf-8")

        def put(key: str, value: Any) -> None:
            (data / f"{file_key(key)}.js").write_text(_script(key, value), encoding="utf-8")

        put("experiment", viewer.experiment())
        put("scorecards", viewer.scorecards())
        put("facets", viewer.facets())
        cols = list(dict.fromkeys(SHOWN + FACETS))
        put("runs", {"shown": SHOWN, "columns": viewer.runs.columnar(cols),
                     "types": {c: SCHEMA[c].type for c in cols}})
        put("pairs", viewer.pair_list())
        pair_items, where = viewer.all_pairs()
        paired = {rid for p in pair_items for rid in (p["run_id_treatment"], p["run_id_control"])}
        kept: dict[str, dict[str, Any]] = {}  # what a pair page reads of its runs, kept from the one pass over runs
        for row in progress("bundle: runs", "run")(viewer.runs.iter_rows(), total=len(viewer.runs)):
            run = viewer.build_run(row)
            put(f"run/{row['run_id']}", run)
            if row["run_id"] in paired:
                kept[row["run_id"]] = {"row": run["row"], "turns": run["turns"]}
            counts["runs"] += 1
            crashpoints.hit("bundle_item")
        for p in progress("bundle: pairs", "pair")(pair_items):
            t, c = kept.get(p["run_id_treatment"]), kept.get(p["run_id_control"])
            if t is not None and c is not None:
                put(f"pair/{p['comparison']}/{p['run_id_treatment']}", pair_page(p, where, t, c))
                counts["pairs"] += 1
                crashpoints.hit("bundle_item")
        figures = viewer.directory / "report"
        if figures.is_dir() and any(figures.glob("*.png")):
            (data / "figures").mkdir()
            for png in figures.glob("*.png"):
                shutil.copy(png, data / "figures" / png.name)
        _copy_report(figures, tmp / "report")

    write_folder(out, fill)
    return counts
