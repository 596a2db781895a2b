"""Work a user started and waits for, one at a time per wrapper and client: progress, results so far, cancel.

Each is the one `Job` of lit_app/model/jobs.py (`jobs.user_job`: its status has the USER wire form), registered
in a request lane of the model's job table (lit_app/model/jobs_table.py) while it runs.

The explanation tests (lit_app/wrappers/explain.py) and the intervention run (lit_app/wrappers/inside.py)
share this mechanism: the request that starts a job runs it and answers when it ends;
"status" and "cancel" requests, which never wait for the model, read and stop the job
while it runs. The browser polls "status" for `stage`, `done`/`total` and, where the
job offers them, its results so far (`partial`).

A job stops (its `should_stop`, the cancel check given to the core library, turns True
within one chunk) when a "cancel" request arrives, when a newer job of the same slot and
client starts (superseded: the user moved on; lit_app/edge/clients.py), or when the HTTP client of the request that
runs it disconnects (the tab was closed: lit_app/model/cancel.py).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Hashable, Iterator

import sequence_salience as ss
from lit_app.model import cancel
from lit_app.edge import clients
from lit_app.model.jobs_table import JobTable
from lit_app.model.jobs import Job, user_job

CANCEL_REQUEST = "a cancel request"
NEWER_JOB = "a newer job replaced it"
# The user job's type and constructor: `UserJob(action, key, check=None)` (the name its callers use).
UserJob = user_job
_SLOTS = itertools.count(1)


class JobSlot:
    """The running user job of each client of a wrapper (lit_app/edge/clients.py): a request lane of a job table.

    A client's new job stops that client's running one (superseded); another client's jobs go on. A
    request without a client id supersedes nothing: its job runs until it ends, its client disconnects or
    a cancel arrives; "status" and "cancel" without an id read the newest such job.

    table: the model's job table (`SharedLM.jobs`; a table of its own when None); name: what the wrapper's
    lane is named after (its lane is its own: "explain-3").
    """

    def __init__(self, table: JobTable | None = None, name: str = "user") -> None:
        self._table = table if table is not None else JobTable()
        self.lane = f"{name}-{next(_SLOTS)}"

    def start(self, action: str, key: str, supersede: bool = True, view: Hashable = None,
              why: str = NEWER_JOB) -> Job:
        """A new running job of the current request's client, run by the request this thread serves (its
        client's disconnect stops it); that client's running job (if any) is told to stop, saying `why`.

        supersede: False for work that several requests of one client may run side by side (a comparison's
          log-probs): the client's running job goes on, and "status" and "cancel" read neither.
        view: when set, only that client's running job of the same view is told to stop (a comparison of the
          selected datapoint with itself, Compare models, runs beside one with a pinned datapoint, Compare an
          edit); "status" and "cancel" read only jobs started without one."""
        client = clients.current()
        job = user_job(action, key, cancel.for_request(f"the {action} job"))
        slot = (client, id(job)) if not supersede else client if view is None else (client, view)
        old = self._table.track(self.lane, slot, job)
        if old is not None and client != clients.ANONYMOUS:
            old.cancel(why)
        return job

    def finish(self, job: Job) -> None:
        """`job` ended (its request answers): polls no longer find it."""
        self._table.untrack(self.lane, job)

    @contextlib.contextmanager
    def running(self, job: Job, ended: Callable[[str], None] | None = None) -> Iterator[Job]:
        """Runs the block as `job` (lit_app/model/jobs.py `Job.running`: done, cancelled or failed when it ends), then
        `finish`es it.

        ended(outcome): called when the block ended done ("done") or cancelled ("cancelled (<reason>)"), not when it
          failed, BEFORE `finish`: the wrapper's outcome line is written while "status" still finds the job, so a
          status of None means the line is in the log (a test that waits for None may read the log once)."""
        try:
            with job.running():
                yield job
            if ended is not None:
                ended("done")
        except ss.ComputationCancelled:
            if ended is not None:
                ended(f"cancelled ({job.cancel_reason})")
            raise
        finally:
            self.finish(job)

    def status(self) -> dict | None:
        """The current request's client's running job's status; None when it runs none."""
        job = self._table.tracked(self.lane, clients.current())
        return None if job is None else job.status()

    def cancel(self) -> bool:
        """Tells the current request's client's running job to stop; False when it runs none."""
        job = self._table.tracked(self.lane, clients.current())
        if job is not None:
            job.cancel(CANCEL_REQUEST)
        return job is not None

    def poll_answer(self, action: str) -> dict | None:
        """The answer of a "status" or "cancel" request (no model needed); None for any other action."""
        if action == "status":
            return {"action": "status", "job": self.status()}
        if action == "cancel":
            return {"action": "cancel", "cancelled": self.cancel()}
        return None
