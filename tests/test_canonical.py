"""Canonical JSON: the orjson fast path gives the standard encoder's bytes for every value, or steps aside; so
hashes, run ids and traces written before stay what they were."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aft_bench.common import canonical
from aft_bench.common.canonical import agrees, canonical_bytes, canonical_json, canonical_pair, digest

REFERENCE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode

floats = st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                   st.builds(lambda m, e: m * 10.0 ** e, st.floats(-10, 10), st.integers(-12, 20)))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70), floats, st.text())
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                       st.dictionaries(st.text(), inner, max_size=5)), max_leaves=30)


@settings(max_examples=1000, deadline=None)
@given(values)
def test_every_value_gets_the_reference_bytes(value: Any) -> None:
    want = REFERENCE(value)
    assert canonical_json(value) == want
    assert canonical_bytes(value) == want.encode("utf-8")
    text, copy = canonical_pair(value)
    assert text == want and REFERENCE(copy) == want and copy == json.loads(want)


def test_the_fast_path_is_taken_for_ordinary_events_and_not_where_orjson_spells_otherwise() -> None:
    event = {"tool": "refund_payment", "args": {"order_id": "o1", "amount": 50.5}, "tokens": 1234, "claim": None}
    assert canonical._dumps is not None and canonical._fast(event) is not None  # known positive
    for value in ({"x": math.nan}, {"x": None, "y": [math.inf]}, {"x": 1e-7}, {"x": 2.5e-5}, [2 ** 64], {1: "a"},
                  {"x": (None, 1)}):  # known negatives: orjson would write null for a NaN, or spell a float otherwise
        assert canonical._fast(value) is None
    assert canonical._fast({"x": 1e-7}) is None and orjson_spelling({"x": 1e-7}) != REFERENCE({"x": 1e-7})


def orjson_spelling(value: Any) -> str:
    import orjson

    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def test_a_lone_surrogate_is_encoded_by_the_reference_and_refused_as_bytes() -> None:
    assert canonical_json({"a": "\ud800"}) == REFERENCE({"a": "\ud800"})
    with pytest.raises(UnicodeEncodeError):
        canonical_bytes({"a": "\ud800"})


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, {"a": [math.nan]}])
def test_nan_and_infinity_are_still_refused(bad: Any) -> None:
    with pytest.raises(ValueError):
        canonical_json(bad)


def test_digests_of_known_values_are_unchanged() -> None:
    """Pinned before the fast path existed: run ids and world hashes of stored results depend on them."""
    assert digest({"b": [1, 2.5, None], "a": "é"}) == __import__("hashlib").sha256(
        '{"a":"é","b":[1,2.5,null]}'.encode()).hexdigest()
    assert canonical_json({"z": 1e-05, "y": 1e16, "x": -0.0}) == '{"x":-0.0,"y":1e+16,"z":1e-05}'


def test_the_import_time_probe_covers_the_cases_orjson_spells_otherwise() -> None:
    assert all(agrees(v) for v in canonical.PROBE)
    differ = [v for v in canonical.PROBE if not isinstance(v, float) or math.isfinite(v)]
    assert any(orjson_spelling(v) != REFERENCE(v) for v in differ if isinstance(v, float))
