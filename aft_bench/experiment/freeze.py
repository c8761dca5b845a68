"""Evidence freeze: the hashes of every input a config's evidence depends on, written to a lock file next
to the config; `run` on a frozen config refuses when any of them changed, naming each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aft_bench.canonical import digest
from aft_bench.catalog import VOCAB_PATH
from aft_bench.config import Plan
from aft_bench.errors import InputError

PACKAGE = Path(__file__).resolve().parent
# The code that defines fault semantics, interface treatments, the controller contract and the verifiers.
FROZEN_CODE = ("stages.py", "faults.py", "pipeline.py", "backend.py", "interface.py", "controller.py",
               "labels.py", "tasks.py", "world.py", "ranking.py", "tokens.py")


def lock_path(config: Path) -> Path:
    return config.with_name(f"{config.stem}.lock.json")


def inputs(plan: Plan) -> dict[str, str]:
    """Name -> hash of every frozen input of a plan."""
    out: dict[str, str] = {
        "config": plan.config_hash,
        "conditions": plan.conditions.hash,
        "comparisons": digest([c.model_dump(mode="json") for c in plan.comparisons]),
    }
    for wid in dict.fromkeys(c.workload for c in plan.cells):
        wl = plan.workloads.get(wid)
        out[f"workload:{wid}"] = wl.hash
        for t in wl.tasks:
            out[f"task:{wid}/{t.id}"] = t.hash
        for v in wl.variants:
            out[f"faults:{wid}/{v.id}"] = digest(v.model_dump(mode="json"))
        world = wl.info.world
        src = VOCAB_PATH if world == "catalog" else plan.worlds_dir / world / "world.toml"
        out[f"world:{world}"] = digest(src.read_text())
    for name in FROZEN_CODE:
        out[f"code:{name}"] = digest((PACKAGE / name).read_text())
    return dict(sorted(out.items()))


def freeze(plan: Plan) -> Path:
    """Write the lock file next to the plan's config."""
    current = inputs(plan)
    path = lock_path(plan.path)
    path.write_text(json.dumps({"config": plan.path.name, "lock_hash": digest(current), "inputs": current},
                               indent=2, sort_keys=True) + "\n")
    return path


def check(plan: Plan) -> str | None:
    """The lock hash if the config is frozen and nothing changed; None if not frozen; else InputError."""
    path = lock_path(plan.path)
    if not path.exists():
        return None
    try:
        lock: dict[str, Any] = json.loads(path.read_text())
        frozen = lock["inputs"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise InputError(path, "<file>", str(path), "unreadable lock file") from None
    current = inputs(plan)
    changed = sorted(k for k in set(frozen) | set(current) if frozen.get(k) != current.get(k))
    if changed:
        shown = changed[:8] + ([f"... {len(changed) - 8} more"] if len(changed) > 8 else [])
        raise InputError(path, "frozen inputs", shown, "changed since the evidence freeze "
                         "(re-freeze deliberately with `aft-bench freeze`, or restore them)")
    return str(lock["lock_hash"])
