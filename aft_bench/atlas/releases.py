"""Which releases a registry has published (the only step of an atlas that reads a registry's index besides the
install): PyPI's JSON API and the npm registry's package document, pre-releases and yanked or deprecated
releases left out, in version order with the time each was published, and written into the atlas's lock so a rerun needs
no network to know what to measure."""

from __future__ import annotations

import json
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from aft_bench.atlas.spec import RELEASE
from aft_bench.common.errors import InputError
from aft_bench.common.files import write_atomic
from aft_bench.common.secrets import json_text

PYPI = os.environ.get("AFT_BENCH_PYPI_JSON", "https://pypi.org/pypi")  # {PYPI}/{package}/json
NPM = os.environ.get("AFT_BENCH_NPM_REGISTRY", "https://registry.npmjs.org")  # {NPM}/{package}
TIMEOUT_S = 30.0
LOCK_VERSION = 1


@dataclass(frozen=True)
class Release:
    version: str
    published: str  # ISO 8601, as the registry says it


class RegistryFailed(Exception):
    """The registry could not be read (no network, no such package): the entry cannot be resolved."""


def _get(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:  # noqa: S310 (a registry's https URL)
            return json.loads(r.read(20_000_000))
    except (OSError, ValueError) as exc:
        raise RegistryFailed(f"{url}: {exc}") from None


def _stable(version: str, registry: str = "pypi") -> bool:
    """A stable release whose string can name a folder (a registry is untrusted: no separator, no space); npm's
    pre-releases (`1.0.0-1`, `2.0.0-beta`) carry a '-', which PEP 440 would read as a post-release."""
    if not isinstance(version, str) or not RELEASE.fullmatch(version) or (registry == "npm" and "-" in version):
        return False
    try:
        v = Version(version)
    except InvalidVersion:
        return False
    return not (v.is_prerelease or v.is_devrelease)


def published(registry: str, package: str) -> list[Release]:
    """Every stable release of `package`, lowest version first (a registry's publication times are not always in
    release order: npm's record a republished document's time)."""
    out: list[Release] = []
    if registry == "pypi":
        doc = _get(f"{PYPI}/{package}/json")
        if not isinstance(doc, dict) or not isinstance(doc.get("releases") or {}, dict):
            raise RegistryFailed(f"{PYPI}/{package}/json: not a PyPI project document")
        for version, files in (doc.get("releases") or {}).items():
            live = [f for f in files if isinstance(f, dict) and not f.get("yanked")] if isinstance(files, list) else []
            if live and _stable(version):
                out.append(Release(version, min(str(f.get("upload_time_iso_8601") or f.get("upload_time"))
                                                for f in live)))
    else:
        doc = _get(f"{NPM}/{package.replace('/', '%2f')}")
        if not isinstance(doc, dict) or not isinstance(doc.get("versions") or {}, dict):
            raise RegistryFailed(f"{NPM}/{package}: not an npm package document")
        times = doc.get("time") if isinstance(doc.get("time"), dict) else {}
        for version, meta in (doc.get("versions") or {}).items():
            if _stable(version, "npm") and isinstance(meta, dict) and not meta.get("deprecated") and version in times:
                out.append(Release(version, str(times[version])))
    return sorted(out, key=lambda r: Version(r.version))


def since(releases: list[Release], first: str, last: int | None) -> list[Release]:
    """The releases from `first` on (in version order), the newest `last` of them where given."""
    start = next((i for i, r in enumerate(releases) if r.version == first), None)
    if start is None:
        raise RegistryFailed(f"no stable release {first} (published: {', '.join(r.version for r in releases[-8:])})")
    picked = releases[start:]
    return picked[-last:] if last is not None else picked


def lock_path(atlas_path: Path) -> Path:
    return atlas_path.with_suffix(".lock.json")


def read_lock(path: Path) -> dict[str, Any]:
    """The lock's resolved entries by server name ({} where there is no lock yet)."""
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(path, "<file>", "", f"not a readable atlas lock: {exc}") from None
    if not isinstance(doc, dict) or doc.get("lock") != LOCK_VERSION or not isinstance(doc.get("servers"), dict):
        raise InputError(path, "lock", doc.get("lock") if isinstance(doc, dict) else "", "not an atlas lock of "
                         f"version {LOCK_VERSION}: delete it to resolve the releases again")
    for name, held in doc["servers"].items():  # a lock is a file anyone may edit: what it names reaches paths
        rels = held.get("releases") if isinstance(held, dict) else None
        when = held.get("published", {}) if isinstance(held, dict) else None
        bad = (not isinstance(rels, list) or not all(isinstance(r, str) and RELEASE.fullmatch(r) for r in rels)
               or not isinstance(when, dict) or not all(isinstance(v, str) for v in when.values()))
        if bad:
            raise InputError(path, f"servers.{name}", rels if isinstance(rels, list) else "", "not releases as a "
                             "lock holds them (version strings, each with its publication time): delete the entry "
                             "to resolve it again")
    return dict(doc["servers"])


def write_lock(path: Path, servers: dict[str, Any]) -> None:
    write_atomic(path, json_text({"lock": LOCK_VERSION, "servers": servers}), redacted=True)
