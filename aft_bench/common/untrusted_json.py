"""JSON from a party that may send anything (an MCP server, a file a server wrote): only what canonical JSON and
every writer of evidence can hold, or a ValueError saying what is wrong. `json.loads` alone accepts NaN and
Infinity, lone surrogates (text no UTF-8 writer can write) and nesting deep enough to exhaust the recursion of
whatever reads the value next."""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterator

MAX_DEPTH = 200  # far beyond any MCP answer or state record seen; well inside Python's recursion limit


class UntrustedJson(ValueError):
    """The text is not JSON, or holds a value evidence cannot hold; the message says which."""


def _constant(name: str) -> Any:
    raise UntrustedJson(f"holds {name}, which JSON does not have")


# one decoder for every call: json.loads with any keyword builds a new one each time (half its cost on short lines)
_DECODER = json.JSONDecoder(parse_constant=_constant)


def parse(data: str | bytes, max_depth: int = MAX_DEPTH, only_if: Callable[[Any], bool] | None = None) -> Any:
    """`data` as JSON, checked: no NaN or Infinity, no lone surrogate in any text or key, at most `max_depth`
    levels of arrays and objects. Text that is not JSON at all raises json's own error (a ValueError too)."""
    try:
        value = _DECODER.decode(data.decode('utf-8') if isinstance(data, bytes) else data)
    except RecursionError:
        raise UntrustedJson(f"JSON nested too deep to read ({len(data)} bytes)") from None
    if (only_if is None or only_if(value)) and _might_fail(data, max_depth):  # else no walk can find anything
        check(value, max_depth)
    return value


_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # a surrogate can only come from a \uD800-\uDFFF escape
_ESCAPE_B = re.compile(rb"\\u[dD][89a-fA-F]")


def _might_fail(data: str | bytes, max_depth: int) -> bool:
    """Whether the text could hold a lone surrogate (it has a surrogate escape) or nest `max_depth` deep (it has
    that many brackets): most answers and state lines have neither, and are not walked (a walk costs 5 parses)."""
    if isinstance(data, str):
        return bool(_ESCAPE.search(data)) or data.count("[") + data.count("{") >= max_depth
    return bool(_ESCAPE_B.search(data)) or data.count(b"[") + data.count(b"{") >= max_depth


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


def lines(text: str, max_depth: int = MAX_DEPTH) -> Iterator[tuple[int, str, Any]]:
    """(line number, line, value) of each non-blank line of JSON-lines `text`, each checked as `parse` checks it;
    the surrogate test runs once over the whole text, not once per line (a state file may hold 300,000 lines).
    A line that is not JSON raises json's ValueError, one that holds what evidence cannot hold UntrustedJson;
    both with `.lineno` set."""
    escapes = bool(_ESCAPE.search(text))
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = _DECODER.decode(line)
            if escapes or line.count("[") + line.count("{") >= max_depth:
                check(value, max_depth)
        except RecursionError:
            exc: ValueError = UntrustedJson(f"JSON nested too deep to read ({len(line)} bytes)")
            exc.lineno = n  # type: ignore[attr-defined]
            raise exc from None
        except ValueError as exc:
            exc.lineno = n  # type: ignore[attr-defined]
            raise
        yield n, line, value
