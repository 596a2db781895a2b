"""Work a user started and waits for, one at a time per wrapper: progress, results so far, cancel.

The explanation tests (lit_app/explain.py) and the intervention run (lit_app/inside.py)
share this mechanism: the request that starts a job runs it and answers when it ends;
"status" and "cancel" requests, which never wait for the model, read and stop the job
while it runs. A new job cancels the one running (the user moved on). The browser
polls "status" for `stage`, `done`/`total` and, where the job offers them, its
results so far (`partial`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class UserJob:
    """The job now running: what, how far, its results so far, and a cancel flag."""

    def __init__(self, action: str, key: str):
        self.action, self.key = action, key
        self.stage, self.done, self.total = "starting", 0, 0
        self.started = time.monotonic()
        self.cancelled = threading.Event()
        self.partial: dict[str, Any] | None = None  # replaced whole (never mutated) so a poll reads one state
        # (done, total) read at each poll while a step the job does not report itself runs (`follow`).
        self._live: tuple[str, Callable[[], tuple[int, int]]] | None = None

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
               "cancelled": self.cancelled.is_set()}
        if self.partial is not None:
            out["partial"] = self.partial
        return out


class JobSlot:
    """Holds the one running `UserJob` of a wrapper."""

    def __init__(self) -> None:
        self._job: UserJob | None = None
        self._lock = threading.Lock()

    def start(self, action: str, key: str) -> UserJob:
        """A new job; the one running (if any) is told to stop."""
        job = UserJob(action, key)
        with self._lock:
            if self._job is not None:
                self._job.cancelled.set()
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
                job.cancelled.set()
        return job is not None

    def poll_answer(self, action: str) -> dict | None:
        """The answer of a "status" or "cancel" request (no model needed); None for any other action."""
        if action == "status":
            return {"action": "status", "job": self.status()}
        if action == "cancel":
            return {"action": "cancel", "cancelled": self.cancel()}
        return None
