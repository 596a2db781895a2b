"""How many torch intra-op threads a small pass uses: measured, not assumed (issue 43 §4).

Used by an ablation's forward batches (sequence_salience/ablation/prefix.py, one chooser per computation) and by
the first highlight's gradient pass (`compute_span_result(threads=...)`; a server keeps one chooser per loaded
model, measured across requests: lit_app/model/salience_runs.py). At load 11-13 on 2 cores the gradient pass
of a 28-token prompt took 15.7 s with 2 threads and 4.2 s with 1 (benchmarks/bench_gradient_threads.py,
docs/benchmarks.md).

Leave one word out of the constitutional row slowed from ~0.8 s to ~27 s per forward on a loaded
machine. The cause: torch runs each op over its intra-op threads (one per core), and every op waits at
a barrier for all of them. An edited row's forward is small (one row, the 30-130 positions after the
removed word, a 135M model): hundreds of short ops, each needing every intra-op thread to be scheduled.
When other processes hold the cores, each barrier waits for the scheduler, and the forward's time is
those waits. Measured (benchmarks/bench_loo_word_slowdown.py, docs/benchmarks.md): at load 11-14 on 2
cores, 2 threads took 4.1-4.8 s per row against 0.59-0.76 s with 1 thread, alternating in one process;
a 40-token forward on a worker thread 2.7-4.9 s against 0.30-0.79 s.

Which count is faster depends on the machine's load, which changes while a job runs, so a
`ThreadChooser` measures it: the first batch (PrefixScorer's unedited forward) runs with 1 thread (cheap under load, and on an idle
machine a small forward's second thread saves less than half), the second with `most` (torch's count
on that thread), then every batch with the cheaper one (seconds per recomputed token: a moving average
over the batches a count ran in a row; a count tried again starts afresh). The other is tried again
after `explore_every` batches, so that a change of load is noticed; each try that confirms the choice
doubles that interval (up to `MAX_EXPLORE_EVERY`: through the real server at load ~15, a try of 2 threads
cost 3-18 s against ~1 s for a batch with 1), and a try that changes it resets the interval.
The count is set on the calling thread for one batch and restored after it (`using`); with torch's
OpenMP build it is per thread, so other threads' work keeps its own count.

No try of more threads on contested cores (issue 43, session 34): those tries were the multi-second stalls of
leave one word out under load. With two busy processes beside the server (constitutional row, 92 rows through
the server, docs/benchmarks.md "Session 34 (h4)") every stall (10-25 s, against 1-3 s for a row) was a try of
2 threads, at rows 0, 8, 24, 56 and 88 (the tries' 8, 16, 32, 32 intervals); the job's thread spent 80-87 % of
such a row waiting on the kernel's run queue (/proc/thread-self/schedstat), and each try confirmed 1 thread.
So a batch also measures the share of its time that its thread waited for a core (`run_queue_s`); while the
last batch's share is above `CONTESTED`, the try of a larger count (first or later) is put off to the next
batch that ran uncontested: on cores that other work holds, more threads only wait at more barriers. Where
the share cannot be read (not Linux) the chooser tries as before.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import torch

# After this many batches the count not in use is tried again (a change of load is noticed within it); each
# try that confirms the choice doubles the interval, up to MAX_EXPLORE_EVERY.
EXPLORE_EVERY = 8
MAX_EXPLORE_EVERY = 32
# Weight of the newest measurement in a count's moving average cost.
NEWEST_WEIGHT = 0.5
# A batch whose thread waited on the run queue for more than this share of its time ran on contested cores: no
# try of more threads until a batch runs below it (module docstring).
CONTESTED = 0.25


def run_queue_s() -> float | None:
    """Seconds the calling thread has waited on the kernel's run queue so far (Linux /proc/thread-self/schedstat);
    None where that cannot be read."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class ThreadChooser:
    """The intra-op thread count of each forward batch: the cheaper of `most` and 1, as measured (module
    docstring). Not thread-safe: one per computation, or one used under a lock (a server's, under its model lock).

    Args:
      most: the larger count (default: torch's count on the calling thread now); 1 turns choosing off.
      measure: False: every batch runs with `most` threads (no choice; the reference of the benchmark).
      explore_every: after this many batches the other count is tried again (doubling, up to
        MAX_EXPLORE_EVERY, while the tries confirm the choice).
      clock: the time source (seconds); tests pass a fake one.
      waited: the calling thread's run-queue seconds so far, read around each batch (None: `run_queue_s`, looked
        up at each batch); tests pass a fake one.
    """

    def __init__(self, most: int | None = None, measure: bool = True, explore_every: int = EXPLORE_EVERY,
                 clock: Callable[[], float] = time.perf_counter, waited: Callable[[], float | None] | None = None):
        self.most = max(1, int(most if most is not None else torch.get_num_threads()))
        self.options = (1, self.most) if self.most > 1 and measure else (self.most,)
        self.explore_every = max(2, int(explore_every))
        self.interval = self.explore_every  # batches from one try of the other count to the next
        self.since = 0  # batches with the chosen count since the last try
        self.clock = clock
        self.cost: dict[int, float] = {}  # thread count -> moving average seconds per recomputed token
        self.batches = 0
        self.used: list[int] = []  # the count of each batch (tests and logs)
        self.waited = waited
        self.contested = False  # the last batch's thread waited for a core more than CONTESTED of its time
        self.put_off = 0  # tries of more threads put off on contested cores (tests and logs)

    def best(self) -> int | None:
        """The cheaper count measured so far; None until each was tried."""
        if any(n not in self.cost for n in self.options):
            return None
        return min(self.options, key=lambda n: self.cost[n])

    def choose(self) -> int:
        """The count for the next batch: each option once first (1 first), then the cheaper, and after
        `interval` batches the other one once."""
        best = self.best()
        if best is None:
            n = next(n for n in self.options if n not in self.cost)
        elif len(self.options) > 1 and self.since >= self.interval - 1:
            n = next(n for n in self.options if n != best)
        else:
            return best
        if n > min(self.options) and self.contested:  # more threads on contested cores: put off (module docstring)
            self.put_off += 1
            return best if best is not None else min(self.options)
        return n

    def record(self, threads: int, seconds: float, tokens: int) -> None:
        """A batch with `threads` threads recomputed `tokens` tokens in `seconds`: that count's cost is the moving
        average over the batches it ran in a row, afresh when it was not the last batch's (the load may have
        changed since its last try)."""
        cost = max(0.0, float(seconds)) / max(1, int(tokens))
        chosen = self.best()
        before = self.cost.get(threads) if self.used and self.used[-1] == threads else None
        self.cost[threads] = cost if before is None else NEWEST_WEIGHT * cost + (1 - NEWEST_WEIGHT) * before
        self.batches += 1
        self.used.append(int(threads))
        if chosen is None:  # the first tries: the interval counts from the last of them
            self.since = 0
            return
        if threads == chosen:
            self.since += 1
            return
        # a try of the other count: it confirms the choice (longer until the next) or changes it
        self.interval = (min(2 * self.interval, MAX_EXPLORE_EVERY) if self.best() == chosen
                         else self.explore_every)
        self.since = 0

    @contextlib.contextmanager
    def batch(self, tokens: int) -> Iterator[int]:
        """Runs the block (one forward batch recomputing `tokens` tokens) with the chosen count on this thread,
        times it, and restores the thread's count after it (also on error)."""
        threads = self.choose()
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        waited = self.waited or run_queue_s
        start, queued = self.clock(), waited()
        try:
            yield threads
        finally:
            torch.set_num_threads(before)
        seconds, now_queued = self.clock() - start, waited()
        if queued is not None and now_queued is not None:
            self.contested = now_queued - queued > CONTESTED * seconds
        self.record(threads, seconds, tokens)


# The size classes of `PassSizes`: a pass of up to 128 tokens, up to 512, up to 2,048, up to 8,192, more.
SIZE_BOUNDS = (128, 512, 2048, 8192)


class PassSizes:
    """One `ThreadChooser` per size class of pass (`SIZE_BOUNDS`), for passes of every size measured across
    requests (a server's spans, lit_app/model/salience_runs.py).

    A chooser's cost is seconds per token, but a short pass costs more per token than a long one: measured
    across sizes, the count last tried on a long prompt looked cheaper and was then chosen for short ones
    (benchmarks/bench_gradient_threads.py at load ~18: 2 threads chosen after a 2,183-token pass, then a
    28-token pass took 78 s against 4.8 s with 1). Within a class the passes are alike. Same arguments as
    `ThreadChooser`; not thread-safe either.
    """

    def __init__(self, most: int | None = None, clock: Callable[[], float] = time.perf_counter,
                 waited: Callable[[], float | None] | None = None):
        self.most = max(1, int(most if most is not None else torch.get_num_threads()))
        self.clock, self.waited = clock, waited
        self.choosers: dict[int, ThreadChooser] = {}  # size class (index into SIZE_BOUNDS, or its length) -> chooser

    def chooser(self, tokens: int) -> ThreadChooser:
        """The chooser of passes of `tokens`' size class."""
        size = next((i for i, bound in enumerate(SIZE_BOUNDS) if tokens <= bound), len(SIZE_BOUNDS))
        if size not in self.choosers:
            self.choosers[size] = ThreadChooser(most=self.most, clock=self.clock, waited=self.waited)
        return self.choosers[size]

    def batch(self, tokens: int) -> contextlib.AbstractContextManager[int]:
        """`ThreadChooser.batch` of the chooser of `tokens`' size class."""
        return self.chooser(tokens).batch(tokens)
