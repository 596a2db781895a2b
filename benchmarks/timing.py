"""Wall-clock timing shared by the benchmarks."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """(fn(), the seconds it took by time.perf_counter)."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start
