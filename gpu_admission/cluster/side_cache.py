"""A small cache for objects fetched by GET on a cache miss, each kept for a short time.

The informers never hold some of what a policy asks for (a Secret of another type, for one); a
GET settles it, and keeping the answer briefly means a burst of pods naming the same object costs
one GET, not one each. Used on the event loop thread only.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SideCache(Generic[K, V]):
    """Values by key, each kept for `ttl` seconds; the oldest go first beyond `max_entries`."""

    def __init__(
        self, ttl: float, max_entries: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl = ttl
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self.puts = 0  # counts every value put in: what the cache holds may have changed

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            del self._entries[key]
            return None
        return entry[1]

    def put(self, key: K, value: V) -> None:
        self.puts += 1
        self._entries.pop(key, None)
        self._entries[key] = (self._clock() + self._ttl, value)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
