"""A deep copy of JSON-shaped values (dicts, lists and tuples of strings, numbers, booleans and None), about three
times faster than `copy.deepcopy`, which it leaves anything else to. The world copies every record it stores and
every ledger entry it returns (issue 28: `deepcopy` was a twentieth of an episode)."""

from __future__ import annotations

import copy
from typing import TypeVar

T = TypeVar("T")
_ATOMS = frozenset({str, int, float, bool, type(None)})


def deep_copy(value: T) -> T:
    """A copy sharing no dict, list or tuple with `value` (nor one part of the copy with another)."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is dict:
        return {k: deep_copy(v) for k, v in value.items()}  # type: ignore[attr-defined,return-value]
    if kind is list:
        return [deep_copy(v) for v in value]  # type: ignore[attr-defined,return-value]
    if kind is tuple:
        return tuple(deep_copy(v) for v in value)  # type: ignore[attr-defined,return-value]
    return copy.deepcopy(value)
