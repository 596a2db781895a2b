"""Background computation of the per-token salience matrices, one job at a time.

The first highlight comes from one forward + backward for the span on screen
(`SharedLM.quick`); the full [T, N] matrices that make retargeting instant are
computed here, in a worker thread, while the user already reads the map:

* One worker per lane runs its jobs in order (segment methods have a lane of their own); a job is background work for the model
  scheduler (lit_app/scheduler.py): it runs in time slices of bounded model time
  (`SharedLM.slice_s`, sequence_salience/slices.py) and after each slice every
  waiting interactive request (a span the user clicked, a trace, a generation)
  uses the model first (`ModelScheduler.yield_to_waiting`).
* Stale work stops within one slice: a job is cancelled when the user focuses
  another datapoint (`focus`), when a newer IG job of the same datapoint
  replaces it, or when nobody has polled it for `heartbeat_s` seconds (the page
  was closed). A cancelled job logs one INFO line when it stops (`_work`: what, why, how far);
  the moment it is told to stop is a DEBUG line (a cancellation is information, not a fault).
* Progress (`done`/`total`, elapsed time, the time left as a range) is read by polling (`status`), which
  needs no model lock. The range comes from the measured rate of the recent units (lit_app/time_left.py, the
  one estimator of every job): it widens when the rate drops, grows while a unit takes longer than the
  estimate, and never falls to "about 1 s" with units outstanding; there is none once every unit is done (the
  page then says "finishing…"). While the job waits for the model behind more urgent work (a user job: an
  explanation test the user started; `Job.waiting`), its status says `"waiting": true` with no estimate, and
  the paused time does not count as the units' time.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import dataclasses
import logging
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import sequence_salience as ss
from lit_app import clients
from lit_app.lru_cache import nbytes
from lit_app.time_left import Range, TimeLeft, status_fields

logger = logging.getLogger(__name__)

QUEUED, RUNNING, DONE, CANCELLED, ERROR = "queued", "running", "done", "cancelled", "error"
_FINISHED = (DONE, CANCELLED, ERROR)
DEFAULT_HEARTBEAT_S = 30.0
_KEEP_FINISHED = 16
# Bytes of the finished jobs' results and payloads kept (`lru_cache.nbytes`; the newest finished job is
# always kept). A long prompt's complete result is tens of MB (grad_gram [N, T, T]); 16 of them were kept
# whatever their size. The results stay in SharedLM's byte-bounded cache besides.
FINISHED_JOBS_BYTES = 256 * 1024**2
# Live (queued or running) jobs of one client beyond this release its oldest; of all clients beyond
# MAX_LIVE_JOBS_TOTAL cancel the oldest: the queues are bounded (client ids are not authenticated).
MAX_LIVE_JOBS = 4
MAX_LIVE_JOBS_TOTAL = 16
# Clients whose focus is remembered (the most recent ones).
MAX_CLIENTS = 256
# Longest wait at interpreter exit for a cancelled job to finish its current chunk.
EXIT_WAIT_S = 120.0
_ALL_QUEUES: "weakref.WeakSet[DetailJobs]" = weakref.WeakSet()


@dataclasses.dataclass(eq=False)
class Job:
    """One background computation for one datapoint (`group`) and one `kind` ("grad", "ig16", ...)."""

    group: Hashable
    kind: str
    run: Callable[["Job"], Any]
    state: str = QUEUED
    done: int = 0
    total: int = 0
    created: float = dataclasses.field(default_factory=time.monotonic)
    started: float | None = None
    finished: float | None = None
    last_seen: float = dataclasses.field(default_factory=time.monotonic)
    error: str = ""
    result: Any = None
    payload: Any = None  # the serialized result, built once by the caller
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    clock: Callable[[], float] = time.monotonic
    # Names this job in its status ("job_id") when set, so that a cancel can name the job it stops.
    job_id: str = ""
    # The stage of a job whose work comes in stages (coarse_to_fine: "coarse pass", then "refining"), in its status
    # ("stage") when set; `total` then counts the rows known so far.
    stage: str = ""
    # The clients that asked for it (lit_app/clients.py ids; "" a request without one). A client's newer
    # selection takes that client off; the job is cancelled once no client is left (`DetailJobs.focus`).
    owners: set[str] = dataclasses.field(default_factory=set)
    _cancel: threading.Event = dataclasses.field(default_factory=threading.Event)
    # Why it was told to stop (the first reason), for the one line logged when it stops.
    cancel_reason: str = ""
    # Since when (`clock` time) it waits for the model behind more urgent work (`waiting`); None: it does not.
    waiting_since: float | None = None
    # The time-left estimate (lit_app/time_left.py), from the units reported.
    time_left: TimeLeft = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.time_left = TimeLeft(self.clock)

    def cancel(self, reason: str = "") -> None:
        if self.state not in _FINISHED and not self._cancel.is_set():
            self.cancel_reason = reason
            logger.debug("Cancelling %s job for %s%s.", self.kind, _short(self.group), f" ({reason})" if reason else "")
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        """Whether `cancel` was called (or the heartbeat ran out)."""
        return self._cancel.is_set()

    def should_stop(self) -> bool:
        """The `cancel` check given to the core library (called between slices)."""
        if not self._cancel.is_set() and time.monotonic() - self.last_seen > self.heartbeat_s:
            self.cancel(f"nobody polled it for {self.heartbeat_s:.0f} s")
        return self._cancel.is_set()

    def start(self) -> None:
        """It runs from now on: its first units are estimated from now."""
        self.state, self.started = RUNNING, self.clock()
        self.time_left.restart()

    def report(self, done: int, total: int) -> None:
        """`done` of `total` units are done now (lit_app/time_left.py: a report with another `total`, or fewer
        units done than the last, starts a new sequence: a span's one-pass gradients, then its IG steps)."""
        self.done, self.total = done, total
        self.time_left.report(done, total)

    def begin_sequence(self) -> None:
        """The units reported from now on are a new sequence, estimated from now: work done before them that
        is not reported as units (a span's one gradient pass before its IG steps) is not counted in their cost,
        and until the first of them is reported the status has none (0 of 0)."""
        self.done = self.total = 0
        self.time_left.restart()

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """The job waits for the model behind more urgent work while this block runs: its status says so
        and has no estimate; the time waited is not counted as the units' time."""
        self.waiting_since = self.clock()
        self.time_left.pause()
        try:
            yield
        finally:
            self.time_left.resume()
            self.waiting_since = None

    def eta(self) -> Range | None:
        """Seconds left as a range (lit_app/time_left.py); None when not running, while it waits for the model,
        before the first unit, or once every unit is done."""
        if self.state != RUNNING or self.waiting_since is not None:
            return None
        return self.time_left.range()

    def status(self) -> dict[str, Any]:
        now = self.clock()
        elapsed = (now - self.started) if self.started is not None else 0.0
        if self.finished is not None and self.started is not None:
            elapsed = self.finished - self.started
        out = {
            "kind": self.kind, "state": self.state, "done": int(self.done), "total": int(self.total),
            "elapsed_s": round(elapsed, 2), **status_fields(self.eta()),
            "error": self.error, "waiting": self.state == RUNNING and self.waiting_since is not None,
        }
        if self.job_id:
            out["job_id"] = self.job_id
        if self.stage:
            out["stage"] = self.stage
        return out


def _short(group: Hashable) -> str:
    text = repr(group)
    return text if len(text) < 60 else text[:57] + "..."


class DetailJobs:
    """Queues of background jobs, one worker thread per lane and client.

    A lane is a queue with its own worker: jobs of one lane run one after the other, jobs of two
    lanes side by side, alternating slice by slice on the model (the scheduler's fairness among
    background holders). The per-token matrices go in the default lane; a segment method's job
    (a few forwards, what the view switches to) in its own, so it does not wait for a matrix job
    of T backwards to end.

    Work belongs to clients (lit_app/clients.py): each client has its own queue per lane (so two
    clients' jobs alternate slice by slice instead of one waiting for the other's to end), its own
    focus (the datapoint it looks at) and its own bound of live jobs. A client's newer selection
    releases that client's older jobs only; a job several clients asked for runs while one of them
    still wants it. A request without a client id (`clients.ANONYMOUS`) supersedes nothing: its job
    stops when nobody polls it for `heartbeat_s`.
    """

    def __init__(self, heartbeat_s: float = DEFAULT_HEARTBEAT_S, finished_bytes: int = FINISHED_JOBS_BYTES):
        self.heartbeat_s = heartbeat_s
        self.finished_bytes = finished_bytes
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        # (lane, client) -> its queue
        self._queues: dict[tuple[str, str], collections.deque[Job]] = collections.defaultdict(collections.deque)
        self._jobs: collections.OrderedDict[tuple[Hashable, str], Job] = collections.OrderedDict()
        # client -> (datapoint it looks at, how often that moved); the most recent MAX_CLIENTS clients
        self._focus: collections.OrderedDict[str, tuple[Hashable, int]] = collections.OrderedDict()
        self._workers: dict[tuple[str, str], threading.Thread] = {}
        _ALL_QUEUES.add(self)

    def focus_of(self, client: str) -> tuple[Hashable | None, int]:
        """(the datapoint `client` looks at, how many times its focus moved to another one); (None, 0) before
        its first selection (lit_app/cancel.py's `focus_moved`)."""
        with self._lock:
            return self._focus.get(client, (None, 0))

    def focus(self, group: Hashable, client: str = "") -> None:
        """`client` looks at `group` now: its jobs of other datapoints are released (cancelled unless another
        client still wants them). Without a client id nothing moves: such a request supersedes nothing."""
        if not client:
            return
        with self._lock:
            old, moves = self._focus.pop(client, (None, 0))
            self._focus[client] = (group, moves + (group != old))
            while len(self._focus) > MAX_CLIENTS:
                self._focus.popitem(last=False)
            for job in self._jobs.values():
                if job.group != group:
                    self._release(job, client, "another datapoint was selected")

    def _release(self, job: Job, client: str, reason: str) -> None:
        """`client` no longer wants `job` (called under `_lock`): cancelled once no client wants it."""
        if client in job.owners:
            job.owners.discard(client)
            if not job.owners:
                job.cancel(reason)

    def submit(self, group: Hashable, kind: str, run: Callable[[Job], Any], replaces: str | None = None,
               lane: str = "", job_id: str = "", client: str = "") -> Job:
        """The job for (group, kind): the live or finished one, else a new one queued in `lane` of `client`.

        job_id: names a new job in its status, for `cancel_job` (a live or finished job keeps its own).

        replaces: a kind prefix (e.g. "ig"): `client`'s live jobs of this group whose kind starts with it
          and differs from `kind` are released (a new IG step count replaces the old one; without a client
          id nothing is replaced).
        lane: the queue (and worker) the job runs in (see the class docstring).
        client: who asks (lit_app/clients.py); it becomes one of the job's owners.
        """
        with self._lock:
            job = self._jobs.get((group, kind))
            if job is not None and job.state not in (CANCELLED, ERROR) and not job._cancel.is_set():
                job.last_seen = time.monotonic()
                job.owners.add(client)
                return job
            if replaces is not None and client:
                for other in self._jobs.values():
                    if other.group == group and other.kind != kind and other.kind.startswith(replaces):
                        self._release(other, client, f"replaced by {kind}")
            job = Job(group=group, kind=kind, run=run, heartbeat_s=self.heartbeat_s, job_id=job_id, owners={client})
            live = [j for j in self._jobs.values() if j.state in (QUEUED, RUNNING) and not j._cancel.is_set()]
            mine = [j for j in live if client in j.owners]
            for old in mine[: max(0, len(mine) + 1 - MAX_LIVE_JOBS)]:
                self._release(old, client, f"more than {MAX_LIVE_JOBS} background jobs of this client")
            live = [j for j in live if not j._cancel.is_set()]
            for old in live[: max(0, len(live) + 1 - MAX_LIVE_JOBS_TOTAL)]:
                old.cancel(f"more than {MAX_LIVE_JOBS_TOTAL} background jobs on the server")
            self._jobs[(group, kind)] = job
            self._jobs.move_to_end((group, kind))
            self._trim()
            queue_key = (lane, client)
            self._queues[queue_key].append(job)
            worker = self._workers.get(queue_key)
            if worker is None or not worker.is_alive():
                worker = threading.Thread(target=self._work, args=queue_key,
                                          name=f"salience-detail{lane and '-' + lane}", daemon=True)
                self._workers[queue_key] = worker
                worker.start()
            self._wake.notify_all()
            return job

    def cancel_job(self, group: Hashable, job_id: str, reason: str, client: str = "") -> Job | None:
        """Releases the live job of `group` that `job_id` names for `client` (cancelled, within one slice, once
        no other client wants it; a job only other clients asked for is left alone) and returns it; None when
        no job of this group has that id (an id never names a newer job: a cancel sent late stops nothing else)."""
        with self._lock:
            for job in self._jobs.values():
                if job.group == group and job_id and job.job_id == job_id:
                    if client in job.owners:
                        self._release(job, client, reason)
                    return job
            return None

    def get(self, group: Hashable, kind: str, client: str | None = None) -> Job | None:
        """The job, marked as still wanted (heartbeat; by `client`, when given), or None."""
        with self._lock:
            job = self._jobs.get((group, kind))
            if job is not None:
                job.last_seen = time.monotonic()
                if client is not None and job.state not in _FINISHED and not job._cancel.is_set():
                    job.owners.add(client)
            return job

    def cancel_all(self) -> None:
        with self._lock:
            for job in self._jobs.values():
                job.cancel("shutting down")

    def idle(self) -> bool:
        """True when no job is queued or running (a cancelled one stops within one chunk)."""
        with self._lock:
            return not any(j.state in (QUEUED, RUNNING) for j in self._jobs.values())

    def _trim(self) -> None:
        """Drops the oldest finished jobs beyond `_KEEP_FINISHED`, then while the finished ones hold more
        than `finished_bytes` (never the newest)."""
        finished = [k for k, j in self._jobs.items() if j.state in _FINISHED]
        drop = finished[: max(0, len(finished) - _KEEP_FINISHED)]
        kept = finished[len(drop):]
        sizes = {k: nbytes(self._jobs[k].result) + nbytes(self._jobs[k].payload) for k in kept}
        total = sum(sizes.values())
        for k in kept[:-1]:
            if total <= self.finished_bytes:
                break
            total -= sizes[k]
            drop.append(k)
        for k in drop:
            del self._jobs[k]

    def finished_job_bytes(self) -> int:
        """Bytes the finished jobs hold (`lru_cache.nbytes` of results and payloads)."""
        with self._lock:
            return sum(nbytes(j.result) + nbytes(j.payload) for j in self._jobs.values() if j.state in _FINISHED)

    def _work(self, lane: str = "", client: str = "") -> None:
        queue = self._queues[(lane, client)]
        while True:
            with self._lock:
                while not queue:
                    if not self._wake.wait(timeout=60) and not queue:
                        if self._workers.get((lane, client)) is threading.current_thread():
                            del self._workers[(lane, client)]
                            del self._queues[(lane, client)]
                        return
                job = queue.popleft()
            if job.should_stop():
                job.state, job.finished = CANCELLED, time.monotonic()
                logger.info("Cancelled the %s job for %s before it started (%s).", job.kind, _short(job.group),
                            job.cancel_reason or "stopped")
                continue
            job.start()
            try:
                with clients.acting_as(client):  # the scheduler shares the model fairly between clients
                    job.result = job.run(job)
                job.state = DONE
                logger.info("%s job done in %.1f s.", job.kind, time.monotonic() - job.started)
            except ss.ComputationCancelled:
                job.state = CANCELLED
                logger.info("Cancelled the %s job for %s (%s) after %.1f s at %d/%d.", job.kind, _short(job.group),
                            job.cancel_reason or "stopped", time.monotonic() - job.started, job.done, job.total)
            except Exception as e:  # pylint: disable=broad-except
                logger.exception("%s job failed", job.kind)
                job.error = " ".join(f"{type(e).__name__}: {e}".split())
                job.state = ERROR
            finally:
                job.finished = time.monotonic()
                with self._lock:
                    self._trim()  # the bounds hold as soon as a job finishes, not at the next submit


@atexit.register
def _stop_at_exit(timeout_s: float = EXIT_WAIT_S) -> None:
    """Cancels every background job and waits until each worker is idle.

    The worker is a daemon thread: if the interpreter exited while it was inside a torch
    backward, torch's thread pool would be torn down under it and the process would abort
    ("terminate called without an active exception", exit code 134) after a clean run.
    A cancelled job stops within one slice, so this waits at most one slice.
    """
    deadline = time.monotonic() + timeout_s
    for jobs in list(_ALL_QUEUES):
        jobs.cancel_all()
    for jobs in list(_ALL_QUEUES):
        while not jobs.idle() and time.monotonic() < deadline:
            time.sleep(0.05)
