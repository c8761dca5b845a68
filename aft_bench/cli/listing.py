"""`aft-bench list`: the agents, comparisons, conditions, workloads, worlds and fault kinds the harness knows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aft_bench.agents.registry import describe
from aft_bench.experiment.comparisons import load_comparisons
from aft_bench.interface.mechanisms import load_conditions
from aft_bench.runtime.faults import FAULT_STAGES
from aft_bench.tasks.workloads import load_workloads


def listing(what: str, worlds_dir: Path) -> list[dict[str, Any]]:
    if what == "agents":
        return describe()
    if what == "comparisons":
        return [c.model_dump(mode="json") for c in load_comparisons()]
    if what == "conditions":
        return [{"name": n, **m.to_dict()} for n, m in load_conditions().table.items()]
    if what == "workloads":
        return [{"id": w.id, "world": w.info.world, "tasks": len(w.tasks), "variants": [v.id for v in w.variants],
                 "catalog_sizes": list(w.info.catalog_sizes), "description": w.info.description}
                for w in load_workloads(worlds_dir).items.values()]
    if what == "worlds":
        return [{"id": d.name, "path": str(d / "world.toml")}
                for d in sorted(worlds_dir.iterdir()) if (d / "world.toml").exists()]
    return [{"kind": k, "stages": [str(s) for s in v]} for k, v in FAULT_STAGES.items()]
