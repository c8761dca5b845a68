"""Sphinx configuration of the aft-bench documentation (MyST Markdown, Furo). Build: `make docs`."""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent

project = "aft-bench"
author = "aft-bench contributors"
copyright = "2026, aft-bench contributors"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/__pycache__"]
html_theme = "furo"
html_title = "aft-bench"
html_static_path: list[str] = []
myst_heading_anchors = 4  # `page.md#a-heading` links are checked like page links
myst_enable_extensions = ["colon_fence", "deflist"]
nitpicky = True  # every reference must resolve; with -W a broken link or anchor fails the build
language = "en"

# Pages written elsewhere: docs/distributed.md (scale-out) is linked only while it exists, so the build
# passes on a checkout without it.
OPTIONAL = {"distributed": HERE / "distributed.md"}


def _drop_missing(app, docname, source):  # type: ignore[no-untyped-def]
    """While an optional page is absent: drop its toctree entry and turn links to it into plain text."""
    text = source[0]
    for name, path in OPTIONAL.items():
        if not path.exists():
            text = "".join(ln for ln in text.splitlines(keepends=True) if not (docname == "index" and ln.strip() == name))
            text = re.sub(rf"\[([^\]]*)\]\((?:\.\./)*{name}\.md[^)]*\)", r"\1", text)
    source[0] = text


def setup(app):  # type: ignore[no-untyped-def]
    app.connect("source-read", _drop_missing)
    return {"parallel_read_safe": True}
