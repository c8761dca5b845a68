"""Context-token counting with a real tokenizer that works offline: the count litellm's `token_counter` gives.

For the model-free default (`gpt-4o`) that count is tiktoken's `o200k_base` encoding, read from the tokenizer
files litellm bundles, and we take it from tiktoken directly: importing litellm costs about 3 s per process, the
encoding alone 0.2 s (tests/test_tokens.py holds the two equal on every surface of every world). Other models go
through litellm. litellm, unless told otherwise, fetches a model price map over the network on import; we set
LITELLM_LOCAL_MODEL_COST_MAP before a lazy import so it never does. Counts are cached per text (they are
deterministic), so a 1000-tool surface is tokenized once per process.
"""

from __future__ import annotations

import importlib.util
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

TOKENIZER_MODEL = "gpt-4o"  # whose tokenizer counts the context of model-free (deterministic) runs
TOKENIZER_ENCODING = "o200k_base"  # the tiktoken encoding litellm counts TOKENIZER_MODEL with
# litellm encodes a text in chunks of this many characters and sums the counts (its default
# TIKTOKEN_ENCODE_CHUNK_SIZE_CHARS, which keeps tiktoken linear on long repeated runs), exactly up to
# TOKEN_COUNTER_MAX_EXACT_CHARS; with either setting in the environment, or past that length, litellm counts.
CHUNK_CHARS = 1024
EXACT_MAX_CHARS = 4_000_000
LITELLM_SETTINGS = ("TIKTOKEN_ENCODE_CHUNK_SIZE_CHARS", "TOKEN_COUNTER_MAX_EXACT_CHARS")


@lru_cache(maxsize=1)  # set up once: an agent asks for it on every model call
def litellm_module() -> Any:
    """litellm, imported lazily and only after its offline switches are set (no price map or anything else is
    fetched): the one place the harness imports it, for the tokenizer and for the `llm` agent."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    os.environ.setdefault("LITELLM_LOG", "ERROR")
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    return litellm


@lru_cache(maxsize=1)
def _counter() -> Any:
    return litellm_module().token_counter


def bundled_tokenizers() -> Path:
    """The folder of tokenizer files litellm ships (found without importing litellm)."""
    spec = importlib.util.find_spec("litellm")
    assert spec is not None and spec.submodule_search_locations, "litellm is a dependency"
    return Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"


@lru_cache(maxsize=1)
def _encoding() -> Any:
    """TOKENIZER_ENCODING from litellm's bundled files (offline): the cache folder is chosen as litellm chooses it
    on import (CUSTOM_TIKTOKEN_CACHE_DIR if set, else its bundled folder), so importing litellm later changes
    nothing."""
    os.environ["TIKTOKEN_CACHE_DIR"] = os.environ.get("CUSTOM_TIKTOKEN_CACHE_DIR") or str(bundled_tokenizers())
    import tiktoken

    return tiktoken.get_encoding(TOKENIZER_ENCODING)


@lru_cache(maxsize=65536)
def count_tokens(text: str, model: str = TOKENIZER_MODEL) -> int:
    """Tokens of `text` under `model`'s tokenizer, as litellm counts them (bundled, offline)."""
    if not text:
        return 0
    if model == TOKENIZER_MODEL and len(text) <= EXACT_MAX_CHARS and not any(map(os.environ.get, LITELLM_SETTINGS)):
        return sum(map(_chunk_tokens, (text[i:i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS))))
    return int(_counter()(model=model, text=text))


@lru_cache(maxsize=16384)
def _chunk_tokens(chunk: str) -> int:
    """Tokens of one CHUNK_CHARS piece (a count is the sum of its pieces'): the surfaces of a matrix share most of
    their pieces (one pass over the paper's cells encodes 17,044 pieces, 6,200 of them distinct)."""
    return len(_encoding().encode(chunk, disallowed_special=()))


def warm() -> None:
    """Load the tokenizer now (a worker-process server does this once, before it forks any worker)."""
    count_tokens("warm")
