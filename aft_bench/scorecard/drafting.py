"""A world folder drafted from a live server (what `aft-bench init-world` and the atlas share): the server started
once in an empty folder to list its tools, the install read for its package and version, a built-in probe picked
from the command, each tool that needs no arguments measured, and `world.toml` written. Nothing is left of a draft
that failed."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from aft_bench.common.files import write_atomic
from aft_bench.common.scratch import scratch_dir
from aft_bench.scorecard.effects import measure_effects
from aft_bench.world import install
from aft_bench.world.draft import ProbeDraft, draft, pick_probe
from aft_bench.world.external import expand, load_external
from aft_bench.world.mcp_stdio import StdioServer

WORLD_FILE = "world.toml"


class NothingToDraft(Exception):
    """The server lists no tools."""


@dataclass(frozen=True)
class Drafted:
    """What a draft found: the live tools, the server's own word about itself, the install's package and version
    (None: unreadable), the probe picked and the tools measured with no arguments (name -> it wrote)."""

    path: Path
    listed: list[dict[str, Any]]
    info: dict[str, Any]
    installed: tuple[str, str] | None
    probe: ProbeDraft
    measured: dict[str, bool]


def list_tools(command: Sequence[str], folder: Path, timeout_s: float, env: dict[str, str] | None = None,
               root: Path | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The server started once in an empty folder (or `root`, prepared by the caller), with `env`, `{root}`
    expanded: its named tools and its serverInfo (ServerFailed: it did not start or answer; what it said on
    stderr is in the error, redacted)."""
    with tempfile.TemporaryDirectory(prefix="aft-init-", dir=scratch_dir()) as tmp:
        if root is None:
            root = Path(tmp) / "root"
            root.mkdir()
        with StdioServer([expand(c, root, "", folder) for c in command], cwd=root, timeout_s=timeout_s,
                         env={k: expand(v, root, "", folder) for k, v in (env or {}).items()},
                         stderr_path=Path(tmp) / "server.log") as srv:
            listed, info = srv.tools(), dict(srv.server_info)
    return [t for t in listed if isinstance(t, dict) and isinstance(t.get("name"), str) and t.get("name")], info


def draft_folder(name: str, command: Sequence[str], target: Path, timeout_s: float) -> Drafted:
    """Draft `target/world.toml` for the server `command` starts (`target` absolute; every folder this made is
    removed again where drafting fails)."""
    listed, info = list_tools(command, target, timeout_s)
    if not listed:
        raise NothingToDraft("the server lists no tools: there is nothing to draft")
    installed = install.identify([expand(c, Path("/nonexistent-aft-root"), "", target) for c in command])
    probe = pick_probe(command, installed[0] if installed else None)
    made = not target.exists()
    first = next((d for d in reversed([target, *target.parents]) if not d.exists()), None)  # the outermost made
    target.mkdir(parents=True, exist_ok=True)
    try:
        write_atomic(target / WORLD_FILE, draft(name, command, listed, info, installed, probe, {}))
        measured = measure_effects(load_external(target), listed)
        write_atomic(target / WORLD_FILE, draft(name, command, listed, info, installed, probe, measured))
    except BaseException:
        if made:  # every folder this made (nothing left of a failed draft)
            shutil.rmtree(first or target, ignore_errors=True)
        else:
            (target / WORLD_FILE).unlink(missing_ok=True)
        raise
    return Drafted(target / WORLD_FILE, listed, info, installed, probe, measured)
