"""The server process's native memory: glibc's malloc arenas capped, and freed model-pass memory given back.

PyTorch on CPU takes a model pass's activations and gradients from malloc. glibc keeps what is
freed in its arenas for reuse and gives memory back to the OS only from the top of a heap, so the
server's RSS kept the high-water mark of every pass and the holes between live blocks: issue 33
measured 1,261 MB after warm-up and 1,529 MB after 60 s of mixed requests, not released 10 s
later, while the Python objects and the byte-bounded caches stayed flat (mallinfo2: ~500 MB of
the arenas were free; `malloc_trim(0)` gave ~170 MB of it back at once).

* `cap_malloc_arenas`  at most a few arenas (each keeps its own high-water mark); the server
                       calls it at start.
* `malloc_trim`        glibc's malloc_trim(0): every free page of every arena back to the OS.
* `Trimmer`            calls it when the model is let go (`ModelScheduler.on_free`), at most once
                       per `min_interval_s`, never twice at once: RSS then follows the memory in
                       use instead of the high-water mark.

Other C libraries (musl, macOS) are left alone: every function returns False there.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

_M_ARENA_MAX = -8
# Seconds between two trims: a trim takes a few milliseconds per hundred MB free, and the pages it
# returns are faulted in again by the next pass, so it runs after a burst of passes, not after each.
DEFAULT_TRIM_INTERVAL_S = 2.0


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim  # pylint: disable=pointless-statement  # glibc only
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _glibc()


def cap_malloc_arenas(count: int = 2) -> bool:
    """Caps glibc's malloc arenas, as MALLOC_ARENA_MAX=count does; True when applied.

    glibc gives threads up to 8 x cores arenas, and each keeps the high-water mark
    of the model passes run on it, so a thread-per-connection server running torch
    grows by one pass's activations per arena. A few arenas bound that. A
    MALLOC_ARENA_MAX set by the user wins; other C libraries are left alone.
    """
    if os.environ.get("MALLOC_ARENA_MAX") or _LIBC is None:
        return False
    return bool(_LIBC.mallopt(_M_ARENA_MAX, count))


def malloc_trim() -> bool:
    """Gives every free page of glibc's arenas back to the OS (malloc_trim(0)); True when memory was released."""
    if _LIBC is None:
        return False
    return bool(_LIBC.malloc_trim(0))


class Trimmer:
    """`malloc_trim` at most once per `min_interval_s`, skipped while another thread trims.

    Called on the thread that let the model go (`ModelScheduler.on_free`); it never waits. A
    call inside the interval is not lost: one trim is scheduled for the interval's end (on a
    timer thread), so the memory of the last pass of a burst is given back too.

    Attributes:
      trims: how many times it trimmed.
    """

    def __init__(self, min_interval_s: float = DEFAULT_TRIM_INTERVAL_S,
                 trim: Callable[[], bool] = malloc_trim, clock: Callable[[], float] = time.monotonic):
        if min_interval_s < 0:
            raise ValueError(f"min_interval_s={min_interval_s}; it must be 0 or more seconds.")
        self.min_interval_s = min_interval_s
        self._trim, self._clock = trim, clock
        self._lock = threading.Lock()
        self._last: float | None = None
        self._deferred: threading.Timer | None = None
        self.trims = 0

    def __call__(self) -> bool:
        """Trims unless one ran less than `min_interval_s` ago (then one is scheduled for the end of the
        interval) or runs now; True when it trimmed."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            now = self._clock()
            if self._last is not None and now - self._last < self.min_interval_s:
                if self._deferred is None:
                    self._deferred = threading.Timer(self.min_interval_s - (now - self._last), self._run_deferred)
                    self._deferred.daemon = True
                    self._deferred.start()
                return False
            self._last = now
            try:
                self._trim()
            except Exception:  # pylint: disable=broad-except  # memory housekeeping never fails a request
                logger.exception("malloc_trim failed")
                return False
            self.trims += 1
            return True
        finally:
            self._lock.release()

    def _run_deferred(self) -> None:
        self._deferred = None
        self()

    def cancel(self) -> None:
        """Drops a scheduled trim (tests; a stopping server)."""
        timer, self._deferred = self._deferred, None
        if timer is not None:
            timer.cancel()
