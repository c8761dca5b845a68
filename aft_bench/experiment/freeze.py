"""Evidence freeze: the hashes of every input a config's evidence depends on, written to a lock file next
to the config; `run` on a frozen config refuses when any of them changed, naming each."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from aft_bench.common.canonical import digest
from aft_bench.common.errors import HarnessError, InputError, OutputError
from aft_bench.common.files import read_json
from aft_bench.common.paths import PACKAGE
from aft_bench.experiment.config import Matrix
from aft_bench.world.catalog import VOCAB_PATH

# The modules every label depends on: those that build and run one cell (and expand the config into cells),
# with every aft_bench module they import, found by reading the imports (not a hand list), each named by its
# path inside the package. A module added to that import graph is hashed too.
ROOTS = ("aft_bench.experiment.build", "aft_bench.experiment.config")


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
        if wl.external is not None:  # a real server: its world file and the pinned version it runs
            out[f"world:{world}"] = wl.external.hash
            continue
        src = VOCAB_PATH if world == "catalog" else wl.path.parent.parent / world / "world.toml"  # its own folder
        out[f"world:{world}"] = digest(src.read_text())
    for path in frozen_code():
        out[f"code:{path.relative_to(PACKAGE).as_posix()}"] = digest(path.read_text())
    return dict(sorted(out.items()))


def frozen_code(roots: tuple[str, ...] = ROOTS) -> list[Path]:
    """Every module reachable from `roots` through aft_bench imports; a root that is missing is an error."""
    seen: set[Path] = set()
    todo = []
    paths: dict[str, Path | None] = {}  # a module's file, looked up once per call (imports name each many times)

    def module_path(name: str) -> Path | None:
        if name not in paths:
            paths[name] = _module_path(name)
        return paths[name]

    for root in roots:
        path = module_path(root)
        if path is None:
            raise HarnessError(f"frozen root module {root} is missing; update experiment/freeze.py ROOTS")
        todo.append(path)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imported(path):
            dep = module_path(name)
            if dep is not None and dep not in seen:
                todo.append(dep)
    return sorted(seen)


def _module_path(name: str) -> Path | None:
    """The file of an aft_bench module (a package's `__init__.py`), or None if there is none."""
    rel = Path(*name.split(".")[1:])
    for candidate in (PACKAGE / rel.with_suffix(".py"), PACKAGE / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


# An import statement at the start of a line (any indentation: in a function, a branch, a handler):
# `from aft_bench.x import a, b` (names in parentheses over several lines, or continued with a backslash) or
# `import aft_bench.x [as y], ...`. A regular expression over the text, not `ast.parse`: parsing the package
# was two thirds of a run's fixed cost (0.1 s per run). tests/test_freeze.py holds that it finds every import
# the syntax tree has, in every module of the package; a line inside a string that looks like an import can
# only add a module to the lock, never drop one.
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(aft_bench(?:\.\w+)*)[ \t]+import[ \t]*(\([^)]*\)|(?:[^\n\\]|\\\n)*)"
                     r"|import[ \t]+((?:[^\n\\]|\\\n)*))", re.M)
_COMMENT = re.compile(r"#[^\n]*")


def _imported(path: Path) -> set[str]:
    """The aft_bench modules a file imports (anywhere in it), and the packages they sit in."""
    out: set[str] = set()
    for m in _IMPORT.finditer(path.read_text()):
        module, names, plain = m.groups()
        if module is not None:
            listed = _COMMENT.sub("", names).strip("()").replace("\\\n", " ").split(",")
            found = [module] + [f"{module}.{n.split()[0]}" for n in listed if n.split()]
        else:
            listed = _COMMENT.sub("", plain).replace("\\\n", " ").split(";")[0].split(",")
            found = [n.split()[0] for n in listed if n.split()]
        for name in found:
            parts = name.split(".")
            if parts[0] == "aft_bench":
                out.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
    return out


def freeze(matrix: Matrix) -> Path:
    """Write the lock file next to the matrix's config."""
    current = inputs(matrix)
    path = lock_path(matrix.path)
    text = json.dumps({"config": matrix.path.name, "lock_hash": digest(current), "inputs": current},
                      indent=2, sort_keys=True) + "\n"
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp.exists():
            tmp.unlink()
        raise OutputError(path, exc) from None
    return path


def check(matrix: Matrix, current: dict[str, str] | None = None) -> str | None:
    """The lock hash if the config is frozen and nothing changed; None if not frozen; else InputError."""
    path = lock_path(matrix.path)
    if not path.exists():
        return None
    lock = read_json(path, "lock file")
    frozen = lock.get("inputs") if isinstance(lock, dict) else None
    if not isinstance(frozen, dict) or not isinstance(lock.get("lock_hash"), str):
        raise InputError(path, "inputs", type(frozen).__name__, "not an aft-bench lock file (re-freeze it with "
                         "`aft-bench freeze`)")
    current = current if current is not None else inputs(matrix)  # a caller that has them already passes them
    changed = sorted(k for k in set(frozen) | set(current) if frozen.get(k) != current.get(k))
    if changed:
        shown = changed[:8] + ([f"... {len(changed) - 8} more"] if len(changed) > 8 else [])
        raise InputError(path, "frozen inputs", shown, "changed since the evidence freeze "
                         "(re-freeze deliberately with `aft-bench freeze`, or restore them)")
    return str(lock["lock_hash"])
