"""How a client reads a server's answer to a re-issued call: failed or not, and which signal said so. A failure
is `isError`, or text reporting one (a world's failure phrases, whole words, any case) that the first call's
answer did not report: a server whose every answer says "0 errors" is not read as failing."""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

NOT_SENT = "not sent"
IS_ERROR = "isError"
ANSWERED_OK = "answered success"


def text_of(answer: dict[str, Any] | None) -> str:
    """An answer's text blocks joined (structured content as the text a client would print)."""
    if not answer:
        return ""
    return "\n".join(str(b.get("text", "")) for b in answer.get("content") or [] if isinstance(b, dict)
                     and b.get("type") == "text")


def _says(text: str, phrase: str) -> bool:
    return re.search(r"(?<!\w)" + re.escape(phrase) + r"(?!\w)", text, re.IGNORECASE) is not None


def failure_signal(answer: dict[str, Any] | None, first: dict[str, Any] | None,
                   phrases: Sequence[str]) -> str | None:
    """What reports `answer` as a failure (`isError`, or `text "PHRASE"`), or None where a client reads success."""
    if answer is None:
        return None
    if answer.get("isError"):
        return IS_ERROR
    text, before = text_of(answer), text_of(first)
    for phrase in phrases:
        if _says(text, phrase) and not _says(before, phrase):
            return f'text "{phrase}"'
    return None


PLACEHOLDER = re.compile(r"^\{before\.(\d+)((?:\.[^.{}]+)+)\}$")


def answer_value(answer: dict[str, Any] | None) -> Any:
    """What an answer holds as data: its structured content, else its text parsed as JSON, else None."""
    if not answer:
        return None
    if answer.get("structuredContent") is not None:
        return answer["structuredContent"]
    try:
        return json.loads(text_of(answer))
    except ValueError:
        return None


def resolve(args: Any, earlier: Sequence[dict[str, Any] | None]) -> Any:
    """An example's arguments with each `{before.N.a.b}` (a whole string) replaced by that field of the N-th set-up
    call's answer: the id a server made up for the record the call created. Unresolvable: a LookupError."""
    if isinstance(args, dict):
        return {k: resolve(v, earlier) for k, v in args.items()}
    if isinstance(args, list):
        return [resolve(v, earlier) for v in args]
    m = PLACEHOLDER.match(args) if isinstance(args, str) else None
    if m is None:
        return args
    n = int(m.group(1))
    value = answer_value(earlier[n]) if n < len(earlier) else None
    for part in m.group(2).strip(".").split("."):
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise LookupError(f"{args}: set-up call {n}'s answer has no {m.group(2).strip('.')}")
    return value
