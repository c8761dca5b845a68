"""Redaction of credentials, by value and by pattern: values of environment variables whose names look like
credentials, and strings shaped like provider keys. This is the one choke point every writer of evidence (journal,
parquet, manifest, trace, failures, sessions, catalog, analysis, report, logs) passes its text through."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from aft_bench.common.cache import BoundedCache
from aft_bench.common.canonical import canonical_json

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
# Every KEY_PATTERNS alternative starts with one of these prefixes (sk-, gh[pousr]_, github_pat_, xox[abposr]-,
# AKIA, ASIA, AIza, hf_, eyJ, [Bb]earer\s): text holding none of them skips the full patterns (the hot path: every
# trace event passes here). The prefilter drops each prefix's first character, which makes it a superset (more
# text goes on to the full patterns, none less) that the regex engine scans 2.5 times faster.
KEY_PREFIXES = re.compile(r"k-|h[pousr]_|ithub_pat_|ox[abposr]-|KIA|SIA|Iza|f_|yJ|earer\s")


def secret_name(name: str) -> bool:
    """Does an environment variable's name say it holds a credential?"""
    upper = name.upper()
    if upper in NOT_SECRET:
        return False
    return any(w in upper for w in SECRET_WORDS) or bool(SECRET_PARTS & set(upper.split("_")))


class _Known:
    """The environment's secret values, re-read when the environment changes: a variable added or removed (its
    names, in order) or a known secret's value changed. Cheap enough for every trace event: the names are compared
    as one tuple (os.environ's own dict, undecoded), the values only of the names that hold secrets."""

    names: tuple[str, ...] = ()
    keys: tuple[Any, ...] | None = None  # the environment's names when `values` was read
    secret_raw: tuple[Any, ...] = ()  # the secret names' values then, as os.environ holds them
    values: tuple[str, ...] = ()

    raw_names: tuple[Any, ...] = ()

    @classmethod
    def current(cls) -> tuple[str, ...]:
        env = os.environ
        raw = getattr(env, "_data", None)  # os.environ's own dict: keys and values undecoded, cheap to compare
        source: Any = raw if raw is not None else env
        names = cls.raw_names if raw is not None else cls.names
        if tuple(source) == cls.keys and (not names or tuple(map(source.get, names)) == cls.secret_raw):
            return cls.values
        cls.names = tuple(sorted(k for k in env if secret_name(k)))
        cls.raw_names = tuple(env.encodekey(k) for k in cls.names) if raw is not None else ()  # type: ignore
        plain = {env[k] for k in cls.names if len(env[k]) >= MIN_VALUE}
        escaped = {json.dumps(v, ensure_ascii=False)[1:-1] for v in plain}  # as the value appears inside JSON
        # a longer secret first, so a shorter one inside it can't split it
        cls.values = tuple(sorted(plain | escaped, key=len, reverse=True))
        names = cls.raw_names if raw is not None else cls.names
        cls.keys, cls.secret_raw = tuple(source), tuple(map(source.get, names))
        return cls.values


def _secrets() -> tuple[str, ...]:
    return _Known.current()


# Long texts found clean, remembered with the secrets they were checked against: a matrix writes the same large
# surface event (a 1000-tool catalog's names) into thousands of traces, and hashing a text is 20 times cheaper than
# scanning it. Bounded; a changed environment (other secret values) misses.
LONG_TEXT = 4096
_CLEAN: BoundedCache[tuple[tuple[str, ...], str], bool] = BoundedCache(64)


def redact(text: str) -> str:
    """`text` with every credential-like environment value and every key-shaped string replaced."""
    values = _Known.current()
    if len(text) >= LONG_TEXT:
        key = (values, text)
        if _CLEAN.get(key, lambda: _scan(values, text) is text):
            return text
    return _scan(values, text)


def _scan(values: tuple[str, ...], text: str) -> str:
    for value in values:
        if value in text:
            text = text.replace(value, REDACTED)
    if KEY_PREFIXES.search(text):
        text = KEY_PATTERNS.sub(REDACTED, text)
    return text


def redact_json(text: str) -> str:
    """Canonical JSON text with every credential redacted, string by string, so the record keeps its shape; the
    same object when there is nothing to redact (the common case, checked on the text without parsing)."""
    if redact(text) == text:
        return text
    return canonical_json(redact_value(json.loads(text)))


def redacted_dumps(value: Any) -> str:
    """`value` as indented, key-sorted JSON (manifests, catalogs, analysis tables) with every credential redacted."""
    text = json.dumps(value, indent=2, sort_keys=True) + "\n"
    return text if redact(text) == text else json.dumps(redact_value(value), indent=2, sort_keys=True) + "\n"


def json_text(value: Any, indent: int | None = 1) -> str:
    """`value` as key-sorted JSON ending in a newline (one line where `indent` is None: a JSON-lines row) with every
    string redacted (its shape kept whatever a secret's value is); for `files.write_atomic(..., redacted=True)`."""
    return json.dumps(redact_value(value), indent=indent, sort_keys=True, ensure_ascii=False) + "\n"


def redact_value(value: Any) -> Any:
    """A JSON-shaped value (dicts, lists, strings, numbers) with every string, key included, redacted."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(k): redact_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(v) for v in value]
    return value


def holds_secret(text: str) -> bool:
    """Does `text` carry a credential (an environment secret's value or a key-shaped string)?"""
    return redact(text) != text
