"""A bounded, thread-safe memo: the last few thousand answers of a pure function of some text.

The language server re-analyses a whole file on every edit, from several threads; most of a file's
kernels did not change, so their answers (a Kernel read from the tree, an inferred spec) are kept by the
text they were computed from. Least recently used entries go first.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar, overload

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


T = TypeVar("T")


class MadeOnRead(Sequence[T]):
    """A sequence whose items are made when first read and kept: an edit's analysis then costs the items
    it is asked for, not one for each of a big file's thousands. Subclasses give `__len__` and `_make`."""

    def __init__(self) -> None:
        self._made: dict[int, T] = {}

    @abstractmethod
    def _make(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        made = self._made.get(index)
        if made is None:
            made = self._made[index] = self._make(index)
        return made
