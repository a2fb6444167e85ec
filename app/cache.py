"""The one cache of the application layer: least recently used first out, bounded by a count and by
bytes, safe to share between threads.

Graphs, diagnoses, a merged graph's host parts and query results all live in one of these, each with
its own bounds; a hit refreshes the entry, so what a session keeps using stays. Sizes are what the
caller says an entry costs (a graph's file size, a diagnosis' JSON length): a cache holds at least its
newest entry whatever its size, so one large graph is never loaded twice in a row.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class BoundedCache(Generic[V]):
    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._entries: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()  # least recently used first
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                return None
            self._entries.move_to_end(key)
            return hit[0]

    def put(self, key: Hashable, value: V, size: int) -> V:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[key] = (value, size)
            self._bytes += size
            while len(self._entries) > 1 and (len(self._entries) > self.max_entries or self._bytes > self.max_bytes):
                _, (_, gone) = self._entries.popitem(last=False)
                self._bytes -= gone
        return value

    def get_or_make(self, key: Hashable, make: Callable[[], V], size: Callable[[V], int]) -> V:
        """The cached value, or `make()` cached (made outside the lock: two threads may both make it)."""
        found = self.get(key)
        if found is not None:
            return found
        value = make()
        return self.put(key, value, size(value))

    def drop(self, key: Hashable) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]

    def drop_where(self, test: Callable[[Hashable], bool]) -> None:
        with self._lock:
            for key in [k for k in self._entries if test(k)]:
                self._bytes -= self._entries.pop(key)[1]

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._entries

    def usage(self) -> dict[str, int]:
        with self._lock:
            return {"entries": len(self._entries), "bytes": self._bytes, "max_entries": self.max_entries,
                    "max_bytes": self.max_bytes}
