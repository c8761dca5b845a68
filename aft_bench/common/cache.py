"""A bounded least-recently-used cache for the per-process caches of pure functions (worlds, schemas, cards)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Generic, Hashable, Iterator, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """At most `maxsize` entries; the least recently used one goes first."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The cached value for `key`, made (and cached) by `make()` on a miss."""
        items = self._items
        if key in items:
            items.move_to_end(key)
            return items[key]
        value = items[key] = make()
        if len(items) > self.maxsize:
            items.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[K]:
        """The keys, the least recently used first."""
        return iter(list(self._items))

    def clear(self) -> None:
        self._items.clear()
