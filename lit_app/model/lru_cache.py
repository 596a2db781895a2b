"""A small thread-safe LRU cache bounded by entry count and by bytes, for the shared model's results."""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Hashable, Mapping
from typing import Any, Generic, TypeVar

import numpy as np


def nbytes(value: Any) -> int:
    """Approximate memory held by a cached value: its numpy arrays and torch tensors (recursively) plus 1 KiB."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if callable(getattr(value, "element_size", None)) and callable(getattr(value, "numel", None)):  # a torch tensor
        return int(value.element_size() * value.numel())
    total = 1024
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [getattr(value, f.name) for f in dataclasses.fields(value)]
    elif isinstance(value, Mapping):
        items = list(value.values())
    elif isinstance(value, (list, tuple)):
        items = list(value) if len(value) < 64 else []
        total += 16 * len(value)
    else:
        return total
    for item in items:
        if (isinstance(item, (np.ndarray, Mapping, list, tuple)) or dataclasses.is_dataclass(item)
                or callable(getattr(item, "element_size", None))):
            total += nbytes(item)
    return total


V = TypeVar("V")


class LRUCache(Generic[V]):
    """A small thread-safe LRU cache of values of type V, bounded by entry count and by bytes (`nbytes`)."""

    def __init__(self, size: int, max_bytes: int | None = None):
        self._size = size
        self._max_bytes = max_bytes
        self._bytes: dict[Hashable, int] = {}
        self._d: collections.OrderedDict[Hashable, V] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            if key not in self._d:
                return None
            self._d.move_to_end(key)
            return self._d[key]

    def put(self, key: Hashable, value: V) -> None:
        size = nbytes(value) if self._max_bytes is not None else 0
        with self._lock:
            self._d[key] = value
            self._bytes[key] = size
            self._d.move_to_end(key)
            while len(self._d) > self._size or (
                    self._max_bytes is not None and len(self._d) > 1 and self.total_bytes > self._max_bytes):
                old, _ = self._d.popitem(last=False)
                self._bytes.pop(old, None)

    def items(self) -> list[tuple[Hashable, V]]:
        """A snapshot of (key, value), oldest first; does not touch the order."""
        with self._lock:
            return list(self._d.items())

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
            self._bytes.clear()

    @property
    def total_bytes(self) -> int:
        return sum(self._bytes.values())

    def __len__(self) -> int:
        return len(self._d)


