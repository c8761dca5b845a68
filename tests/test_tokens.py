"""Context tokens are counted as litellm counts them: the tiktoken fast path (no litellm import) gives litellm's
`token_counter` count for every text an episode measures, and other models still go through litellm."""

from __future__ import annotations

from typing import Any

import pytest

from aft_bench.common.cache import BoundedCache
from aft_bench.experiment.build import run_cell
from aft_bench.experiment.config import load_matrix
from aft_bench.interface import interface, tokens

from conftest import ROOT, WORLDS


def _litellm_count(text: str, model: str = tokens.TOKENIZER_MODEL) -> int:
    return int(tokens.litellm_module().token_counter(model=model, text=text))


@pytest.fixture(scope="module")
def measured_texts() -> list[str]:
    """Every text the interface counts, over one cell of each (workload, condition, catalog size) of the paper."""
    matrix = load_matrix(ROOT / "configs" / "paper_deterministic.toml", WORLDS)
    seen: dict[tuple[Any, ...], Any] = {}
    for cell in matrix.cells:
        seen.setdefault((cell.workload, cell.condition, cell.catalog_size), cell)
    texts: list[str] = []
    real = interface.count_tokens

    def recording(text: str) -> int:
        texts.append(text)
        return real(text)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(interface, "count_tokens", recording)
        for name in ("_SURFACE_TOKENS", "_BUSINESS", "_CARDS"):  # cold, as in a fresh process: every text measured
            mp.setattr(interface, name, BoundedCache(512))
        for cell in seen.values():
            run_cell(matrix, cell, None)
    return texts


def test_every_measured_text_counts_as_litellm_counts_it(measured_texts: list[str]) -> None:
    assert len(measured_texts) > 50 and max(map(len, measured_texts)) > 20_000  # eager surfaces of large catalogs
    wrong = [(t[:60], tokens.count_tokens(t), _litellm_count(t)) for t in set(measured_texts)
             if tokens.count_tokens(t) != _litellm_count(t)]
    assert not wrong, wrong[:3]


@pytest.mark.parametrize("text", ["", "a", "<|endoftext|> and <|fim_prefix|>", "é€😀 ünïcödé\n\t" * 40,
                                  '{"name":"refund_payment","parameters":{"type":"object"}}'])
def test_edge_texts_count_as_litellm_counts_them(text: str) -> None:
    assert tokens.count_tokens(text) == (_litellm_count(text) if text else 0)


def test_the_count_is_a_real_tokenizer_not_a_length() -> None:
    """Known positive and negative: a repeated word is few tokens, random letters many; both as litellm says."""
    word, noise = "payment " * 100, "".join(chr(97 + (i * 7919) % 26) for i in range(800))
    assert tokens.count_tokens(word) < 150 < 300 < tokens.count_tokens(noise)
    assert (tokens.count_tokens(word), tokens.count_tokens(noise)) == (_litellm_count(word), _litellm_count(noise))


def test_another_model_goes_through_litellm() -> None:
    text = "Summarize the refund policy for order o1."
    assert tokens.count_tokens(text, "gpt-3.5-turbo") == _litellm_count(text, "gpt-3.5-turbo")
