"""Hostile or scripted OpenAI-compatible providers for tests: real HTTP on 127.0.0.1, each defined by one
function from the request (body and headers) to the answer (status and JSON body)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[dict[str, Any], Mapping[str, str]], tuple[int, dict[str, Any]]]


def tool_reply(name: str, arguments: str, content: str | None = None, prompt_tokens: int = 3) -> dict[str, Any]:
    """A chat-completions body whose one choice calls `name` with `arguments` (a JSON text, sent as is)."""
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "stub", "choices": [{
        "index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": content, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1}}


def error_reply(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "server_error"}}


@contextmanager
def provider(answer: Answer) -> Iterator[str]:
    """Serve `answer` on a free 127.0.0.1 port for the block; yields the api_base (…/v1)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            status, body = answer(request, self.headers)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()


REPORT_ESCALATE = json.dumps({"action": "escalate", "claim": "unknown"})


def answered(request: dict[str, Any]) -> bool:
    """Has a tool result come back in this conversation?"""
    return any(m.get("role") == "tool" for m in request.get("messages", []))
