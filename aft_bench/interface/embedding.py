"""Sentence similarity from a static embedding model that ships inside a package: WordLlama's `l2_supercat`
(256 dimensions, weights and tokenizer inside the `wordllama` wheel). Loaded from the package's own files with
downloads disabled, so it runs offline and nothing is fetched at run time; about 0.3 s to load, once per process."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

MODEL = "wordllama l2_supercat 256"  # what a ranker built on it records


@lru_cache(maxsize=1)
def _model() -> Any:
    import wordllama
    from wordllama import WordLlama

    # cache_dir = the package's own folder: its weights/ and tokenizers/ hold the shipped files
    return WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)


@lru_cache(maxsize=64)
def _embed(texts: tuple[str, ...]) -> np.ndarray:
    return np.asarray(_model().embed(list(texts), norm=True), dtype=np.float64)


def similarity(query: str, texts: tuple[str, ...]) -> np.ndarray:
    """Cosine similarity of `query` to each text, rounded to 6 places so ties do not hang on float noise."""
    if not texts:
        return np.zeros(0)
    return np.round(_embed(texts) @ _embed((query,))[0], 6)
