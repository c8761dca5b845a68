"""Evidence freeze: the hashes of every input a config's evidence depends on, written to a lock file next
to the config; `run` on a frozen config refuses when any of them changed, naming each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aft_bench.common.canonical import digest
from aft_bench.common.errors import HarnessError, InputError
from aft_bench.common.paths import PACKAGE
from aft_bench.experiment.config import Matrix
from aft_bench.world.catalog import VOCAB_PATH

# The code that defines the worlds, fault semantics, interface treatments, the agents' contract, the episode
# and the verifiers: every module under these subpackages, named by its path relative to the package, so a
# module moved or added inside them is hashed too and one moved out of them shows as a changed input.
FROZEN_CODE = ("world", "runtime", "interface", "tasks", "judge", "agents", "episode")


def lock_path(config: Path) -> Path:
    return config.with_name(f"{config.stem}.lock.json")


def inputs(matrix: Matrix) -> dict[str, str]:
    """Name -> hash of every frozen input of a matrix."""
    out: dict[str, str] = {
        "config": matrix.config_hash,
        "conditions": matrix.conditions.hash,
        "comparisons": digest([c.model_dump(mode="json") for c in matrix.comparisons]),
    }
    for wid in dict.fromkeys(c.workload for c in matrix.cells):
        wl = matrix.workloads.get(wid)
        out[f"workload:{wid}"] = wl.hash
        for t in wl.tasks:
            out[f"task:{wid}/{t.id}"] = t.hash
        for v in wl.variants:
            out[f"faults:{wid}/{v.id}"] = digest(v.model_dump(mode="json"))
        world = wl.info.world
        src = VOCAB_PATH if world == "catalog" else matrix.worlds_dir / world / "world.toml"
        out[f"world:{world}"] = digest(src.read_text())
    for path in frozen_code():
        out[f"code:{path.relative_to(PACKAGE).as_posix()}"] = digest(path.read_text())
    return dict(sorted(out.items()))


def frozen_code() -> list[Path]:
    """Every module of the frozen subpackages; a subpackage that is missing is a harness error, never skipped."""
    out = []
    for sub in FROZEN_CODE:
        if not (PACKAGE / sub / "__init__.py").is_file():
            raise HarnessError(f"frozen code {PACKAGE / sub} is missing; update experiment/freeze.py FROZEN_CODE")
        out += sorted((PACKAGE / sub).rglob("*.py"))
    return out


def freeze(matrix: Matrix) -> Path:
    """Write the lock file next to the matrix's config."""
    current = inputs(matrix)
    path = lock_path(matrix.path)
    path.write_text(json.dumps({"config": matrix.path.name, "lock_hash": digest(current), "inputs": current},
                               indent=2, sort_keys=True) + "\n")
    return path


def check(matrix: Matrix) -> str | None:
    """The lock hash if the config is frozen and nothing changed; None if not frozen; else InputError."""
    path = lock_path(matrix.path)
    if not path.exists():
        return None
    try:
        lock: dict[str, Any] = json.loads(path.read_text())
        frozen = lock["inputs"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise InputError(path, "<file>", str(path), "unreadable lock file") from None
    current = inputs(matrix)
    changed = sorted(k for k in set(frozen) | set(current) if frozen.get(k) != current.get(k))
    if changed:
        shown = changed[:8] + ([f"... {len(changed) - 8} more"] if len(changed) > 8 else [])
        raise InputError(path, "frozen inputs", shown, "changed since the evidence freeze "
                         "(re-freeze deliberately with `aft-bench freeze`, or restore them)")
    return str(lock["lock_hash"])
