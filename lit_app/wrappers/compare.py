"""LIT wrapper for "Compare an edit": the pinned datapoint's response under the selected datapoint's
prompt (sequence_salience.compare), over the shared model of lit_app/model/shared_model.py.

One hidden LIT model per loaded model, `_<name>_compare` (fields.compare_model_name). Its input is
the selected datapoint (prompt, system, chat) plus the pinned one's prompt, system and target
(`pinned_*`), the count of the extra method shown (as the salience model's), two flags and the view that asks
(`compare_view`, below). Its one output, `compare`, holds:

* `CrossLogprobs.to_dict()` of the pinned response (its greedy generation when its target is empty,
  the ids as generated) under the pinned prompt ("under_a") and under the selected prompt ("under_b");
  "forwards": the teacher-forced forwards this answer ran: one when a cached salience result of the
  pinned datapoint holds its log-probs, else two;
* with `with_pinned_salience` true (the compare view sends it, and frontend/src/salience/compare_models/ with the
  selected datapoint "pinned" to itself for a model's whole-response salience; its log-prob requests do
  not): "pinned_salience", the pinned datapoint's
  whole-response salience (the payload of a first highlight, docs/architecture.md "LIT salience
  payload"; `SharedLM.quick`, from the caches when it was shown before, so the forwards are then one),
  and "pinned_salience_passes" (0 from the caches, else 1: one forward + backward);
* with `old_answer` true: "old_answer_salience", the pinned answer's own salience under the selected
  prompt (one forward + backward for the gradient methods); else null.
* with `with_pinned_salience` true and a segment method in `segment_method` (with `granularity`,
  `pattern`, `removal` and its count, as the salience model's segment requests: the method on screen):
  "pinned_segments" and "selected_segments", each the `salience` of a finished segment request
  (docs/architecture.md "Segment salience") for the whole response of that side, and with `old_answer`
  "old_answer_segments" (the pinned answer under the selected prompt); else null. Segment values live
  on a segmentation, not on the gradient's tokens, so both sides are measured here (the selected side's
  from the caches when the module measured its whole response before).

Each comparison is a job of the model's table (lit_app/model/user_jobs.py): stopped within one chunk (IG steps,
SmoothGrad samples, segment forwards) when its client goes, and one that computes salience (`with_pinned_salience`
or `old_answer`) when the same client's newer one of the same view arrives: a 409 "Cancelled: a newer selection
replaced this request. It stopped after k of n SmoothGrad samples.", as a superseded salience span. The view is the
field `compare_view` the browser sends (fields.COMPARE_VIEWS: "edit", Compare an edit; "models", Compare models);
absent, "edit" (old clients, notebooks); another value is a 400 naming the field and the views. (Was inferred from
the fields' equality: an edit comparison of a pinned datapoint not yet edited read as Compare models'.)

Asking here, not through the salience model, leaves the server's focus (the datapoint whose
background matrices run, lit_app/model/progressive.py) on the selected datapoint. The browser's compare
view (frontend/src/salience/compare/) asks when LIT's *Pin datapoint* (or the editor's *Add and compare*) pins
a datapoint and another is selected.
"""

from __future__ import annotations

import dataclasses

import sequence_salience as ss
from sequence_salience.salience import Progress
from lit_app.schema import fields
from lit_app.model import cancel, user_jobs
from lit_app.model.jobs import Job
from lit_app.errors import RequestError
from lit_app.schema.inputs import JsonDict, SegmentRequest, choice_field, extra_counts, segment_request, text_field
from lit_app.schema.method_registry import EXTRA_METHODS
from lit_app.wrappers.payloads import salience_payload, segment_payload
from lit_app.model.shared_model import SharedLM
from lit_app.wrappers.wrapper import Wrapper


class CompareModel(Wrapper):
    """`_<name>_compare`: the pinned response's log p under the pinned and the selected prompt."""

    INPUT_SPEC = fields.COMPARE_INPUT_SPEC
    OUTPUT_SPEC = fields.COMPARE_OUTPUT_SPEC

    def __init__(self, shared: SharedLM):
        super().__init__(shared)
        self.jobs = user_jobs.JobSlot(shared.jobs, "compare")  # its lane of the model's job table

    def _predict_one(self, ex: JsonDict) -> JsonDict:
        # The view and the segment method's fields are checked first: a malformed one is refused before any model work.
        view = choice_field(ex, fields.COMPARE_VIEW, fields.COMPARE_VIEWS, fields.COMPARE_VIEW_EDIT)
        request = None
        if ex.get(fields.WITH_PINNED_SALIENCE) is True and text_field(ex, fields.SEGMENT_METHOD):
            request = dataclasses.replace(segment_request(ex), span=None)  # the whole response of each side
        chat_b = self._shared.format_prompt(ex)
        pinned_prompt = text_field(ex, fields.PINNED_PROMPT)
        if not pinned_prompt.strip():
            raise RequestError(f"{fields.PINNED_PROMPT} is empty. Fix: send the pinned datapoint's prompt "
                               "(pin a datapoint with LIT's Pin button first).")
        chat_a = self._shared.format_prompt({fields.PROMPT: pinned_prompt,
                                             fields.SYSTEM: text_field(ex, fields.PINNED_SYSTEM),
                                             fields.CHAT: ex.get(fields.CHAT),
                                             fields.MAX_NEW_TOKENS: ex.get(fields.PINNED_MAX_NEW_TOKENS)})
        # One job of the model's table (lit_app/model/user_jobs.py) per comparison, entered on arrival: stopped within
        # one chunk when its client goes, and one that computes salience when the same client's newer one of the same
        # view arrives (superseded as a salience span is: the user changed the method, the count or the datapoint;
        # was: the stale SmoothGrad run went on to its last sample while the newer comparison waited behind it).
        # Log-probs alone (a few forwards) supersede nothing.
        computes = ex.get(fields.WITH_PINNED_SALIENCE) is True or ex.get(fields.OLD_ANSWER) is True
        job = self.jobs.start("comparison", request.job_kind if request is not None else "salience",
                              supersede=computes, view=view, why=cancel.SUPERSEDED)
        unit = [""]  # the units of the last counted method reported (its cancellation says how far it got)

        def report(method: str, done: int, total: int) -> None:
            if method in _UNITS:
                unit[0] = _UNITS[method]
                job.report(done, total)

        try:
            with self.jobs.running(job):
                return {fields.COMPARE: self._compare(ex, chat_a, chat_b, request, job, report)}
        except ss.ComputationCancelled:
            check = job.check
            if check.client_gone or not unit[0] or job.done >= job.total:
                raise check.error("the comparison was computed") from None
            raise check.stopped_after(job.done, job.total, unit[0]) from None

    def _compare(self, ex: JsonDict, chat_a: ss.ChatPrompt, chat_b: ss.ChatPrompt, request: SegmentRequest | None,
                 job: Job, report: Progress) -> JsonDict:
        """The comparison's output (module docstring), computed as `job` (its check stops each part)."""
        target_a = text_field(ex, fields.PINNED_TARGET)
        shared = self._shared
        counts = extra_counts(ex)
        methods, _ = shared.methods_and_config(counts)
        out: JsonDict = {"pinned_salience": None, "pinned_salience_passes": 0, "old_answer_salience": None}
        if ex.get(fields.WITH_PINNED_SALIENCE) is True:
            cached = all(shared.cached_span(chat_a, target_a, m) is not None for m in methods)
            # The whole response; cached when shown before.
            pinned = shared.quick(chat_a, target_a, 0, None, counts, cancel=job.check, progress=report, job=job)
            out["pinned_salience"] = salience_payload(pinned, counts, methods=methods, dtype=shared.dtype)
            out["pinned_salience_passes"] = 0 if cached else 1
        cross, forwards = shared.cross_logprobs(chat_a, target_a, chat_b)
        out.update(cross.to_dict(), forwards=forwards)
        if ex.get(fields.OLD_ANSWER) is True:
            # On request: the pinned answer's salience under the selected prompt (one forward + backward for
            # the gradient methods; cached per prompt and answer like any salience).
            answer = cross.under_a.response
            old = shared.quick(chat_b, answer, 0, None, counts, cancel=job.check, progress=report, job=job)
            out["old_answer_salience"] = salience_payload(old, counts, methods=methods, dtype=shared.dtype)
        out.update(pinned_segments=None, selected_segments=None, old_answer_segments=None)
        if request is not None:
            sides = {"pinned_segments": (chat_a, target_a), "selected_segments": (chat_b, text_field(ex, fields.TARGET))}
            if ex.get(fields.OLD_ANSWER) is True:
                sides["old_answer_segments"] = (chat_b, cross.under_a.response)
            for name, (chat, target) in sides.items():
                seg = shared.segment_salience(chat, target, request, cancel=job.check)
                out[name] = segment_payload(seg, request.count)
        return out


# The counted methods' units, as a cancelled comparison names how far it got ("SmoothGrad samples").
_UNITS = {e.method: f"{ss.get_method(e.method).short} {e.unit}" for e in EXTRA_METHODS}
