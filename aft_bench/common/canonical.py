"""Canonical JSON and hashing: one byte representation per value, so hashes are stable across runs.

The bytes are those of the standard library's encoder (sorted keys, no whitespace, no NaN). orjson produces the
same bytes ten times faster for almost every value; where it may not (NaN, which it writes as `null`; floats in
[1e-9, 1e-4), which it spells `1e-7` and `0.00001` where Python spells `1e-07` and `1e-05`; anything it refuses:
big integers, non-string keys, subclasses, lone surrogates), the standard encoder decides. So the canonical bytes,
and every hash and trace written before, do not depend on whether or which orjson is installed.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from typing import Any, Callable

from aft_bench.common.gcpause import paused

# One encoder for every call: `json.dumps` with non-default options builds a new encoder each time, and this
# is on the hot path (every trace event, every durable checkpoint).
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_reference: Callable[[Any], str] = _ENCODER.encode

# orjson output that the reference encoder might spell otherwise: a float with a one-digit negative exponent (`1e-7`)
# or written as `0.0000...` (a match inside a string only costs speed), and `null`, which may stand for a NaN or an
# infinity (the reference refuses both): there the value parsed back must equal the value. Substring tests first
# (a regex scan of every event costs more than the encoding it guards).
_E_MINUS = re.compile(rb"e-[1-9](?![0-9])")  # literal-led: the engine finds "e-" fast, then the digit before


def _short_exponent(out: bytes) -> bool:
    """Does `out` hold a float like `1e-7` (a digit, `e-`, one digit)?"""
    return any(m.start() and out[m.start() - 1] in b"0123456789" for m in _E_MINUS.finditer(out))


try:
    import orjson

    _OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS \
        | orjson.OPT_PASSTHROUGH_DATETIME
    _dumps: Callable[..., bytes] | None = orjson.dumps
    _loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover - orjson is a dependency; without it, the reference encoder alone
    _dumps = None
    _loads = json.loads


def _encoded(value: Any) -> bytes | None:
    """orjson's bytes of `value` unless orjson is absent, refuses it, or may spell one of its floats otherwise."""
    if _dumps is None:
        return None
    try:
        out = _dumps(value, option=_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError: something the reference encoder handles or refuses itself
        return None
    return None if b"0.0000" in out or (b"e-" in out and _short_exponent(out)) else out


def _fast(value: Any) -> bytes | None:
    """orjson's bytes of `value` when they are certainly the reference encoder's, else None."""
    out, _ = _fast_pair(value, parse=False)
    return out


def _fast_pair(value: Any, parse: bool) -> tuple[bytes | None, Any]:
    """`_fast(value)` and, when asked (or needed to rule out a NaN written as `null`), the value parsed back."""
    out = _encoded(value)
    if out is None:
        return None, None
    copy = _loads(out) if parse or b"null" in out else None
    if b"null" in out and copy != value:  # a NaN or an infinity became null (or a tuple a list): the reference decides
        return None, None
    return out, copy


# The cases above and their neighbours, probed once at import: an orjson whose fast bytes differ from the
# reference's for any of them is not used at all (tests/test_canonical.py probes far more values).
PROBE: tuple[Any, ...] = (
    1e-4, 1e-10, 9.99e-5, 1e-5, 1e-9, 5e-324, 1e15, 1e16, 1.5e16, 1e22, -0.0, 0.1, 100.0, 1.7976931348623157e308,
    float("nan"), float("inf"), 2 ** 63, 2 ** 64, -(2 ** 63), {1: 2}, [True, False, None],
    "x\u2028\x7f\x00\x1f\"\\/€😀", {chr(c): c for c in (0x41, 0x61, 0x7f, 0xe9, 0x20ac, 0xffff, 0x1f600)},
)


def agrees(value: Any) -> bool:
    """Does the fast path give `value` the reference encoder's bytes (or leave it to the reference)?"""
    out = _fast(value)
    return out is None or out == _reference(value).encode("utf-8")


if _dumps is not None and not all(agrees(v) for v in PROBE):  # pragma: no cover - an orjson that spells otherwise
    _dumps = None


def canonical_bytes(value: Any) -> bytes:
    """The canonical JSON of `value` as UTF-8 bytes (what hashes are taken of)."""
    out = _fast(value)
    return out if out is not None else _reference(value).encode("utf-8")


def canonical_json(value: Any) -> str:
    """Serialize with sorted keys, no whitespace and no NaN, so equal values give equal bytes."""
    if value is None:  # the commonest scalars of a record (an unset field) without the float and NaN checks
        return "null"
    out = _fast(value)
    return out.decode("utf-8") if out is not None else _reference(value)


@lru_cache(maxsize=1024, typed=True)  # typed: True, 1 and 1.0 are equal keys but three spellings
def word_json(value: str | int | bool | None) -> str:
    """canonical_json of a scalar from a small set that a record repeats (a status, an id), remembered."""
    return canonical_json(value)


def digest(value: Any) -> str:
    """SHA-256 hex digest of the canonical JSON of `value`."""
    return hashlib.sha256(canonical_bytes(value)).hexdigest()


def canonical_pair(value: Any) -> tuple[str, Any]:
    """The canonical JSON of `value` and a detached copy parsed from exactly that text (JSON-exact: tuples become
    lists, keys sorted). orjson parses what orjson wrote; anything else goes through the standard parser, which
    keeps integers beyond 64 bits exact where orjson would turn them into floats."""
    with paused():
        out, copy = _fast_pair(value, parse=True)
        if out is not None:
            return out.decode("utf-8"), copy
        text = _reference(value)
        return text, json.loads(text)


class Frozen:
    """A JSON value held as its canonical text; `thaw()` is a fresh copy, parsed by orjson when orjson wrote the
    text (then it holds no integer beyond 64 bits, which orjson would read as a float), else by the standard parser."""

    __slots__ = ("text", "_fast")

    def __init__(self, value: Any) -> None:
        out = _fast(value)
        self.text: str = out.decode("utf-8") if out is not None else _reference(value)
        self._fast = out is not None

    def thaw(self) -> Any:
        with paused():
            return _loads(self.text) if self._fast else json.loads(self.text)


def parse_fast(text: str) -> Any:
    """orjson's parse of `text` (the standard parser's where orjson is absent). Unlike the standard parser it reads
    an integer beyond 64 bits as a float: use it only where the result is checked against `text` again."""
    return _loads(text)


def recanonical(parsed: Any) -> str | None:
    """canonical_json of a value `parse_fast` returned (it holds no NaN or infinity, which orjson does not parse),
    or None where the reference encoder would have to decide."""
    out = _encoded(parsed)
    return out.decode("utf-8") if out is not None else None
