"""The layout is the design: subpackages import only downward (each declares what it may import), the agent's
view of a task cannot reach the judge's or the script's, frozen code is hashed wherever it moves, and every
agent runs on the one loop."""

from __future__ import annotations

import ast
import asyncio
import gc
import re
from pathlib import Path
from typing import Any, Sequence

import pytest

from aft_bench.agents.protocol import Call, End, Usage
from aft_bench.common.cache import BoundedCache
from aft_bench.common.errors import HarnessError
from aft_bench.episode.episode import Setup, run_sync
from aft_bench.experiment import executors, freeze
from aft_bench.interface.mechanisms import load_conditions
from aft_bench.interface.tools import Observation, ToolSpec
from aft_bench.runtime.faults import FaultSchedule, FaultSpec
from aft_bench.tasks.task import Brief, Clause, Criteria, PlanStep, Policy, Script, Step, Task
from aft_bench.tasks.workloads import load_workloads

from conftest import ROOT, WORLDS, task_of

PACKAGE = ROOT / "aft_bench"
# From the bottom up: a subpackage may import only subpackages before it.
ORDER = ["common", "world", "runtime", "interface", "routing", "tasks", "judge", "agents", "episode", "experiment", "serving",
         "scorecard", "atlas", "analysis",
         "viewer", "cli"]


def _declared(init: Path) -> set[str] | None:
    """The subpackages an `__init__.py` docstring says may be imported (None: anything)."""
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    m = re.search(r"May import: (.+?)(?:\n\n|$)", doc, re.S)
    if m is None:
        raise AssertionError(f"{init}: the docstring does not say what the subpackage may import")
    text = m.group(1)
    if text.startswith("anything"):
        return None
    return set(re.findall(r"aft_bench\.([a-z_]+)", text))


def _imports(path: Path) -> set[str]:
    """The aft_bench subpackages a module imports, anywhere in it (functions and TYPE_CHECKING blocks too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
        for name in names:
            parts = name.split(".")
            if parts[0] == "aft_bench" and len(parts) > 1:
                out.add(parts[1])
    return out


def violations(package: Path, order: list[str]) -> list[str]:
    """Every import that goes upward or is not declared, and every module outside a subpackage."""
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if len(rel.parts) == 1:
            if rel.name != "__init__.py":
                found.append(f"{rel}: a module outside every subpackage")
            continue
        sub = rel.parts[0]
        if sub not in order:
            found.append(f"{rel}: subpackage '{sub}' is not in the layer order")
            continue
        allowed = _declared(package / sub / "__init__.py")
        for target in _imports(path) - {sub, "__version__"}:
            if target not in order or order.index(target) > order.index(sub):
                found.append(f"{rel}: imports aft_bench.{target}, a layer above '{sub}'")
            elif allowed is not None and target not in allowed:
                found.append(f"{rel}: imports aft_bench.{target}, which '{sub}' does not declare")
    for sub in order:
        allowed = _declared(package / sub / "__init__.py")
        for target in allowed or ():
            if target not in order or order.index(target) >= order.index(sub):
                found.append(f"{sub}/__init__.py: declares aft_bench.{target}, which is not below it")
    return found


def test_imports_only_go_downward_and_as_declared() -> None:
    assert violations(PACKAGE, ORDER) == []


def test_the_layer_check_catches_an_upward_and_an_undeclared_import(tmp_path: Path) -> None:
    pkg = tmp_path / "aft_bench"
    for sub, may in (("low", "nothing from aft_bench."), ("mid", "aft_bench.low."), ("high", "aft_bench.low.")):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text(f'"""A layer.\n\nMay import: {may}\n"""\n')
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("from aft_bench.mid import b\n")  # upward
    (pkg / "high" / "c.py").write_text("def f():\n    from aft_bench.mid.b import x\n")  # below, undeclared
    (pkg / "mid" / "b.py").write_text("import aft_bench.low.a\n")  # fine
    (pkg / "flat.py").write_text("")
    found = violations(pkg, ["low", "mid", "high"])
    assert any("low/a.py: imports aft_bench.mid, a layer above" in f for f in found)
    assert any("high/c.py: imports aft_bench.mid, which 'high' does not declare" in f for f in found)
    assert any("flat.py: a module outside every subpackage" in f for f in found)
    assert not any(f.startswith("mid/b.py") for f in found)


def _module_names(package: Path) -> dict[str, Path]:
    out = {}
    for path in package.rglob("*.py"):
        rel = path.with_suffix("").relative_to(package.parent)
        out[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = path
    return out


def _module_imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that module `name` imports, anywhere in it (function-level and relative ones too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            candidates = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for c in candidates:
            while c and c not in modules:
                c = c.rpartition(".")[0]
            if c and c != name:
                out.add(c)
    return out


def import_cycles(package: Path) -> list[list[str]]:
    """Every set of modules that import one another round a circle (strongly connected components, Tarjan)."""
    modules = _module_names(package)
    graph = {n: sorted(_module_imports(n, p, modules)) for n, p in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, 0)]
        while work:  # iterative: the package's import chains are deeper than is safe to recurse
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
            if i < len(graph[v]):
                work.append((v, i + 1))
                w = graph[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    cycles.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return cycles


def test_no_module_imports_itself_round_a_circle() -> None:
    assert import_cycles(PACKAGE) == []


def test_the_cycle_check_finds_a_circle_through_a_function_level_import(tmp_path: Path) -> None:
    pkg = tmp_path / "aft_bench"
    (pkg / "agents").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "agents" / "__init__.py").write_text("")
    (pkg / "agents" / "llm.py").write_text("def base():\n    from aft_bench.agents.fake import b\n")
    (pkg / "agents" / "fake.py").write_text("from .llm import RESTARTED\nb = 1\n")
    (pkg / "agents" / "alone.py").write_text("from aft_bench.agents import llm\n")  # imports in, not round
    assert import_cycles(pkg) == [["aft_bench.agents.fake", "aft_bench.agents.llm"]]
    (pkg / "agents" / "fake.py").write_text("b = 1\n")
    assert import_cycles(pkg) == []


# -- the task split by audience ----------------------------------------------------------------------------
HIDDEN = (Task, Criteria, Script, PlanStep, Step, Clause, Policy)


def _reachable(root: Any) -> list[Any]:
    seen, todo, out = {id(root)}, [root], []
    while todo:
        obj = todo.pop()
        out.append(obj)
        for ref in gc.get_referents(obj):
            if id(ref) not in seen and not isinstance(ref, type) and not callable(ref):
                seen.add(id(ref))
                todo.append(ref)
    return out


def test_the_brief_cannot_reach_criteria_script_or_task() -> None:
    tasks = [t for wl in load_workloads(WORLDS).items.values() for t in wl.tasks]
    assert len(tasks) >= 50
    for task in tasks:
        brief = task.brief
        assert isinstance(brief, Brief) and set(vars(brief)) == {"task_id", "spec", "inputs"}
        leaked = [type(o).__name__ for o in _reachable(brief) if isinstance(o, HIDDEN)]
        assert leaked == [], (task.id, leaked)
        assert task.criteria.goal == task.goal and task.script.plan == task.plan


def test_the_reachability_check_finds_a_leak() -> None:
    task = load_workloads(WORLDS).get("response_loss").tasks[0]
    leaky = Brief(task.id, task.spec, {"hint": task.criteria})
    assert any(isinstance(o, Criteria) for o in _reachable(leaky))
    with pytest.raises(TypeError):
        task.brief.inputs["x"] = 1  # type: ignore[index]


# -- one loop for every agent ---------------------------------------------------------------------------------
class ForeverReader:
    """A model-like agent that suspends on every step and reads the same record until stopped."""

    def __init__(self) -> None:
        self.restarts = 0
        self.shown: list[str] = []

    async def start(self, brief: Brief, surface: Sequence[ToolSpec]) -> None:
        self.shown = [t.name for t in surface]

    async def act(self, observation: Observation | None) -> Call | End:
        await asyncio.sleep(0)  # really suspends: the loop runs it on an event loop
        return Call("get_order", {"order_id": "o1"})

    async def restart(self, surface: Sequence[ToolSpec]) -> None:
        self.restarts += 1

    def usage(self) -> Usage:
        return Usage(model_calls=2, prompt_tokens=10) + Usage(model_calls=1, completion_tokens=5, cost_usd=0.5)

    def take_records(self) -> list:
        return []


def test_an_async_agent_runs_on_the_loop_and_the_budget_ends_it(worlds) -> None:
    world, task = task_of(worlds, "payments/charge-o1")
    agent = ForeverReader()
    result = run_sync(Setup(world, task, mechanisms=load_conditions().resolve("I0")), agent)
    assert "charge_payment" in agent.shown and "verify_effect" not in agent.shown
    assert result.played.tool_calls == task.budget and result.played.turns == task.budget + 1
    assert result.labels.terminal_action == "budget_exhausted" and result.labels.terminal_claim is None
    assert result.played.usage == Usage(model_calls=3, prompt_tokens=10, completion_tokens=5, cost_usd=0.5)


def test_state_loss_restarts_the_agent_once_and_the_trace_says_so(worlds) -> None:
    world, task = task_of(worlds, "exports/export-d1")
    agent = ForeverReaderOfExports()
    sched = FaultSchedule(id="sl", faults=(FaultSpec(kind="state_loss", op="start_export", unit=1),))
    result = run_sync(Setup(world, task, sched, mechanisms=load_conditions().resolve("I4")), agent)
    assert agent.restarts == 1 and agent.lost_seen == 1
    assert [e.kind for e in result.events].count("agent_restart") == 1


class ForeverReaderOfExports(ForeverReader):
    def __init__(self) -> None:
        super().__init__()
        self.lost_seen = 0
        self.sent = False

    async def act(self, observation: Observation | None) -> Call | End:
        if observation is not None and observation.lost:
            self.lost_seen += 1
        if not self.sent:
            self.sent = True
            return Call("start_export", {"dataset_id": "d1", "format": "csv"})
        return End("finish", "unknown")


# -- seams ------------------------------------------------------------------------------------------------------
def test_frozen_code_is_what_the_cell_builder_imports_by_relative_path() -> None:
    names = {p.relative_to(PACKAGE).as_posix() for p in freeze.frozen_code()}
    label_deciders = {"experiment/build.py", "experiment/config.py", "tasks/workloads.py", "world/catalog.py",
                      "interface/mechanisms.py", "judge/labels.py", "agents/deterministic.py", "runtime/pipeline.py",
                      "episode/loop.py", "world/sqlite_store.py"}
    assert label_deciders <= names
    assert not {n for n in names if n.startswith(("analysis/", "cli/"))} and "experiment/runner.py" not in names


def test_a_module_added_to_the_import_graph_is_frozen_and_a_missing_root_is_an_error(tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "aft_bench"
    (pkg / "a").mkdir(parents=True)
    for f, text in (("__init__.py", ""), ("a/__init__.py", ""), ("a/root.py", "from aft_bench.a import dep\n"),
                    ("a/dep.py", "def f():\n    import aft_bench.a.late\n"), ("a/late.py", ""), ("a/loose.py", "")):
        (pkg / f).write_text(text)
    monkeypatch.setattr(freeze, "PACKAGE", pkg)
    got = {p.relative_to(pkg).as_posix() for p in freeze.frozen_code(("aft_bench.a.root",))}
    assert got == {"a/__init__.py", "a/root.py", "a/dep.py", "a/late.py"}
    with pytest.raises(HarnessError, match="vanished"):
        freeze.frozen_code(("aft_bench.a.vanished",))


def _ast_imports(text: str) -> set[str]:
    """The reference the import scan is held to: every aft_bench import statement in the syntax tree."""
    import ast

    out: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "aft_bench":
                out.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
    return out


def test_the_import_scan_finds_every_import_the_syntax_tree_has(tmp_path) -> None:
    """The freeze reads imports with a regular expression (parsing was most of a run's fixed cost): in every module
    of the package it finds at least what `ast` finds (more is only a string that looks like an import), and the
    forms that span lines or sit in blocks are found."""
    for path in sorted(PACKAGE.rglob("*.py")):
        missed = _ast_imports(path.read_text()) - freeze._imported(path)
        assert not missed, f"{path}: the import scan misses {sorted(missed)}"
    f = tmp_path / "m.py"
    f.write_text("from aft_bench.a import (b,  # why\n    c as d,\n)\nif x:\n    import aft_bench.e.f as g, aft_bench.h\n"
                 "from aft_bench.i import \\\n    j\ntry:\n    pass\nexcept E:\n    from aft_bench.k import l  # m\n"
                 "import os, aft_bench.n\n")
    want = {"aft_bench.a", "aft_bench.a.b", "aft_bench.a.c", "aft_bench.e", "aft_bench.e.f", "aft_bench.h",
            "aft_bench.i", "aft_bench.i.j", "aft_bench.k", "aft_bench.k.l", "aft_bench.n"}
    assert _ast_imports(f.read_text()) == want and freeze._imported(f) == want


def test_workers_never_fork_the_runner() -> None:
    assert executors.context().get_start_method() in ("forkserver", "spawn")


def test_bounded_cache_keeps_the_most_recent() -> None:
    cache: BoundedCache[int, int] = BoundedCache(2)
    made = []

    def make(k: int) -> Any:
        return lambda: made.append(k) or k * 10

    assert [cache.get(k, make(k)) for k in (1, 2, 1, 3, 1, 2)] == [10, 20, 10, 30, 10, 20]
    assert made == [1, 2, 3, 2] and len(cache) == 2  # 2 was evicted by 3 (1 was used more recently)


def test_the_committed_paper_lock_matches_the_code_and_data() -> None:
    """configs/paper_deterministic.lock.json is real: re-freeze it on purpose (`aft-bench freeze`) after a
    change to anything a label depends on, or this fails naming what changed."""
    from aft_bench.experiment.config import load_matrix

    matrix = load_matrix(ROOT / "configs" / "paper_deterministic.toml", WORLDS)
    assert freeze.lock_path(matrix.path).exists()
    assert freeze.check(matrix) is not None
