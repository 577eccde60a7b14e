"""A bounded, thread-safe memo: the last few thousand answers of a pure function of some text.

The language server re-analyses a whole file on every edit, from several threads; most of a file's
kernels did not change, so their answers (a Kernel read from the tree, an inferred spec) are kept by the
text they were computed from. Least recently used entries go first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedMemo(Generic[K, V]):
    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        """The kept value, or `make()`'s (computed outside the lock, then kept)."""
        value = self.get(key)
        if value is None:
            value = make()
            with self._lock:
                self._entries[key] = value
                if len(self._entries) > self._size:
                    self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
