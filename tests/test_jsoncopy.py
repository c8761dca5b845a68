"""`deep_copy` (issue 28) replaces `copy.deepcopy` for the world's records and ledger entries: equal values, no
container shared with the original, and `deepcopy` itself for anything that is not JSON-shaped."""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

from aft_bench.common.jsoncopy import deep_copy


def _containers(value: Any) -> list[int]:
    """The ids of every dict and list inside `value` (the containers a caller could change)."""
    inner = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    own = [id(value)] if isinstance(value, (dict, list)) else []
    return own + [i for v in inner for i in _containers(v)]


def test_a_json_value_is_copied_exactly_and_shares_no_container() -> None:
    value = {"a": [1, 2.5, None, True, {"b": "é"}], "t": ("x", ["y"]), "n": {"deep": [[[]]]}}
    out = deep_copy(value)
    assert out == value == copy.deepcopy(value)
    assert type(out["t"]) is tuple and type(out["a"]) is list
    assert not set(_containers(out)) & set(_containers(value))
    out["a"][4]["b"] = "changed"
    out["t"][1].append("z")
    assert value["a"][4]["b"] == "é" and value["t"][1] == ["y"]


def test_an_alias_inside_a_value_becomes_two_copies() -> None:
    shared = {"k": 1}
    out = deep_copy({"x": shared, "y": shared})
    assert out["x"] == out["y"] == shared and out["x"] is not out["y"]


def test_anything_else_goes_to_deepcopy() -> None:
    class Box:
        def __init__(self) -> None:
            self.items = [1]

    odd = {"set": {1, 2}, "ordered": OrderedDict(a=[1]), "box": Box()}
    out = deep_copy(odd)
    assert out["set"] == {1, 2} and out["set"] is not odd["set"]
    assert type(out["ordered"]) is OrderedDict and out["ordered"]["a"] is not odd["ordered"]["a"]
    assert out["box"] is not odd["box"] and out["box"].items == [1] and out["box"].items is not odd["box"].items
    assert deep_copy(7) == 7 and deep_copy(None) is None and deep_copy("s") == "s"
