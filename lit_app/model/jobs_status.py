"""What a poll reads of a job (lit_app/model/jobs.py): the one status type, `Status`, and its two wire forms.

The browser reads both forms; their keys are the contract of docs/architecture.md ("Progressive salience",
"Explain payload"). `Status.none` is the one status of "no such job".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from lit_app.model.time_left import Range, status_fields
from lit_app.schema.fields import SHARING, WAITING_FOR

# A job's states (lit_app/model/jobs.py `TRANSITIONS`), as its status names them.
QUEUED, RUNNING, DONE, CANCELLED, ERROR = "queued", "running", "done", "cancelled", "error"
NONE = "none"  # the state of `Status.none`: no such job (never a job's own state)

# The two wire forms of a status (the browser reads both; their keys are the contract of docs/architecture.md):
DETAIL = "detail"  # a span or a background job: `salience.detail` of the salience model's answers
USER = "user"  # an explanation test or an intervention run: the "job" of a "status" answer


@dataclasses.dataclass(frozen=True)
class Status:
    """What a poll reads of a job (or of no job: `Status.none`); `to_json()` is the wire form.

    kind: the job's kind ("grad", "ig16", "span", a segment job's kind) or, for a user job, its action.
    eta: the time left as a range (lit_app/model/time_left.py); None without an estimate.
    form: DETAIL or USER, the wire form (module constants); key, cancelled and partial are USER's only,
    waiting, waiting_for, sharing and job_id DETAIL's only.
    waiting_for: while waiting, whose work goes first (lit_app/schema/fields.py WAITING_OWN or WAITING_OTHER); ""
    unknown.
    sharing: while running and taking turns with equal work, whose (WAITING_OWN or WAITING_OTHER); "" otherwise.
    """

    kind: str
    state: str
    done: int = 0
    total: int = 0
    elapsed_s: float = 0.0
    eta: Range | None = None
    error: str = ""
    waiting: bool = False
    waiting_for: str = ""
    sharing: str = ""
    job_id: str = ""
    stage: str = ""
    form: str = DETAIL
    key: str = ""
    cancelled: bool = False
    partial: Mapping[str, Any] | None = None

    @classmethod
    def none(cls, kind: str, error: str) -> "Status":
        """The status of no such job (nothing computed, or an id naming no live job); `error` says what was
        looked for and, where it helps, what to do."""
        return cls(kind=kind, state=NONE, error=error)

    @classmethod
    def done_now(cls, kind: str, units: int) -> "Status":
        """The status of work whose result is there already (cached): `units` of `units`, no time spent."""
        return cls(kind=kind, state=DONE, done=units, total=units)

    def to_json(self) -> dict[str, Any]:
        """The wire form (docs/architecture.md, "Progressive salience" and "Explain payload")."""
        if self.form == USER:
            out = {"action": self.kind, "key": self.key, "stage": self.stage, "done": int(self.done),
                   "total": int(self.total), "elapsed_s": round(self.elapsed_s, 1), "cancelled": self.cancelled,
                   **status_fields(self.eta)}
            if self.partial is not None:
                out["partial"] = self.partial
            return out
        if self.state == NONE:
            return {"kind": self.kind, "state": NONE, "done": 0, "total": 0, "elapsed_s": 0, "eta_s": None,
                    "error": self.error}
        out = {"kind": self.kind, "state": self.state, "done": int(self.done), "total": int(self.total),
               "elapsed_s": round(self.elapsed_s, 2), **status_fields(self.eta), "error": self.error,
               "waiting": self.waiting}
        if self.waiting and self.waiting_for:
            out[WAITING_FOR] = self.waiting_for
        if self.sharing:
            out[SHARING] = self.sharing
        if self.job_id:
            out["job_id"] = self.job_id
        if self.stage:
            out["stage"] = self.stage
        return out
