"""Worlds and their tasks, loaded once from a worlds directory (calibration and tests address tasks as
`world/task`)."""

from __future__ import annotations

from pathlib import Path

from aft_bench.common.errors import InputError
from aft_bench.tasks.task import Task, load_tasks
from aft_bench.world.manifest import World, find_world


class WorldSet:
    """Worlds and their tasks, loaded once from a worlds directory."""

    def __init__(self, worlds_dir: Path) -> None:
        self.dir = worlds_dir
        self._worlds: dict[str, World] = {}
        self._tasks: dict[str, tuple[Task, ...]] = {}

    def world(self, world_id: str) -> World:
        if world_id not in self._worlds:
            self._worlds[world_id] = find_world(self.dir, world_id)
        return self._worlds[world_id]

    def tasks(self, world_id: str) -> tuple[Task, ...]:
        if world_id not in self._tasks:
            self._tasks[world_id] = load_tasks(self.dir / world_id / "tasks.toml", self.world(world_id))
        return self._tasks[world_id]

    def task(self, ref: str, path: Path, field: str) -> tuple[World, Task]:
        world_id, task_id = ref.split("/", 1)
        for t in self.tasks(world_id):
            if t.id == task_id:
                return self.world(world_id), t
        raise InputError(path, field, ref, "unknown task")

    def world_ids(self) -> list[str]:
        return sorted(d.name for d in self.dir.iterdir() if (d / "world.toml").exists() and (d / "tasks.toml").exists())
