"""BM25 ranking of tool texts for discovery (rank_bm25's Okapi BM25), with an index cached per corpus."""

from __future__ import annotations

import re
from functools import lru_cache

from rank_bm25 import BM25Okapi

_WORD = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lower-case word pieces; snake_case names split into their words."""
    return _WORD.findall(text.lower().replace("_", " "))


@lru_cache(maxsize=64)
def _index(docs: tuple[str, ...]) -> BM25Okapi:
    return BM25Okapi([tokenize(d) for d in docs])


def rank(query: str, names: tuple[str, ...], docs: tuple[str, ...], k: int | None = None) -> list[str]:
    """Names ordered by BM25 score of their doc against `query`; ties keep catalog order."""
    scores = _index(docs).get_scores(tokenize(query))
    order = sorted(range(len(names)), key=lambda i: (-scores[i], i))
    return [names[i] for i in (order if k is None else order[:k])]
