"""Redaction of credentials: values of environment variables that look like secrets never reach a log or a
failure record."""

from __future__ import annotations

import os

SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


def _secrets() -> list[str]:
    return [v for k, v in os.environ.items() if len(v) >= 8 and any(w in k.upper() for w in SECRET_WORDS)]


def redact(text: str) -> str:
    """`text` with every credential-like environment value replaced by `[redacted]`."""
    for value in _secrets():
        text = text.replace(value, "[redacted]")
    return text
