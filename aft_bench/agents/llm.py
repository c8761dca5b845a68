"""The `llm` agent: any litellm model drives the episode through tool calls.

The model sees a system prompt with the policy it must follow, the task as an agent sees it (the brief), and
the interface's tools as function schemas (plus `report_outcome`, which ends the episode). Every tool call
goes through the surface like any agent's. Provider failures (rate limits, timeouts, connection and server
errors) are retried here with exponential backoff and jitter, litellm's own retries off; a call that still
fails raises ProviderError, so the runner records a failure and the tuple stays pending. Accounting is what
the provider reported: tokens, latency, retries, and litellm's cost when it knows the price (else None).
"""

from __future__ import annotations

import asyncio
import contextvars
import email.utils
import hashlib
import json
import os
import random
import re
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from aft_bench.agents.endpoints import endpoint, limiter
from aft_bench.agents.notices import RESTARTED
from aft_bench.agents.protocol import ACTIONS, CLAIMS, Action, Call, End, Usage
from aft_bench.common.secrets import REDACTED, holds_secret, redact
from aft_bench.interface.tokens import count_tokens, litellm_module
from aft_bench.interface.tools import Observation, ToolSpec, described_schema
from aft_bench.tasks.task import Brief

OFFLINE = "offline"  # api_base that means: the embedded offline model server (agents/fake_llm.py)
REMINDER = "Act with one of the tools, or end the episode by calling report_outcome."

SYSTEM = """You operate tools against a live system to complete one task for a user.
Policy:
- Use only the tools you are given; call one tool at a time.
- A write may have taken effect even when its response was lost or reported an error: find out before you repeat it.
- Do not act after the task's preconditions fail (a record changed under you, a permission is missing): abort or refuse.
- When you are done, call report_outcome with the action (finish, abort, refuse or escalate), your claim
  (success, failure or unknown) and the evidence for it. Claim success only when you have evidence the
  requested effect holds.
Task id: {task_id}"""

REPORT = {"name": "report_outcome",
          "description": "End the episode: your terminal action, your claim about the task's outcome, and evidence.",
          "parameters": {"type": "object", "additionalProperties": False, "required": ["action", "claim"],
                         "properties": {"action": {"type": "string", "enum": list(ACTIONS)},
                                        "claim": {"type": "string", "enum": list(CLAIMS)},
                                        "evidence": {"type": "string"}}}}


class Params(BaseModel):
    """Parameters of the `llm` agent. The key is named by its environment variable, never given."""

    model: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/@+-]*$",
                       description="litellm model string, e.g. openai/gpt-4o-mini")
    api_base: str | None = Field(default=None, description="OpenAI-compatible endpoint; 'offline' = embedded fake")
    api_key_env: str | None = Field(default=None, description="name of the environment variable holding the key")
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)  # no NaN or infinite setting
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="sampling temperature")
    max_tokens: int = Field(default=1024, ge=1, description="completion tokens per model call")
    max_turns: int = Field(default=30, ge=1, description="model decisions per episode before budget_exhausted")
    max_episode_tokens: int | None = Field(default=None, ge=1, description="prompt+completion tokens per episode")
    concurrency: int = Field(default=8, ge=1, le=256, description="episodes in flight at once on one event loop")
    adaptive: bool = Field(default=False, description="AIMD: halve the endpoint's in-flight model calls on a rate "
                           "limit, add one after a window of successes; `concurrency` stays the ceiling")
    timeout_s: float = Field(default=60.0, gt=0, le=3600, description="seconds per provider call, the whole call "
                             "(connect, first byte and complete body)")
    retries: int = Field(default=4, ge=0, le=20, description="harness retries of a transient provider failure")
    backoff_s: float = Field(default=1.0, ge=0, le=600, description="first backoff; doubles per retry, with jitter")
    max_backoff_s: float = Field(default=60.0, ge=0, le=3600, description="no single backoff waits longer")
    input_usd_per_mtok: float | None = Field(default=None, ge=0, description="declared prompt price (USD per "
                                             "million tokens) for a model litellm does not price, e.g. self-hosted")
    output_usd_per_mtok: float | None = Field(default=None, ge=0, description="declared completion price; "
                                              "given together with input_usd_per_mtok")
    tool_choice: str | None = Field(default=None, min_length=1, pattern=r"^[A-Za-z0-9_.-]+$",
                                    description="'auto' or 'required' as the provider takes them, or a tool's name "
                                    "forced on every turn (protocol smoke tests on servers without 'required'); "
                                    "unset: not sent, the provider's default")

    @field_validator("model", "api_base")
    @classmethod
    def _no_credentials(cls, value: str | None, info: ValidationInfo) -> str | None:
        """A key is named only by `api_key_env`: one inside the model string or the URL would be written to every
        row, trace and manifest."""
        if value is not None and holds_secret(value):
            raise ValueError(f"{info.field_name} carries a credential; put the key in an environment variable and "
                             f"name it with api_key_env")
        return value

    @field_validator("api_base")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None or value == OFFLINE:
            return value
        url = urlsplit(value)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError("api_base is 'offline' or an http(s) URL with a host, e.g. http://127.0.0.1:8000/v1")
        if url.username is not None or url.password is not None:
            raise ValueError("api_base carries user:password; name the key with api_key_env instead")
        return value

    @model_validator(mode="after")
    def _prices_together(self) -> Params:
        if (self.input_usd_per_mtok is None) != (self.output_usd_per_mtok is None):
            raise ValueError("input_usd_per_mtok and output_usd_per_mtok are declared together or not at all")
        return self

    @model_serializer(mode="wrap")
    def _spec(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The spec that goes into run keys: `tool_choice` came after results existed, so while unset it is left
        out and those results keep their keys."""
        data = handler(self)
        if data.get("tool_choice") is None:
            data.pop("tool_choice", None)
        if data.get("max_backoff_s") == 60.0:  # likewise added later: its default stays out of run keys
            data.pop("max_backoff_s", None)
        if data.get("adaptive") is False:  # likewise
            data.pop("adaptive", None)
        return data

    def tool_choice_arg(self) -> dict[str, Any]:
        """The request's `tool_choice`, if any."""
        if self.tool_choice is None:
            return {}
        if self.tool_choice in ("auto", "required"):
            return {"tool_choice": self.tool_choice}
        return {"tool_choice": {"type": "function", "function": {"name": self.tool_choice}}}

    def pricing(self) -> dict[str, float]:
        """litellm's custom-pricing arguments for a declared price (per token), else none: litellm's own."""
        if self.input_usd_per_mtok is None or self.output_usd_per_mtok is None:
            return {}
        return {"input_cost_per_token": self.input_usd_per_mtok / 1e6,
                "output_cost_per_token": self.output_usd_per_mtok / 1e6}


class ProviderError(Exception):
    """A provider call failed after every retry (or with a non-transient error): the tuple stays pending."""


class CallDeadline(Exception):
    """A provider call that did not complete within `timeout_s` (transient: retried like a timeout)."""


TRANSIENT = ("CallDeadline", "RateLimitError", "Timeout", "APIConnectionError", "InternalServerError", "ServiceUnavailableError",
             "BadGatewayError", "APIError")


def _unreachable(failure: BaseException, base: str | None) -> str | None:
    """'connection refused at HOST:PORT' (or 'no such host: HOST') when the provider was never reached: the
    error's chain of causes, or its text, holds the socket's refusal or a failed name lookup."""
    chain: list[BaseException] = []
    seen: BaseException | None = failure
    while seen is not None and len(chain) < 12:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    text = " ".join(f"{type(e).__name__}: {e}" for e in chain)
    from urllib.parse import urlsplit

    where = urlsplit(base or "")
    host = where.hostname or "the provider"
    port = where.port or (443 if where.scheme == "https" else 80)
    if any(isinstance(e, ConnectionRefusedError) for e in chain) or "Connection refused" in text \
            or "ConnectionRefusedError" in text:
        return f"connection refused at {host}:{port}"
    if "Name or service not known" in text or "nodename nor servname" in text or "getaddrinfo failed" in text:
        return f"no such host: {host}"
    return None


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _seconds(value: str, now: float) -> float | None:
    """A header's wait in seconds: a number of seconds, an HTTP date, or a duration such as `6m0s` or `20ms`."""
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parts = _DURATION.findall(value)
    if parts and "".join(n + u for n, u in parts) == value.replace(" ", ""):
        return sum(float(n) * _UNIT_S[u] for n, u in parts)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now) if when is not None else None


def asked_wait(exc: BaseException, now: float | None = None) -> float | None:
    """How long the provider asked to wait before a retry (Retry-After in ms, seconds or as an HTTP date; else
    the longest of the common rate-limit reset headers), or None when it said nothing usable."""
    headers = getattr(exc, "litellm_response_headers", None) or getattr(getattr(exc, "response", None),
                                                                        "headers", None)
    if not headers:
        return None
    now = time.time() if now is None else now
    get = {str(k).lower(): str(v) for k, v in dict(headers).items()}.get
    if (ms := get("retry-after-ms")) is not None and (v := _seconds(ms, now)) is not None:
        return v / 1000.0
    if (ra := get("retry-after")) is not None and (v := _seconds(ra, now)) is not None:
        return v
    resets = [v for h in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens", "ratelimit-reset")
              if (raw := get(h)) is not None and (v := _seconds(raw, now)) is not None]
    return max(resets) if resets else None


EPISODE: contextvars.ContextVar[str] = contextvars.ContextVar("aft_bench_episode", default="-")  # its run id
ROUTE_ENV = "AFT_BENCH_MODEL_ROUTE"  # JSON {api_base or "": URL}: where a run sends model calls (a cassette)


def routed_base(api_base: str | None) -> str | None:
    """The URL model calls go to: a recording proxy or a replaying cassette when the run routes this api_base
    there (set by `run --record/--replay`, inherited by loop processes), else the embedded offline model for
    `offline`, else `api_base` itself. Not part of the agent's spec: the same runs either way."""
    table = os.environ.get(ROUTE_ENV)
    if table:
        routes = json.loads(table)
        if (api_base or "") in routes:  # the episode in the path: a cassette keeps each episode's answers apart
            return f"{routes[api_base or '']}/e/{EPISODE.get()}"
    if api_base == OFFLINE:
        from aft_bench.agents.fake_llm import offline_base

        return offline_base()
    return api_base


# json.dumps(value, sort_keys=True) with its encoder built once (json.dumps builds one per call with any option)
_SORTED = json.JSONEncoder(sort_keys=True)


def _field(obj: Any, name: str) -> Any:
    """`obj.name`, or None where a response, message or error leaves it out (one place for litellm's optional
    attributes: a reply without usage, an exception without a status)."""
    return getattr(obj, name, None)


def _provider_message(exc: BaseException) -> str:
    """What a provider said with a non-transient error (a replay miss names its request), redacted and short."""
    text = str(getattr(exc, "message", "") or "")
    return f": {redact(' '.join(text.split()))[:400]}" if text else ""


def preflight(params: Params) -> str | None:
    """Why this agent cannot run here, or None: an unset key variable, a model litellm cannot route."""
    if params.api_key_env is not None and not os.environ.get(params.api_key_env):
        return f"api_key_env names {params.api_key_env}, which is not set in the environment"
    if params.api_base is None:
        try:
            litellm_module().get_llm_provider(params.model)
        except Exception:  # noqa: BLE001 - litellm raises its own BadRequestError here
            return f"litellm does not know the model {params.model!r}; give api_base for an OpenAI-compatible server"
    return None


def api_key(params: Params) -> str | None:
    """The key from the named variable; a local OpenAI-compatible server without one gets a placeholder (the
    client library insists on some key); with neither, litellm reads its provider's usual variable."""
    if params.api_key_env is None:
        return "no-key" if params.api_base is not None else None
    return os.environ.get(params.api_key_env)


def observation_text(obs: Observation) -> str:
    c = obs.content
    return c if isinstance(c, str) else _SORTED.encode(c)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _valid_args(schema: dict[str, Any], args: Any) -> bool:
    """A light JSON-schema check of a model's arguments: an object, required keys present, no unknown keys."""
    if not isinstance(args, dict):
        return False
    params = schema.get("parameters", {})
    props = params.get("properties", {})
    return set(params.get("required", [])) <= set(args) and set(args) <= set(props)


class LLMAgent:
    """A model behind litellm on the one agent protocol."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self._usage = Usage(cost_usd=0.0)
        self._records: list[dict[str, Any]] = []
        self._messages: list[dict[str, Any]] = []
        self._tools: dict[str, dict[str, Any]] = {}
        self._tool_cache: tuple[tuple[Any, ...], list[dict[str, Any]], str] | None = None
        # each message's sorted JSON, encoded once: a conversation only grows (a restart starts a new list), so a
        # call encodes its new messages, not the whole conversation again
        self._message_texts: tuple[list[dict[str, Any]], list[str]] = ([], [])
        self._member_json: dict[str, tuple[Any, str]] = {}  # a request member's value (by identity) and its JSON
        self._pending: str | None = None  # the tool_call id awaiting its result
        self._turns = 0
        self._brief: Brief | None = None

    # -- protocol ---------------------------------------------------------------------------------------
    async def start(self, brief: Brief, surface: Sequence[ToolSpec]) -> None:
        self._brief = brief
        self._reset(surface, restarted=False)

    async def restart(self, surface: Sequence[ToolSpec]) -> None:
        self._reset(surface, restarted=True)

    def usage(self) -> Usage:
        return self._usage

    def take_records(self) -> list[dict[str, Any]]:
        out, self._records = self._records, []
        return out

    async def act(self, observation: Observation | None) -> Action:
        if observation is not None:
            self._observe(observation)
        reminded = False
        while True:
            if self._turns >= self.params.max_turns or self._over_tokens():
                return End("budget_exhausted", None)
            self._turns += 1
            message = await self._complete()
            calls = message.get("tool_calls") or []
            if not calls:
                self._messages.append({"role": "assistant", "content": message.get("content") or ""})
                if reminded:
                    return End("none", None)
                reminded = True
                self._messages.append({"role": "user", "content": REMINDER})
                continue
            call = calls[0]  # one action per turn: further calls in the same reply are not executed
            name, raw = call["function"]["name"], call["function"].get("arguments") or "{}"
            self._messages.append({"role": "assistant", "content": message.get("content") or None,
                                   "tool_calls": [call]})
            try:  # NaN and Infinity are not JSON: such arguments are an invalid call, answered as one
                args = json.loads(raw, parse_constant=_not_json)
            except ValueError:
                args = None
            if name == REPORT["name"]:
                if isinstance(args, dict) and args.get("action") in ACTIONS and args.get("claim") in CLAIMS:
                    return End(args["action"], args["claim"])
                self._invalid(call["id"], "ERROR invalid_arguments: report_outcome needs action in "
                              f"{list(ACTIONS)} and claim in {list(CLAIMS)}")
                continue
            if not isinstance(args, dict):
                self._invalid(call["id"], "ERROR invalid_arguments: the arguments are not a JSON object")
                continue
            if name not in self._tools or not _valid_args(self._tools[name], args):
                self._usage = self._usage + Usage(invalid_tool_calls=1)  # still sent: the interface answers it
            self._pending = call["id"]
            return Call(name, args)

    # -- internals --------------------------------------------------------------------------------------
    def _reset(self, surface: Sequence[ToolSpec], restarted: bool) -> None:
        assert self._brief is not None
        self._tools = {t.name: t.schema() for t in surface}
        user = f"Task: {self._brief.spec}\nInputs: {_SORTED.encode(dict(self._brief.inputs))}"
        if restarted:
            user += f"\n{RESTARTED}"
        self._messages = [{"role": "system", "content": SYSTEM.format(task_id=self._brief.task_id)},
                          {"role": "user", "content": user}]
        self._pending = None

    def _observe(self, obs: Observation) -> None:
        text = observation_text(obs)
        schema = described_schema(obs)
        if schema is not None:
            self._tools[schema["name"]] = schema  # describe_tool materialized it: the model may call it now
        if self._pending is not None:
            self._messages.append({"role": "tool", "tool_call_id": self._pending, "content": text})
            self._pending = None
        else:  # after a restart the call that was in flight has no place in the new conversation
            self._messages.append({"role": "user", "content": f"The last tool call before the restart returned: {text}"})

    def _invalid(self, call_id: str, text: str) -> None:
        self._usage = self._usage + Usage(invalid_tool_calls=1)
        self._messages.append({"role": "tool", "tool_call_id": call_id, "content": text})

    def _over_tokens(self) -> bool:
        cap = self.params.max_episode_tokens
        return cap is not None and self._usage.prompt_tokens + self._usage.completion_tokens >= cap

    def _scrubber(self) -> Any:
        """Text from the provider with this agent's key (by value) and any key-shaped string redacted, before it
        becomes an action, a message or a trace event."""
        key = os.environ.get(self.params.api_key_env) if self.params.api_key_env else None

        def scrub(text: Any) -> Any:
            if not isinstance(text, str):
                return text
            if key and len(key) >= 4:
                text = text.replace(key, REDACTED)
            return redact(text)

        return scrub

    def _request(self, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return {"model": self.params.model, "messages": self._messages,
                "tools": self._tool_list()[0] if tools is None else tools,
                "temperature": self.params.temperature, "max_tokens": self.params.max_tokens,
                **self.params.tool_choice_arg()}

    def _tool_list(self) -> tuple[list[dict[str, Any]], str]:
        """The tools the model is shown and their JSON text: rebuilt only when the surface changes (a describe, a
        restart), not on every call."""
        key = (*self._tools, *map(id, self._tools.values()))  # a schema replaced under its name counts too
        if self._tool_cache is None or self._tool_cache[0] != key:
            tools = [{"type": "function", "function": s} for s in (*self._tools.values(), REPORT)]
            self._tool_cache = (key, tools, _SORTED.encode(tools))
        return self._tool_cache[1], self._tool_cache[2]

    def _request_text(self, request: dict[str, Any], tools_text: str) -> bytes:
        """`json.dumps(request, sort_keys=True)`, member by member in sorted order, with the tools' cached text and
        the messages' texts encoded once each (the same bytes: the encoder joins members with ", " and ": ")."""
        members = []
        known = self._member_json  # the members that are the same object call after call (model, temperature, ...)
        for key in sorted(request):
            value = request[key]
            if key == "tools" and self._tool_cache is not None and value is self._tool_cache[1]:
                text = tools_text
            elif key == "messages" and value is self._messages:
                text = f"[{', '.join(self._message_json())}]"
            elif (held := known.get(key)) is not None and held[0] is value:
                text = held[1]
            else:
                text = _SORTED.encode(value)
                known[key] = (value, text)
            members.append(f"{_SORTED.encode(key)}: {text}")
        return f"{{{', '.join(members)}}}".encode()

    def _message_json(self) -> list[str]:
        """The sorted JSON of every message of the conversation, the new ones encoded now."""
        held, texts = self._message_texts
        if held is not self._messages or len(texts) > len(held):  # a new conversation (a reset, a restart)
            held, texts = self._messages, []
            self._message_texts = (held, texts)
        texts.extend(map(_SORTED.encode, held[len(texts):]))
        return texts

    async def _complete(self) -> dict[str, Any]:
        """One model decision, with the harness's retries; returns the reply message as a plain dict."""
        litellm = litellm_module()
        tools, tools_text = self._tool_list()
        request = self._request(tools)
        request_text = self._request_text(request, tools_text)
        request_hash = hashlib.sha256(request_text).hexdigest()
        base = routed_base(self.params.api_base)
        attempt = 0
        waited = 0.0
        waits: list[dict[str, Any]] = []
        gate = limiter(*endpoint(self.params.model, self.params.api_base),
                       self.params.concurrency) if self.params.adaptive else None
        while True:
            epoch = await gate.acquire() if gate is not None else 0
            t0 = time.perf_counter()
            failure: Exception | None = None
            try:
                call = litellm.acompletion(**request, api_base=base, api_key=api_key(self.params),
                                           **self.params.pricing(), timeout=self.params.timeout_s, num_retries=0,
                                           max_retries=0)
                # litellm's timeout bounds each read; this bounds the whole call (a slow or endless body). As a task
                # of its own (wait_for): asyncio.timeout in this task measured slower, wall 1.25-1.29x litellm alone
                # against 1.10-1.16x (bench_llm_concurrency.py, alternating runs)
                try:
                    response = await asyncio.wait_for(call, self.params.timeout_s)
                except TimeoutError:
                    raise CallDeadline(f"no complete answer within {self.params.timeout_s:g} s") from None
            except Exception as exc:  # noqa: BLE001 - classified below; anything else is not ours to retry
                failure = exc
            finally:  # a success, a failure or a cancellation: the slot frees before any wait (a backoff holds none)
                waited += time.perf_counter() - t0
                if gate is not None:  # litellm gives every RateLimitError status 429, and only those
                    gate.release(epoch, rate_limited=_field(failure, "status_code") == 429)
            if failure is None:
                break
            kind = type(failure).__name__
            status = _field(failure, "status_code")
            if kind not in TRANSIENT or attempt >= self.params.retries:
                said = _provider_message(failure) if kind not in TRANSIENT else ""
                unreachable = _unreachable(failure, base)
                if unreachable:  # litellm reports a refused connection as a provider's 500: say what happened
                    raise ProviderError(f"{unreachable} after {attempt + 1} attempt(s) on {self.params.model} "
                                        f"({kind})") from None
                raise ProviderError(f"{kind} (status {status}) after {attempt + 1} attempt(s) "
                                    f"on {self.params.model}{said}") from None
            attempt += 1
            asked = asked_wait(failure)  # the provider's Retry-After or reset header, if it sent one
            delay = min(asked if asked is not None else
                        self.params.backoff_s * 2 ** (attempt - 1) * random.uniform(0.5, 1.5),
                        self.params.max_backoff_s)
            waits.append({"reason": "retry_after" if asked is not None else "backoff", "error": kind,
                          "status": status, "seconds": round(delay, 6)})
            await asyncio.sleep(delay)
        usage = _field(response, "usage")
        prompt = int(_field(usage, "prompt_tokens") or 0)
        completion = int(_field(usage, "completion_tokens") or 0)
        cost = (_field(response, "_hidden_params") or {}).get("response_cost")
        cost = float(cost) if isinstance(cost, (int, float)) else None
        message = response.choices[0].message
        scrub = self._scrubber()  # a provider that echoes the Authorization header: the key stops here
        calls = [{"id": c.id, "type": "function",
                  "function": {"name": scrub(c.function.name), "arguments": scrub(c.function.arguments)}}
                 for c in (_field(message, "tool_calls") or [])]
        reply = {"content": scrub(_field(message, "content")), "tool_calls": calls}
        sent = len(request_text) + len(json.dumps(reply).encode())
        self._usage = self._usage + Usage(model_calls=1, prompt_tokens=prompt, completion_tokens=completion,
                                          cost_usd=cost, retries=attempt, latency_s=waited, model_bytes=sent,
                                          retry_wait_s=sum(w["seconds"] for w in waits))
        self._records.append({"model": self.params.model, "request_hash": request_hash, "prompt_tokens": prompt,
                              "completion_tokens": completion, "latency_s": round(waited, 6), "cost_usd": cost,
                              "retries": attempt, "tool_context_tokens": count_tokens(tools_text),  # cached per text
                              "turn": self._turns,
                              **({"waits": waits} if waits else {})})
        return reply
