"""Paired-comparison statistics (paper §4.5), numpy-vectorized, every random draw from an explicit seed.

- task-clustered percentile bootstrap of the pooled mean paired difference;
- paired sign-flip permutation test (pair or cluster flips), exact enumeration when 2^n <= m;
- Holm over the primary family and Benjamini-Hochberg for model-specific contrasts (statsmodels' arithmetic);
- one-sided non-inferiority as a test of d + delta > 0;
- Clopper-Pearson upper bounds for zero-event endpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from aft_bench.common.memory import ensure_scipy_room

Alternative = Literal["two-sided", "greater", "less"]
EXACT_LIMIT = 20  # never enumerate more than 2^20 sign vectors
_TOL = 1e-9  # relative tolerance when comparing resampled statistics with the observed one


def _cluster_codes(clusters: np.ndarray) -> tuple[np.ndarray, int]:
    _, codes = np.unique(clusters, return_inverse=True)
    return codes, int(codes.max()) + 1 if len(codes) else 0


def cluster_bootstrap_ci(diffs: np.ndarray, clusters: np.ndarray, n_resamples: int = 2000, seed: int = 0,
                         level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the pooled mean, resampling whole task clusters with replacement.

    A drawn cluster contributes all its pairs; the statistic is sum of drawn diffs / number of drawn pairs.
    """
    d = np.asarray(diffs, dtype=float)
    if d.size == 0:
        return (float("nan"), float("nan"))
    codes, k = _cluster_codes(np.asarray(clusters))
    sums = np.bincount(codes, weights=d, minlength=k)
    counts = np.bincount(codes, minlength=k).astype(float)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, k, size=(n_resamples, k))
    means = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    alpha = (1 - level) / 2
    lo, hi = np.percentile(means, [100 * alpha, 100 * (1 - alpha)])
    return float(lo), float(hi)


def _flip_bits(n: int, m: int, exact: bool, rng: np.random.Generator) -> np.ndarray:
    """0/1 matrix, one row per sign vector (1 = flipped). Exact: all 2^n rows, row 0 the identity.
    Random: m rows of fair bits, drawn as random bytes and unpacked (8 flips per drawn byte)."""
    if exact:
        codes = np.arange(2**n, dtype=np.int64)[:, None]
        return ((codes >> np.arange(n, dtype=np.int64)[None, :]) & 1).astype(np.uint8)
    raw = rng.integers(0, 256, size=(m, (n + 7) // 8), dtype=np.uint8)
    return np.unpackbits(raw, axis=1, count=n)


@dataclass(frozen=True)
class PermutationResult:
    statistic: float
    pvalue: float
    exact: bool
    n_resamples: int


def sign_flip_test(diffs: np.ndarray, clusters: np.ndarray | None = None, *, unit: Literal["pair", "cluster"] = "pair",
                   n_permutations: int = 10_000, alternative: Alternative = "two-sided", seed: int = 0,
                   shift: float = 0.0) -> PermutationResult:
    """Paired sign-flip permutation test of mean(diffs + shift) = 0.

    Flips signs per pair or per task cluster (all pairs of a cluster together). Exact enumeration when
    2^units <= n_permutations, else p = (b + 1) / (m + 1) over m random flips. Two-sided uses |T*| >= |T|,
    which for this symmetric null equals scipy's 2 * min(one-sided p) whenever T != 0.
    """
    d = np.asarray(diffs, dtype=float) + shift
    n_pairs = d.size
    if n_pairs == 0:
        return PermutationResult(float("nan"), float("nan"), False, 0)
    if unit == "cluster":
        if clusters is None:
            raise ValueError("cluster flips need cluster labels")
        codes, k = _cluster_codes(np.asarray(clusters))
        unit_sums = np.bincount(codes, weights=d, minlength=k)
    else:
        unit_sums = d
    n_units = unit_sums.size
    exact = n_units <= EXACT_LIMIT and 2**n_units <= n_permutations
    flips = _flip_bits(n_units, n_permutations, exact, np.random.default_rng(seed))
    # sum of sign-flipped units = total - 2 * (sum of the flipped ones)
    stats_ = (unit_sums.sum() - 2.0 * (flips @ unit_sums)) / n_pairs
    observed = float(d.mean())
    tol = _TOL * max(1.0, abs(observed))
    if alternative == "two-sided":
        hits = np.abs(stats_) >= abs(observed) - tol
    elif alternative == "greater":
        hits = stats_ >= observed - tol
    else:
        hits = stats_ <= observed + tol
    if exact:
        p = float(hits.mean())
    else:
        p = float((hits.sum() + 1) / (n_permutations + 1))
    return PermutationResult(observed, min(p, 1.0), exact, int(flips.shape[0]))


def holm(pvalues: np.ndarray) -> np.ndarray:
    """Holm step-down adjusted p-values (statsmodels `method="holm"`, not its Holm-Sidak default)."""
    return _multipletests(pvalues, "holm")


def benjamini_hochberg(pvalues: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (statsmodels `method="fdr_bh"`)."""
    return _multipletests(pvalues, "fdr_bh")


def _multipletests(pvalues: np.ndarray, method: str) -> np.ndarray:
    """Adjust the finite p-values; missing (NaN) entries stay missing and do not count in the family."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        out[ok] = _ADJUST[method](p[ok])
    return out


def _holm(p: np.ndarray) -> np.ndarray:
    """statsmodels' `multipletests(p, method="holm")[1]`, the same operations in the same order (so the same
    floats; tests/test_stats.py holds them equal), without importing statsmodels and scipy.stats (0.9 s)."""
    order = np.argsort(p)
    adjusted = np.minimum(np.maximum.accumulate(p[order] * np.arange(len(p), 0, -1)), 1)
    out = np.empty_like(adjusted)
    out[order] = adjusted
    return out


def _fdr_bh(p: np.ndarray) -> np.ndarray:
    """statsmodels' `multipletests(p, method="fdr_bh")[1]`, likewise."""
    order = np.argsort(p)
    raw = p[order] / (np.arange(1, len(p) + 1) / float(len(p)))
    adjusted = np.minimum(np.minimum.accumulate(raw[::-1])[::-1], 1)
    out = np.empty_like(adjusted)
    out[order] = adjusted
    return out


_ADJUST = {"holm": _holm, "fdr_bh": _fdr_bh}


def clopper_pearson_upper(events: int, n: int, level: float = 0.95) -> float:
    """Two-sided Clopper-Pearson upper bound of a binomial rate (for zero-event endpoints)."""
    if n == 0:
        return float("nan")
    if events >= n:
        return 1.0
    return float(_beta_ppf()(1 - (1 - level) / 2, events + 1, n - events))


def _beta_ppf() -> Any:
    """The beta quantile: the ufunc `scipy.stats.beta.ppf` itself calls (0.2 s to import where scipy.stats takes
    0.7 s; tests/test_stats.py holds them equal), or `beta.ppf` where a scipy lacks it."""
    ensure_scipy_room()  # under `ulimit -v` too small for scipy's OpenBLAS: MemoryError, not a load that spins
    try:
        from scipy.special._ufuncs import _beta_ppf

        return _beta_ppf
    except ImportError:  # pragma: no cover - another scipy layout
        from scipy.stats import beta

        return beta.ppf
