"""Benchmark: the statistics of all primary comparisons on paper-sized data, and our sign-flip test vs
scipy.stats.permutation_test on the same data.

    .venv/bin/python benchmarks/bench_stats.py

Paper-sized data: seven comparisons of 72 pairs (144 for terminal verification) over 8 task clusters,
10,000 sign flips and 2,000 cluster-bootstrap resamples each. Best of 5 repetitions.
"""

from __future__ import annotations

import time

import numpy as np
from scipy import stats as sps

from aft_bench.analysis.stats import cluster_bootstrap_ci, sign_flip_test

SIZES = [72, 72, 72, 72, 72, 72, 144]


def data(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.choice([-1.0, 0.0, 1.0], size=n, p=[0.1, 0.5, 0.4]), np.repeat(np.arange(8), n // 8))
            for n in SIZES]


def ours(sets) -> None:
    for i, (d, c) in enumerate(sets):
        cluster_bootstrap_ci(d, c, 2000, seed=i)
        sign_flip_test(d, c, n_permutations=10_000, seed=i)


def best(fn, *args, reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    sets = data(0)
    ours(sets)  # warm-up (imports, first allocation)
    t_all = best(ours, sets)
    print(f"all 7 primary comparisons (10,000 flips + 2,000 resamples each): {t_all * 1000:.1f} ms")
    d, _ = sets[-1]

    def mine() -> float:
        return sign_flip_test(d, n_permutations=10_000, seed=1).pvalue

    def scipy_() -> float:
        return sps.permutation_test((d,), lambda x, axis: np.mean(x, axis=axis), permutation_type="samples",
                                    vectorized=True, n_resamples=10_000, rng=np.random.default_rng(1)).pvalue

    t_mine, t_scipy = best(mine), best(scipy_)
    print(f"sign-flip test, n=144, 10,000 flips: ours {t_mine * 1000:.2f} ms, "
          f"scipy.stats.permutation_test {t_scipy * 1000:.2f} ms, ratio {t_scipy / t_mine:.1f}x "
          f"(p: ours {mine():.5f}, scipy {scipy_():.5f})")


if __name__ == "__main__":
    main()
