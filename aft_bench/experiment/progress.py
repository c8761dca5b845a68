"""Progress of a matrix run: a tqdm bar (counts, rate, ETA) on a terminal, plain periodic lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Iterable, Iterator

PLAIN_EVERY_S = 10.0


def progress_for(label: str) -> Callable[[Iterable[Any]], Iterable[Any]]:
    def wrap(items: Iterable[Any]) -> Iterable[Any]:
        total = len(items) if hasattr(items, "__len__") else None  # type: ignore[arg-type]
        if sys.stderr.isatty():
            from tqdm import tqdm

            return tqdm(items, unit="run", desc=label, total=total)
        return _plain(items, label, total)

    return wrap


def _plain(items: Iterable[Any], label: str, total: int | None) -> Iterator[Any]:
    start = last = time.monotonic()
    n = 0
    for item in items:
        yield item
        n += 1
        now = time.monotonic()
        if now - last >= PLAIN_EVERY_S:
            rate = n / (now - start)
            eta = f", ETA {(total - n) / rate:.0f} s" if total and rate > 0 else ""
            print(f"{label}: {n}/{total or '?'} runs, {rate:.0f} runs/s{eta}", file=sys.stderr, flush=True)
            last = now
