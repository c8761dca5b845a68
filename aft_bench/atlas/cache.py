"""Each release installed once, into a folder of its own under the atlas's cache: a venv for a PyPI release (wheels
only: an sdist would run its setup code at install), an npm prefix for an npm release (its install scripts off
unless the entry allows them). A folder counts as installed only once its marker is written, last; two processes
installing the same release wait for each other on a lock; what pip or npm printed is kept, redacted, as the
reason an install failed. After the install nothing here reads the network."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from aft_bench.atlas.spec import Entry
from aft_bench.common.canonical import digest
from aft_bench.common.secrets import redact
from aft_bench.world import install

MARKER = ".aft-atlas-installed.json"
INSTALL_TIMEOUT_S = 900.0
CACHE_ENV = "AFT_BENCH_ATLAS_CACHE"  # where releases are installed (default: .atlas/ of the project)


class InstallFailed(Exception):
    """The release could not be installed: the cell is untestable, with this as its reason."""


def default_cache() -> Path:
    from aft_bench.common.paths import ROOT

    return Path(os.path.abspath(os.environ.get(CACHE_ENV) or ROOT / ".atlas"))


def _what(entry: Entry, release: str, until: str | None) -> dict[str, Any]:
    """Everything an install holds depends on: a change to any of it is another install."""
    return {"registry": entry.registry, "package": entry.package, "version": release, "pins": list(entry.pins),
            "scripts": entry.scripts, "as_of": until}


def folder(cache: Path, entry: Entry, release: str, until: str | None = None) -> Path:
    """Where `release` of the entry's package is installed (a scoped npm name's '/' as '+'); where it has pins or
    install scripts, a short hash of them too, so another entry's install of the same release is another folder."""
    base = f"{entry.package.replace('/', '+')}-{release}"
    if entry.pins or entry.scripts:
        base += "-" + digest(_what(entry, release, until))[:10]
    return cache / entry.registry / base


def installed(cache: Path, entry: Entry, release: str, until: str | None = None) -> Path | None:
    """The release's folder where its install finished, as this entry asks for it, else None."""
    f = folder(cache, entry, release, until)
    try:
        said = json.loads((f / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return f if said == _what(entry, release, until) else None


def _tail(text: bytes) -> str:
    lines = [ln for ln in text.decode(errors="replace").splitlines() if ln.strip()]
    return redact(" | ".join(lines[-4:])[-600:]) or "(it printed nothing)"


def _env(pip_cutoff: bool) -> dict[str, str]:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "npm_config_update_notifier": "false",
           "npm_config_fund": "false", "npm_config_audit": "false"}
    if pip_cutoff:  # a folder of wheels or a file:// index has no upload times, so a cutoff would not hold there:
        env["PIP_CONFIG_FILE"] = os.devnull  # pip reads only its index (PyPI, or $PIP_INDEX_URL)
        env.pop("PIP_FIND_LINKS", None)
    return env


def _run(argv: list[str], cwd: Path, what: str, pip_cutoff: bool = False) -> None:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, timeout=INSTALL_TIMEOUT_S, env=_env(pip_cutoff))
    except subprocess.TimeoutExpired:
        raise InstallFailed(f"{what} did not finish within {INSTALL_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise InstallFailed(f"{what}: cannot run {argv[0]!r}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        raise InstallFailed(f"{what} exited {done.returncode}: {_tail(done.stderr or done.stdout)}")


def cutoff(published: str | None) -> str | None:
    """What an install of a release published at `published` may take: files uploaded up to a day later (the day a
    user who installed it then would have got; a dependency's later major release, mcp 2.x for a server written
    for 1.x, would otherwise break every old release at start). None: no cutoff known."""
    if not published:
        return None
    try:
        t = datetime.fromisoformat(published.replace("Z", "+00:00"))
    except ValueError:
        return None
    t = t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)  # PyPI's bare upload_time is UTC
    return (t.astimezone(timezone.utc) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pypi(dest: Path, entry: Entry, release: str, until: str | None) -> None:
    _run([sys.executable, "-m", "venv", "--without-pip", str(dest)], dest.parent, "python -m venv")
    # this environment's pip installs into the release's venv (`--python`): it knows --uploaded-prior-to
    _run([sys.executable, "-m", "pip", "--python", str(dest / "bin" / "python"), "install", "--quiet", "--no-input",
          "--only-binary", ":all:", *(["--uploaded-prior-to", until] if until else []), *entry.pins,
          f"{entry.package}=={release}"], dest, f"pip install {entry.package}=={release}", pip_cutoff=bool(until))


def _npm(dest: Path, entry: Entry, release: str, until: str | None) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise InstallFailed("npm is not installed (apt-get install npm)")
    dest.mkdir()
    (dest / "package.json").write_text('{"private": true}\n', encoding="utf-8")
    _run([npm, "install", "--prefix", str(dest), "--no-save", "--no-package-lock", "--loglevel=error",
          *([] if entry.scripts else ["--ignore-scripts"]), *([f"--before={until}"] if until else []), *entry.pins,
          f"{entry.package}@{release}"], dest,
         f"npm install {entry.package}@{release}")


def _read_version(dest: Path, entry: Entry) -> str | None:
    """The version the install itself holds (never the server's word)."""
    if entry.registry == "npm":
        try:
            pkg = json.loads((dest / "node_modules" / entry.package / "package.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return str(pkg.get("version"))
    return install.version_of(entry.package, (str(dest / "bin" / "python"),))


def ensure(cache: Path, entry: Entry, release: str, published: str | None = None) -> Path:
    """The release's install folder, installing it first where it is not there (InstallFailed: why not); with the
    release's publication time, its dependencies as they were then (`cutoff`)."""
    until = cutoff(published)
    done = installed(cache, entry, release, until)
    if done is not None:
        return done
    dest = folder(cache, entry, release, until)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.with_name(dest.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process installing it: wait, then use what it made
        done = installed(cache, entry, release, until)
        if done is not None:
            return done
        shutil.rmtree(dest, ignore_errors=True)  # a half-made install (killed mid-way) is made again
        try:
            (_pypi if entry.registry == "pypi" else _npm)(dest, entry, release, until)
            found = _read_version(dest, entry)
            if found != release:
                raise InstallFailed(f"the install holds {entry.package} {found}, not {release}")
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        marker = _what(entry, release, until)
        tmp = dest / (MARKER + ".tmp")
        tmp.write_text(json.dumps(marker, sort_keys=True), encoding="utf-8")
        os.replace(tmp, dest / MARKER)
    return dest
