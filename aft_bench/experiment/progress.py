"""Progress of a matrix run: a tqdm bar (counts, rate, ETA) on a terminal, plain periodic lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Iterable, Iterator

PLAIN_EVERY_S = 10.0


def progress_for(label: str, unit: str = "run") -> Callable[[Iterable[Any]], Iterable[Any]]:
    """A wrapper that shows progress over the items it is given, counted in `unit`s."""
    def wrap(items: Iterable[Any], total: int | None = None) -> Iterable[Any]:
        if total is None and hasattr(items, "__len__"):
            total = len(items)  # type: ignore[arg-type]
        if sys.stderr.isatty():
            from tqdm import tqdm

            return tqdm(items, unit=unit, desc=label, total=total)
        return _plain(items, label, total, unit)

    return wrap


def _plain(items: Iterable[Any], label: str, total: int | None, unit: str = "run") -> Iterator[Any]:
    start = last = time.monotonic()
    n = 0
    for item in items:
        yield item
        n += 1
        now = time.monotonic()
        if now - last >= PLAIN_EVERY_S:
            rate = n / (now - start)
            eta = f", ETA {(total - n) / rate:.0f} s" if total and rate > 0 else ""
            print(f"{label}: {n}/{total or '?'} {unit}s, {rate:.0f} {unit}s/s{eta}", file=sys.stderr, flush=True)
            last = now
