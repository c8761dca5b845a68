"""A scratch copy of HEAD for the mutant scripts (`check_survivors.py`, `outside_mutants.py`): a `git worktree` in a
temporary folder, removed on exit unless kept, so nothing in this checkout is changed."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def scratch_tree(prefix: str, keep: bool = False) -> Iterator[Path]:
    """A worktree of HEAD under a new temporary folder; with `keep`, left in place (its path is printed)."""
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    copy = scratch / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(copy), "HEAD"], cwd=ROOT, check=True)
    try:
        yield copy
    finally:
        if keep:
            print(f"kept: {copy}")
        else:
            subprocess.run(["git", "worktree", "remove", "--force", str(copy)], cwd=ROOT, check=False)
            shutil.rmtree(scratch, ignore_errors=True)
