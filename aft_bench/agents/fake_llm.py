"""An offline model for tests and demos: an OpenAI-compatible chat-completions server on 127.0.0.1 that litellm
talks to over real HTTP. It is stateless: each request's conversation is replayed through a policy.

Policies (the request's model name is `fake-<policy>`):
* `capability`: the deterministic agent's policy, from the tools the model is shown (it finds the task's plan
  by the task id and spec in the conversation, as a model would understand the task);
* `naive`: the same, but it ignores every lifecycle and verification tool (a client that only retries);
* `overclaim`: the capability policy, but it always ends claiming success;
* `invalid`: first an unknown tool, then arguments that are not JSON, then the capability policy.
Failures are injected at a seeded rate (HTTP 429, 500, a timeout, a dropped connection) and every reply can
be delayed, for the retry tests and the concurrency benchmark.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from aft_bench.agents.deterministic import DeterministicAgent, Params
from aft_bench.agents.llm import RESTARTED
from aft_bench.agents.protocol import Action, End
from aft_bench.interface.tools import Observation, ToolSpec
from aft_bench.tasks.task import Brief, Script

POLICIES = ("capability", "naive", "overclaim", "invalid")
FAILURES = ("429", "500", "timeout", "drop")
NOT_BUSINESS = frozenset({"get_invocation_status", "resume_invocation", "list_invocations", "verify_effect",
                          "search_tools", "describe_tool"})
NOISE = ("no_such_tool", "{not json")  # what the `invalid` policy sends before it behaves


def _run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Drive a coroutine that never suspends (the deterministic agent's methods)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("the replayed agent suspended")


def index_tasks(worlds_dirs: Sequence[Path]) -> dict[tuple[str, str], Script]:
    """(task id, spec) -> script, over every workload of the given worlds folders."""
    from aft_bench.tasks.workloads import load_workloads

    out: dict[tuple[str, str], Script] = {}
    for d in worlds_dirs:
        if (d / "workloads").is_dir():
            for wl in load_workloads(d).items.values():
                for t in wl.tasks:
                    out.setdefault((t.brief.task_id, t.brief.spec), t.script)
    return out


def _content(text: str) -> Any:
    """A tool result as the interface gave it: a structured dict was sent as JSON, text as text."""
    if text.startswith("{"):
        try:
            value = json.loads(text)
            if isinstance(value, dict):
                return value
        except ValueError:
            pass
    return text


@dataclass
class FakeModel:
    """The policies over a task index; `respond` maps one chat-completions request to its reply body."""

    tasks: dict[tuple[str, str], Script]
    failure_rate: float = 0.0
    failures: tuple[str, ...] = FAILURES
    latency_s: float = 0.0
    seed: int = 0
    timeout_sleep_s: float = 3.0
    policy: str | None = None  # every request gets this policy, whatever its model name says
    _rng: random.Random = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def failure(self) -> str | None:
        with self._lock:
            if self.failure_rate and self._rng.random() < self.failure_rate:
                return self._rng.choice(self.failures)
        return None

    def respond(self, request: dict[str, Any]) -> dict[str, Any]:
        policy = self.policy or str(request.get("model", "")).rsplit("/", 1)[-1].removeprefix("fake-")
        if policy not in POLICIES:
            raise ValueError(f"unknown fake model policy {policy!r}; known: {', '.join(POLICIES)}")
        messages = request["messages"]
        action = self._next(policy, messages, request.get("tools") or [])
        forced = request.get("tool_choice")  # a named tool is obeyed as a real server would: that tool, always
        if isinstance(forced, dict):
            action = self._obey(action, str(forced.get("function", {}).get("name")))
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        name, args = self._tool_call(action)
        prompt = len(json.dumps(messages)) // 4 + len(json.dumps(request.get("tools") or [])) // 4
        return {"id": f"fake-{turn}", "object": "chat.completion", "created": 0, "model": request.get("model"),
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                    "role": "assistant", "content": None,
                    "tool_calls": [{"id": f"call_{turn}", "type": "function",
                                    "function": {"name": name, "arguments": args}}]}}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": 8 + len(args) // 4,
                          "total_tokens": prompt + 8 + len(args) // 4}}

    @staticmethod
    def _tool_call(action: Action | tuple) -> tuple[str, str]:
        """The (name, JSON arguments) an action is sent as; a tuple is the `invalid` policy's noise, as is."""
        if isinstance(action, End):
            return "report_outcome", json.dumps({"action": action.action, "claim": action.claim or "unknown",
                                                 "evidence": "from the tool results above"})
        if isinstance(action, tuple):
            return action
        return action.tool, json.dumps(action.args, sort_keys=True)

    @classmethod
    def _obey(cls, action: Action | tuple, forced: str) -> Action | tuple:
        """The action under a forced tool choice: unchanged if it is that tool, else a report that it could not
        act (`report_outcome` forced) or that tool with empty arguments."""
        if cls._tool_call(action)[0] == forced:
            return action
        return End("escalate", "unknown") if forced == "report_outcome" else (forced, "{}")

    def _next(self, policy: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Action | tuple:
        system, user = messages[0]["content"], messages[1]["content"]
        task_id = re.search(r"Task id: (\S+)", system)
        spec = re.match(r"Task: (.*)\nInputs: ", user, flags=re.S)
        if task_id is None or spec is None:
            return End("none", None)
        script = self.tasks.get((task_id.group(1), spec.group(1)))
        if script is None:
            return End("escalate", "unknown")  # a task this offline model does not know
        schemas = [t["function"] for t in tools if t["function"]["name"] != "report_outcome"]
        described = self._described(messages)
        shown = [s for s in schemas if s["name"] not in described]  # the surface as it was at the start
        if policy == "naive":
            shown = [s for s in shown if s["name"] not in NOT_BUSINESS]
        specs = [ToolSpec(s["name"], s.get("description", ""), s.get("parameters", {}),
                          "discovery" if s["name"] in NOT_BUSINESS else "business") for s in shown]
        agent = DeterministicAgent(Params(), script)
        _run(agent.start(Brief(task_id.group(1), spec.group(1), {}), specs))
        if RESTARTED in user:
            _run(agent.restart(specs))
        obs: Observation | None = None
        sent_noise = 0
        skip_reply = False
        for m in messages[2:]:
            if m.get("role") == "user" and m["content"].startswith("The last tool call before the restart"):
                obs = Observation(_content(m["content"].split("returned: ", 1)[1]))
            elif m.get("role") == "assistant" and m.get("tool_calls"):
                fn = m["tool_calls"][0]["function"]
                if fn["name"] == NOISE[0] or fn["arguments"] == NOISE[1]:
                    sent_noise += 1
                    skip_reply = True
                    continue
                _run(agent.act(obs))
                obs = None
            elif m.get("role") == "tool":
                if skip_reply:
                    skip_reply = False
                    continue
                obs = Observation(_content(m["content"]))
        if policy == "invalid" and sent_noise < 2:
            return (NOISE[0], "{}") if sent_noise == 0 else ("get_order", NOISE[1])
        action = _run(agent.act(obs))
        if policy == "overclaim" and isinstance(action, End):
            return End("finish", "success")
        return action

    @staticmethod
    def _described(messages: list[dict[str, Any]]) -> set[str]:
        """Tools whose schemas describe_tool returned in this conversation (materialized after the start)."""
        asked: dict[str, str] = {}
        out = set()
        for m in messages:
            for c in m.get("tool_calls") or []:
                if c["function"]["name"] == "describe_tool":
                    asked[c["id"]] = c["function"]["arguments"]
            if m.get("role") == "tool" and m.get("tool_call_id") in asked:
                content = _content(m["content"][4:] if m["content"].startswith("OK: ") else m["content"])
                result = content.get("result", content) if isinstance(content, dict) else None
                if isinstance(result, dict) and "name" in result:
                    out.add(result["name"])
        return out


def serve(model: FakeModel, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """Start the server in a daemon thread; `server.server_port` is the port it listens on."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms delayed-ACK stall

        def do_POST(self) -> None:  # noqa: N802 - the http.server interface
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            fail = model.failure()
            if fail == "drop":
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if fail == "timeout":
                time.sleep(model.timeout_sleep_s)
            if model.latency_s:
                time.sleep(model.latency_s)
            if fail in ("429", "500"):
                self._send(int(fail), {"error": {"message": "injected failure", "type": "server_error"}})
                return
            try:
                reply = model.respond(json.loads(body))
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                self._send(400, {"error": {"message": f"{type(exc).__name__}: {exc}", "type": "invalid_request_error"}})
                return
            self._send(200, reply)

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 256  # many clients connect at once (the default backlog of 5 drops connections)
        daemon_threads = True

    server = Server((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="fake-llm").start()
    return server


_OFFLINE: dict[str, Any] = {}
_OFFLINE_LOCK = threading.Lock()


def offline_base() -> str:
    """The URL of this process's embedded offline model (started on first use, on 127.0.0.1)."""
    with _OFFLINE_LOCK:
        if "url" not in _OFFLINE:
            from aft_bench.common.paths import WORLDS

            dirs = [p for p in (Path.cwd() / "worlds", WORLDS) if p.is_dir()]
            server = serve(FakeModel(index_tasks(dirs)))
            _OFFLINE.update(server=server, url=f"http://127.0.0.1:{server.server_port}/v1")
        return str(_OFFLINE["url"])
