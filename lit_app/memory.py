"""The server process's native memory: glibc's malloc arenas capped, and freed model-pass memory given back.

PyTorch on CPU takes a model pass's activations and gradients from malloc. glibc keeps what is
freed in its arenas for reuse and gives memory back to the OS only from the top of a heap, so the
server's RSS kept the high-water mark of every pass and the holes between live blocks: issue 33
measured 1,261 MB after warm-up and 1,529 MB after 60 s of mixed requests, not released 10 s
later. Two causes, the byte-bounded caches staying small: glibc kept freed pass memory (mallinfo2:
~500 MB of the arenas free after warm-up; `malloc_trim(0)` gave ~170 MB back at once), and
reference cycles held computations' tensors until the cyclic collector's rare full pass (in-use
malloc memory grew 209 -> 648 MB in 150 s of the soak's mix; `gc.collect()` freed it at once).

* `cap_malloc_arenas`  at most a few arenas (each keeps its own high-water mark); the server
                       calls it at start.
* `malloc_trim`        glibc's malloc_trim(0): every free page of every arena back to the OS.
* `release_memory`     gc.collect() (reference cycles that hold a computation's tensors), then
                       malloc_trim: what the trimmer runs.
* `freeze_startup_objects`  gc.freeze() after start, so that the collector's full passes are
                       cheap and frequent (they scan only what requests created).
* `trim_soon`          schedules it (`Trimmer`, one per process, on a timer thread) when a model is
                       let go (`ModelScheduler.on_free`) and when a compute request ends
                       (`security.SecureApp`), at most every 2 s: RSS then follows the memory in use
                       instead of the high-water mark.

* `fixed_malloc_thresholds`  glibc's mmap and trim thresholds fixed (not raised by each big block freed), on
                       `import lit_app`: a thread arena's free top is given back at TRIM_THRESHOLD_BYTES.

* `no_mkl_buffer_pools`  MKL's per-thread buffer pools off (MKL_DISABLE_FAST_MM), before torch is imported:
                       `import lit_app` calls it, so the server process (`python -m lit_app.server`) runs without them.

MKL (torch's BLAS here) keeps the work buffers of its matrix products in a pool per thread and gives them back
only when the thread ends: ~10 MB per thread that ran a model pass, ~20 MB with its OpenMP worker, measured with
mallinfo2 on the default model (one 50-token per-target pass per thread; main thread alone: +0.0 MB per further
pass). The server runs model work on many long-lived threads (a worker per client and lane, the request
threads, each one's OpenMP team), so the pools held 5-7 clients' paused matrix jobs' ~30 MB each of malloc's
memory in use in the 10-minute soak (docs/benchmarks.md, "Session 37 (h1)"). Without the pools each product takes
its buffer from malloc and frees it: one thread runs the model at a time, so the arenas reuse one set of buffers.

glibc raises its mmap threshold to the size of every mmapped block freed (up to 32 MB) and its trim threshold
to twice that (up to 64 MB). Loading the model frees such blocks, so afterwards every tensor of a pass came from the
arenas (mmapped: 4 MB of ~200 in use), and a thread arena (every thread but the main one) gave its free top back
only above 64 MB: `malloc_trim` returns the free pages inside every arena but trims the top of the main arena's
heap only. In the soak's warm-up the thread arena kept 35-45 MB free and resident through the trims
(docs/benchmarks.md, "Session 38 (h1)"). Fixed thresholds keep glibc from raising them: a block of
MMAP_THRESHOLD_BYTES or more is mmapped and unmapped when freed, and an arena's top above TRIM_THRESHOLD_BYTES is
given back as it is freed.

Other C libraries (musl, macOS) are left alone: every function returns False there.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
# glibc's defaults, before the first mmapped block freed raises them (module docstring): blocks of 1 MB or more
# (a 50-token pass's activations are 0.1-0.3 MB; a matrix chunk's and the logits' 3-10 MB) are mmapped, and a
# free top above 4 MB is given back.
MMAP_THRESHOLD_BYTES = 1 << 20
TRIM_THRESHOLD_BYTES = 4 << 20
# The user's own settings, which win: glibc's environment variables and tunables.
_THRESHOLD_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
_THRESHOLD_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold")
# Read by MKL once, when torch loads it: "1" turns its per-thread buffer pools ("fast memory manager") off.
MKL_POOLS_ENV = "MKL_DISABLE_FAST_MM"
# Seconds between two trims: a trim takes a few milliseconds per hundred MB free, and the pages it
# returns are faulted in again by the next pass, so it runs after a burst of passes, not after each.
DEFAULT_TRIM_INTERVAL_S = 2.0
# Seconds from a call to its trim: what the caller frees right after (the request's graph and result
# objects, its answer once written) is given back by the same trim.
DEFAULT_TRIM_DELAY_S = 0.5


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim  # pylint: disable=pointless-statement  # glibc only
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _glibc()
_FROZEN = False  # freeze_startup_objects ran: a full collection scans only what came after


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


def fixed_malloc_thresholds(mmap_bytes: int = MMAP_THRESHOLD_BYTES, trim_bytes: int = TRIM_THRESHOLD_BYTES) -> bool:
    """Fixes glibc's mmap and trim thresholds (module docstring); True when applied.

    Either mallopt stops glibc from raising both as big blocks are freed. Any time works (a top already kept is
    given back at the next free into it); `import lit_app` calls it. The user's own MALLOC_MMAP_THRESHOLD_,
    MALLOC_TRIM_THRESHOLD_ or GLIBC_TUNABLES of either win; other C libraries are left alone.
    """
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if _LIBC is None or any(os.environ.get(v) for v in _THRESHOLD_SETTINGS) or any(
            t in tunables for t in _THRESHOLD_TUNABLES):
        return False
    return bool(_LIBC.mallopt(_M_MMAP_THRESHOLD, mmap_bytes)) & bool(_LIBC.mallopt(_M_TRIM_THRESHOLD, trim_bytes))


def no_mkl_buffer_pools() -> bool:
    """Turns MKL's per-thread buffer pools off for this process (module docstring); True when it takes effect.

    MKL reads MKL_DISABLE_FAST_MM when torch loads it, so this works only before torch is imported (a process
    that imported torch first keeps its pools; so does one whose user set the variable). `import lit_app` calls it.
    """
    if "torch" in sys.modules or MKL_POOLS_ENV in os.environ:
        return False
    os.environ[MKL_POOLS_ENV] = "1"
    return True


def freeze_startup_objects() -> None:
    """Moves every object alive now (the model, torch, LIT) out of the cyclic collector's sight (gc.freeze).

    The collector's full pass then scans only what requests created, so it runs often and fast: with
    hundreds of thousands of long-lived startup objects it ran rarely, and reference cycles holding a
    computation's tensors (in the soak: 430 MB of malloc'd memory in use, freed at once by gc.collect)
    waited for it. The server calls it once, after loading the models and building the app.
    """
    global _FROZEN
    gc.collect()
    gc.freeze()
    _FROZEN = True


def unfreeze() -> None:
    """Undoes `freeze_startup_objects` (tests)."""
    global _FROZEN
    gc.unfreeze()
    _FROZEN = False


def release_memory() -> bool:
    """Collects reference cycles (once `freeze_startup_objects` made that cheap: a full pass over a loaded
    model's ~600,000 objects holds the GIL for about a second), then gives every free page back to the OS."""
    if _FROZEN:
        gc.collect()
    return malloc_trim()


def malloc_trim() -> bool:
    """Gives every free page of glibc's arenas back to the OS (malloc_trim(0)); True when memory was released."""
    if _LIBC is None:
        return False
    return bool(_LIBC.malloc_trim(0))


class Trimmer:
    """Schedules `malloc_trim` on a timer thread, at most once per `min_interval_s`.

    Called on the thread that let the model go (`ModelScheduler.on_free`) and when a compute request
    ends (`security.SecureApp`); it never waits and never trims there, so no request's answer waits
    for a trim. A call while a trim is scheduled adds nothing; a call inside the interval schedules
    the trim for the interval's end, so the memory of the last request of a burst is given back too.

    Attributes:
      trims: how many times it trimmed.
    """

    def __init__(self, min_interval_s: float = DEFAULT_TRIM_INTERVAL_S, delay_s: float = DEFAULT_TRIM_DELAY_S,
                 trim: Callable[[], bool] = release_memory, clock: Callable[[], float] = time.monotonic):
        if min_interval_s < 0 or delay_s < 0:
            raise ValueError(f"min_interval_s={min_interval_s}, delay_s={delay_s}; use 0 or more seconds.")
        self.min_interval_s, self.delay_s = min_interval_s, delay_s
        self._trim, self._clock = trim, clock
        self._lock = threading.Lock()
        self._last: float | None = None
        self._pending: threading.Timer | None = None
        self.trims = 0

    def __call__(self) -> None:
        """Schedules a trim `delay_s` from now, or at the end of `min_interval_s` after the last one if later."""
        with self._lock:
            if self._pending is not None:
                return
            now = self._clock()
            delay = self.delay_s if self._last is None else max(self.delay_s, self.min_interval_s - (now - self._last))
            self._pending = threading.Timer(delay, self._run)
            self._pending.daemon = True
            self._pending.start()

    def _run(self) -> None:
        with self._lock:
            self._pending = None
            self._last = self._clock()
        try:
            self._trim()
        except Exception:  # pylint: disable=broad-except  # memory housekeeping never fails anything
            logger.exception("malloc_trim failed")
            return
        with self._lock:
            self.trims += 1

    def cancel(self) -> None:
        """Drops a scheduled trim (tests; a stopping server)."""
        with self._lock:
            timer, self._pending = self._pending, None
        if timer is not None:
            timer.cancel()


# One per process: malloc_trim acts on the whole process, whichever model or request calls it.
_PROCESS_TRIMMER = Trimmer()


def trim_soon() -> None:
    """Schedules a trim of the process's freed memory (`Trimmer`; at most every 2 s, 0.5 s after the call)."""
    _PROCESS_TRIMMER()


def trim_count() -> int:
    """How many times the process's trimmer trimmed."""
    return _PROCESS_TRIMMER.trims
