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
* Progress (`done`/`total`, elapsed time, an estimate of the time left) is read
  by polling (`status`), which needs no model lock. The estimate is the units left times the
  measured seconds per unit, taken at each report and counted down between reports; it never
  rises (a later, slower report cannot push it up) and is None when it ran out before the work
  did or once every unit is done (the page then says "finishing…", never "about 1 s left").
  While the job waits for the model behind more urgent work (a user job: an explanation test the user
  started; `Job.waiting`), its status says `"waiting": true` with no estimate, and the paused time
  counts neither towards the estimate's deadline nor towards the measured seconds per unit.
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
from lit_app.lru_cache import nbytes

logger = logging.getLogger(__name__)

QUEUED, RUNNING, DONE, CANCELLED, ERROR = "queued", "running", "done", "cancelled", "error"
_FINISHED = (DONE, CANCELLED, ERROR)
DEFAULT_HEARTBEAT_S = 30.0
_KEEP_FINISHED = 16
# Bytes of the finished jobs' results and payloads kept (`lru_cache.nbytes`; the newest finished job is
# always kept). A long prompt's complete result is tens of MB (grad_gram [N, T, T]); 16 of them were kept
# whatever their size. The results stay in SharedLM's byte-bounded cache besides.
FINISHED_JOBS_BYTES = 256 * 1024**2
# Live (queued or running) jobs beyond this cancel the oldest: the queue is bounded.
MAX_LIVE_JOBS = 4
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
    # When the time-left estimate says the work ends (`clock` time); None before the first report.
    eta_deadline: float | None = None
    clock: Callable[[], float] = time.monotonic
    # Names this job in its status ("job_id") when set, so that a cancel can name the job it stops.
    job_id: str = ""
    # The stage of a job whose work comes in stages (coarse_to_fine: "coarse pass", then "refining"), in its status
    # ("stage") when set; `total` then counts the rows known so far.
    stage: str = ""
    _cancel: threading.Event = dataclasses.field(default_factory=threading.Event)
    # Why it was told to stop (the first reason), for the one line logged when it stops.
    cancel_reason: str = ""
    # Since when (`clock` time) it waits for the model behind more urgent work (`waiting`); None: it does not.
    waiting_since: float | None = None
    waited_s: float = 0.0  # seconds it waited so, in total (not model time spent on it)
    # When the units of the current sequence began (`clock` time; None: at `started`, else `created`), and when
    # the last report came: a job's work may report several sequences (a span's gradient pass 1/1, then its
    # 256 IG steps), and each is estimated from its own units only.
    sequence_begun: float | None = None
    last_report: float | None = None

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

    def report(self, done: int, total: int) -> None:
        """`done` of `total` units are done now: the estimate of the time left becomes
        (total - done) x the measured seconds per unit since the sequence began (`started`, else
        `created`), unless an earlier estimate of the same sequence ends sooner (the estimate never rises).

        A report with another `total`, or fewer units done than the last, starts a new sequence (a
        span's one-pass gradients, then its IG steps): its units began at the last report, and the
        finished sequence's estimate (which had run out) no longer applies."""
        now = self.clock()
        if self.last_report is not None and (total != self.total or done < self.done):
            self.sequence_begun, self.eta_deadline, self.waited_s = self.last_report, None, 0.0
        self.done, self.total, self.last_report = done, total, now
        if done <= 0 or total <= 0:
            return
        begun = self.sequence_begun
        if begun is None:
            begun = self.started if self.started is not None else self.created
        deadline = now + max(0, total - done) * max(0.0, now - begun - self.waited_s) / done
        self.eta_deadline = deadline if self.eta_deadline is None else min(self.eta_deadline, deadline)

    def begin_sequence(self) -> None:
        """The units reported from now on are a new sequence, estimated from now: work done before them that
        is not reported as units (a span's one gradient pass before its IG steps) is not counted in their cost."""
        self.sequence_begun, self.eta_deadline, self.waited_s = self.clock(), None, 0.0

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """The job waits for the model behind more urgent work while this block runs: its status says so
        and has no estimate; afterwards the estimate's deadline moves on by the time waited."""
        self.waiting_since = self.clock()
        try:
            yield
        finally:
            waited = self.clock() - self.waiting_since
            self.waiting_since = None
            self.waited_s += waited
            if self.eta_deadline is not None:
                self.eta_deadline += waited

    def eta(self) -> float | None:
        """Seconds left by the estimate (see `report`); None when not running, while it waits for the model,
        before the first report, once every unit is done, or when the estimate ran out before the work did."""
        if self.state != RUNNING or self.waiting_since is not None or self.eta_deadline is None \
                or self.done >= self.total:
            return None
        left = self.eta_deadline - self.clock()
        return left if left > 0.5 else None

    def status(self) -> dict[str, Any]:
        now = self.clock()
        elapsed = (now - self.started) if self.started is not None else 0.0
        if self.finished is not None and self.started is not None:
            elapsed = self.finished - self.started
        eta = self.eta()
        out = {
            "kind": self.kind, "state": self.state, "done": int(self.done), "total": int(self.total),
            "elapsed_s": round(elapsed, 2), "eta_s": None if eta is None else round(eta, 1),
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
    """Queues of background jobs, one worker thread per lane.

    A lane is a queue with its own worker: jobs of one lane run one after the other, jobs of two
    lanes side by side, alternating slice by slice on the model (the scheduler's fairness among
    background holders). The per-token matrices go in the default lane; a segment method's job
    (a few forwards, what the view switches to) in its own, so it does not wait for a matrix job
    of T backwards to end.
    """

    def __init__(self, heartbeat_s: float = DEFAULT_HEARTBEAT_S, finished_bytes: int = FINISHED_JOBS_BYTES):
        self.heartbeat_s = heartbeat_s
        self.finished_bytes = finished_bytes
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queues: dict[str, collections.deque[Job]] = collections.defaultdict(collections.deque)
        self._jobs: collections.OrderedDict[tuple[Hashable, str], Job] = collections.OrderedDict()
        self._focus: Hashable | None = None
        self._focus_moves = 0
        self._workers: dict[str, threading.Thread] = {}
        _ALL_QUEUES.add(self)

    @property
    def focus_group(self) -> Hashable | None:
        return self._focus

    @property
    def focus_moves(self) -> int:
        """How many times the focus moved to another datapoint (lit_app/cancel.py's `focus_moved`)."""
        return self._focus_moves

    def focus(self, group: Hashable) -> None:
        """The user looks at `group` now: cancel every job of other datapoints."""
        with self._lock:
            if group != self._focus:
                self._focus_moves += 1
            self._focus = group
            for job in self._jobs.values():
                if job.group != group:
                    job.cancel("another datapoint was selected")

    def submit(self, group: Hashable, kind: str, run: Callable[[Job], Any], replaces: str | None = None,
               lane: str = "", job_id: str = "") -> Job:
        """The job for (group, kind): the live or finished one, else a new one queued in `lane`.

        job_id: names a new job in its status, for `cancel_job` (a live or finished job keeps its own).

        replaces: a kind prefix (e.g. "ig"): live jobs of this group whose kind starts with it
          and differs from `kind` are cancelled (a new IG step count replaces the old one).
        lane: the queue (and worker) the job runs in (see the class docstring).
        """
        with self._lock:
            job = self._jobs.get((group, kind))
            if job is not None and job.state not in (CANCELLED, ERROR) and not job._cancel.is_set():
                job.last_seen = time.monotonic()
                return job
            if replaces is not None:
                for other in self._jobs.values():
                    if other.group == group and other.kind != kind and other.kind.startswith(replaces):
                        other.cancel(f"replaced by {kind}")
            job = Job(group=group, kind=kind, run=run, heartbeat_s=self.heartbeat_s, job_id=job_id)
            live = [j for j in self._jobs.values() if j.state in (QUEUED, RUNNING) and not j._cancel.is_set()]
            for old in live[: max(0, len(live) + 1 - MAX_LIVE_JOBS)]:
                old.cancel(f"more than {MAX_LIVE_JOBS} background jobs")
            self._jobs[(group, kind)] = job
            self._jobs.move_to_end((group, kind))
            self._trim()
            self._queues[lane].append(job)
            worker = self._workers.get(lane)
            if worker is None or not worker.is_alive():
                worker = threading.Thread(target=self._work, args=(lane,), name=f"salience-detail{lane and '-' + lane}",
                                          daemon=True)
                self._workers[lane] = worker
                worker.start()
            self._wake.notify_all()
            return job

    def cancel_job(self, group: Hashable, job_id: str, reason: str) -> Job | None:
        """Cancels the live job of `group` that `job_id` names (it stops within one slice) and returns it;
        None when no job of this group has that id (an id never names a newer job: a cancel sent late
        stops nothing else)."""
        with self._lock:
            for job in self._jobs.values():
                if job.group == group and job_id and job.job_id == job_id:
                    job.cancel(reason)
                    return job
            return None

    def get(self, group: Hashable, kind: str) -> Job | None:
        """The job, marked as still wanted (heartbeat), or None."""
        with self._lock:
            job = self._jobs.get((group, kind))
            if job is not None:
                job.last_seen = time.monotonic()
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

    def _work(self, lane: str = "") -> None:
        queue = self._queues[lane]
        while True:
            with self._lock:
                while not queue:
                    if not self._wake.wait(timeout=60) and not queue:
                        if self._workers.get(lane) is threading.current_thread():
                            del self._workers[lane]
                        return
                job = queue.popleft()
            if job.should_stop():
                job.state, job.finished = CANCELLED, time.monotonic()
                logger.info("Cancelled the %s job for %s before it started (%s).", job.kind, _short(job.group),
                            job.cancel_reason or "stopped")
                continue
            job.state, job.started = RUNNING, time.monotonic()
            try:
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
