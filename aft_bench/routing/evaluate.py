"""`aft-bench route-eval`: Tool Forge's router table for a suite and a ranker. Selection quality (micro and
macro precision, recall and F1 of the resolved sessions against each case's expected tools) and context
(tokens per case of naive exposure: every full schema; compact exposure: every card; the router's task flow:
the cards a search of each request shows and the full schemas of the resolved tools; and, apart, the router's
stable meta-tool surface, paid once per agent), with the real tokenizer and as characters / 4 (Tool Forge's
estimate)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aft_bench.common.canonical import canonical_json
from aft_bench.interface.interface import SEARCH_K
from aft_bench.interface.ranking import Candidate, clauses, ranked, top_tools
from aft_bench.interface.router import SESSION_MAX, meta_tools
from aft_bench.interface.tokens import count_tokens
from aft_bench.routing.suites import Suite


@dataclass(frozen=True)
class Cost:
    """Context of one exposure, counted two ways."""

    tokens: int
    chars: int

    @staticmethod
    def of(value: Any) -> Cost:
        text = canonical_json(value)
        return Cost(count_tokens(text), len(text))

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.tokens + other.tokens, self.chars + other.chars)


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r else 0.0


def evaluate(suite: Suite, ranker: str) -> dict[str, Any]:
    """The router table's row for one suite and ranker, plus each case's resolved session."""
    tools = suite.catalog()
    cands = [Candidate.of(t.name, t.card(), t.effect == "read", t.action, t.resource) for t in tools]
    by_name = {t.name: t for t in tools}
    naive = Cost.of([t.schema() for t in tools])
    compact = Cost.of([t.card() for t in tools])
    surface = Cost.of([m.schema() for m in meta_tools(SEARCH_K)])
    tp = fp = fn = 0
    f1s, router, per_case = [], [], []
    for case in suite.cases:
        chosen = top_tools(case.intent, cands, ranker, SESSION_MAX)
        hit = set(chosen) & set(case.expected)
        tp, fp, fn = tp + len(hit), fp + len(set(chosen) - hit), fn + len(set(case.expected) - hit)
        p = len(hit) / len(chosen) if chosen else 0.0
        r = len(hit) / len(case.expected)
        f1s.append(_f1(p, r))
        searched = [_cards(c, cands, ranker) for c in clauses(case.intent) or [case.intent]]
        cost = Cost.of(searched) + Cost.of([by_name[n].schema() for n in chosen])
        router.append(cost)
        per_case.append({"id": case.id, "phenomenon": case.phenomenon, "expected": list(case.expected),
                         "resolved": chosen, "f1": round(f1s[-1], 4)})
    mp = tp / (tp + fp) if tp + fp else 0.0
    mr = tp / (tp + fn) if tp + fn else 0.0
    n = len(suite.cases)
    avg_tokens = sum(c.tokens for c in router) / n
    avg_chars = sum(c.chars for c in router) / n
    return {"suite": suite.suite.id, "ranker": ranker, "cases": n, "tools": len(tools),
            "micro_precision": mp, "micro_recall": mr, "micro_f1": _f1(mp, mr), "macro_f1": sum(f1s) / n,
            "naive_tokens": naive.tokens, "compact_tokens": compact.tokens, "router_tokens": avg_tokens,
            "reduction": 1 - avg_tokens / naive.tokens, "surface_tokens": surface.tokens,
            "naive_chars4": naive.chars / 4, "compact_chars4": compact.chars / 4, "router_chars4": avg_chars / 4,
            "reduction_chars4": 1 - avg_chars / naive.chars, "surface_chars4": surface.chars / 4,
            "per_case": per_case}


def _cards(clause: str, cands: list[Candidate], ranker: str) -> list[dict[str, str]]:
    """The compact cards a search for `clause` shows (the top SEARCH_K)."""
    return [{"name": c.name, "card": c.card} for c in ranked(clause, cands, ranker, SEARCH_K)]
