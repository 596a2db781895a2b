"""Who uses the shared model next: requests a person waits for first, then work a person started, then automatic work.

The policy (`ModelScheduler`): three levels (`Priority`): interactive requests (clicks, first
highlights, traces; `with lock:`), then user jobs a person started with a button and watches (explanation tests,
intervention runs, the value-index build a search starts; `lock.user_job()`), then automatic background work
(per-token matrix jobs, every-matrix requests; `lock.background()`). Below the interactive level work runs in time
slices of `--slice_s` (pausing inside long backwards while `outranked()`); a holder yields to every more urgent
waiter of its own client and to its equals (below: they share model time), never to its own client's less urgent work;
between clients a user job outranks only its own client's background work, and one client's user job and another's
background work are equals (a background job runs as the client whose queue it is in). A matrix job
paused behind a user job says so (`"waiting": true`, no `eta_s`; the estimate resumes without the paused time). A
span's IG steps or SmoothGrad samples (interactive) yield between chunks too, so another client's click is not
behind them.

One retained graph at a time (issue 43): work below clicks that keeps a forward's graph across its turns (the
per-token matrices: `acquire(..., graph=True)`) hands the model between its chunks to another such work only
after freeing its graph (sequence_salience/slices.py, "The graph across pauses": the core asks `graph_waiting()`
and says with `yield_to_waiting(holding_graph=...)` whether it still holds one); while one waits holding its
graph (a click or a segment job went first), no other such work starts building one. So K clients' matrix jobs
hold one graph, not K (their peak was +89 % of the server's RSS with four, docs/benchmarks.md).

Equals share model time, not turns (issue 43): each holder below clicks has a virtual time, the model time it has
held since it took the model (its `acquire` at depth 0); one that (re)joins starts at the least of the others'
(so a new job cannot starve an old one, and time away gives no credit). Among free equals the least virtual time
goes first, and a holder yields between slices to an equal only when the equal's is not above its own. A job that
yields after 0.25 s and one that holds the model for a 7 s batch so get about half each (was: one turn each, a few
per cent of the model for the first, docs/benchmarks.md "Session 35 (h2)"); while they take turns, each job's
status says that it shares the model, in its own turns and the equal's alike (`equal_waiting`; session 36 said
"waiting" in the equal's turns only, so two polls apart it alternated with an estimate). The virtual times live on the holder
and the waiting tickets only: nothing is kept per thread after it lets go.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import itertools
import threading
import time
from collections.abc import Callable, Iterator

from lit_app.edge import clients
from lit_app.errors import RequestError


class Priority(enum.IntEnum):
    """The three levels of `ModelScheduler`, most urgent first (a lower value goes first)."""

    INTERACTIVE = 0  # a click, a first highlight, a trace: a person waits for it now
    USER_JOB = 1  # work a person started with a button and is watching: explanation tests, interventions
    BACKGROUND = 2  # automatic work nobody asked for: per-token matrix jobs, every-matrix requests


class ModelScheduler:
    """A re-entrant model lock that serves interactive requests, then user jobs, then background slices.

    One thread uses the model at a time. Acquirers queue for it at one of three levels (`Priority`):

    * interactive (`with scheduler:` or `acquire()`): what a person waits for: a clicked
      span, the first highlight of a datapoint, an inside-the-model trace, a value search's
      lookup, a tokenization that falls back to the model's tokenizer, the generation of the
      selected datapoint.
    * user job (`with scheduler.user_job():` or `acquire(Priority.USER_JOB)`): work a person
      started with a button and is watching: the explanation tests (lit_app/wrappers/explain.py), the
      intervention runs (lit_app/wrappers/inside.py), the value-index build that a person's first
      search starts (searches answer from the layers built so far while the module shows its
      progress; nothing else starts it).
    * background (`with scheduler.background():` or `acquire(Priority.BACKGROUND)`): automatic
      work nobody asked for click by click: the per-token matrix jobs that a first highlight
      starts (gradients, IG, SmoothGrad, segment methods), blocking every-matrix requests.

    When the model is free it goes to the acquirer of the most urgent level that waits,
    to clicks in arrival order, and among the work below clicks that nothing goes before to the
    one that has held the model least (virtual time, module docstring; ties: arrival). Work below the interactive
    level holds the model for one bounded slice at a time (about 0.3-0.5 s of model time,
    sized by `sequence_salience.slices.SliceSizer`) and calls `yield_to_waiting()` between
    slices (and, when one target's backward alone is longer than a slice, inside it at layer
    boundaries while `outranked()`: `compute_salience(between_slices=...)`), so a click waits
    at most for the rest of the slice that is running when it arrives, and a user job for the
    rest of a background slice. An interactive request that runs in chunks (a span's IG steps or
    SmoothGrad samples, `SalienceRuns.quick`) yields between them too, so another client's click is not
    behind it (issue 43). The scheduler interrupts nothing itself: it only decides who
    goes next when the holder lets go. A background job waits, paused, while user jobs run
    (its progress says so: lit_app/model/jobs.py `Job.status`'s "waiting").

    Graphs (module docstring): work acquired with `graph=True` keeps a forward's graph across its slices. While
    a waiter holds such a graph (it yielded with `holding_graph=True`), other `graph=True` work below clicks does
    not get the model; `graph_waiting()` tells the holder that such work waits for it, and the holder frees its
    graph before it yields. Clicks and work without a graph are never held back by this.

    Re-entrant: the holder may acquire again (at any level) without waiting; the
    model is free once it has released as often as it acquired. Holding the model keeps
    the level it was first acquired with.

    Fairness among equals: a holder that yields lets every waiting acquirer of a more urgent
    level of its own client go first, and an equal (its own level, another client's work below
    clicks) whose virtual time (module docstring: model time held) is not above its own, so two
    jobs of one level share the model's time, however long each holds it between yields; it
    never yields to a less urgent level of its own client. Ties keep arrival order.

    Between clients (lit_app/edge/clients.py; a background job runs as the client whose queue it is in):
    clicks of every client go first; below them a user job outranks only its own client's background
    work, and another client's user job and background work are equals that share the model's time
    (one client's explanation test does not pause another client's matrices).

    clock: the model-time clock of the virtual times (tests pass a scripted one).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._cond = threading.Condition(threading.Lock())
        # level -> tickets of the threads waiting at that level, in arrival order
        self._queues: dict[Priority, collections.deque[_Ticket]] = {p: collections.deque() for p in Priority}
        self._owner: int | None = None
        self._owner_priority = Priority.INTERACTIVE
        self._owner_client = ""
        self._owner_graph = False
        self._owner_vtime = 0.0  # the holder's virtual time when it took the model (`_vtime` adds since)
        self._held_since = 0.0
        self._clock = clock
        self._depth = 0
        self._arrivals = itertools.count()
        # Called (outside the lock, on the releasing thread) each time the model is let go:
        # SharedLM gives the freed pass memory back to the OS there (lit_app/memory.py, `Trimmer`).
        self.on_free: Callable[[], object] | None = None

    @staticmethod
    def _before(waiter: "_Ticket", level: Priority, client: str) -> bool:
        """Whether `waiter` goes before an acquirer at `level` of `client` whatever their arrival: a click before
        anything else; a user job before its own client's background work only (another client's user job
        and background work are equals: they share model time, issue 43)."""
        return waiter.level < level and (waiter.level == Priority.INTERACTIVE or waiter.client == client)

    def _waiters(self) -> list["_Ticket"]:
        """Every waiting ticket (a copy, safe to read without `_cond`: list() of a deque is one step)."""
        return [t for p in Priority for t in list(self._queues[p])]

    @staticmethod
    def _builds_graph(waiter: "_Ticket") -> bool:
        """Whether `waiter` would build a graph it keeps across turns (work below clicks acquired with
        graph=True that holds none now)."""
        return waiter.graph and not waiter.holding and waiter.level != Priority.INTERACTIVE

    def _vtime(self) -> float:
        """The holder's virtual time now: the model time it has held below clicks (module docstring)."""
        if self._owner_priority == Priority.INTERACTIVE:
            return self._owner_vtime
        return self._owner_vtime + max(0.0, self._clock() - self._held_since)

    def _least_vtime(self) -> float:
        """Where an acquirer below clicks starts: the least virtual time of the others below clicks (0 if none)."""
        others = [w.vtime for w in self._waiters() if w.level != Priority.INTERACTIVE]
        if self._owner is not None and self._owner_priority != Priority.INTERACTIVE:
            others.append(self._vtime())
        return min(others, default=0.0)

    def _my_turn(self, ticket: "_Ticket", level: Priority) -> bool:
        if self._owner is not None:
            return False
        waiters = self._waiters()
        if any(self._before(w, level, ticket.client) for w in waiters):
            return False
        if level == Priority.INTERACTIVE:
            return self._queues[level][0] is ticket
        # Among the work below clicks that nothing goes before, the one that held the model least (ties: the one
        # that waited longest); work that would
        # build a graph waits while another waits holding one (one retained graph at a time).
        held = any(w.holding for w in waiters)
        free = [w for w in waiters if not any(self._before(o, w.level, w.client) for o in waiters)
                and not (held and self._builds_graph(w))]
        return bool(free) and min(free, key=lambda w: (w.vtime, w.seq)) is ticket

    def _yields_to(self, waiter: "_Ticket", holding_graph: bool = False) -> bool:
        """Whether the holder, between slices, lets `waiter` go first: a click; for work below clicks, its own
        client's more urgent work, and an equal (its own level, other clients' work) whose virtual time is not
        above its own; never its own client's less urgent work, and while the holder keeps a graph
        (`holding_graph`) never work that would build another."""
        if holding_graph and self._builds_graph(waiter):
            return False
        if waiter.level == Priority.INTERACTIVE:
            return True
        if self._owner_priority == Priority.INTERACTIVE:
            return False
        if self._before(waiter, self._owner_priority, self._owner_client):
            return True
        equal = waiter.level <= self._owner_priority or waiter.client != self._owner_client
        return equal and waiter.vtime <= self._vtime()

    def _queue_and_wait(self, level: Priority, client: str, graph: bool = False, holding: bool = False,
                        vtime: float | None = None) -> None:
        """Joins the back of `level`'s queue and waits for the model's turn (called under `_cond`). vtime: the
        acquirer's virtual time (a yielding holder's); None: one that joins starts at the others' least."""
        queue = self._queues[level]
        if vtime is None:
            vtime = 0.0 if level == Priority.INTERACTIVE else self._least_vtime()
        ticket = _Ticket(level, client, next(self._arrivals), graph, holding, vtime)
        queue.append(ticket)
        try:
            while not self._my_turn(ticket, level):
                self._cond.wait()
        except BaseException:  # e.g. KeyboardInterrupt while waiting: leave the queue
            queue.remove(ticket)
            self._cond.notify_all()
            raise
        queue.remove(ticket)
        self._owner, self._owner_priority, self._owner_client, self._depth = threading.get_ident(), level, client, 1
        self._owner_graph = graph
        self._owner_vtime, self._held_since = ticket.vtime, self._clock()

    def acquire(self, priority: Priority = Priority.INTERACTIVE, graph: bool = False) -> bool:
        """Waits for the model (see the class docstring for the order); re-entrant. Returns True.

        graph: the work keeps a forward's graph across its slices (per-token matrices; class docstring)."""
        level = Priority(priority)
        with self._cond:
            if self._owner == threading.get_ident():
                self._depth += 1
                return True
            self._queue_and_wait(level, _client(), graph)
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

    def yield_to_waiting(self, holding_graph: bool = False,
                         while_waiting: Callable[[bool], contextlib.AbstractContextManager[object]] | None = None
                         ) -> bool:
        """Between two slices: lets the waiting acquirers that go first use the model, then takes it back.

        Those are every waiting click, its own client's more urgent work, and the equals whose virtual
        time is not above the holder's (class docstring; in arrival order among ties). Only the holder
        may call it; it does nothing below depth 1 (the holder's caller still relies on what it holds).
        Returns whether it let anybody go first. Letting go and queueing again are one step, so no less urgent acquirer
        can take the model in between.

        holding_graph: the holder keeps a forward's graph across this pause; work that would build another
          (acquired with graph=True, below clicks) waits until the holder has freed it (class docstring).
        while_waiting: when it lets anybody go first, `while_waiting(shared)` is entered before it lets go and left
          once it holds the model again (a job's status says "waiting" meanwhile: lit_app/model/jobs.py
          `Job.waiting`); `shared` is True when only equals go first (they share the model's time, so the wait is
          part of the holder's rate), False when a click or more urgent work of its own client does.
        """
        with self._cond:
            if self._owner != threading.get_ident():
                raise RuntimeError("ModelScheduler.yield_to_waiting called by a thread that does not hold it.")
            level, client, graph = self._owner_priority, self._owner_client, self._owner_graph
            first = [w for w in self._waiters() if self._yields_to(w, holding_graph)]
            if self._depth != 1 or not first:
                return False
            shared = not any(w.level == Priority.INTERACTIVE or self._before(w, level, client) for w in first)
            vtime = self._vtime()
            self._owner = None
            self._cond.notify_all()
            with contextlib.nullcontext() if while_waiting is None else while_waiting(shared):
                self._queue_and_wait(level, client, graph, holding_graph, vtime)
        if self.on_free is not None:  # the model was let go (SharedLM's trim is scheduled, not run here)
            self.on_free()
        return True

    def equal_waiting(self) -> bool | None:
        """For the holder, between slices: whether work that shares the model's time with it waits (an equal: below
        clicks, neither going before it nor its own client's less urgent work; class docstring), whether or not its
        virtual time lets it go first now: another client's (True), only the holder's own client's (False), none
        (None; also for a click, which has no equals). A job's status says it shares the model from it
        (lit_app/model/jobs.py `Job.share`)."""
        with self._cond:
            level, client = self._owner_priority, self._owner_client
            if self._owner != threading.get_ident() or level == Priority.INTERACTIVE:
                return None
            equals = [w for w in self._waiters() if w.level != Priority.INTERACTIVE
                      and not self._before(w, level, client) and not (level < w.level and w.client == client)]
        return any(w.client != client for w in equals) if equals else None

    def graph_waiting(self) -> bool:
        """Whether work that would build a graph of its own (acquired with graph=True, below clicks) waits for
        the holder's next yield: the holder then frees its graph before it yields (class docstring). Cheap."""
        return any(self._builds_graph(w) and self._yields_to(w) for w in self._waiters())

    @contextlib.contextmanager
    def at(self, priority: Priority) -> Iterator["ModelScheduler"]:
        """Holds the model at `priority` (`with scheduler.at(Priority.USER_JOB): ...`)."""
        self.acquire(priority)
        try:
            yield self
        finally:
            self.release()

    def background(self) -> contextlib.AbstractContextManager["ModelScheduler"]:
        """Holds the model as automatic background work (`with scheduler.background(): ...`)."""
        return self.at(Priority.BACKGROUND)

    def user_job(self) -> contextlib.AbstractContextManager["ModelScheduler"]:
        """Holds the model as work a person started and watches (`with scheduler.user_job(): ...`)."""
        return self.at(Priority.USER_JOB)

    def __enter__(self) -> "ModelScheduler":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def locked(self) -> bool:
        """True while some thread holds the model."""
        with self._cond:
            return self._owner is not None

    def waiting(self, priority: Priority | None = None) -> int:
        """How many threads wait for the model at `priority`, or at any level (None)."""
        with self._cond:
            if priority is None:
                return sum(len(q) for q in self._queues.values())
            return len(self._queues[Priority(priority)])

    def interactive_waiting(self) -> bool:
        """True while an interactive request waits (cheap: a deque's length is read atomically)."""
        return bool(self._queues[Priority.INTERACTIVE])

    def outranked(self) -> bool:
        """True while an acquirer of a more urgent level than the holder's waits (cheap: background work
        asks at every layer boundary; a stale answer costs one layer)."""
        level, client = self._owner_priority, self._owner_client
        return any(self._before(w, level, client) for w in self._waiters())

    def holder_priority(self) -> Priority | None:
        """The level the holder acquired the model with; None while the model is free."""
        with self._cond:
            return None if self._owner is None else self._owner_priority

    def whose_turn(self) -> Callable[[], bool | None]:
        """For work of the calling thread's client that is about to wait for the model (or let others go first): a
        cheap check, callable from any thread at any later time (a status poll), of whether the work holding the
        model then is another client's (True), its own client's (False), or nothing holds it (None). A job's
        status says from it why it waits (lit_app/model/jobs.py `Job.waiting`)."""
        mine = _client()

        def other() -> bool | None:
            with self._cond:  # held only for a few steps by acquirers: never waits for the model
                return None if self._owner is None else self._owner_client != mine

        return other

    def holder_is_background(self) -> bool:
        """True while automatic background work holds the model."""
        return self.holder_priority() == Priority.BACKGROUND


class _Ticket:
    """A waiting acquirer: its level, its client (lit_app/edge/clients.py), its arrival number, its graph and its
    virtual time (the model time it has held, module docstring)."""

    __slots__ = ("level", "client", "seq", "graph", "holding", "vtime")

    def __init__(self, level: Priority, client: str, seq: int, graph: bool = False, holding: bool = False,
                 vtime: float = 0.0):
        self.level, self.client, self.seq, self.vtime = level, client, seq, vtime
        self.graph = graph  # the work keeps a forward's graph across its turns (acquire's graph=True)
        self.holding = holding  # it waits holding one (yield_to_waiting's holding_graph=True)


def _client() -> str:
    """The client of the work this thread runs (a request's, or a background job's worker's: `clients.acting_as`)."""
    try:
        return clients.current()
    except RequestError:  # a malformed id: the request itself is refused with it
        return clients.ANONYMOUS
