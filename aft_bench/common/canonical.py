"""Canonical JSON and hashing: one byte representation per value, so hashes are stable across runs."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# One encoder for every call: `json.dumps` with non-default options builds a new encoder each time, and this
# is on the hot path (every trace event, every durable checkpoint).
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> str:
    """Serialize with sorted keys, no whitespace and no NaN, so equal values give equal bytes."""
    return _ENCODER.encode(value)


def digest(value: Any) -> str:
    """SHA-256 hex digest of the canonical JSON of `value`."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
