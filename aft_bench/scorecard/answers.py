"""How a client reads a server's answer to a re-issued call: failed or not, and which signal said so. A failure
is `isError`, or text reporting one (a world's failure phrases, whole words, any case) that the first call's
answer did not report: a server whose every answer says "0 errors" is not read as failing."""

from __future__ import annotations

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
