"""JSON from a party that may send anything (an MCP server, a file a server wrote): only what canonical JSON and
every writer of evidence can hold, or a ValueError saying what is wrong. `json.loads` alone accepts NaN and
Infinity, lone surrogates (text no UTF-8 writer can write) and nesting deep enough to exhaust the recursion of
whatever reads the value next."""

from __future__ import annotations

import json
from typing import Any, Callable

MAX_DEPTH = 200  # far beyond any MCP answer or state record seen; well inside Python's recursion limit


class UntrustedJson(ValueError):
    """The text is not JSON, or holds a value evidence cannot hold; the message says which."""


def _constant(name: str) -> Any:
    raise UntrustedJson(f"holds {name}, which JSON does not have")


def parse(data: str | bytes, max_depth: int = MAX_DEPTH, only_if: Callable[[Any], bool] | None = None) -> Any:
    """`data` as JSON, checked: no NaN or Infinity, no lone surrogate in any text or key, at most `max_depth`
    levels of arrays and objects. Text that is not JSON at all raises json's own error (a ValueError too)."""
    try:
        value = json.loads(data, parse_constant=_constant)
    except RecursionError:
        raise UntrustedJson(f"JSON nested too deep to read ({len(data)} bytes)") from None
    if only_if is None or only_if(value):  # a value the caller will drop anyway need not be walked
        check(value, max_depth)
    return value


def check(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """Raise UntrustedJson if `value` nests deeper than `max_depth` or holds text that is not valid Unicode."""
    todo = [(value, 0)]
    while todo:
        v, depth = todo.pop()
        if isinstance(v, str):
            _text(v)
        elif isinstance(v, (list, dict)):
            if depth >= max_depth:
                raise UntrustedJson(f"JSON nested more than {max_depth} levels deep")
            if isinstance(v, dict):
                for k, x in v.items():
                    _text(k)
                    todo.append((x, depth + 1))
            else:
                todo.extend((x, depth + 1) for x in v)


def _text(s: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise UntrustedJson("holds text that is not valid Unicode (a lone surrogate)") from None
