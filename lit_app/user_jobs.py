"""Work a user started and waits for, one at a time per wrapper: progress, results so far, cancel.

The explanation tests (lit_app/explain.py) and the intervention run (lit_app/inside.py)
share this mechanism: the request that starts a job runs it and answers when it ends;
"status" and "cancel" requests, which never wait for the model, read and stop the job
while it runs. The browser polls "status" for `stage`, `done`/`total` and, where the
job offers them, its results so far (`partial`).

A job stops (its `should_stop`, the cancel check given to the core library, turns True
within one chunk) when a "cancel" request arrives, when a newer job of the same slot
starts (superseded: the user moved on), or when the HTTP client of the request that
runs it disconnects (the tab was closed: lit_app/cancel.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from lit_app import cancel

CANCEL_REQUEST = "a cancel request"
NEWER_JOB = "a newer job replaced it"


class UserJob:
    """The job now running: what, how far, its results so far, and its cancel check."""

    def __init__(self, action: str, key: str, check: cancel.Cancel | None = None):
        self.action, self.key = action, key
        self.stage, self.done, self.total = "starting", 0, 0
        self.started = time.monotonic()
        self.check = check if check is not None else cancel.Cancel(f"the {action} job")
        self.partial: dict[str, Any] | None = None  # replaced whole (never mutated) so a poll reads one state
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
        self.stage, self.done, self.total = stage, int(done), int(total)

    def follow(self, stage: str, live: Callable[[], tuple[int, int]]) -> None:
        """Enters `stage` whose (done, total) `live()` reads at each poll (it must not wait for the
        model), until the next `report`."""
        self.stage, self.done, self.total = stage, 0, 0
        self._live = (stage, live)

    def status(self) -> dict:
        stage, done, total, live = self.stage, self.done, self.total, self._live
        if live is not None and live[0] == stage:
            done, total = live[1]()
        out = {"action": self.action, "key": self.key, "stage": stage, "done": int(done),
               "total": int(total), "elapsed_s": round(time.monotonic() - self.started, 1),
               "cancelled": self.cancelled}
        if self.partial is not None:
            out["partial"] = self.partial
        return out


class JobSlot:
    """Holds the one running `UserJob` of a wrapper."""

    def __init__(self) -> None:
        self._job: UserJob | None = None
        self._lock = threading.Lock()

    def start(self, action: str, key: str) -> UserJob:
        """A new job, run by the request this thread serves (its client's disconnect stops it);
        the one running (if any) is told to stop."""
        job = UserJob(action, key, cancel.for_request(f"the {action} job"))
        with self._lock:
            if self._job is not None:
                self._job.check.stop(NEWER_JOB)
            self._job = job
        return job

    def finish(self, job: UserJob) -> None:
        with self._lock:
            if self._job is job:
                self._job = None

    def status(self) -> dict | None:
        with self._lock:
            return None if self._job is None else self._job.status()

    def cancel(self) -> bool:
        """Tells the running job to stop; False when none runs."""
        with self._lock:
            job = self._job
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
