"""The task behind a run, found again from the manifest's workload files: its s0 (for the terminal-state diff)
and its criteria (to attribute unintended effects). Used only when the files' hashes equal those the run
recorded; otherwise the viewer says the task changed since and shows the state without a diff."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aft_bench.common.cache import BoundedCache
from aft_bench.common.canonical import digest
from aft_bench.tasks.task import Criteria
from aft_bench.tasks.workloads import Workload, load_workload, world_for

_WORKLOADS: BoundedCache[tuple[str, str], Workload | None] = BoundedCache(32)


def _workload(manifest: dict[str, Any], workload_id: str) -> Workload | None:
    info = (manifest.get("workloads") or {}).get(workload_id) or {}
    path, worlds = info.get("path"), manifest.get("worlds_dir")
    if not path or not worlds or not Path(path).is_file():
        return None

    def make() -> Workload | None:
        try:
            return load_workload(Path(path), Path(worlds))
        except Exception:  # noqa: BLE001 - a workload that no longer loads: no s0, said so
            return None

    return _WORKLOADS.get((str(path), str(worlds)), make)


def task_context(manifest: dict[str, Any], row: dict[str, Any], run_start: dict[str, Any]) -> dict[str, Any]:
    """{s0, criteria, note}: s0 when its hash equals the trace's s0_hash, criteria when the task hash matches."""
    wl = _workload(manifest, str(row.get("workload")))
    if wl is None:
        return {"s0": None, "criteria": None, "note": "the workload file is not available here: no s0 to diff against"}
    task = next((t for t in wl.tasks if t.id == row.get("task_id")), None)
    if task is None:
        return {"s0": None, "criteria": None, "note": f"task {row.get('task_id')} is no longer in {wl.path.name}"}
    criteria: Criteria | None = task.criteria if task.hash == row.get("task_hash") else None
    try:
        world = world_for(wl, task, row.get("catalog_size"), int(row.get("fault_seed") or 0))
        s0 = world.initial_state(task.state)
    except Exception:  # noqa: BLE001
        return {"s0": None, "criteria": criteria, "note": "the task's world could not be built here"}
    if digest(s0) != run_start.get("s0_hash"):
        return {"s0": None, "criteria": criteria, "note": "the world or task changed since the run (s0 hash differs)"}
    return {"s0": s0, "criteria": criteria, "note": None}


def state_diff(s0: dict[str, Any], final: dict[str, Any]) -> list[dict[str, Any]]:
    """Records and permissions that differ between s0 and the terminal state, field by field."""
    out: list[dict[str, Any]] = []
    r0, r1 = s0.get("records") or {}, final.get("records") or {}
    for coll in sorted(set(r0) | set(r1)):
        a, b = r0.get(coll) or {}, r1.get(coll) or {}
        for key in sorted(set(a) | set(b)):
            ref = f"{coll}/{key}"
            if key not in a:
                out.append({"ref": ref, "change": "added", "after": b[key]})
            elif key not in b:
                out.append({"ref": ref, "change": "removed", "before": a[key]})
            elif a[key] != b[key]:
                fields = sorted(f for f in set(a[key]) | set(b[key]) if a[key].get(f) != b[key].get(f))
                out.append({"ref": ref, "change": "changed",
                            "fields": {f: [a[key].get(f), b[key].get(f)] for f in fields}})
    p0, p1 = s0.get("permissions") or {}, final.get("permissions") or {}
    for who in sorted(set(p0) | set(p1)):
        lost, gained = sorted(set(p0.get(who, [])) - set(p1.get(who, []))), sorted(set(p1.get(who, [])) - set(p0.get(who, [])))
        if lost or gained:
            out.append({"ref": f"permissions/{who}", "change": "permissions", "lost": lost, "gained": gained})
    return out
