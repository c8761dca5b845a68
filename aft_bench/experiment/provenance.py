"""Provenance of a run directory: the resolved config, input hashes, code and package versions, platform."""

from __future__ import annotations

import platform
import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from typing import Any

from aft_bench import __version__
from aft_bench.common.paths import ROOT
from aft_bench.experiment.config import Matrix
from aft_bench.interface.tokens import TOKENIZER_MODEL

PACKAGES = ("pydantic", "litellm", "rank-bm25", "pandas", "pyarrow", "numpy", "scipy", "statsmodels", "sqlalchemy",
            "matplotlib")


def _git() -> dict[str, Any]:
    root = ROOT
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=True)
        return {"git_sha": sha.stdout.strip(), "git_dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.CalledProcessError):
        return {"git_sha": None, "git_dirty": None}


def code_version() -> dict[str, Any]:
    git = _git()
    sha = git["git_sha"] or "unknown"
    return {"package_version": __version__, **git,
            "version": f"{__version__}+{sha[:12]}{'.dirty' if git['git_dirty'] else ''}"}


def package_versions() -> dict[str, str | None]:
    """The installed version of each package the results depend on (read once per process: reading the metadata
    of ten packages parses ten files, about a tenth of a second)."""
    return dict(_package_versions())


@lru_cache(maxsize=1)
def _package_versions() -> tuple[tuple[str, str | None], ...]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return tuple(out.items())


def manifest(matrix: Matrix) -> dict[str, Any]:
    """Provenance of a run directory: resolved config, input hashes, code and package versions."""
    workloads = {w: matrix.workloads.get(w) for w in dict.fromkeys(c.workload for c in matrix.cells)}
    return {
        "config_path": str(matrix.path),
        "config_hash": matrix.config_hash,
        "worlds_dir": str(matrix.worlds_dir),
        "experiment": matrix.resolved(),
        "runs": len(matrix.cells),
        "agents": [a.json for a in matrix.agents],
        "conditions": {n: matrix.conditions.resolve(n).to_dict()
                       for n in dict.fromkeys(c.condition for c in matrix.cells)},
        "conditions_hash": matrix.conditions.hash,
        "comparisons": [c.model_dump(mode="json") for c in matrix.comparisons],
        # how `analyze` adjusts them: the config's families, or all of its comparisons in one Holm family
        "families": [f.model_dump(mode="json") for f in matrix.families],
        "workloads": {w: {"path": str(wl.path), "hash": wl.hash,
                          "tasks": {t.id: t.hash for t in wl.tasks}} for w, wl in workloads.items()},
        "tokenizer": {"counter": "litellm.token_counter", "model": TOKENIZER_MODEL},
        "code": code_version(),
        "packages": package_versions(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
