"""Redaction of credentials, by value and by pattern: values of environment variables whose names look like
credentials, and strings shaped like provider keys, never reach a failure record, a log or a report."""

from __future__ import annotations

import os
import re

# Matched anywhere in the variable's name (upper-cased): OPENAI_API_KEY, GITHUB_TOKEN, DB_PASSWORD, ...
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
# Matched as a whole `_`-separated part only, so PATH and AUTHOR stay readable: GH_PAT, BASIC_AUTH, ...
SECRET_PARTS = frozenset({"PAT", "AUTH", "PASS", "PW"})
MIN_VALUE = 4  # shorter values would redact ordinary words
NOT_SECRET = frozenset({"PWD", "OLDPWD"})  # working directories, not passwords

# Shapes of provider credentials (OpenAI/Anthropic `sk-`, GitHub, Slack, AWS, Google, Hugging Face, JWT,
# `Bearer` headers). Long enough that ordinary text and our hashes (hex only) never match.
KEY_PATTERNS = re.compile("|".join((
    r"\bsk-[A-Za-z0-9_\-]{16,}",
    r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}",
    r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bAIza[0-9A-Za-z_\-]{35}",
    r"\bhf_[A-Za-z0-9]{30,}",
    r"\beyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",
    r"\b[Bb]earer\s+[A-Za-z0-9._\-]{16,}",
)))
REDACTED = "[redacted]"


def secret_name(name: str) -> bool:
    """Does an environment variable's name say it holds a credential?"""
    upper = name.upper()
    if upper in NOT_SECRET:
        return False
    return any(w in upper for w in SECRET_WORDS) or bool(SECRET_PARTS & set(upper.split("_")))


def _secrets() -> list[str]:
    values = {v for k, v in os.environ.items() if len(v) >= MIN_VALUE and secret_name(k)}
    return sorted(values, key=len, reverse=True)  # a longer secret first, so a shorter one inside it can't split it


def redact(text: str) -> str:
    """`text` with every credential-like environment value and every key-shaped string replaced."""
    for value in _secrets():
        text = text.replace(value, REDACTED)
    return KEY_PATTERNS.sub(REDACTED, text)


def holds_secret(text: str) -> bool:
    """Does `text` carry a credential (an environment secret's value or a key-shaped string)?"""
    return redact(text) != text
