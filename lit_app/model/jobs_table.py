"""The one table of jobs (lit_app/model/jobs.py) of a loaded model, in lanes.

Every computation a client starts is a `Job` in this table, in a lane:

* worker lanes (`submit`): background work that a request only starts and then polls: the per-token
  matrices (lane "") and a segment method's values (lane method_registry.SEGMENT_DETAIL), and the value index's
  build (lane "value_index", lit_app/model/value_index.py: about the model, not a datapoint). Each lane has one
  queue and one worker thread per client, so two clients' jobs share the model's time (scheduler.py) and a
  segment job does not wait for a matrix job of T backwards to end. Jobs are keyed by (datapoint, kind): a
  second request of the same finds the job, live or finished.
* request lanes (`track`): work its request runs itself on its own thread, registered here so that polls
  and cancels (which never wait for the model) find it: spans (lane SPAN_LANE, keyed by (client, datapoint))
  and user jobs (explanation tests, intervention runs: one lane per wrapper, keyed by client; lit_app/model/user_jobs.py).

Work belongs to clients (lit_app/edge/clients.py): each client has its own queue per worker lane, its own focus
(the datapoint it looks at) and its own bound of live background jobs. A client's newer selection releases
that client's older background jobs only; a job several clients asked for runs while one of them still
wants it. A request without a client id (`clients.ANONYMOUS`) supersedes nothing: its background job stops
when nobody polls it for `heartbeat_s`.
"""

from __future__ import annotations

import atexit
import collections
import logging
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import sequence_salience as ss
from lit_app.edge import clients
from lit_app.model.jobs import CANCELLED, DEFAULT_HEARTBEAT_S, ERROR, FINISHED, QUEUED, RUNNING, Job, short
from lit_app.model.lru_cache import nbytes

# The background jobs' lines keep the logger name the server's log has always had for them.
logger = logging.getLogger("lit_app.model.progressive")

SPAN_LANE = "span"
KEEP_FINISHED = 16
# Bytes of the finished jobs' results and payloads kept (`lru_cache.nbytes`; the newest finished job is
# always kept). A long prompt's complete result is tens of MB (grad_gram [N, T, T]); 16 of them were kept
# whatever their size. The results stay in SharedLM's byte-bounded cache besides.
FINISHED_JOBS_BYTES = 256 * 1024**2
# Live (queued or running) background jobs of one client beyond this release its oldest; of all clients beyond
# MAX_LIVE_JOBS_TOTAL cancel the oldest: the queues are bounded (client ids are not authenticated).
MAX_LIVE_JOBS = 4
MAX_LIVE_JOBS_TOTAL = 16
# Clients whose focus is remembered (the most recent ones).
MAX_CLIENTS = 256
# Entries kept per request lane (one per client, plus those of requests without a client id); the oldest go
# (their jobs run on: only polls lose them).
MAX_TRACKED = 256
# Longest wait at interpreter exit for a cancelled job to finish its current chunk.
EXIT_WAIT_S = 120.0
_ALL_TABLES: "weakref.WeakSet[JobTable]" = weakref.WeakSet()


class JobTable:
    """The jobs of one loaded model, in worker lanes and request lanes (module docstring)."""

    def __init__(self, heartbeat_s: float = DEFAULT_HEARTBEAT_S, finished_bytes: int = FINISHED_JOBS_BYTES):
        self.heartbeat_s = heartbeat_s
        self.finished_bytes = finished_bytes
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        # (lane, client) -> its queue
        self._queues: dict[tuple[str, str], collections.deque[Job]] = collections.defaultdict(collections.deque)
        # the worker lanes' jobs by (group, kind), oldest first
        self._jobs: collections.OrderedDict[tuple[Hashable, str], Job] = collections.OrderedDict()
        # the request lanes' jobs: lane -> key -> job, oldest first
        self._tracked: dict[str, collections.OrderedDict[Hashable, Job]] = collections.defaultdict(
            collections.OrderedDict)
        # client -> (datapoint it looks at, how often that moved); the most recent MAX_CLIENTS clients
        self._focus: collections.OrderedDict[str, tuple[Hashable, int]] = collections.OrderedDict()
        self._workers: dict[tuple[str, str], threading.Thread] = {}
        _ALL_TABLES.add(self)

    # ------------------------------------------------------------ request lanes

    def track(self, lane: str, key: Hashable, job: Job, drop: Callable[[Hashable], bool] | None = None) -> Job | None:
        """Registers `job`, which its request runs, as the current one of `key` in `lane` (polls find it there);
        first drops the lane's other entries whose key `drop` accepts (stale ones: a client's older datapoint).
        Returns the job it replaced for `key` (the caller decides whether that one stops), or None."""
        with self._lock:
            entries = self._tracked[lane]
            for old_key in [k for k in entries if k != key and drop is not None and drop(k)]:
                del entries[old_key]
            old = entries.pop(key, None)
            entries[key] = job
            while len(entries) > MAX_TRACKED:
                del entries[next(iter(entries))]
            return old

    def tracked(self, lane: str, key: Hashable) -> Job | None:
        """The current job of `key` in `lane`, or None."""
        with self._lock:
            return self._tracked[lane].get(key)

    def untrack(self, lane: str, job: Job) -> None:
        """`job` ended: polls no longer find it (an entry of a newer job stays)."""
        with self._lock:
            entries = self._tracked[lane]
            for key in [k for k, j in entries.items() if j is job]:
                del entries[key]

    # ------------------------------------------------------------- worker lanes

    def focus_of(self, client: str) -> tuple[Hashable | None, int]:
        """(the datapoint `client` looks at, how many times its focus moved to another one); (None, 0) before
        its first selection (lit_app/model/cancel.py's `focus_moved`)."""
        with self._lock:
            return self._focus.get(client, (None, 0))

    def focus(self, group: Hashable, client: str = "") -> None:
        """`client` looks at `group` now: its background jobs of other datapoints are released (cancelled
        unless another client still wants them). Without a client id nothing moves."""
        if not client:
            return
        with self._lock:
            old, moves = self._focus.pop(client, (None, 0))
            self._focus[client] = (group, moves + (group != old))
            while len(self._focus) > MAX_CLIENTS:
                self._focus.popitem(last=False)
            for job in self._jobs.values():
                if job.group != group and job.about_datapoint:
                    self._release(job, client, "another datapoint was selected")

    @staticmethod
    def _release(job: Job, client: str, reason: str) -> None:
        """`client` no longer wants `job` (called under `_lock`): cancelled once no client wants it."""
        if client in job.owners:
            job.owners.discard(client)
            if not job.owners:
                job.cancel(reason)

    def submit(self, group: Hashable, kind: str, run: Callable[[Job], Any], replaces: str | None = None,
               lane: str = "", job_id: str = "", client: str = "", about_datapoint: bool = True) -> Job:
        """The background job for (group, kind): the live or finished one, else a new one queued in `lane` of
        `client`.

        job_id: names a new job in its status, for `cancel_job` (a live or finished job keeps its own).
        replaces: a kind prefix (e.g. "ig"): `client`'s live jobs of this group whose kind starts with it
          and differs from `kind` are released (a new IG step count replaces the old one; without a client
          id nothing is replaced).
        lane: the queue (and worker) the job runs in (module docstring).
        client: who asks (lit_app/edge/clients.py); it becomes one of the job's owners.
        about_datapoint: False for a job about the model (`Job.about_datapoint`: the value index).
        """
        with self._lock:
            job = self._jobs.get((group, kind))
            if job is not None and job.state not in (CANCELLED, ERROR) and not job.cancelled:
                job.last_seen = time.monotonic()
                job.owners.add(client)
                return job
            if replaces is not None and client:
                for other in self._jobs.values():
                    if other.group == group and other.kind != kind and other.kind.startswith(replaces):
                        self._release(other, client, f"replaced by {kind}")
            job = Job(group=group, kind=kind, run=run, heartbeat_s=self.heartbeat_s, job_id=job_id, owners={client},
                      about_datapoint=about_datapoint)
            live = [j for j in self._jobs.values()
                    if j.state in (QUEUED, RUNNING) and not j.cancelled and j.about_datapoint]
            mine = [j for j in live if client in j.owners]
            for old in mine[: max(0, len(mine) + 1 - MAX_LIVE_JOBS)]:
                self._release(old, client, f"more than {MAX_LIVE_JOBS} background jobs of this client")
            live = [j for j in live if not j.cancelled]
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

    def release_client(self, client: str, reason: str) -> list[Job]:
        """`client` is gone (its page was closed): every live background job it asked for is released (cancelled,
        within one slice, once no other client wants it) and its focus is forgotten. Returns the jobs released.
        A job nobody polls stops after `heartbeat_s` anyway; this stops it at once. Without a client id nothing is
        released (a request without one owns nothing that others could not also own)."""
        if not client:
            return []
        with self._lock:
            self._focus.pop(client, None)
            mine = [job for job in self._jobs.values()
                    if client in job.owners and job.state in (QUEUED, RUNNING) and not job.cancelled]
            for job in mine:
                self._release(job, client, reason)
            return mine

    def cancel_job(self, group: Hashable, job_id: str, reason: str, client: str = "") -> Job | None:
        """Releases the background job of `group` that `job_id` names for `client` (cancelled, within one
        slice, once no other client wants it; a job only other clients asked for is left alone) and returns
        it; None when no job of this group has that id (an id never names a newer job: a cancel sent late
        stops nothing else)."""
        with self._lock:
            for job in self._jobs.values():
                if job.group == group and job_id and job.job_id == job_id:
                    if client in job.owners:
                        self._release(job, client, reason)
                    return job
            return None

    def get(self, group: Hashable, kind: str, client: str | None = None) -> Job | None:
        """The background job, marked as still wanted (heartbeat; by `client`, when given), or None."""
        with self._lock:
            job = self._jobs.get((group, kind))
            if job is not None:
                job.last_seen = time.monotonic()
                if client is not None and not job.is_finished and not job.cancelled:
                    job.owners.add(client)
            return job

    def cancel_all(self) -> None:
        with self._lock:
            for job in self._jobs.values():
                job.cancel("shutting down")

    def idle(self) -> bool:
        """True when no background job is queued or running (a cancelled one stops within one chunk)."""
        with self._lock:
            return not any(j.state in (QUEUED, RUNNING) for j in self._jobs.values())

    def _trim(self) -> None:
        """Drops the oldest finished jobs beyond `KEEP_FINISHED`, then while the finished ones hold more
        than `finished_bytes` (never the newest)."""
        finished = [k for k, j in self._jobs.items() if j.is_finished]
        drop = finished[: max(0, len(finished) - KEEP_FINISHED)]
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
            return sum(nbytes(j.result) + nbytes(j.payload) for j in self._jobs.values() if j.is_finished)

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
                job.end_cancelled()
                logger.info("Cancelled the %s job for %s before it started (%s).", job.kind, short(job.group),
                            job.cancel_reason or "stopped")
                continue
            try:
                with clients.acting_as(client), job.running():  # the scheduler shares the model between clients
                    job.result = job.run(job)
                logger.info("%s job done in %.1f s.", job.kind, job.finished - job.started)
            except ss.ComputationCancelled:
                logger.info("Cancelled the %s job for %s (%s) after %.1f s at %d/%d.", job.kind, short(job.group),
                            job.cancel_reason or "stopped", job.finished - job.started, job.done, job.total)
            except Exception:  # pylint: disable=broad-except
                logger.exception("%s job failed", job.kind)
            finally:
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
    for table in list(_ALL_TABLES):
        table.cancel_all()
    for table in list(_ALL_TABLES):
        while not table.idle() and time.monotonic() < deadline:
            time.sleep(0.05)
