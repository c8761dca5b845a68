"""Context-token counting with a real tokenizer that works offline: litellm's `token_counter`.

litellm is slow to import and, unless told otherwise, fetches a model price map over the network on
import; we set LITELLM_LOCAL_MODEL_COST_MAP before a lazy import so it never does. Counts are cached per
text (they are deterministic), so a 1000-tool surface is tokenized once per process.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

TOKENIZER_MODEL = "gpt-4o"  # whose tokenizer counts the context of model-free (deterministic) runs


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


@lru_cache(maxsize=65536)
def count_tokens(text: str, model: str = TOKENIZER_MODEL) -> int:
    """Tokens of `text` under `model`'s tokenizer (litellm picks the tokenizer; bundled, offline)."""
    if not text:
        return 0
    return int(_counter()(model=model, text=text))


def warm() -> None:
    """Load the tokenizer now (a worker-process server does this once, before it forks any worker)."""
    count_tokens("warm")
