"""An offline model for tests and demos: an OpenAI-compatible chat-completions server on 127.0.0.1 that litellm
talks to over real HTTP. It is stateless: each request's conversation is replayed through a policy.

Policies (the request's model name is `fake-<policy>`):
* `capability`: the deterministic agent's policy, from the tools the model is shown (it finds the task's plan
  by the task id and spec in the conversation, as a model would understand the task);
* `naive`: the same, but it ignores every lifecycle and verification tool (a client that only retries); it still
  finds and loads tools through selective discovery, as any working client must;
* `keyless`: naive, and it never sends an idempotency key or an expected version (a client that ignores effect
  semantics and guards: they are in the schema, it leaves them out);
* `blind`: naive, and it ignores discovery too, so under selective discovery it never reaches a business tool (a
  null agent: what the analysis must flag, never read as a result);
* `overclaim`: the capability policy, but it always ends claiming success;
* `invalid`: first an unknown tool, then arguments that are not JSON, then the capability policy;
* `programmer`: where the surface offers `run_program`, it writes the task as one program (from the plan it
  understood and the tools it is shown, never the task's reference program), resubmits it after a failure
  (replay keeps completed writes from running twice) and, once programs are refused for good or its attempts
  are spent, makes the calls its programs did not complete stepwise as the capability policy (as far as the
  results show them: a text result does not); elsewhere it is the capability policy;
* `broken`: the programmer, but its first program has a mistake (`agents/program_writer.py`: an undeclared
  tool, a write labelled READ, a type error after the first write, a runaway loop, or the type error and then a
  repair that changes the completed write, which replay refuses: the stepwise fallback).
Failures are injected at a seeded rate (HTTP 429, 500, a timeout, a dropped connection) and every reply can
be delayed, for the retry tests and the concurrency benchmark.

It also takes what agent frameworks send when they drive a served episode (`aft-bench serve`): message content
as OpenAI content-part arrays; the task as the served `task` prompt (task id, spec and inputs in any system,
developer or user message, after instructions of the framework's own or none); tool results inside a
framework's wrappers (pydantic-ai's `{"error": ...}` for a tool error, a `Fix the errors and try again.` retry
prompt, text around an interface observation), from which it recovers the interface's observation; and once
its report_outcome call has been answered it replies in plain text, so a framework's run ends there.
Setting AFT_FAKE_LLM_LOG to a file appends every request and reply to it as JSON lines (a debugging aid).

It answers `POST …/chat/completions`, plainly or, with `stream: true`, as server-sent chunks the way providers
stream (tool-call deltas, a usage chunk when `stream_options.include_usage` asks); a path or an option it cannot
honour is an HTTP error naming it (`unsupported`), never a body a client would read as an empty answer.
"""

from __future__ import annotations

import hashlib
import json
import os
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
from aft_bench.agents.notices import RESTARTED
from aft_bench.agents.program_writer import (
    REFUSED_BY_DESIGN,
    broken_kind,
    completed_before_failure,
    completed_calls,
    mistake_of,
    plan_calls,
    program_status,
    written_program,
)
from aft_bench.agents.protocol import Action, Call, End
from aft_bench.common.canonical import canonical_json
from aft_bench.common.secrets import redact_json
from aft_bench.interface.interface import KEY_PARAM, VERSION_PARAM
from aft_bench.interface.programs import MAX_ATTEMPTS
from aft_bench.interface.tools import Observation, ToolSpec
from aft_bench.tasks.task import Brief, Script

POLICIES = ("capability", "naive", "keyless", "blind", "overclaim", "invalid", "programmer", "broken")
PROGRAMMERS = frozenset({"programmer", "broken"})
FAILURES = ("429", "500", "timeout", "drop")
LIFECYCLE = frozenset({"get_invocation_status", "resume_invocation", "list_invocations", "verify_effect"})
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


def _text(content: Any) -> str:
    """A message's content as text: a string as is, an OpenAI content-part array as its text parts joined
    (`text`, and the Responses API's `input_text` / `output_text`), None as ''."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_text(p.get("text")) if isinstance(p, dict) else _text(p) for p in content
                       if not isinstance(p, dict) or p.get("type", "text") in ("text", "input_text", "output_text"))
    return str(content)


HEADS = ("OK", "ERROR", "INTERRUPTED", "TIMEOUT")  # the interface's text forms (`OK: {...}`, `ERROR code: ...`)
STATUSES = ("ok", "error", "interrupted", "timeout")  # its result envelope's `status`
RETRY_SUFFIX = "\n\nFix the errors and try again."  # pydantic-ai's retry prompt (RetryPromptPart.model_response)
_HEAD = re.compile(r"(?:^|(?<=[\s\"'`(\[]))(?:OK|ERROR(?: [a-z_]+)?|INTERRUPTED|TIMEOUT): ")


def _is_form(text: str) -> bool:
    return text.partition(": ")[0].split(" ", 1)[0] in HEADS and ": " in text


def observed(content: Any) -> Any:
    """The interface's observation inside a tool message as a framework sent it back: the result envelope (a
    dict) or the interface's text form. What the harness's own `llm` agent sends comes back exactly as
    `_content` reads it; a framework's wrappers are taken off: content parts, pydantic-ai's `{"error": ...}`
    for a tool error and its `Fix the errors and try again.` retry prompt, and text or JSON around an envelope or
    a text form. Text with no observation inside stays the text it is (the policy reads it as a lost response)."""
    text = _text(content)
    for _ in range(8):  # wrappers nest (an error envelope's JSON text inside `{"error": ...}`), but not deeply
        value = _content(text)
        if isinstance(value, dict):
            if set(value) == {"error"}:  # pydantic-ai: an errored tool return as `{"error": <text or value>}`
                inner = value["error"]
                if isinstance(inner, dict) and inner.get("status") in STATUSES:
                    return inner
                text = inner if isinstance(inner, str) else json.dumps(inner, sort_keys=True)
                continue
            return value
        if text.startswith("["):  # a content-part array sent as JSON text
            try:
                parts = json.loads(text)
            except ValueError:
                parts = None
            if isinstance(parts, list) and parts and all(isinstance(p, dict) and "text" in p for p in parts):
                text = _text(parts)
                continue
        if _is_form(text):
            return text.removesuffix(RETRY_SUFFIX)
        if text.endswith(RETRY_SUFFIX):
            text = text.removesuffix(RETRY_SUFFIX)
            continue
        inner = _embedded(text)
        if inner is None or inner == text:
            return text
        text = inner if isinstance(inner, str) else json.dumps(inner, sort_keys=True)
    return text


_PY_ESCAPE = re.compile(r"\\([\\'\"])")


def _embedded(text: str) -> Any:
    """An envelope (JSON object with an interface `status`) or an interface text form inside other text; inside
    a Python repr too (LlamaIndex prints a tool result that way: a quote in the text comes escaped, `\\'` or
    `\\"`, which JSON cannot read as it is)."""
    found = _embedded_as_is(text)
    if found is None and "\\" in text:
        found = _embedded_as_is(_PY_ESCAPE.sub(r"\1", text))
    return found


def _embedded_as_is(text: str) -> Any:
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch == "{":
            try:
                value, _ = decoder.raw_decode(text, i)
            except ValueError:
                continue
            if isinstance(value, dict) and (value.get("status") in STATUSES or set(value) == {"error"}):
                return value
    m = _HEAD.search(text)
    return text[m.start():] if m else None


def _conversation_brief(messages: list[dict[str, Any]]) -> tuple[str, str, str] | None:
    """(task id, spec, the text holding the spec) from the system/developer/user messages: the harness's
    system prompt + brief, or the served `task` prompt after any instructions of a framework's own."""
    task_id = spec = None
    for m in messages:
        if m.get("role") not in ("system", "developer", "user"):
            continue
        text = _text(m.get("content"))
        if task_id is None and (found := re.search(r"Task id: (\S+)", text)):
            task_id = found.group(1)
        if spec is None:
            at = text.find("Task: ")
            while at != -1 and at > 0 and text[at - 1] != "\n":
                at = text.find("Task: ", at + 1)
            if at != -1 and (found := re.match(r"Task: (.*)\nInputs: ", text[at:], flags=re.DOTALL)):
                spec = (found.group(1), text)
        if task_id is not None and spec is not None:
            return task_id, spec[0], spec[1]
    return None


def policy_of(model: str) -> str:
    """The policy a model name selects: `fake-<policy>` after any provider prefix (`openai/fake-capability`)."""
    return model.rsplit("/", 1)[-1].removeprefix("fake-")


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
    # A provider's rate limit: more than `max_inflight` requests at once are answered 429 with `Retry-After`
    # (seconds); with a limit set, each request's arrival is logged, so a test can check the client waited as asked.
    max_inflight: int | None = None
    retry_after_s: float = 1.0
    inflight: int = field(default=0, init=False)
    arrivals: list[tuple[float, str, int]] = field(default_factory=list, init=False)  # (time, body hash, status)
    _rng: random.Random = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def admit(self, body: bytes) -> bool:
        """Count a request in (False: over the rate limit, answer 429); the caller calls `leave` after an admit."""
        if self.max_inflight is None:  # no rate limit: nothing to count or log (a long-lived server stays small)
            return True
        digest = hashlib.sha256(body).hexdigest()[:16]
        with self._lock:
            ok = self.inflight < self.max_inflight
            self.inflight += ok
            self.arrivals.append((time.monotonic(), digest, 200 if ok else 429))
            return ok

    def leave(self) -> None:
        if self.max_inflight is None:
            return
        with self._lock:
            self.inflight -= 1

    def failure(self) -> str | None:
        with self._lock:
            if self.failure_rate and self._rng.random() < self.failure_rate:
                return self._rng.choice(self.failures)
        return None

    def respond(self, request: dict[str, Any]) -> dict[str, Any]:
        policy = self.policy or policy_of(str(request.get("model", "")))
        if policy not in POLICIES:
            raise ValueError(f"unknown fake model policy {policy!r}; known: {', '.join(POLICIES)}")
        messages = request["messages"]
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        reported = self._reported(messages)
        if reported is not None:  # its report was answered: a plain reply, so a framework ends its run here
            text = f"Outcome reported. The tool answered: {reported}"[:400]
            prompt = len(json.dumps(messages)) // 4 + len(json.dumps(request.get("tools") or [])) // 4
            return {"id": f"fake-{turn}", "object": "chat.completion", "created": 0, "model": request.get("model"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": len(text) // 4,
                              "total_tokens": prompt + len(text) // 4}}
        action = self._next(policy, messages, request.get("tools") or [])
        forced = request.get("tool_choice")  # a named tool is obeyed as a real server would: that tool, always
        if isinstance(forced, dict):
            action = self._obey(action, str(forced.get("function", {}).get("name")))
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
        found = _conversation_brief(messages)
        if found is None:
            return End("none", None)
        task_id, spec, brief = found
        script = self.tasks.get((task_id, spec))
        if script is None:
            return End("escalate", "unknown")  # a task this offline model does not know
        schemas = [t["function"] for t in tools  # function tools only (a framework may add others of its own)
                   if isinstance(t.get("function"), dict) and t["function"].get("name") != "report_outcome"]
        described = self._described(messages)
        shown = [s for s in schemas if s["name"] not in described]  # the surface as it was at the start
        if policy in ("naive", "keyless", "blind"):  # no lifecycle or verification tool; blind: no discovery either
            ignored = NOT_BUSINESS if policy == "blind" else LIFECYCLE
            shown = [s for s in shown if s["name"] not in ignored]
        specs = [ToolSpec(s["name"], s.get("description", ""), s.get("parameters", {}),
                          "discovery" if s["name"] in NOT_BUSINESS else "business") for s in shown]
        done = 0
        if policy in PROGRAMMERS and any(s["name"] == "run_program" for s in shown):
            move, done, messages = self._programmer(policy, task_id, script, messages, shown)
            if move is not None:
                return move
        agent = DeterministicAgent(Params(), script)
        _run(agent.start(Brief(task_id, spec, {}), specs))
        if RESTARTED in brief:
            _run(agent.restart(specs))
        if done:  # the stepwise fallback begins after the steps the programs completed, with their own keys
            agent.skip(done)
        obs, sent_noise = _replay(agent, messages)
        if policy == "invalid" and sent_noise < 2:
            return (NOISE[0], "{}") if sent_noise == 0 else ("get_order", NOISE[1])
        action = _run(agent.act(obs))
        if policy == "overclaim" and isinstance(action, End):
            return End("finish", "success")
        if policy == "keyless" and isinstance(action, Call):
            return _without_guards(action)
        return action

    @staticmethod
    def _programmer(policy: str, task_id: str, script: Script, messages: list[dict[str, Any]],
                    shown: list[dict[str, Any]]) -> tuple[Action | None, int, list[dict[str, Any]]]:
        """The program-writing policies' move: a (re)submitted program, or the end once one completed; else None
        with what the stepwise fallback needs: the plan steps the programs completed (as far as their results
        show, or the model knows from where its own mistake was) and the conversation after the last program.
        It falls back once programs are refused for good (replay disabled, the attempt budget spent, or a
        program without a mistake refused by validation) or its attempts are spent."""
        ids = _call_ids(messages, "run_program")
        results, last = [], -1
        for i, m in enumerate(messages):
            if m.get("role") == "tool" and m.get("tool_call_id") in ids:
                results.append(observed(m.get("content")))
                last = i
        statuses = [program_status(r) for r in results]
        if statuses and statuses[-1][0] == "ok":
            return End("finish", "success"), 0, messages
        kind = broken_kind(task_id) if policy == "broken" else None
        mistakes = [mistake_of(kind, j) for j in range(len(results) + 1)]
        ran = sum(1 for status, _ in statuses if status == "error_run")
        refused = any("continue stepwise" in detail or "attempt budget" in detail or  # refused for something
                      (status == "error_refused" and mistakes[j] not in REFUSED_BY_DESIGN)  # it cannot repair
                      for j, (status, detail) in enumerate(statuses))
        if not refused and ran < MAX_ATTEMPTS:
            keyed = [s["name"] for s in shown if KEY_PARAM in (s.get("parameters") or {}).get("properties", {})]
            source = written_program(task_id, script.plan, keyed, mistakes[len(results)])
            return Call("run_program", {"source": source}), 0, messages
        known = completed_before_failure(script.plan, kind) if statuses and statuses[0][0] == "error_run" else 0
        done = max([completed_calls(r) for r in results] + [known])  # what ran, as results or its author know
        calls = plan_calls(script.plan)
        return None, (calls[done][0] if done < len(calls) else len(script.plan)), messages[last + 1:]

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
                seen = observed(m.get("content"))
                content = _content(seen[4:]) if isinstance(seen, str) and seen.startswith("OK: ") else seen
                result = content.get("result", content) if isinstance(content, dict) else None
                if isinstance(result, dict) and "name" in result:
                    out.add(result["name"])
        return out

    @staticmethod
    def _reported(messages: list[dict[str, Any]]) -> str | None:
        """The answer to this conversation's report_outcome call, once it has one that is not an error (the
        episode is over: the model ends its turn in text); None while there is none."""
        calls = _call_ids(messages, "report_outcome")
        for m in messages:
            if m.get("role") == "tool" and m.get("tool_call_id") in calls:
                seen = observed(m.get("content"))
                if isinstance(seen, dict):
                    if seen.get("status") in ("ok", None):
                        return json.dumps(seen, sort_keys=True)
                elif not str(seen).startswith(("ERROR", "TIMEOUT", "INTERRUPTED", "Unknown tool")):
                    return str(seen)
        return None


def _call_ids(messages: list[dict[str, Any]], tool: str) -> set[str]:
    """Ids of the conversation's calls of `tool`."""
    return {c.get("id") for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []
            if c.get("function", {}).get("name") == tool}


def _replay(agent: DeterministicAgent, messages: list[dict[str, Any]]) -> tuple[Observation | None, int]:
    """Drive `agent` through the conversation's earlier turns; returns the observation it is to act on next and
    how many of the `invalid` policy's noise calls were sent."""
    obs: Observation | None = None
    sent_noise = 0
    skip_reply = False
    for m in messages:  # the system/brief messages match none of these
        role = m.get("role")
        if role == "user" and _text(m.get("content")).startswith("The last tool call before the restart"):
            obs = Observation(observed(_text(m["content"]).split("returned: ", 1)[1]))
        elif role == "assistant" and m.get("tool_calls"):
            fn = m["tool_calls"][0]["function"]
            if fn["name"] == NOISE[0] or fn["arguments"] == NOISE[1]:
                sent_noise += 1
                skip_reply = True
                continue
            _run(agent.act(obs))
            obs = None
        elif role == "tool":
            if skip_reply:
                skip_reply = False
                continue
            obs = Observation(observed(m.get("content")))
    return obs, sent_noise


_LOG_LOCK = threading.Lock()


def _log(body: bytes, reply: dict[str, Any]) -> None:
    """Append one exchange to $AFT_FAKE_LLM_LOG, if set (what a framework sent, and the answer), with the machine's
    monotonic clock when it was answered (`t`), which a served episode's wire log shares (analysis/reissues.py)."""
    path = os.environ.get("AFT_FAKE_LLM_LOG")
    if not path:
        return
    try:
        request: Any = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth: logged as text
        request = body.decode(errors="replace")
    with _LOG_LOCK, open(path, "a", encoding="utf-8") as f:
        f.write(redact_json(canonical_json({"request": request, "reply": reply, "t": time.monotonic()})) + "\n")


def _without_guards(call: Call) -> Call:
    """A call as the keyless policy sends it: no idempotency key, no expected version (routed calls included)."""
    def strip(args: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in args.items() if k not in (KEY_PARAM, VERSION_PARAM)}

    if call.tool == "call_tool" and isinstance(call.args.get("arguments"), dict):
        return Call(call.tool, {**call.args, "arguments": strip(call.args["arguments"])})
    return Call(call.tool, strip(call.args))


CHAT_PATH = "/chat/completions"
MAX_BODY_BYTES = 64 * 1024 * 1024  # a request body larger than this is refused (413), never read into memory
MAX_BODY_DEPTH = 128  # nesting of a request body (a chat request with tool schemas uses well under 20 levels)


class BadRequest(ValueError):
    """A request the server refuses with `status` (400, or 413 when too large) and this message, naming the
    header or the body's problem."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def body_length(value: str | None) -> int:
    """The request's Content-Length (0 when absent); BadRequest naming the header when it is not a whole number
    of bytes or exceeds MAX_BODY_BYTES."""
    if value is None:
        return 0
    text = value.strip()
    if not (text.isascii() and text.isdigit()):
        raise BadRequest(f"header 'Content-Length' must be a whole number of bytes (got {value[:40]!r})")
    if int(text) > MAX_BODY_BYTES:
        raise BadRequest(f"header 'Content-Length' is {text[:40]} bytes; this server takes at most {MAX_BODY_BYTES}",
                         413)
    return int(text)


def parse_body(body: bytes) -> Any:
    """The request body as JSON; ValueError when it is not JSON, BadRequest when it is nested deeper than
    MAX_BODY_DEPTH (checked iteratively: deep nesting never reaches a recursive function)."""
    try:
        request = json.loads(body)
    except RecursionError:
        raise BadRequest(f"the request body is nested more than {MAX_BODY_DEPTH} levels deep") from None
    stack: list[tuple[Any, int]] = [(request, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_BODY_DEPTH:
            raise BadRequest(f"the request body is nested more than {MAX_BODY_DEPTH} levels deep")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return request


def unsupported(path: str, request: Any) -> tuple[int, str] | None:
    """Why this server cannot answer a request as asked (status, message naming the path or option), or None.
    It answers chat completions, streamed or not; an option it cannot honour is refused by name, never answered
    with a body a client would read as an empty or a different answer."""
    if not path.split("?", 1)[0].rstrip("/").endswith(CHAT_PATH):
        return 404, (f"fake-llm serves POST .../v1{CHAT_PATH} only; {path.split('?', 1)[0]!r} is not served "
                     f"(point the client's chat-completions API at it)")
    if not isinstance(request, dict):
        return 400, "the request body is not a JSON object"
    stream = request.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        return 400, f"option 'stream' must be true or false (got {stream!r})"
    options = request.get("stream_options")
    if options is not None:
        if not stream:
            return 400, "option 'stream_options' is only allowed when 'stream' is true"
        if not isinstance(options, dict) or set(options) - {"include_usage", "include_obfuscation"}:
            return 400, f"option 'stream_options' can hold only include_usage here (got {options!r})"
    if request.get("n") not in (None, 1):
        return 400, f"option 'n' = {request.get('n')!r} is not supported: this model gives one choice (n = 1)"
    fmt = request.get("response_format")
    if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text"):
        return 400, f"option 'response_format' {fmt!r} is not supported: this model answers text or tool calls"
    if request.get("logprobs") or request.get("top_logprobs"):
        return 400, "option 'logprobs' is not supported: this model has no token probabilities"
    return None


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def stream_events(reply: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """A chat completion as the chunks a provider streams: the role, the text in pieces, each tool call's id and
    name and then its arguments in pieces (tool-call deltas), the finish reason, and the usage last when asked."""
    head = {"id": reply["id"], "object": "chat.completion.chunk", "created": reply["created"], "model": reply["model"]}
    choice = reply["choices"][0]
    message = choice["message"]
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": piece} for piece in _pieces(message.get("content") or "", 24)]
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call["function"]
        deltas.append({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                       "function": {"name": fn["name"], "arguments": ""}}]})
        deltas += [{"tool_calls": [{"index": i, "function": {"arguments": piece}}]}
                   for piece in _pieces(fn["arguments"], 16)]
    events = [{**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    events.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]})
    if include_usage:
        events.append({**head, "choices": [], "usage": reply["usage"]})
    return events


def serve(model: FakeModel, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """Start the server in a daemon thread; `server.server_port` is the port it listens on."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms delayed-ACK stall

        def do_POST(self) -> None:  # noqa: N802 - the http.server interface
            try:
                length = body_length(self.headers.get("Content-Length"))
            except BadRequest as exc:  # the body's end is unknown: answer, then close the connection
                self.close_connection = True
                self._send(exc.status, {"error": {"message": str(exc), "type": "invalid_request_error"}})
                return
            body = self.rfile.read(length)
            if not model.admit(body):
                self._send(429, {"error": {"message": "rate limit: too many requests in flight",
                                           "type": "rate_limit_error"}},
                           {"Retry-After": f"{model.retry_after_s:g}"})
                return
            try:
                self._answer(body)
            finally:
                model.leave()

        def _answer(self, body: bytes) -> None:
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
                request = parse_body(body)
                refused = unsupported(self.path, request)
                if refused is not None:
                    status, message = refused
                    error = {"error": {"message": message, "type": "invalid_request_error"}}
                    _log(body, error)
                    self._send(status, error)
                    return
                reply = model.respond(request)
            except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
                said = str(exc) if isinstance(exc, BadRequest) else f"{type(exc).__name__}: {exc}"
                error = {"error": {"message": said, "type": "invalid_request_error"}}
                _log(body, error)
                self._send(400, error)
                return
            _log(body, reply)
            if request.get("stream"):
                usage = bool((request.get("stream_options") or {}).get("include_usage"))
                self._stream(stream_events(reply, usage))
            else:
                self._send(200, reply)

        def _stream(self, events: list[dict[str, Any]]) -> None:
            """Server-sent events, one HTTP chunk each, then `data: [DONE]`."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for data in [json.dumps(e) for e in events] + ["[DONE]"]:
                event = f"data: {data}\n\n".encode()
                self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
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
