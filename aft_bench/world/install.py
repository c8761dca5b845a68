"""Which release of a server a command starts, read from the install itself, never from the server's own word (one
server reported its SDK's version as its own): a Python venv's dist-info beside the command's interpreter or
script, or the package.json of the node package a command's script lies in. Knows nothing of faults or agents."""

from __future__ import annotations

import configparser
import json
import re
import shutil
from pathlib import Path
from typing import Sequence


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _exists(p: Path) -> bool:
    """Whether `p` exists; a command's argument that cannot be a path (too long a name, a NUL) is none."""
    try:
        return p.exists()
    except (OSError, ValueError):
        return False


def _executable(arg: str, cwd: Path | None = None) -> Path | None:
    """The file a command's first word names: a path, or a name on PATH."""
    if "/" in arg:
        p = Path(arg) if Path(arg).is_absolute() or cwd is None else cwd / arg
        return p if _exists(p) else None
    found = shutil.which(arg)
    return Path(found) if found else None


def _site_packages(exe: Path) -> list[Path]:
    """The site-packages of the venv an executable's `bin/` folder belongs to (none outside a venv)."""
    venv = exe.parent.parent
    if not (venv / "pyvenv.cfg").is_file():
        return []
    return sorted(venv.glob("lib/python*/site-packages"))


def _dists(site: Path) -> list[tuple[str, str, Path]]:
    """(name, version, dist-info folder) of every distribution installed in a site-packages."""
    out = []
    for info in sorted(site.glob("*.dist-info")):
        name = version = None
        try:
            for line in (info / "METADATA").read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("Name: "):
                    name = line[6:].strip()
                elif line.startswith("Version: "):
                    version = line[9:].strip()
                elif not line.strip():
                    break
        except OSError:
            continue
        if name and version:
            out.append((name, version, info))
    return out


def _scripts(info: Path) -> set[str]:
    """The console scripts a distribution installs."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # a script's name keeps its capitals
    try:
        parser.read_string((info / "entry_points.txt").read_text(encoding="utf-8", errors="replace"))
    except (OSError, configparser.Error):
        return set()
    return set(parser["console_scripts"]) if parser.has_section("console_scripts") else set()


def _node_package(path: Path, package: str | None = None) -> tuple[str, str] | None:
    """(name, version) of the nearest package.json above a script (the one named `package`, where given)."""
    p = path.resolve()
    for folder in [p, *p.parents] if p.is_dir() else p.parents:
        pj = folder / "package.json"
        if pj.is_file():
            try:
                data = json.loads(pj.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            name, version = data.get("name"), data.get("version")
            if isinstance(name, str) and isinstance(version, str) and (package is None or name == package):
                return name, version
        if folder.name == "node_modules":
            return None
    return None


def _paths(argv: Sequence[str], cwd: Path | None) -> list[Path]:
    out = []
    for a in argv[1:]:
        if "/" in a and not a.startswith("-"):
            p = Path(a) if Path(a).is_absolute() or cwd is None else cwd / a
            if _exists(p) and p.suffix in (".js", ".mjs", ".cjs", ".ts", ".py", ""):
                out.append(p)
    return out


def version_of(package: str, argv: Sequence[str], cwd: Path | None = None) -> str | None:
    """The installed version of `package` that `argv` starts, or None where it cannot be read from the install."""
    if not argv:
        return None
    exe = _executable(argv[0], cwd)
    candidates = [exe] if exe is not None else []
    if exe is not None and exe.is_symlink():
        candidates.append(exe.resolve())
    for c in candidates:
        for site in _site_packages(c):
            for name, version, _ in _dists(site):
                if _norm(name) == _norm(package):
                    return version
        found = _node_package(c, package) if c.suffix in (".js", ".mjs", ".cjs") or "node_modules" in c.parts \
            else None
        if found:
            return found[1]
    for p in _paths(argv, cwd):
        found = _node_package(p, package)
        if found:
            return found[1]
    return None


LAUNCHERS = ("npm", "pnpm", "yarn", "corepack")  # packages whose programs start another's (npx, pnpm dlx): never
# the server (npx's own package.json is npm's, which identified every npx command as npm)


def identify(argv: Sequence[str], cwd: Path | None = None) -> tuple[str, str] | None:
    """(package, version) of the server `argv` starts, from its install: the distribution that installs the
    command's console script (or the only non-tooling one a venv's interpreter runs with `-m`), or the node
    package its script lies in. None where the install says nothing."""
    if not argv:
        return None
    exe = _executable(argv[0], cwd)
    if exe is not None:
        real = exe.resolve()
        for c in dict.fromkeys((exe, real)):  # a link into a venv (pipx, uv tool) is read where it leads too
            for site in _site_packages(c):
                dists = _dists(site)
                for name, version, info in dists:
                    if c.name in _scripts(info):
                        return name, version
                if "-m" in argv[1:-1]:
                    module = argv[list(argv).index("-m") + 1].split(".")[0]
                    for name, version, info in dists:
                        if _norm(name) == _norm(module) or _top_level(info, module):
                            return name, version
        if real.suffix in (".js", ".mjs", ".cjs") or "node_modules" in real.parts:
            found = _node_package(real)
            if found and found[0] not in LAUNCHERS:
                return found
    for p in _paths(argv, cwd):
        found = _node_package(p)
        if found:
            return found
    return None


def _top_level(info: Path, module: str) -> bool:
    try:
        names = (info / "top_level.txt").read_text(encoding="utf-8").split()
    except OSError:
        try:
            names = [_module(line.split(",")[0]) for line in
                     (info / "RECORD").read_text(encoding="utf-8").splitlines() if line]
        except OSError:
            return False
    return module in names


def _module(path: str) -> str:
    """The top-level module a RECORD path installs: its first folder, or a single module file without `.py`."""
    parts = Path(path).parts
    return parts[0].removesuffix(".py") if parts else ""
