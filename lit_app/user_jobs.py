"""Work a user started and waits for, one at a time per wrapper: progress, results so far, cancel.

The explanation tests (lit_app/explain.py) and the intervention run (lit_app/inside.py)
share this mechanism: the request that starts a job runs it and answers when it ends;
"status" and "cancel" requests, which never wait for the model, read and stop the job
while it runs. The browser polls "status" for `stage`, `done`/`total` and, where the
job offers them, its results so far (`partial`).

A job stops (its `should_stop`, the cancel check given to the core library, turns True
within one chunk) when a "cancel" request arrives, when a newer job of the same slot and
client starts (superseded: the user moved on; lit_app/clients.py), or when the HTTP client of the request that
runs it disconnects (the tab was closed: lit_app/cancel.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from lit_app import cancel, clients
from lit_app.time_left import TimeLeft, status_fields

CANCEL_REQUEST = "a cancel request"
NEWER_JOB = "a newer job replaced it"
# Clients whose running job a slot remembers for "status" and "cancel" (the most recent ones).
MAX_CLIENT_SLOTS = 256


class UserJob:
    """The job now running: what, how far, its results so far, and its cancel check."""

    def __init__(self, action: str, key: str, check: cancel.Cancel | None = None):
        self.action, self.key = action, key
        self.stage, self.done, self.total = "starting", 0, 0
        self.started = time.monotonic()
        self.check = check if check is not None else cancel.Cancel(f"the {action} job")
        self.partial: dict[str, Any] | None = None  # replaced whole (never mutated) so a poll reads one state
        # The time left of the current stage (lit_app/time_left.py, the estimator of every job).
        self.time_left = TimeLeft(time.monotonic)
        # (done, total) read at each poll while a step the job does not report itself runs (`follow`).
        self._live: tuple[str, Callable[[], tuple[int, int]]] | None = None

    def should_stop(self) -> bool:
        """The cancel check given to the core library (called between chunks; see the module docstring)."""
        return self.check()

    @property
    def cancelled(self) -> bool:
        return bool(self.check.reason)

    def report(self, stage: str, done: int, total: int) -> None:
        self._live = None
        if stage != self.stage:  # each stage is its own sequence of units, begun when the last one ended
            self.time_left.restart(at=self.time_left.last_report_at)
        self.stage, self.done, self.total = stage, int(done), int(total)
        self.time_left.report(self.done, self.total)

    def follow(self, stage: str, live: Callable[[], tuple[int, int]]) -> None:
        """Enters `stage` whose (done, total) `live()` reads at each poll (it must not wait for the
        model), until the next `report`."""
        self.stage, self.done, self.total = stage, 0, 0
        self._live = (stage, live)

    def status(self) -> dict:
        stage, done, total, live = self.stage, self.done, self.total, self._live
        eta = self.time_left.range()
        if live is not None and live[0] == stage:
            done, total = live[1]()
            eta = None  # a step the job does not report itself: no units measured
        out = {"action": self.action, "key": self.key, "stage": stage, "done": int(done),
               "total": int(total), "elapsed_s": round(time.monotonic() - self.started, 1),
               "cancelled": self.cancelled, **status_fields(eta)}
        if self.partial is not None:
            out["partial"] = self.partial
        return out


class JobSlot:
    """Holds the running `UserJob` of each client of a wrapper (lit_app/clients.py).

    A client's new job stops that client's running one (superseded); another client's jobs go on. A
    request without a client id supersedes nothing: its job runs until it ends, its client disconnects or
    a cancel arrives; "status" and "cancel" without an id read the newest such job.
    """

    def __init__(self) -> None:
        self._jobs: dict[str, UserJob] = {}
        self._lock = threading.Lock()

    def start(self, action: str, key: str) -> UserJob:
        """A new job of the current request's client, run by the request this thread serves (its client's
        disconnect stops it); that client's running job (if any) is told to stop."""
        client = clients.current()
        job = UserJob(action, key, cancel.for_request(f"the {action} job"))
        with self._lock:
            old = self._jobs.get(client)
            if old is not None and client != clients.ANONYMOUS:
                old.check.stop(NEWER_JOB)
            self._jobs.pop(client, None)
            self._jobs[client] = job
            while len(self._jobs) > MAX_CLIENT_SLOTS:  # the oldest clients' entries (their jobs run on)
                del self._jobs[next(iter(self._jobs))]
        return job

    def finish(self, job: UserJob) -> None:
        with self._lock:
            for client, mine in list(self._jobs.items()):
                if mine is job:
                    del self._jobs[client]

    def status(self) -> dict | None:
        """The current request's client's running job's status; None when it runs none."""
        client = clients.current()
        with self._lock:
            job = self._jobs.get(client)
        return None if job is None else job.status()

    def cancel(self) -> bool:
        """Tells the current request's client's running job to stop; False when it runs none."""
        client = clients.current()
        with self._lock:
            job = self._jobs.get(client)
            if job is not None:
                job.check.stop(CANCEL_REQUEST)
        return job is not None

    def poll_answer(self, action: str) -> dict | None:
        """The answer of a "status" or "cancel" request (no model needed); None for any other action."""
        if action == "status":
            return {"action": "status", "job": self.status()}
        if action == "cancel":
            return {"action": "cancel", "cancelled": self.cancel()}
        return None
