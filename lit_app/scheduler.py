"""Who uses the shared model next: requests a person waits for first, background work between them.

See `ModelScheduler`; docs/architecture.md ("Progressive salience") describes the policy.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable, Iterator


class ModelScheduler:
    """A re-entrant model lock that serves interactive requests before background slices.

    One thread uses the model at a time. Two kinds of acquirers queue for it:

    * interactive (`with scheduler:` or `acquire()`): what a person waits for: a clicked
      span, the first highlight of a datapoint, an inside-the-model trace, a tokenization
      that falls back to the model's tokenizer, the generation of the selected datapoint.
    * background (`with scheduler.background():` or `acquire(background=True)`): work
      nobody waits for click by click: the per-token matrix jobs (gradients, IG,
      SmoothGrad), blocking every-matrix requests, user-started explanation tests, the
      value-index build.

    When the model is free it goes to the interactive acquirer that has waited longest;
    a background acquirer gets it only while no interactive one waits, again in arrival
    order. Background work holds the model for one bounded slice at a time (about
    0.3-0.5 s of model time, sized by `sequence_salience.slices.SliceSizer`) and calls
    `yield_to_waiting()` between slices (and, when one target's backward alone is longer
    than a slice, inside it at layer boundaries: `compute_salience(between_slices=...)`),
    so a click waits at most for the rest of the slice that is running when it arrives,
    never for the next one. The scheduler interrupts nothing itself: it only decides who
    goes next when the holder lets go.

    Re-entrant: the holder may acquire again (at any priority) without waiting; the
    model is free once it has released as often as it acquired. Holding the model keeps
    the priority it was first acquired with.

    Fairness among background holders is kept as before (the former FairLock): a
    background holder that yields lets background work that queued before it go first,
    so two background jobs alternate slice by slice. An interactive holder that yields
    lets only other interactive requests go first.
    """

    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        # background? -> tickets of the threads waiting, in arrival order
        self._queues: dict[bool, collections.deque[object]] = {False: collections.deque(),
                                                                True: collections.deque()}
        self._owner: int | None = None
        self._owner_background = False
        self._depth = 0
        # Called (outside the lock, on the releasing thread) each time the model is let go:
        # SharedLM gives the freed pass memory back to the OS there (lit_app/memory.py, `Trimmer`).
        self.on_free: Callable[[], object] | None = None

    def _my_turn(self, ticket: object, background: bool) -> bool:
        if self._owner is not None:
            return False
        if background:
            return not self._queues[False] and self._queues[True][0] is ticket
        return self._queues[False][0] is ticket

    def acquire(self, background: bool = False) -> bool:
        """Waits for the model (see the class docstring for the order); re-entrant. Returns True."""
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:
                self._depth += 1
                return True
            queue = self._queues[background]
            ticket = object()
            queue.append(ticket)
            try:
                while not self._my_turn(ticket, background):
                    self._cond.wait()
            except BaseException:  # e.g. KeyboardInterrupt while waiting: leave the queue
                queue.remove(ticket)
                self._cond.notify_all()
                raise
            queue.popleft()
            self._owner, self._owner_background, self._depth = me, background, 1
            return True

    def release(self) -> None:
        with self._cond:
            if self._owner != threading.get_ident():
                raise RuntimeError("ModelScheduler released by a thread that does not hold it.")
            self._depth -= 1
            freed = self._depth == 0
            if freed:
                self._owner = None
                self._cond.notify_all()
        if freed and self.on_free is not None:
            self.on_free()

    def yield_to_waiting(self) -> bool:
        """Between two slices: lets the waiting acquirers that go first use the model, then takes it back.

        Those are every waiting interactive request and, for a background holder, the
        background work that queued before it. Only the holder may call it; it does
        nothing below depth 1 (the holder's caller still relies on what it holds).
        Returns whether it let anybody go first.
        """
        me = threading.get_ident()
        with self._cond:
            if self._owner != me:
                raise RuntimeError("ModelScheduler.yield_to_waiting called by a thread that does not hold it.")
            background = self._owner_background
            waiting = len(self._queues[False]) + (len(self._queues[True]) if background else 0)
            if not waiting or self._depth != 1:
                return False
        self.release()
        self.acquire(background=background)
        return True

    @contextlib.contextmanager
    def background(self) -> Iterator["ModelScheduler"]:
        """Holds the model as background work (`with scheduler.background(): ...`)."""
        self.acquire(background=True)
        try:
            yield self
        finally:
            self.release()

    def __enter__(self) -> "ModelScheduler":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def locked(self) -> bool:
        """True while some thread holds the model."""
        with self._cond:
            return self._owner is not None

    def waiting(self, background: bool | None = None) -> int:
        """How many threads wait for the model: interactive (False), background (True) or all (None)."""
        with self._cond:
            if background is None:
                return len(self._queues[False]) + len(self._queues[True])
            return len(self._queues[background])

    def interactive_waiting(self) -> bool:
        """True while an interactive request waits (cheap: background work asks at every layer boundary)."""
        return bool(self._queues[False])  # a deque's length is read atomically; a stale answer costs one layer

    def holder_is_background(self) -> bool:
        """True while background work holds the model."""
        with self._cond:
            return self._owner is not None and self._owner_background
