"""Background computation of the per-token salience matrices: the worker lanes of the job table.

The jobs are the one `Job` of lit_app/model/jobs.py and live in the one table of lit_app/model/jobs_table.py
(`JobTable`, which this module names `DetailJobs`); this module is what they mean for the salience model.

The first highlight comes from one forward + backward for the span on screen
(`SharedLM.quick`); the full [T, N] matrices that make retargeting instant are
computed here, in a worker thread, while the user already reads the map:

* One worker per lane runs its jobs in order (segment methods have a lane of their own); a job is background work for the model
  scheduler (lit_app/model/scheduler.py): it runs in time slices of bounded model time
  (`SharedLM.slice_s`, sequence_salience/slices.py) and after each slice every
  waiting interactive request (a span the user clicked, a trace, a generation)
  uses the model first (`ModelScheduler.yield_to_waiting`).
* Stale work stops within one slice: a job is cancelled when the user focuses
  another datapoint (`focus`), when a newer IG job of the same datapoint
  replaces it, or when nobody has polled it for `heartbeat_s` seconds (the page
  was closed). A cancelled job logs one INFO line when it stops (`JobTable._work`: what, why, how far);
  the moment it is told to stop is a DEBUG line (a cancellation is information, not a fault).
* Progress (`done`/`total`, elapsed time, the time left as a range) is read by polling (`status`), which
  needs no model lock. The range comes from the measured rate of the recent units (lit_app/model/time_left.py, the
  one estimator of every job): it widens when the rate drops, grows while a unit takes longer than the
  estimate, and never falls to "about 1 s" with units outstanding; there is none once every unit is done (the
  page then says "finishing…"). While the job waits for the model behind more urgent work (a user job: an
  explanation test the user started; `Job.waiting`), its status says `"waiting": true` with no estimate, and
  the paused time does not count as the units' time.
"""

from __future__ import annotations

from lit_app.model.jobs_table import (FINISHED_JOBS_BYTES, KEEP_FINISHED, MAX_CLIENTS, MAX_LIVE_JOBS, MAX_LIVE_JOBS_TOTAL,
                                      JobTable)
from lit_app.model.jobs import CANCELLED, DEFAULT_HEARTBEAT_S, DONE, ERROR, QUEUED, RUNNING, Job

# The names this module has always offered (the server, its scripts and tests read them here).
DetailJobs = JobTable
_KEEP_FINISHED = KEEP_FINISHED

__all__ = ["CANCELLED", "DEFAULT_HEARTBEAT_S", "DONE", "DetailJobs", "ERROR", "FINISHED_JOBS_BYTES", "Job",
           "JobTable", "MAX_CLIENTS", "MAX_LIVE_JOBS", "MAX_LIVE_JOBS_TOTAL", "QUEUED", "RUNNING"]
