"""The salience model: prompt + target (or the greedy response) -> salience of every prompt token
for every target token.

Its output is the `salience` payload of docs/architecture.md (lit_app/payloads.py), LIT-native
`SequenceSalienceMap`s, tokens, and the exact salience of a target span on request. `detail`
selects how it answers: every matrix at once (blocking), or progressively ("span" first
highlight, "poll", "<method>_matrix" background jobs, "stream" the response so far).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Hashable, Mapping
from typing import Any, Callable

import numpy as np
from lit_nlp.api import dtypes as lit_dtypes

import sequence_salience as ss
from lit_app import cancel, clients, fields, lit_convention, progressive
from lit_app.errors import CANCELLED_PREFIX, Cancelled, RequestError
from lit_app.inputs import (JsonDict, SegmentRequest, datapoint_group, detail_field, extra_counts, int_field,
                            job_extra, job_id_field, parse_target_span, segment_request, text_field)
from lit_app.method_registry import EXTRA_METHODS, SEGMENT_DETAIL, SEGMENT_JOB_TAG
from lit_app.payloads import compact, salience_payload, segment_payload, span_key
from lit_app.wrapper import Wrapper

# Longest wait of a `detail="stream"` request with `stream_after` (a long poll) before it answers what
# there is: the page then shows "waiting for the model" when another request holds it.
STREAM_WAIT_S = 1.0


class SalienceModel(Wrapper):
    """Prompt + target (or the greedy response) -> salience of every prompt token for every target token."""

    INPUT_SPEC = fields.SALIENCE_INPUT_SPEC
    OUTPUT_SPEC = fields.SALIENCE_OUTPUT_SPEC

    def _predict_one(self, ex: JsonDict) -> JsonDict:
        detail = detail_field(ex)
        if ex.get(fields.TARGET_MASK) is not None and detail == "":
            return self._predict_masked(ex)
        if detail == "":
            return self._predict_complete(ex)
        if detail == "stream":
            return self._predict_stream(ex)
        if detail == "span_progress":
            return self._predict_span_progress(ex)
        if detail == "span_cancel":
            return self._predict_span_cancel(ex)
        if detail == "matrix_cancel":
            return self._predict_matrix_cancel(ex)
        if detail == SEGMENT_DETAIL:
            return self._predict_segments(ex)
        return self._predict_progressive(ex, detail)

    def _span_jobs(self) -> dict[tuple[str, Hashable], progressive.Job]:
        """The progress of the span computed now, per (client, datapoint group): that client's latest span
        request's (lit_app/clients.py; "" for requests without a client id)."""
        jobs = self.__dict__.get("_span_progress")
        if jobs is None:
            jobs = self.__dict__["_span_progress"] = {}
        return jobs

    def _predict_span_progress(self, ex: JsonDict) -> JsonDict:
        """Progress of the latest span request of this datapoint (`detail="span_progress"`): IG steps or
        SmoothGrad samples done, of how many, and the time left; never waits for the model."""
        job = self._span_jobs().get((clients.current(), datapoint_group(ex)))
        if job is None:
            return _status_only({"kind": "span", "state": "none", "done": 0, "total": 0, "elapsed_s": 0,
                                 "eta_s": None, "error": "No span is being computed for this prompt."})
        return _status_only(job.status())

    def _predict_span_cancel(self, ex: JsonDict) -> JsonDict:
        """Stops the span job that `span_job` names (`detail="span_cancel"`; the id its "span_progress" status
        gave) within one chunk of IG steps or SmoothGrad samples, and answers its status; never waits for the
        model. A cancel naming another job (an older one, which a newer span request already superseded)
        stops nothing: the page sends it when the user switched away without a new span request (a method
        whose values are there already). Without an id it is a RequestError naming `span_job`."""
        wanted = job_id_field(ex, fields.SPAN_JOB, "span_cancel")
        job = self._span_jobs().get((clients.current(), datapoint_group(ex)))
        if job is None or job.job_id != wanted:
            return _status_only({"kind": "span", "state": "none", "done": 0, "total": 0, "elapsed_s": 0,
                                 "eta_s": None, "error": f"No span job {wanted!r} is running for this prompt."})
        job.cancel("a cancel request")
        return _status_only(job.status())

    def _predict_matrix_cancel(self, ex: JsonDict) -> JsonDict:
        """Stops the per-token matrix job (IG, SmoothGrad) that `matrix_job` names (`detail="matrix_cancel"`;
        the id its status gave) within one slice, and answers its status; never waits for the model. The
        page sends it when the user switches away from that method or count, so the model is free for what
        the view shows next (a job nobody polls would only stop after the heartbeat). An id naming no live job
        of the datapoint (it ended, or a late cancel) stops nothing; without an id it is a RequestError naming
        `matrix_job`."""
        wanted = job_id_field(ex, fields.MATRIX_JOB, "matrix_cancel")
        job = self._shared.jobs.cancel_job(datapoint_group(ex), wanted, "the page switched away from it",
                                           client=clients.current())
        if job is None:
            return _status_only({"kind": "matrix", "state": "none", "done": 0, "total": 0, "elapsed_s": 0,
                                 "eta_s": None, "error": f"No matrix job {wanted!r} for this prompt."})
        return _status_only(job.status())

    def _predict_segments(self, ex: JsonDict) -> JsonDict:
        """A segment method's values (`detail="segments"`, docs/architecture.md "Segment salience").

        The request starts the background job of its settings (inputs.SegmentRequest) or finds it, and
        never waits for the model: it answers the job's progress (rows done of rows, time left) until
        the values are there, then the values; the page repeats the same request to poll. A new
        segment request of the datapoint cancels its older live segment jobs (another granularity,
        span or method: superseded); another datapoint's selection and a job nobody polls for
        `heartbeat_s` are cancelled as every background job is. A request the core library refuses
        (no removable segments at this granularity, a span outside the target) is a RequestError
        naming the fields.
        """
        shared = self._shared
        request = segment_request(ex)
        group = datapoint_group(ex)
        chat = shared.format_prompt(ex)
        target = text_field(ex, fields.TARGET)
        cached = shared.cached_segments(chat, target, request)
        if cached is not None:
            rows = int(cached.stats.rows) - 1  # the ablated prompts (the job's progress unit), not the unedited one
            done = {"kind": request.job_kind, "state": progressive.DONE, "done": rows, "total": rows,
                    "elapsed_s": 0, "eta_s": None, "error": ""}
            return self._segment_outputs(cached, request, done)
        client = clients.current()
        shared.jobs.focus(group, client)

        def run(job: progressive.Job) -> Any:
            try:
                return shared.segment_salience(chat, target, request, job=job)
            except (ss.SalienceError, RequestError) as e:  # a refusal of this request, not a failure
                return SegmentRefusal(_refusal(request, str(e)))

        job = shared.jobs.submit(group, request.job_kind, run, replaces=SEGMENT_JOB_TAG, lane=SEGMENT_DETAIL,
                                 client=client)
        if job.state != progressive.DONE:
            return _status_only(job.status())
        if isinstance(job.result, SegmentRefusal):
            raise RequestError(job.result.message)
        if job.payload is None:
            job.payload = self._segment_outputs(job.result, request, job.status())
        return job.payload

    @staticmethod
    def _segment_outputs(seg: Any, request: SegmentRequest, status: JsonDict) -> JsonDict:
        out = _status_only(status)
        out[fields.SALIENCE] = segment_payload(seg, request.count, status)
        return out

    def _predict_masked(self, ex: JsonDict) -> JsonDict:
        """LIT's convention: the span `target_mask` marks, as TokenScores (lit_app/lit_convention.py)."""
        target = text_field(ex, fields.TARGET)
        scores = lit_convention.token_scores(self._shared, self._shared.format_prompt(ex), target,
                                             ex.get(fields.TARGET_MASK))
        out = _status_only({})
        out.update({fields.RESPONSE: target, fields.TOKENS: scores[fields.TOKENS],
                    fields.GRAD_L2: scores[fields.GRAD_L2], fields.GRAD_DOT_INPUT: scores[fields.GRAD_DOT_INPUT]})
        return out

    def _predict_stream(self, ex: JsonDict) -> JsonDict:
        """The greedy response generated so far (`detail="stream"`); never waits for the model.

        With `stream_after` (the tokens the page shows) it answers once there are more, the generation
        is done, or STREAM_WAIT_S passed: one request per new piece of text instead of fixed-rate polls.
        """
        if text_field(ex, fields.TARGET):
            raise RequestError(f'"{fields.DETAIL}": "stream" follows the generation of the response, but this input'
                               f' has a "{fields.TARGET}", so nothing is generated. Fix: leave "{fields.TARGET}" empty.')
        shared = self._shared
        chat = shared.format_prompt(ex)
        max_new = shared.generation_config_for(chat).max_new_tokens  # this row's budget
        after = int_field(ex, fields.STREAM_AFTER, -1, -1, max_new)  # -1: answer at once
        stream = shared.generation_stream(chat, after=after if after >= 0 else None, wait_s=STREAM_WAIT_S)
        out = _status_only({})
        out[fields.RESPONSE] = stream.text
        out[fields.SALIENCE] = {"stream": stream.as_dict(max_new)}
        return out

    def _predict_complete(self, ex: JsonDict) -> JsonDict:
        """Every matrix at once (blocking): LIT's own modules and scripts; stops early (lit_app/cancel.py)."""
        # It stops when its client disconnects or another datapoint is selected after it arrived (the
        # focus it compares with is its client's current one); concurrent blocking requests do not stop each
        # other (scripts may send several at once).
        check = cancel.for_request("a blocking salience request",
                                   cancel.focus_moved(self._shared.jobs, datapoint_group(ex), clients.current()))
        chat = self._shared.format_prompt(ex)
        target = text_field(ex, fields.TARGET)
        counts = extra_counts(ex)
        try:
            result = self._shared.salience(chat, target, counts, cancel=check)
        except ss.ComputationCancelled:
            raise check.error("every salience matrix was computed") from None
        n_prompt = int(result.n_prompt_tokens)
        n_targets = len(result.tokens) - n_prompt
        span = parse_target_span(ex.get(fields.TARGET_SPAN), n_targets)
        span_salience = {}
        if span is not None:
            values = self._shared.span_salience(chat, target, span[0], span[1], counts)
            span_salience = {m: compact(v) for m, v in values.items()}
        return self._outputs(result, counts, span_salience, None)

    def _outputs(self, result: Any, counts: Mapping[str, int], span_salience: JsonDict,
                 detail: JsonDict | None) -> JsonDict:
        """The output fields; `counts` = {count field: count} of the extra methods (extra_counts)."""
        tokens = list(result.tokens)
        n_prompt = int(result.n_prompt_tokens)

        def _seq_map(method: str) -> lit_dtypes.SequenceSalienceMap | None:
            if method not in result.matrices:
                return None
            return lit_dtypes.SequenceSalienceMap(
                tokens_in=tokens[:n_prompt],
                tokens_out=tokens[n_prompt:],
                salience=np.asarray(result.matrices[method], dtype=np.float32),  # [T, N]
            )

        methods, _ = self._shared.methods_and_config(counts)
        return {
            fields.RESPONSE: result.text[result.prompt_end:],
            fields.TOKENS: tokens,
            fields.SALIENCE: salience_payload(result, counts, methods=methods, detail=detail,
                                              dtype=self._shared.dtype),
            fields.SPAN_SALIENCE: span_salience,
            fields.GRAD_L2: None,
            fields.GRAD_DOT_INPUT: None,
            fields.GRAD_L2_MAP: _seq_map(fields.GRAD_NORM_METHOD),
            fields.GRAD_DOT_INPUT_MAP: _seq_map(fields.GRAD_X_INPUT_METHOD),
        }

    def _predict_progressive(self, ex: JsonDict, detail: str) -> JsonDict:
        """First highlight now, matrices in the background (docs/architecture.md, "Progressive salience").

        Background jobs: "grad" (the gradient matrices, started by a "span" request) and, per
        extra method, f"{kind}{count}" (e.g. "ig16", "sg8": the gradient matrices plus that
        method's, started by its `matrix_detail` request). A "poll" follows the job of the one
        extra method whose count is > 0, else the "grad" job.
        """
        shared = self._shared
        group = datapoint_group(ex)
        client = clients.current()
        counts = extra_counts(ex)
        off = {field: 0 for field in counts}
        extra = job_extra(counts, detail) if detail != "span" else None
        job_counts = off if extra is None else {**off, extra.field: counts[extra.field]}
        kind = "grad" if extra is None else f"{extra.kind}{counts[extra.field]}"
        if detail == "poll":
            job = shared.jobs.get(group, kind, client)
            if job is None:
                return _status_only({"kind": kind, "state": "none", "done": 0, "total": 0, "elapsed_s": 0,
                                     "eta_s": None, "error": "Nothing is being computed for this prompt;"
                                     " select it again to start."})
            if job.state != progressive.DONE:
                return _status_only(job.status())
            if job.payload is None:
                job.payload = self._outputs(job.result, job_counts, {}, job.status())
            return job.payload

        if detail == "span":
            # What `detail="span_progress"` polls read while this runs (the page shows % and time left); its
            # clock starts now (not at the first report), and its id lets a `span_cancel` stop this job only.
            progress_job = progressive.Job(group, "span", run=lambda _job: None, job_id=f"span-{next(_SPAN_IDS)}")
            progress_job.start()
            span_jobs = self._span_jobs()
            for key in [k for k in span_jobs if k[0] == client]:
                del span_jobs[key]  # one selection at a time per client: its older datapoint's entry is stale
            while len(span_jobs) >= _MAX_SPAN_ENTRIES:
                del span_jobs[next(iter(span_jobs))]
            span_jobs[(client, group)] = progress_job
            # Latest wins, within one client (lit_app/clients.py): a span request (first highlight or clicked
            # span) stops within one chunk of IG steps or SmoothGrad samples once its HTTP client disconnects,
            # its client selects another datapoint, or a newer span request of this datapoint arrives from its
            # client (another span, method or count). Its ticket is taken on arrival, before anything waits for
            # the model. A request without a client id supersedes nothing and nothing supersedes it.
            check = cancel.for_request("a span request", cancel.focus_moved(shared.jobs, group, client),
                                       shared.span_requests.take((client, group)) if client else lambda: "",
                                       lambda: "a cancel request" if progress_job.cancelled else "")
        shared.jobs.focus(group, client)
        requested = parse_target_span(ex.get(fields.TARGET_SPAN), 1 << 30) if detail == "span" else None
        chat = shared.format_prompt(ex)
        target = text_field(ex, fields.TARGET)

        def run_with(job_counts: Mapping[str, int]) -> Callable[[progressive.Job], Any]:
            return lambda job: shared.salience(chat, target, job_counts, job=job)

        if extra is not None:  # "<method>_matrix": that method's per-token matrix, in the background
            job = shared.jobs.submit(group, kind, run_with(job_counts), replaces=extra.kind,
                                     job_id=f"{kind}-{next(_MATRIX_IDS)}", client=client)
            return _status_only(job.status())

        # detail == "span": the exact salience of one span (default: the whole response) now.
        # The span's range is checked by the core library once the target is tokenized.
        t0, t1 = requested if requested is not None else (0, None)

        # What the job's units are now, for the cancellation message: the layers of the one gradient pass first,
        # then the IG steps or SmoothGrad samples.
        units = ["IG steps or SmoothGrad samples"]

        def report(method: str, done: int, total: int) -> None:
            # The job's units are the IG steps or SmoothGrad samples, and, while it runs, the layers of the one
            # gradient pass before them (a long prompt's first highlight takes minutes: issue 43). The pass's
            # end is not shown as "100 % · finishing…" before the first step (issue 35): it starts the steps'
            # sequence and estimate (0 of 0 until the first step).
            if method in _COUNTED_METHODS or done < total:
                units[0] = ("IG steps or SmoothGrad samples" if method in _COUNTED_METHODS
                            else "units of the gradient pass (its forward, then two per layer of its backward)")
                progress_job.report(done, total)
            else:
                progress_job.begin_sequence()

        try:
            result = shared.quick(chat, target, t0, t1, counts, cancel=check, progress=report)
        except ss.ComputationCancelled:
            progress_job.state, progress_job.finished = progressive.CANCELLED, time.monotonic()
            progress_job.error = f"{CANCELLED_PREFIX} {check.reason}."
            if check.client_gone:
                raise check.error("the span was computed") from None
            done = (f" It stopped after {progress_job.done} of {progress_job.total} {units[0]}."
                    if progress_job.total else "")
            raise Cancelled(f"{CANCELLED_PREFIX} {check.reason}.{done}") from None
        except Exception as e:
            progress_job.state, progress_job.error, progress_job.finished = progressive.ERROR, str(e), time.monotonic()
            raise
        progress_job.state, progress_job.finished = progressive.DONE, time.monotonic()
        complete = shared.cached_salience(chat, target)
        if complete is not None:
            status = {"kind": "grad", "state": progressive.DONE, "done": 1, "total": 1, "elapsed_s": 0,
                      "eta_s": None, "error": ""}
        else:
            status = shared.jobs.submit(group, "grad", run_with(off), client=client).status()
        span = (t0, result.num_targets if t1 is None else t1)
        methods, _ = shared.methods_and_config(counts)
        values = {m: compact(result.span_salience(m, *span)) for m in methods if result.has_span(m, *span)}
        if requested is not None:
            # A clicked span: the client has the text and tokens already; send only the values.
            errors = {span_key(*k): float(v) for k, v in result.span_ig_errors.items() if k == span}
            return {**_status_only(status), fields.SALIENCE: {"detail": status, "span_ig_errors": errors},
                    fields.SPAN_SALIENCE: values}
        if complete is not None:
            result = complete.merged(result)
        return self._outputs(result, counts, values, status)


# The methods whose units a span job's progress counts (`detail="span_progress"`): those with a count.
_COUNTED_METHODS = frozenset(e.method for e in EXTRA_METHODS)
# Ids of span jobs (`span_cancel` names the one it stops).
_SPAN_IDS = itertools.count(1)
# Ids of per-token matrix jobs (`matrix_cancel` names the one it stops).
_MATRIX_IDS = itertools.count(1)
# Span progress entries kept (one per client, plus those of requests without a client id).
_MAX_SPAN_ENTRIES = 256


class SegmentRefusal:
    """A segment job's answer when the core library refused its request (the poll raises RequestError)."""

    def __init__(self, message: str):
        self.message = message


def _refusal(request: SegmentRequest, message: str) -> str:
    """The core library's message prefixed with the request's fields, so that it names what to change."""
    where = f'"{fields.SEGMENT_METHOD}": "{request.method}", "{fields.GRANULARITY}": "{request.granularity}"'
    if request.pattern:
        where += f', "{fields.PATTERN}": {request.pattern!r}'
    if request.span is not None:
        where += f', "{fields.TARGET_SPAN}": "{request.span[0]}:{request.span[1]}"'
    return " ".join(f"Input fields {where}: {message}".split())


def _status_only(status: JsonDict) -> JsonDict:
    """A poll answer while the matrices are not ready: only the progress."""
    return {
        fields.RESPONSE: "",
        fields.TOKENS: [],
        fields.SALIENCE: {"detail": dict(status)},
        fields.SPAN_SALIENCE: {},
        fields.GRAD_L2: None,
        fields.GRAD_DOT_INPUT: None,
        fields.GRAD_L2_MAP: None,
        fields.GRAD_DOT_INPUT_MAP: None,
    }

