"""Recorded models: `run --record CASSETTE` puts a recording proxy on 127.0.0.1 between the `llm` agents and their
provider, `--replay CASSETTE` answers every call from the cassette instead. Both are real HTTP, so litellm parses
a replayed answer on its real response path. A request is keyed by the hash of its canonical body (what the model
was shown) and the episode that sent it (its run id, in the URL path); each keeps its answers in order (a 429 and
then the answer, say), so retries replay too, episode by episode. A miss
fails closed: HTTP 400 naming the turn, the request hash and the first field where the request differs from the
nearest recorded one. A cassette is one gzip file, versioned and validated on load; it holds request bodies and
answers, never a header of the request, and passes through the redaction choke point."""

from __future__ import annotations

import gzip
import hashlib
import json
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from aft_bench.common.canonical import canonical_json
from aft_bench.common.errors import InputError
from aft_bench.common.secrets import redact_json

FORMAT, VERSION = "aft-bench-cassette", 1
KEPT_HEADERS = ("retry-after", "retry-after-ms", "x-ratelimit-reset-requests", "x-ratelimit-reset-tokens",
                "ratelimit-reset", "content-type")
MISS = "cassette miss"  # how a replay miss names itself in the provider's error (and so in failures.jsonl)


def request_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(body).encode()).hexdigest()[:16]


def turn_of(body: dict[str, Any]) -> int:
    """The model decision a request asks for: assistant messages so far."""
    return sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The first JSON path at which `a` and `b` differ (None when equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}".lstrip(".")
            found = first_difference(a[k], b[k], f"{path}.{k}")
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found is not None:
                return found
        return None if len(a) == len(b) else f"{path}[{min(len(a), len(b))}]".lstrip(".")
    return None if a == b else (path.lstrip(".") or "<body>")


@dataclass
class Cassette:
    """Recorded requests and their answers, in order, by request hash."""

    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, episode: str, body: dict[str, Any], status: int, headers: dict[str, str], answer: Any) -> None:
        h = request_hash(body)
        with self._lock:
            entry = self.entries.setdefault(h, {"request": body, "answers": []})
            entry["answers"].append({"episode": episode, "status": status, "headers": headers, "body": answer})

    def answers(self, h: str, episode: str) -> list[dict[str, Any]]:
        """The recorded answers to request `h` sent by `episode`, in order (those of any episode if it never sent
        it: the same request from a tuple recorded under another run)."""
        every = self.entries[h]["answers"]
        return [a for a in every if a.get("episode") == episode] or every

    def nearest(self, body: dict[str, Any]) -> tuple[str, str] | None:
        """(hash, first differing field) of the recorded request most like `body`: the same turn, the longest
        run of equal messages, then the most equal tools."""
        def score(req: dict[str, Any]) -> tuple[int, int, int]:
            msgs_a, msgs_b = body.get("messages") or [], req.get("messages") or []
            same = next((i for i, (x, y) in enumerate(zip(msgs_a, msgs_b)) if x != y), min(len(msgs_a), len(msgs_b)))
            tools = sum(1 for x, y in zip(body.get("tools") or [], req.get("tools") or []) if x == y)
            return int(turn_of(req) == turn_of(body)), same, tools

        if not self.entries:
            return None
        h, entry = max(self.entries.items(), key=lambda kv: score(kv[1]["request"]))
        return h, first_difference(entry["request"], body) or "<body>"

    def to_bytes(self) -> bytes:
        doc = {"format": FORMAT, "version": VERSION,
               "entries": [{"hash": h, **e} for h, e in sorted(self.entries.items())]}
        return gzip.compress(redact_json(canonical_json(doc)).encode(), mtime=0)

    def save(self, path: Path) -> str:
        """Write atomically; returns the cassette's hash (what replayed rows name)."""
        data = self.to_bytes()
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
        return hashlib.sha256(data).hexdigest()[:16]


def load(path: Path) -> tuple[Cassette, str]:
    """A cassette file, validated (format, version, every entry's hash); returns it and its hash."""
    try:
        data = path.read_bytes()
        doc = json.loads(gzip.decompress(data))
    except FileNotFoundError:
        raise InputError(path, "--replay", str(path), "no such cassette") from None
    except (OSError, EOFError, ValueError) as exc:
        raise InputError(path, "--replay", str(path), f"not a cassette (a gzip JSON file): {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputError(path, "format", str(doc.get("format") if isinstance(doc, dict) else type(doc).__name__),
                         f"not an aft-bench cassette (format {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise InputError(path, "version", str(doc.get("version")), f"this aft-bench reads cassette version {VERSION}")
    cas = Cassette()
    for i, e in enumerate(doc.get("entries") or []):
        if not isinstance(e, dict) or not isinstance(e.get("request"), dict) or not e.get("answers"):
            raise InputError(path, f"entries.{i}", "", "an entry needs a request and at least one answer")
        if request_hash(e["request"]) != e.get("hash"):
            raise InputError(path, f"entries.{i}.hash", str(e.get("hash")), "does not match its request (edited?)")
        cas.entries[e["hash"]] = {"request": e["request"], "answers": e["answers"]}
    return cas, hashlib.sha256(data).hexdigest()[:16]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


def _split(path: str) -> tuple[str, str, str]:
    """`/<route>/e/<episode>/<rest>` as (route, episode, rest); the episode part may be absent."""
    route, _, rest = path.lstrip("/").partition("/")
    episode = ""
    if rest.startswith("e/"):
        episode, _, rest = rest[2:].partition("/")
    return route, episode, rest


def _reply(handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: Any) -> None:
    data = json.dumps(body).encode()
    handler.send_response(status)
    for k, v in headers.items():
        if k.lower() != "content-length":
            handler.send_header(k, v)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def serve_recorder(cassette: Cassette, upstream_of: dict[str, str]) -> ThreadingHTTPServer:
    """A proxy on 127.0.0.1: `POST /<route>/chat/completions` goes to `upstream_of[route]` (with the request's
    own Authorization header, which is never recorded) and every answer is added to `cassette`."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self) -> None:  # noqa: N802 - the http.server interface
            route, episode, rest = _split(self.path)
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            upstream = upstream_of.get(route)
            if upstream is None:
                _reply(self, 404, {}, {"error": {"message": f"no upstream for route {route!r}"}})
                return
            sent = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type",
                                                                             "api-key", "x-api-key")}
            req = urllib.request.Request(f"{upstream.rstrip('/')}/{rest}", data=raw, headers=sent, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=3600) as resp:  # noqa: S310 - the agent's own api_base
                    status, headers, data = resp.status, dict(resp.headers), resp.read()
            except urllib.error.HTTPError as err:
                status, headers, data = err.code, dict(err.headers), err.read()
            except OSError:  # the upstream went away: the client sees a dropped connection, nothing is recorded
                self.close_connection = True
                self.connection.shutdown(2)
                return
            try:
                answer = json.loads(data)
                body = json.loads(raw)
            except ValueError:
                answer = body = None
            kept = {k: v for k, v in headers.items() if k.lower() in KEPT_HEADERS}
            if isinstance(body, dict) and answer is not None:
                cassette.add(episode, body, status, kept, answer)
            self.send_response(status)
            for k, v in kept.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="cassette-recorder").start()
    return server


def serve_player(cassette: Cassette) -> ThreadingHTTPServer:
    """A provider on 127.0.0.1 that answers every request from `cassette`, each key's answers in their recorded
    order (the last one again if asked more often), and refuses a request it never recorded."""
    served: dict[tuple[str, str], int] = {}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self) -> None:  # noqa: N802 - the http.server interface
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                body = json.loads(raw)
            except ValueError:
                _reply(self, 400, {}, {"error": {"message": f"{MISS}: the request is not JSON"}})
                return
            _route, episode, _rest = _split(self.path)
            h = request_hash(body)
            entry = cassette.entries.get(h)
            if entry is None:
                near = cassette.nearest(body)
                where = (f"; it differs from the nearest recorded request ({near[0]}) at {near[1]}" if near
                         else "; the cassette is empty")
                _reply(self, 400, {}, {"error": {"message": f"{MISS}: turn {turn_of(body)}, request {h} was never "
                                                            f"recorded{where}", "type": "invalid_request_error"}})
                return
            answers = cassette.answers(h, episode)
            with lock:
                n = served.get((episode, h), 0)
                served[(episode, h)] = n + 1
            answer = answers[min(n, len(answers) - 1)]
            _reply(self, answer["status"], answer.get("headers") or {}, answer["body"])

        def log_message(self, *args: Any) -> None:
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="cassette-player").start()
    return server
