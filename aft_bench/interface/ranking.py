"""Ranking tool texts for discovery and routing: BM25 (rank_bm25's Okapi BM25, an index cached per corpus), a
static sentence embedding shipped in a package (`embedding.py`), and rules for what retrieval alone breaks
(negation, read/write intent, confusable families) over either: `rerank` over BM25, `hybrid` over BM25 plus the
embedding.

Rankers are a registry by name; each scores a request against tools described as `Candidate`s. The rules'
lexicon is data (`worlds/catalog/lexicon.toml`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from rank_bm25 import BM25Okapi

from aft_bench.common.datafile import read_toml, validate
from aft_bench.common.paths import WORLDS

LEXICON_PATH = WORLDS / "catalog" / "lexicon.toml"
_WORD = re.compile(r"[a-z0-9]+")
LOCATION = {"in", "to", "on", "into", "onto", "at", "inside"}  # "post in the channel": the channel is a place


def tokenize(text: str) -> list[str]:
    """Lower-case word pieces; snake_case names split into their words."""
    return _WORD.findall(text.lower().replace("_", " "))


MEMO_QUERIES = 4096  # orders remembered per index: a matrix asks the same few queries of a corpus many times


@dataclass
class _Index:
    """A corpus's BM25 index and the document orders of the queries asked of it so far (scores are pure)."""

    bm25: BM25Okapi
    orders: dict[str, list[int]]


@lru_cache(maxsize=64)
def _index(docs: tuple[str, ...]) -> _Index:
    return _Index(BM25Okapi([tokenize(d) for d in docs]), {})


def _order(docs: tuple[str, ...], query: str) -> list[int]:
    """Document indices by descending BM25 score against `query`; ties keep catalog order."""
    index = _index(docs)
    order = index.orders.get(query)
    if order is None:
        scores = index.bm25.get_scores(tokenize(query))
        order = sorted(range(len(docs)), key=lambda i: (-scores[i], i))
        if len(index.orders) < MEMO_QUERIES:
            index.orders[query] = order
    return order


def rank(query: str, names: tuple[str, ...], docs: tuple[str, ...], k: int | None = None) -> list[str]:
    """Names ordered by BM25 score of their doc against `query`; ties keep catalog order."""
    order = _order(docs, query)
    return [names[i] for i in (order if k is None else order[:k])]


@dataclass(frozen=True)
class Candidate:
    """A tool as a ranker sees it: name, compact card, action and resource words, and whether it only reads."""

    name: str
    card: str
    action: str
    resource: str
    read: bool

    @staticmethod
    def of(name: str, card: str, read: bool, action: str | None = None, resource: str | None = None) -> Candidate:
        """`action`/`resource` default to the name's first word and the rest (`charge_payment`)."""
        head, _, rest = name.partition("_")
        return Candidate(name, card, action or head, resource or rest or head, read)


class Lexicon(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    negation: tuple[str, ...] = Field(min_length=1)
    text_only: tuple[str, ...] = ()
    read_cues: tuple[str, ...] = ()
    write_cues: tuple[str, ...] = ()
    verbs: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    resources: dict[str, tuple[str, ...]] = Field(default_factory=dict)


@lru_cache(maxsize=4)
def load_lexicon(path: Path = LEXICON_PATH) -> Lexicon:
    return validate(Lexicon, read_toml(path), path)


def _has(words: Sequence[str], phrase: str) -> list[int]:
    """Start positions of `phrase` (one or more words) in `words`."""
    p = tokenize(phrase)
    return [i for i in range(len(words) - len(p) + 1) if list(words[i:i + len(p)]) == p] if p else []


@dataclass(frozen=True)
class Reading:
    """What a request says, as the reranker reads it: the words before any negation, the negated words, the
    actions and resources it names there, and whether it only looks."""

    positive: tuple[str, ...]
    negated: frozenset[str]
    actions: frozenset[str]
    resources: dict[str, float]  # resource -> evidence: 2.5 named by a cue word ("notify"), 2.0 by its noun
    read_only: bool


def read_request(text: str, resources: Sequence[str], lex: Lexicon) -> Reading:
    words = tokenize(text.replace("-", " "))
    cut = len(words)
    for cue in lex.negation:
        hits = _has(words, cue)
        if hits:
            cut = min(cut, hits[0])
    positive, negated = words[:cut], set(words[cut:])
    for phrase in lex.text_only:
        if _has(words, phrase):
            negated |= {"file", "upload", "attachment", "attach"}
    actions: set[str] = set()
    taken: set[int] = set()  # longest phrases first: "set up" is create, not update's "set"
    for action, phrase in sorted(((a, s) for a, syns in lex.verbs.items() for s in (a, *syns)),
                                 key=lambda x: -len(tokenize(x[1]))):
        for i in _has(positive, phrase):
            span = set(range(i, i + len(tokenize(phrase))))
            if not span & taken:
                actions.add(action)
                taken |= span
    nouns = {r: {r.replace("_", " "), r.replace("_", " ") + "s"} for r in resources}
    starts = {i for forms in nouns.values() for f in forms for i in _has(positive, f)}
    named: dict[str, float] = {}
    for r in resources:
        for form, weight in [(f, 2.0) for f in nouns[r]] + [(f, 2.5) for f in lex.resources.get(r, ())]:
            for i in _has(positive, form):
                end = i + len(tokenize(form))
                placed = any(positive[j] in LOCATION for j in range(max(0, i - 2), i))  # "in the channel"
                modifier = weight == 2.0 and end in starts  # "the team channel": team modifies channel
                imperative = weight == 2.0 and i == 0  # "Report the crash": a verb, not the object
                if not placed and not modifier and not imperative:
                    named[r] = max(named.get(r, 0.0), weight)
    reads = any(_has(positive, c) for c in lex.read_cues)
    writes = any(_has(positive, c) for c in lex.write_cues) or bool(actions - {"get", "list", "search"})
    return Reading(tuple(positive), frozenset(negated), frozenset(actions), named, reads and not writes)


def _bm25_scores(query: str, cands: Sequence[Candidate]) -> list[float]:
    return list(_index(tuple(c.card for c in cands)).bm25.get_scores(tokenize(query)))


def bm25(query: str, cands: Sequence[Candidate]) -> list[float]:
    """Okapi BM25 of each candidate's card against the request."""
    return _bm25_scores(query, cands)


def _scaled(scores: Sequence[float]) -> list[float]:
    """Min-max scaled to 0..1 (a tiny corpus gives BM25 negative IDFs; cosines differ in range per request)."""
    low, high = min(scores, default=0.0), max(scores, default=0.0)
    span = high - low or 1.0
    return [(x - low) / span for x in scores]


def _ruled(query: str, cands: Sequence[Candidate], base: Callable[[str, Sequence[Candidate]], list[float]]
           ) -> list[float]:
    """`base` (0..1 per candidate, scored on the request's words before any negation) plus what the request
    names: its resource (+2, +2.5 when a cue word names it; other resources -1.5 when it names one), its action
    (+1), anything it negates (-3), and a write when it only looks (-1.5)."""
    lex = load_lexicon()
    reading = read_request(query, sorted({c.resource for c in cands}), lex)
    out = []
    for c, s in zip(cands, base(" ".join(reading.positive) or query, cands)):
        if reading.resources:
            s += reading.resources.get(c.resource, -1.5)
        if c.action in reading.actions or (c.action not in lex.verbs and c.action in reading.positive):
            s += 1.0  # a catalog action through the lexicon; any other tool's verb ("charge") as written
        if c.action in reading.negated or set(tokenize(c.resource)) & reading.negated:
            s -= 3.0
        if reading.read_only and not c.read:
            s -= 1.5
        out.append(s)
    return out


def _card_cosines(similarity: Callable[[str, tuple[str, ...]], Any], query: str,
                  cands: Sequence[Candidate]) -> list[float]:
    return [float(x) for x in similarity(query, tuple(c.card for c in cands))]


def _cosines(query: str, cands: Sequence[Candidate]) -> list[float]:
    from aft_bench.interface.embedding import similarity

    return _card_cosines(similarity, query, cands)


def _minilm_cosines(query: str, cands: Sequence[Candidate]) -> list[float]:
    from aft_bench.interface.minilm import similarity

    return _card_cosines(similarity, query, cands)


def _ruled_with(query: str, cands: Sequence[Candidate],
                cosines: Callable[[str, Sequence[Candidate]], list[float]]) -> list[float]:
    """The rules over scaled BM25 plus a scaled embedding cosine."""
    return _ruled(query, cands, lambda q, cs: [a + b for a, b in zip(_scaled(_bm25_scores(q, cs)),
                                                                       _scaled(cosines(q, cs)))])


def embed(query: str, cands: Sequence[Candidate]) -> list[float]:
    """Cosine of the request's and each card's static sentence embedding (no rules)."""
    return _cosines(query, cands)


def rerank(query: str, cands: Sequence[Candidate]) -> list[float]:
    """The rules over scaled BM25."""
    return _ruled(query, cands, lambda q, cs: _scaled(_bm25_scores(q, cs)))


def hybrid(query: str, cands: Sequence[Candidate]) -> list[float]:
    """The rules over scaled BM25 plus the scaled embedding cosine: the lexicon's rules where its words reach,
    the embedding where a request says things in words the lexicon and the cards do not have."""
    return _ruled_with(query, cands, _cosines)


def minilm(query: str, cands: Sequence[Candidate]) -> list[float]:
    """Cosine of the request's and each card's all-MiniLM-L6-v2 embedding (a transformer; no rules)."""
    return _minilm_cosines(query, cands)


def minilm_hybrid(query: str, cands: Sequence[Candidate]) -> list[float]:
    """`hybrid` with the transformer's cosine in place of the static embedding's."""
    return _ruled_with(query, cands, _minilm_cosines)


RANKERS: dict[str, Callable[[str, Sequence[Candidate]], list[float]]] = {
    "bm25": bm25, "embed": embed, "rerank": rerank, "hybrid": hybrid, "minilm": minilm,
    "minilm_hybrid": minilm_hybrid}


def ranked(query: str, cands: Sequence[Candidate], ranker: str, k: int) -> list[Candidate]:
    """The `k` best candidates for `query` under `ranker`; ties keep catalog order."""
    if not cands:
        return []
    scores = RANKERS[ranker](query, cands)
    return [cands[i] for i in sorted(range(len(cands)), key=lambda i: (-scores[i], i))[:k]]


CLAUSE = re.compile(r"\s*(?:;|\.(?:\s|$)|,?\s+and then\s+|,?\s+then\s+|,\s+and\s+|\s+and also\s+)\s*", re.I)


def clauses(request: str) -> list[str]:
    """A request split into the separate things it asks for ("... and then ...", "...; ..."); a part that only
    says what not to do ("do not delete it") asks for no tool."""
    negation = load_lexicon().negation
    parts = [p.strip() for p in CLAUSE.split(request)]
    return [p for p in parts if tokenize(p) and not any(_has(tokenize(p)[:2], cue) for cue in negation)]


def top_tools(request: str, cands: Sequence[Candidate], ranker: str, k: int) -> list[str]:
    """The best tool for each clause of `request` (at most `k`), in order, no repeats; ties keep catalog order."""
    score = RANKERS[ranker]
    chosen: list[str] = []
    for clause in clauses(request) or [request]:
        scores = score(clause, cands)
        order = sorted(range(len(cands)), key=lambda i: (-scores[i], i))
        for i in order:
            if scores[i] > 0 and cands[i].name not in chosen:
                chosen.append(cands[i].name)
                break
        if len(chosen) >= k:
            break
    return chosen
