"""Where the repository's data lives, relative to the installed (editable) package."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
ROOT = PACKAGE.parent
CONFIGS = ROOT / "configs"
WORLDS = ROOT / "worlds"
REFERENCE = ROOT / "analysis"
