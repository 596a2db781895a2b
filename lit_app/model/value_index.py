"""The value index of the shared model (sequence_salience/inside/value_index.py), built as one job of its job table.

Only a person's search starts it (lit_app/wrappers/inside.py `InsideSearchModel`): `start()` submits one `Job`
(lit_app/model/jobs.py) in lane `LANE` of the model's `JobTable` (lit_app/model/jobs_table.py), owned by the
searching client. Its worker loads the cached index or builds it layer by layer, each layer one slice of the
scheduler at the user-job level of that client (lit_app/model/scheduler.py: another client's click goes first,
automatic matrix jobs wait). Its progress is the job's `Status` (lit_app/model/jobs_status.py, the DETAIL wire
form the page's job client reads): stage "building", layers done of all, with the time-left range; "loading" when
the index came from the disk cache. That status is the `index` of every search answer.

Each search marks the job as still wanted (its heartbeat: once nobody searches for `heartbeat_s` it stops between
layers, and the next search starts it again); `cancel()` stops it between layers. The job is about the model, not
a datapoint (`Job.about_datapoint`): a client's newer selection does not release it. Searches and traces read the
layers built so far (`snapshot()`).

Was (issue 43): the core library's `BackgroundValueIndex`, a thread and a status format of its own, outside the
job table: no heartbeat, no cancel, no time left, and no owner the scheduler could share the model with fairly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, ContextManager

import sequence_salience as ss
from sequence_salience import inside as ssi
from lit_app.edge import clients
from lit_app.model.jobs import DONE, ERROR, Job, Status
from lit_app.model.jobs_table import JobTable

KIND = "value_index"  # the job's kind (its status's "kind")
LANE = "value_index"  # its worker lane in the job table
LOADING, BUILDING = "loading", "building"  # its stages
NOT_STARTED = "No search has started the value index yet."


class ValueIndexJob:
    """The value index of one loaded model with `top_k` tokens per value, built as one job (module docstring).

    lm: the loaded model (its weights are read; no forward pass); hold: entered around each built layer (the
    scheduler's user-job turn, `ModelScheduler.user_job`); jobs: the model's job table; directory: where the index
    is cached (None: the library's cache directory).
    """

    def __init__(self, lm: ss.LanguageModel, hold: Callable[[], ContextManager[Any]], jobs: JobTable,
                 top_k: int = ssi.value_index.DEFAULT_TOP_K, directory: Any = None):
        self._lm = lm
        self._hold = hold
        self._jobs = jobs
        self.top_k = top_k
        self.directory = directory
        self.group = (KIND, top_k)
        self._lock = threading.Lock()
        self._index: ssi.ValueIndex | None = None
        self._job: Job | None = None

    def start(self) -> Job:
        """The build's job, marked as wanted by the current request's client: the finished one (built, or failed:
        its error stays), the running one, else a new one (none yet, or the last was cancelled)."""
        client = clients.current()
        with self._lock:
            if self._job is not None and self._job.state in (DONE, ERROR):
                return self._job
            self._job = self._jobs.submit(self.group, KIND, self._run, lane=LANE, client=client,
                                          about_datapoint=False)
            return self._job

    def status(self) -> Status:
        """The build's status (`Status.none` before any search started it)."""
        job = self._job
        return Status.none(KIND, NOT_STARTED) if job is None else job.snapshot()

    def snapshot(self) -> ssi.ValueIndex | None:
        """The index of the layers built so far (all once done); None before the first layer."""
        return self._index

    def cancel(self, reason: str) -> bool:
        """Tells a running build to stop (between layers); False when none runs."""
        job = self._job
        if job is None or job.is_finished:
            return False
        job.cancel(reason)
        return True

    def wait(self, timeout_s: float) -> bool:
        """Waits until the build's job has finished (done, cancelled or failed); whether it has."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self._job
            if job is not None and job.is_finished:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def _run(self, job: Job) -> None:
        """The job's work: load or build the index (its layers kept in `_index` as they come; the job's result
        stays None, so that the finished jobs' byte bound counts no index)."""
        job.report(LOADING, 0, 1)
        built: list[ssi.ValueIndex] = []  # the layers built by this job so far (none when it was loaded)

        def layer_built(index: ssi.ValueIndex) -> None:
            built.append(index)
            self._index = index

        def progress(done: int, total: int) -> None:
            job.report(BUILDING if built else LOADING, done, total)

        self._index = ssi.get_value_index(self._lm, self.top_k, progress, self.directory, cancel=job.should_stop,
                                          on_layer=layer_built, hold=self._hold)
