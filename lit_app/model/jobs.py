"""One job: a computation a client started, as a state machine, and its status (the one status type).

Every computation a client starts is a `Job`, whichever way it runs (lit_app/model/jobs_table.py holds them all):
a span (the first highlight or a clicked span, run by its request while "span_progress" polls read it), a
per-token matrix or a segment method's values (background work a lane's worker runs,
lit_app/model/progressive.py), an explanation test or an intervention run (a user job, run by its request while
"status" polls read it, lit_app/model/user_jobs.py).

States and the only transitions (anything else raises `IllegalTransition`):

    queued --start--> running --succeed--> done
       |                  |----fail------> error   (the job's `error` says why)
       +---end_cancelled--+--end_cancelled--> cancelled  (its `cancel_reason` says why)

A job is told to stop with `cancel(reason)` (a cancel request, a newer selection, a disconnected client):
its cancel check (`should_stop`, the `Cancel` of lit_app/model/cancel.py given to the core library) fires between
chunks and the computation ends `cancelled`. Its progress (`report`) feeds the time-left estimate of
lit_app/model/time_left.py. `snapshot()` is a `Status`, whose `to_json()` (`status()`) is what the browser polls; `Status.none`
is the one status of "no such job" (both in lit_app/model/jobs_status.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any

import sequence_salience as ss
from lit_app.model import cancel as cancel_lib
from lit_app.model.jobs_status import CANCELLED, DETAIL, DONE, ERROR, NONE, QUEUED, RUNNING, USER, Status
from lit_app.model.time_left import Range, Then, TimeLeft
from lit_app.schema.fields import WAITING_OTHER, WAITING_OWN

logger = logging.getLogger(__name__)

FINISHED = (DONE, CANCELLED, ERROR)
# state -> the states it may move to (every other move raises IllegalTransition).
TRANSITIONS: Mapping[str, frozenset[str]] = {
    QUEUED: frozenset({RUNNING, CANCELLED}),
    RUNNING: frozenset({DONE, ERROR, CANCELLED}),
    DONE: frozenset(), ERROR: frozenset(), CANCELLED: frozenset(),
}
DEFAULT_HEARTBEAT_S = 30.0
# What callers read here (the states and the status live in lit_app/model/jobs_status.py).
__all__ = ["CANCELLED", "DEFAULT_HEARTBEAT_S", "DETAIL", "DONE", "ERROR", "FINISHED", "IllegalTransition", "Job",
           "NONE", "QUEUED", "RUNNING", "Status", "TRANSITIONS", "USER", "short", "user_job"]


class IllegalTransition(RuntimeError):
    """A job was moved from a state to one it cannot reach (e.g. a finished job started again)."""


def short(group: Hashable) -> str:
    """How the log names a job's datapoint (its group, shortened)."""
    text = repr(group)
    return text if len(text) < 60 else text[:57] + "..."


@dataclasses.dataclass(eq=False)
class Job:
    """One computation a client started (module docstring): its state, progress, cancel check and result.

    group: the datapoint it is about (`inputs.datapoint_group`); kind: what it computes ("grad", "ig16",
      "span", a segment job's kind, an explanation test's action).
    run: the work, `run(job)`, for a job a lane's worker runs (lit_app/model/jobs_table.py); None for a job its
      request runs itself (spans, user jobs).
    heartbeat_s: a job nobody polled (`last_seen`) for this long stops (background jobs, which no connection
      of their own keeps alive); None: no heartbeat.
    reasons: further reasons to stop (lit_app/model/cancel.py `Reason`s: the request's client disconnected, a newer
      selection of its client); `cancel(reason)` adds one from outside.
    form: the status's wire form (DETAIL or USER); key: a user job's key (what it is about, in its status).
    """

    group: Hashable
    kind: str
    run: Callable[["Job"], Any] | None = None
    heartbeat_s: float | None = DEFAULT_HEARTBEAT_S
    clock: Callable[[], float] = time.monotonic
    # Names this job in its status ("job_id") when set, so that a cancel can name the job it stops.
    job_id: str = ""
    # The stage of a job whose work comes in stages (coarse_to_fine: "coarse pass", then "refining"; an
    # explanation test's "salience", "deletion", ...), in its status when set.
    stage: str = ""
    # The clients that asked for it (lit_app/edge/clients.py ids; "" a request without one): a background job is
    # cancelled once no client is left (lit_app/model/jobs_table.py `JobTable.focus`).
    owners: set[str] = dataclasses.field(default_factory=set)
    # False for a job about the model, not a datapoint (the value index, lit_app/model/value_index.py): a client's
    # newer selection does not release it and it counts against no bound of a client's live jobs.
    about_datapoint: bool = True
    reasons: tuple[cancel_lib.Reason, ...] = ()
    form: str = DETAIL
    key: str = ""
    state: str = QUEUED
    done: int = 0
    total: int = 0
    error: str = ""
    result: Any = None
    payload: Any = None  # the serialized result, built once by the caller
    # Results so far, replaced whole (never mutated) so that a poll reads one state (user jobs' `partial`).
    partial: dict[str, Any] | None = None
    started: float | None = None
    finished: float | None = None
    last_seen: float = dataclasses.field(default_factory=time.monotonic)
    # Since when (`clock` time) it waits for the model behind more urgent work (`waiting`); None: it does not.
    waiting_since: float | None = None
    # While it waits: whether another client's work holds the model (`waiting(other=...)`), and its last answer
    # other than None (the model let go for a moment).
    _other: Callable[[], bool | None] | None = dataclasses.field(default=None, init=False)
    _other_last: bool | None = dataclasses.field(default=None, init=False)
    # While it takes turns with equal work (`share`): whose, WAITING_OTHER or WAITING_OWN; "" it does not.
    sharing: str = dataclasses.field(default="", init=False)
    check: cancel_lib.Cancel = dataclasses.field(init=False)
    time_left: TimeLeft = dataclasses.field(init=False)
    # (stage, live) while a step the job does not report itself runs: `live()` -> (done, total) at each poll.
    _live: tuple[str, Callable[[], tuple[int, int]]] | None = dataclasses.field(default=None, init=False)

    def __post_init__(self) -> None:
        self.time_left = TimeLeft(self.clock)
        what = f"the {self.kind} job" + (f" for {short(self.group)}" if self.form == DETAIL else "")
        heartbeat = (self._heartbeat,) if self.heartbeat_s is not None else ()
        self.check = cancel_lib.Cancel(what, *self.reasons, *heartbeat)

    # ------------------------------------------------------------------ states

    def _move(self, to: str) -> None:
        if to not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"The {self.kind} job is {self.state}; it cannot become {to}"
                                    f" (allowed: {', '.join(sorted(TRANSITIONS[self.state])) or 'none, it is finished'}).")
        self.state = to
        if to == RUNNING:
            self.started = self.clock()
        elif to in FINISHED:
            self.finished = self.clock()

    def start(self) -> None:
        """queued -> running: its first units are estimated from now."""
        self._move(RUNNING)
        self.time_left.restart()

    def succeed(self, result: Any = None) -> None:
        """running -> done, with its result."""
        self._move(DONE)
        self.result = result

    def fail(self, error: str) -> None:
        """running -> error; `error` is one line saying why."""
        self._move(ERROR)
        self.error = " ".join(error.split())

    def end_cancelled(self, error: str = "") -> None:
        """queued or running -> cancelled (it stopped; `cancel_reason` says why, `error` what the poll shows)."""
        self._move(CANCELLED)
        self.error = error

    @contextlib.contextmanager
    def running(self) -> Iterator["Job"]:
        """Runs the block as this job: started now (unless it runs already: a user job starts when made), then
        done (the block's `job.result` stays), cancelled (the core library's ComputationCancelled, re-raised)
        or failed (any other error, re-raised)."""
        if self.state == QUEUED:
            self.start()
        try:
            yield self
        except ss.ComputationCancelled:
            self.end_cancelled()
            raise
        except Exception as e:
            self.fail(f"{type(e).__name__}: {e}")
            raise
        self.succeed(self.result)

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED

    # ---------------------------------------------------------------- stopping

    def _heartbeat(self) -> str:
        if time.monotonic() - self.last_seen > self.heartbeat_s:
            return f"nobody polled it for {self.heartbeat_s:.0f} s"
        return ""

    def cancel(self, reason: str = "") -> None:
        """Tells it to stop (the first reason given stays); it stops within one chunk."""
        if self.is_finished:  # nothing to stop; it no longer counts as wanted (a later request starts anew)
            self.check.reason = self.check.reason or reason or "stopped"
            return
        self.check.stop(reason or "stopped")

    @property
    def cancelled(self) -> bool:
        """Whether it was told to stop (`cancel`, or a reason that fired)."""
        return bool(self.check.reason)

    @property
    def _cancel(self) -> cancel_lib.Cancel:
        """The cancel check under the name the former stop flag had (`_cancel.is_set()`; older tests read it)."""
        return self.check

    @property
    def cancel_reason(self) -> str:
        """Why it was told to stop (the first reason); "" while it is wanted."""
        return self.check.reason

    def should_stop(self) -> bool:
        """The cancel check given to the core library (called between chunks)."""
        return self.check()

    # ---------------------------------------------------------------- progress

    def report(self, *progress: Any, same_units: bool = False, then: Then | None = None,
               cost: tuple[float, float] | None = None) -> None:
        """`report(done, total)`: `done` of `total` units are done now; `report(stage, done, total)` (the core
        library's progress callback): the same in `stage`, where another stage than the last starts a new
        sequence of units, begun when the last one ended (lit_app/model/time_left.py: a report with another `total`,
        or fewer units than the last, starts a new sequence too). `same_units`: the new stage's units cost what the
        last stage's did, whose rate then stands until one of its own is measured. `then`: work known to follow
        these units, counted in the time left (a span's IG steps after its gradient pass). `cost`: (cost of the units
        done, of all units), known ahead (leave one out's recomputed positions: time_left.py estimates in both)."""
        if len(progress) == 3:
            stage, done, total = progress
            if stage != self.stage:
                self.time_left.restart(at=self.time_left.last_report_at, keep_rate=same_units)
            self.stage = stage
        else:
            done, total = progress
        self._live = None
        self.done, self.total = int(done), int(total)
        self.time_left.report(self.done, self.total, then, cost)

    def report_within(self, share: float, units: float, ahead: bool = False) -> None:
        """Of the chunk in flight (`units` units), `share` is done now: its backward's layers (the core's
        `SliceSizer.inside`), so that a job has a time left before its first chunk ends (time_left.py `within`);
        `ahead`: of the forward ahead of the units (`units` its rows in units), a time left during it."""
        self.time_left.within(share, units, ahead)

    def begin_sequence(self) -> None:
        """The units reported from now on are a new sequence, estimated from now: work done before them that
        is not reported as units (a span's one gradient pass before its IG steps) is not counted in their cost,
        and until the first of them is reported the status has none (0 of 0)."""
        self.done = self.total = 0
        self.time_left.restart()

    def follow(self, stage: str, live: Callable[[], tuple[int, int]]) -> None:
        """Enters `stage` whose (done, total) `live()` reads at each poll (it must not wait for the model),
        until the next `report`; no estimate meanwhile (no units measured)."""
        self.stage, self.done, self.total = stage, 0, 0
        self._live = (stage, live)

    def share(self, other: bool | None) -> None:
        """Between its slices: whether equal work shares the model's time with it now (lit_app/model/scheduler.py
        `equal_waiting`: another client's (True), only its own client's (False), none (None)). Its status says so
        (`sharing`) from then until a slice boundary finds none, through its own turns and the equal's alike (was:
        "waiting" in the equal's turns and an estimate in its own, alternating from one poll to the next)."""
        self.sharing = "" if other is None else WAITING_OTHER if other else WAITING_OWN

    @contextlib.contextmanager
    def waiting(self, other: Callable[[], bool | None] | None = None, shared: bool = False) -> Iterator[None]:
        """The job waits for the model while this block runs: its status says so and has no estimate; the time
        waited is not counted as the units' time.

        other: read at each poll, whether the work holding the model is another client's (True) or this job's
          own client's (False; None: nothing holds it, the last answer stands): lit_app/model/scheduler.py
          `whose_turn`. The status says whose (`waiting_for`); None: it says nothing of whose.
        shared: the wait is an equal's turn (scheduler.py, virtual time): no wait at all for the status, which
          keeps saying that the job shares the model (`share`) with its estimate, whose rate counts these turns
          (what the rest of the job gets while they share)."""
        if shared:
            yield
            return
        self._other, self._other_last = other, None
        self.waiting_since = self.clock()
        self.time_left.pause()
        try:
            yield
        finally:
            self.time_left.resume()
            self.waiting_since = None
            self._other = None

    def _waiting_for(self) -> str:
        """Whose work goes first while it waits (fields.WAITING_OWN / WAITING_OTHER); "" unknown."""
        ask = self._other  # read once: the block may end meanwhile
        other = ask() if ask is not None else None
        if other is not None:
            self._other_last = other
        elif self._other_last is None:
            return ""
        return WAITING_OTHER if self._other_last else WAITING_OWN

    def eta(self) -> Range | None:
        """Seconds left as a range (lit_app/model/time_left.py); None when not running, while it waits for the model,
        while a step it does not report runs, before its first report (no total known), in its first sequence before
        the first unit or share of a chunk's or its forward's layers (`report_within`; nothing to borrow:
        time_left.py), or once every unit is done."""
        if self.state != RUNNING or self.waiting_since is not None or self._live is not None:
            return None
        return self.time_left.range()

    def snapshot(self) -> Status:
        """What a poll reads now (`status()` is its wire form)."""
        end = self.finished if self.finished is not None else self.clock()
        elapsed = end - self.started if self.started is not None else 0.0
        done, total, live = self.done, self.total, self._live
        if live is not None and live[0] == self.stage:
            done, total = live[1]()
        waiting = self.state == RUNNING and self.waiting_since is not None
        return Status(kind=self.kind, state=self.state, done=int(done), total=int(total), elapsed_s=elapsed,
                      eta=self.eta(), error=self.error, waiting=waiting,
                      waiting_for=self._waiting_for() if waiting else "",
                      sharing=self.sharing if self.state == RUNNING and not waiting else "", job_id=self.job_id, stage=self.stage, form=self.form, key=self.key, cancelled=self.cancelled,
                      partial=self.partial)

    def status(self) -> dict[str, Any]:
        """The wire form of `snapshot()` (what the browser polls)."""
        return self.snapshot().to_json()


def user_job(action: str, key: str, check: cancel_lib.Cancel | None = None) -> Job:
    """A running user job (an explanation test, an intervention run: lit_app/model/user_jobs.py): `action` is its
    kind, `key` what it is about; `check` its cancel check (a fresh one that only `cancel` fires when None)."""
    job = Job(group=key, kind=action, heartbeat_s=None, form=USER, key=key, stage="starting")
    if check is not None:
        job.check = check
    job.start()
    return job
