"""A package registry on 127.0.0.1 for the atlas tests: real wheels of a small notes server (one per release, its
behaviour set by its RELEASE; tests/data/atlas_notes_mcp.py) and of a helper library it needs from 2.0 on, served
through PyPI's simple API in its JSON form with upload times (what pip's --uploaded-prior-to reads) and PyPI's JSON
API (what the atlas reads to resolve `since`). Nothing here leaves the machine."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import threading
import zipfile
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SERVER_SOURCE = Path(__file__).parent / "data" / "atlas_notes_mcp.py"
PACKAGE = "atlas-notes-mcp"
HELPER = "atlas-notes-helper"


@dataclass(frozen=True)
class Dist:
    name: str
    version: str
    uploaded: str  # ISO 8601
    files: dict[str, str]  # path in the wheel -> text
    requires: tuple[str, ...] = ()
    scripts: dict[str, str] | None = None  # console script -> module:function

    @property
    def filename(self) -> str:
        return f"{self.name.replace('-', '_')}-{self.version}-py3-none-any.whl"


def wheel(d: Dist) -> bytes:
    """The wheel's bytes: its files, METADATA, WHEEL, entry points and a RECORD with every file's hash."""
    info = f"{d.name.replace('-', '_')}-{d.version}.dist-info"
    files = dict(d.files)
    files[f"{info}/METADATA"] = "Metadata-Version: 2.1\n" f"Name: {d.name}\nVersion: {d.version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in d.requires)
    files[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: aft-bench-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    if d.scripts:
        files[f"{info}/entry_points.txt"] = "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in d.scripts.items())
    record = []
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path, text in sorted(files.items()):
            data = text.encode()
            z.writestr(zipfile.ZipInfo(path, (2025, 1, 1, 0, 0, 0)), data)
            h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={h},{len(data)}")
        record.append(f"{info}/RECORD,,")
        z.writestr(zipfile.ZipInfo(f"{info}/RECORD", (2025, 1, 1, 0, 0, 0)), "\n".join(record) + "\n")
    return buf.getvalue()


def notes_release(version: str, uploaded: str, requires: tuple[str, ...] = ()) -> Dist:
    source = SERVER_SOURCE.read_text(encoding="utf-8").replace('RELEASE = "1.0"', f'RELEASE = "{version}"', 1)
    return Dist(PACKAGE, version, uploaded, {"notes_mcp/__init__.py": source}, requires,
                {"notes-mcp": "notes_mcp:main"})


def helper_release(version: str, uploaded: str) -> Dist:
    return Dist(HELPER, version, uploaded, {"notes_helper/__init__.py": f'VERSION = "{version}"\n'})


# 1.0 duplicates; 2.0 refuses a repeat in text (and needs the helper, whose 2.0 came out after it: the install must
# take helper 1.0); 3.0 dies at start; 4.0 needs a library no registry has
DISTS = (
    notes_release("1.0", "2025-01-01T10:00:00Z"),
    notes_release("2.0", "2025-06-01T10:00:00Z", (HELPER,)),
    notes_release("3.0", "2025-09-01T10:00:00Z"),
    notes_release("4.0", "2025-10-01T10:00:00Z", ("atlas-no-such-library",)),
    helper_release("1.0", "2025-05-01T10:00:00Z"),
    helper_release("2.0", "2025-12-01T10:00:00Z"),
)


class Registry:
    """The registry, served by a thread until `stop`; `simple` and `pypi_json` are what PIP_INDEX_URL and
    AFT_BENCH_PYPI_JSON take. `hits` counts requests (a rerun from the lock and cache asks for nothing)."""

    def __init__(self, dists: tuple[Dist, ...] = DISTS) -> None:
        self.dists = dists
        self.blobs = {d.filename: wheel(d) for d in dists}
        self.hits: list[str] = []
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - the handler's name
                registry.hits.append(self.path)
                status, ctype, body = registry.answer(self.path, self.headers.get("Host", ""))
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.simple = f"{self.base}/simple/"
        self.pypi_json = f"{self.base}/pypi"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, path: str, host: str) -> tuple[int, str, bytes]:
        parts = [p for p in path.split("?")[0].split("/") if p]
        if len(parts) == 2 and parts[0] == "simple":
            mine = [d for d in self.dists if d.name == parts[1]]
            if not mine:
                return 404, "text/plain", b"no such project"
            doc = {"meta": {"api-version": "1.1"}, "name": parts[1], "versions": [d.version for d in mine],
                   "files": [{"filename": d.filename, "url": f"{self.base}/files/{d.filename}",
                              "hashes": {"sha256": hashlib.sha256(self.blobs[d.filename]).hexdigest()},
                              "upload-time": d.uploaded, "requires-python": ">=3.8"} for d in mine]}
            return 200, "application/vnd.pypi.simple.v1+json", json.dumps(doc).encode()
        if len(parts) == 2 and parts[0] == "files" and parts[1] in self.blobs:
            return 200, "application/octet-stream", self.blobs[parts[1]]
        if len(parts) == 3 and parts[0] == "pypi" and parts[2] == "json":
            mine = [d for d in self.dists if d.name == parts[1]]
            if not mine:
                return 404, "application/json", b'{"message": "Not Found"}'
            doc = {"info": {"name": parts[1]}, "releases": {d.version: [{
                "filename": d.filename, "upload_time_iso_8601": d.uploaded, "yanked": False}] for d in mine}}
            return 200, "application/json", json.dumps(doc).encode()
        return 404, "text/plain", b"not here"

    def env(self) -> dict[str, str]:
        """What points pip and the atlas at this registry (and nowhere else)."""
        return {"PIP_INDEX_URL": self.simple, "AFT_BENCH_PYPI_JSON": self.pypi_json, "PIP_NO_CACHE_DIR": "1",
                "PIP_EXTRA_INDEX_URL": ""}

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
