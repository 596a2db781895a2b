"""When a computation a client started stops: one check per computation, read between its chunks.

Every computation the server runs for a client is a job (lit_app/model/jobs.py `Job`, in the model's job table,
lit_app/model/jobs_table.py), and each job's check (`Cancel`, the job's `check`) is what the core library calls
before the work and after every chunk (IG steps, SmoothGrad samples, target chunks, forward batches of an
explanation test, generated tokens), so abandoned or superseded work stops within one chunk:

* a span (the `detail="span"` first highlight and clicked spans, `SharedLM.quick`): its job's check is built
  from `client_gone()`, `focus_moved(...)` and its `Latest` ticket; a `span_cancel` stops it (`Job.cancel`);
* a user job (explanation tests, intervention runs, a comparison's segment values: `lit_app/model/user_jobs.py`):
  `JobSlot.start` builds its check with `for_request(...)`;
* a background matrix or segment job, which its request only starts: its heartbeat, and `Job.cancel` when its
  last owner lets go;
* a blocking `detail=""` request, which answers when every matrix is done: `for_request(...)` given to
  `SharedLM.salience(cancel=)`.

Reasons a check says stop (each a `Reason`: "" while the work is still wanted):

* `client_gone()`: the HTTP client of the request that runs the work disconnected (a closed
  tab, an aborted fetch, a killed script; `lit_app/edge/disconnect.py`). A background matrix job has
  no connection of its own: it is abandoned when nobody polls it for `heartbeat_s` seconds.
* `Latest.take(key)`: superseded, a newer request of the same kind and key arrived from the same client
  (a newer span of the same datapoint, whatever its method or count; a newer job of the same wrapper).
* `focus_moved(jobs, group, client)`: the same client selected another datapoint.

"Latest wins" holds within one client (lit_app/edge/clients.py): another client's requests never supersede
a client's work, and a request without a client id supersedes nothing.
* the server is stopping (`disconnect.shut_down`, read through `client_gone`).

A new kind of computation plugs in as a job of the table with the reasons that fit it (docs/architecture.md,
"Progressive salience"); nothing else needs to know about it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any

from lit_app.edge import disconnect
from lit_app.errors import CANCELLED_PREFIX, Cancelled, ClientGone

logger = logging.getLogger(__name__)

CLIENT_GONE = "the client disconnected"
SUPERSEDED = "a newer selection replaced this request"
FOCUS_MOVED = "another datapoint was selected"

# "" while the work is wanted, else why it stops (one short clause).
Reason = Callable[[], str]


class Cancel:
    """The cancel check of one computation: the first reason that fires, latched.

    Call it (True: stop) between chunks; `reason` says why ("" while it runs). The first time it
    fires it logs a DEBUG line naming `what` and the reason: the one INFO line of a cancellation is
    the request's own, once the work has stopped (lit_app/wrappers/wrapper.py for a request, the job's for an
    explanation test or an intervention run), saying how far it got.
    """

    def __init__(self, what: str, *reasons: Reason):
        self.what = what
        self._reasons = reasons
        self.reason = ""

    def __call__(self) -> bool:
        if not self.reason:
            for check in self._reasons:
                why = check()
                if why:
                    self.reason = why
                    logger.debug("Cancelling %s: %s.", self.what, why)
                    break
        return bool(self.reason)

    def stop(self, why: str) -> None:
        """Says stop from outside (a "cancel" request); the first reason given stays."""
        if not self.reason:
            self.reason = why
            logger.debug("Cancelling %s: %s.", self.what, why)

    def is_set(self) -> bool:
        """Whether it said stop (a reason fired or was given), without asking the reasons again."""
        return bool(self.reason)

    @property
    def client_gone(self) -> bool:
        return self.reason == CLIENT_GONE

    def error(self, unfinished: str) -> Cancelled:
        """The request's one-line error: `ClientGone` when nobody reads the answer, else `Cancelled`.

        unfinished: what was not finished, e.g. "every salience matrix was computed"."""
        error = ClientGone if self.client_gone else Cancelled
        return error(f"{CANCELLED_PREFIX} {self.reason or 'stopped'} before {unfinished}."
                     " Fix: send the request again (one that nobody waits for is stopped).")

    def stopped_after(self, done: int, total: int, units: str) -> Cancelled:
        """The 409 of a span or comparison that stopped partway (superseded, or its datapoint no longer selected),
        the one text both wrappers answer: "Cancelled: a newer selection replaced this request. It stopped after
        3 of 8 SmoothGrad samples." Without the count when `total` is 0 (nothing was counted yet).

        units: what `done` and `total` count, e.g. "IG steps or SmoothGrad samples"."""
        count = f" It stopped after {done} of {total} {units}." if total else ""
        return Cancelled(f"{CANCELLED_PREFIX} {self.reason or 'stopped'}.{count}")


def client_gone() -> Reason:
    """The disconnect of the HTTP client of the request this thread serves (call it on that thread).

    Always "" without a socket (werkzeug's test client), until the server stops."""
    gone = disconnect.watcher()
    return lambda: CLIENT_GONE if gone() else ""


def for_request(what: str, *reasons: Reason) -> Cancel:
    """The check of work that the current request runs and answers: its client's disconnect, plus `reasons`."""
    return Cancel(what, client_gone(), *reasons)


def focus_moved(jobs: Any, group: Hashable, client: str) -> Reason:
    """`client` selected a datapoint other than `group` after this call (`jobs`: the
    `jobs_table.JobTable` whose focus per client the `detail="span"` requests move). Another client's
    selection never fires it, and a request without a client id (`clients.ANONYMOUS`) has none."""
    if not client:
        return lambda: ""
    _, start = jobs.focus_of(client)

    def check() -> str:
        focus, moves = jobs.focus_of(client)
        return FOCUS_MOVED if moves != start and focus != group else ""

    return check


class Latest:
    """Superseding: per key, the newest request wins; older ones read as superseded.

    `take(key)` on arrival (before anything waits for the model) returns that request's reason."""

    def __init__(self, keep: int = 64):
        self._tickets: dict[Hashable, int] = {}
        self._lock = threading.Lock()
        self._keep = keep

    def take(self, key: Hashable, why: str = SUPERSEDED) -> Reason:
        with self._lock:
            ticket = self._tickets.pop(key, 0) + 1
            self._tickets[key] = ticket  # newest last: the oldest keys go first
            while len(self._tickets) > self._keep:
                del self._tickets[next(iter(self._tickets))]
        return lambda: why if self._tickets.get(key) != ticket else ""
