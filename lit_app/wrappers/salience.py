"""The salience model: prompt + target (or the greedy response) -> salience of every prompt token
for every target token.

Its output is the `salience` payload of docs/architecture.md (lit_app/wrappers/payloads.py), LIT-native
`SequenceSalienceMap`s, tokens, and the exact salience of a target span on request. `detail`
selects how it answers: every matrix at once (blocking), or progressively ("span" first
highlight, "poll", "<method>_matrix" background jobs, "stream" the response so far).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from lit_nlp.api import dtypes as lit_dtypes

import sequence_salience as ss
from sequence_salience.methods.sampling import span_point_cost
from lit_app.model import cancel
from lit_app.edge import clients
from lit_app.schema import fields
from lit_app.wrappers import lit_convention, salience_requests as requests
from lit_app.errors import CANCELLED_PREFIX, RequestError
from lit_app.schema.inputs import JsonDict, SegmentRequest, parse_target_span
from lit_app.model.jobs_table import SPAN_LANE
from lit_app.model import time_left
from lit_app.model.jobs import DONE, FINISHED, Job, Status
from lit_app.model.salience_runs import PARTIAL_SEGMENTS, sends_first_look
from lit_app.schema.method_registry import (EXTRA_METHODS, SEGMENT_DETAIL, SEGMENT_JOB_TAG, SEGMENT_KNOWN_DETAIL,
                                           ExtraMethod)
from lit_app.wrappers.payloads import compact, completeness_payload, salience_payload, segment_payload, span_key
from lit_app.wrappers.wrapper import Wrapper, refused

# Longest wait of a `detail="stream"` request with `stream_after` (a long poll) before it answers what
# there is: the page then shows "waiting for the model" when another request holds it.
STREAM_WAIT_S = 1.0
# Longest wait of the first map's segment request for the job's first values so far (its estimate): the page's
# poll period (frontend/src/salience/page.ts POLL_MS), so that it comes no later than the page's next poll would.
FIRST_LOOK_WAIT_S = 0.7


class SalienceModel(Wrapper):
    """Prompt + target (or the greedy response) -> salience of every prompt token for every target token."""

    INPUT_SPEC = fields.SALIENCE_INPUT_SPEC
    OUTPUT_SPEC = fields.SALIENCE_OUTPUT_SPEC

    def _predict_one(self, ex: JsonDict) -> JsonDict:
        """Parses the request once (lit_app/wrappers/salience_requests.py: a 400 naming the field before any work) and
        runs the handler of its type (`HANDLERS`)."""
        request = requests.parse(ex, self._shared)
        return HANDLERS[type(request)](self, request)

    def _span_progress(self, request: requests.SpanProgressRequest) -> JsonDict:
        """Progress of the latest span request of this datapoint (`detail="span_progress"`): IG steps or
        SmoothGrad samples done, of how many, and the time left; never waits for the model."""
        job = self._shared.jobs.tracked(SPAN_LANE, (clients.current(), request.group))
        if job is None:
            return _status_only(Status.none("span", "No span is being computed for this prompt.").to_json())
        return _status_only(job.status())

    def _span_cancel(self, request: requests.SpanCancelRequest) -> JsonDict:
        """Stops the span job that `span_job` names (`detail="span_cancel"`; the id its "span_progress" status
        gave) within one chunk of IG steps or SmoothGrad samples, and answers its status; never waits for the
        model. A cancel naming another job (an older one, which a newer span request already superseded)
        stops nothing: the page sends it when the user switched away without a new span request (a method
        whose values are there already). Without an id it is a RequestError naming `span_job`."""
        job = self._shared.jobs.tracked(SPAN_LANE, (clients.current(), request.group))
        if job is None or job.job_id != request.job_id:
            return _status_only(Status.none("span", f"No span job {request.job_id!r} is running for this prompt.")
                                .to_json())
        job.cancel("a cancel request")
        return _status_only(job.status())

    def _matrix_cancel(self, request: requests.MatrixCancelRequest) -> JsonDict:
        """Stops the per-token matrix job (IG, SmoothGrad) that `matrix_job` names (`detail="matrix_cancel"`;
        the id its status gave) within one slice, and answers its status; never waits for the model. The
        page sends it when the user switches away from that method or count, so the model is free for what
        the view shows next (a job nobody polls would only stop after the heartbeat). An id naming no live job
        of the datapoint (it ended, or a late cancel) stops nothing; without an id it is a RequestError naming
        `matrix_job`."""
        job = self._shared.jobs.cancel_job(request.group, request.job_id, "the page switched away from it",
                                           client=clients.current())
        if job is None:
            return _status_only(Status.none("matrix", f"No matrix job {request.job_id!r} for this prompt.").to_json())
        return _status_only(job.status())

    def _page_closed(self, _request: requests.PageClosedRequest) -> JsonDict:
        """Stops every background job of this request's client (`detail="page_closed"`): the page sends it when it
        is closed or navigated away from (frontend/src/salience/page_exit.ts), so its matrix and segment jobs stop
        within one slice instead of running for `heartbeat_s` after its last poll, taking the model from other
        pages; a job another client also asked for runs on for that one. Never waits for the model; answers how
        many jobs it released (`Status.done_now` of kind "page_closed")."""
        released = self._shared.jobs.release_client(clients.current(), "its page was closed")
        return _status_only(Status.done_now("page_closed", len(released)).to_json())

    def _segments(self, request: requests.SegmentsRequest) -> JsonDict:
        """A segment method's values (`detail="segments"`, docs/architecture.md "Segment salience").

        The request starts the background job of its settings (inputs.SegmentRequest) or finds it, and
        never waits for the model: it answers the job's progress (rows done of rows, time left) until
        the values are there, then the values; the page repeats the same request to poll. A new
        segment request of the datapoint cancels its older live segment jobs (another granularity,
        span or method: superseded); another datapoint's selection and a job nobody polls for
        `heartbeat_s` are cancelled as every background job is. A request the core library refuses
        (no removable segments at this granularity, a span outside the target) is a RequestError
        naming the fields. While it runs, the answer also holds the job's values so far
        (`fields.PARTIAL_SEGMENTS`, as `segments`; attention_verified: its estimate, then the segments verified so
        far), where salience_runs.sends_first_look; that request (the first map's) waits for them up to
        FIRST_LOOK_WAIT_S (the page's next poll): its estimate needs no forward of its own after the first
        highlight, so the first answer brings it, a poll sooner.
        """
        shared, segment = self._shared, request.segment
        chat, target = request.chat, request.target
        cached = shared.cached_segments(chat, target, segment)
        if cached is not None:
            rows = int(cached.stats.rows) - 1  # the ablated prompts (the job's progress unit), not the unedited one
            return self._segment_outputs(cached, segment, Status.done_now(segment.job_kind, rows).to_json())
        if shared.jobs.get(request.group, segment.job_kind) is None:
            # A new job's pattern is matched here, without the model: a runaway or matchless one is this request's
            # 400 in about a second, however long other work holds the model (issue 43); its job re-checks it.
            try:
                shared.check_pattern(chat, target, segment)
            except ss.SalienceError as e:
                raise refused(_refusal(segment, str(e)), e) from None
        client = clients.current()
        shared.jobs.focus(request.group, client)

        def run(job: Job) -> Any:
            try:
                return shared.segment_salience(chat, target, segment, job=job)
            except (ss.SalienceError, RequestError) as e:  # a refusal of this request, not a failure
                return SegmentRefusal(_refusal(segment, str(e)))

        job = shared.jobs.submit(request.group, segment.job_kind, run, replaces=SEGMENT_JOB_TAG, lane=SEGMENT_DETAIL,
                                 client=client)
        if sends_first_look(segment):  # the first map's job: its first look in this answer
            deadline = time.monotonic() + FIRST_LOOK_WAIT_S
            while job.partial is None and job.state not in FINISHED and time.monotonic() < deadline:
                time.sleep(0.005)
        if job.state != DONE:
            out = _status_only(job.status())
            partial = (job.partial or {}).get(PARTIAL_SEGMENTS)
            if partial is not None:  # the values so far (attention_verified: the estimate, then verified segments)
                out[fields.SALIENCE][fields.PARTIAL_SEGMENTS] = segment_payload(partial, segment.count)[fields.SEGMENTS]
            return out
        if isinstance(job.result, SegmentRefusal):
            raise RequestError(job.result.message)
        if job.payload is None:
            job.payload = self._segment_outputs(job.result, segment, job.status())
        return job.payload

    def _segments_known(self, request: requests.SegmentsKnownRequest) -> JsonDict:
        """How many of a segment request's segments the server knows exactly already (`detail`
        method_registry.SEGMENT_KNOWN_DETAIL): `fields.KNOWN_EXACT` {method, measured} of its own cached result
        (every segment: nothing runs), else of the result leave one out would take its values from (salience_runs.py
        `exact_values_of`: the word button's, the first map's), else None. Starts no job, never waits for the model:
        the page asks it where it states the cost of a measure button it has not run here (a fresh page after another
        page's word button)."""
        # Its own result first: a page that did not measure it (a reload, another tab) after another page did
        # runs no forward at all (was: it named the word button's quarter and stated the rest's forwards).
        found = (self._shared.cached_segments(request.chat, request.target, request.segment)
                 or self._shared.exact_values_of(request.chat, request.target, request.segment))
        out = _status_only(Status.done_now(SEGMENT_KNOWN_DETAIL, 0).to_json())
        out[fields.SALIENCE][fields.KNOWN_EXACT] = None if found is None else {
            "method": found.method, "measured": int(found.measured_mask().sum())}
        return out

    @staticmethod
    def _segment_outputs(seg: Any, request: SegmentRequest, status: JsonDict) -> JsonDict:
        out = _status_only(status)
        out[fields.SALIENCE] = segment_payload(seg, request.count, status)
        return out

    def _masked(self, request: requests.MaskedRequest) -> JsonDict:
        """LIT's convention: the span `target_mask` marks, as TokenScores (lit_app/wrappers/lit_convention.py)."""
        scores = lit_convention.token_scores(self._shared, request.chat, request.target, request.mask)
        out = _status_only({})
        out.update({fields.RESPONSE: request.target, fields.TOKENS: scores[fields.TOKENS],
                    fields.GRAD_L2: scores[fields.GRAD_L2], fields.GRAD_DOT_INPUT: scores[fields.GRAD_DOT_INPUT]})
        return out

    def _stream(self, request: requests.StreamRequest) -> JsonDict:
        """The greedy response generated so far (`detail="stream"`); never waits for the model.

        With `stream_after` (the tokens the page shows) it answers once there are more, the generation
        is done, or STREAM_WAIT_S passed: one request per new piece of text instead of fixed-rate polls.
        """
        after = request.after if request.after >= 0 else None  # -1: answer at once
        stream = self._shared.generation_stream(request.chat, after=after, wait_s=STREAM_WAIT_S)
        out = _status_only({})
        out[fields.RESPONSE] = stream.text
        out[fields.SALIENCE] = {"stream": stream.as_dict(request.max_new)}
        return out

    def _complete(self, request: requests.CompleteRequest) -> JsonDict:
        """Every matrix at once (blocking): LIT's own modules and scripts; stops early (lit_app/model/cancel.py)."""
        # It stops when its client disconnects or another datapoint is selected after it arrived (the
        # focus it compares with is its client's current one); concurrent blocking requests do not stop each
        # other (scripts may send several at once).
        check = cancel.for_request("a blocking salience request",
                                   cancel.focus_moved(self._shared.jobs, request.group, clients.current()))
        chat, target, counts = request.chat, request.target, request.counts
        try:
            result = self._shared.salience(chat, target, counts, cancel=check)
        except ss.ComputationCancelled:
            raise check.error("every salience matrix was computed") from None
        n_prompt = int(result.n_prompt_tokens)
        n_targets = len(result.tokens) - n_prompt
        span = parse_target_span(request.span_text, n_targets)
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

    # First highlight now, matrices in the background (docs/architecture.md, "Progressive salience").
    # Background jobs: "grad" (the gradient matrices, started by a "span" request) and, per extra method,
    # f"{kind}{count}" (e.g. "ig16", "sg8": the gradient matrices plus that method's, started by its
    # `matrix_detail` request). A "poll" follows the job of the one extra method whose count is > 0, else "grad".

    def _run_with(self, chat: ss.ChatPrompt, target: str, job_counts: Mapping[str, int]) -> Callable[[Job], Any]:
        """The work of a background matrix job: every matrix of these counts, reported to the job."""
        return lambda job: self._shared.salience(chat, target, job_counts, job=job)

    def _poll(self, request: requests.PollRequest) -> JsonDict:
        """The progress of a background matrix job, then its matrices (`detail="poll"`); never waits for the model."""
        extra, counts = request.extra, request.counts
        job_counts = _job_counts(counts, extra)
        kind = _job_kind(counts, extra)
        job = self._shared.jobs.get(request.group, kind, clients.current())
        if job is None:
            return _status_only(Status.none(kind, "Nothing is being computed for this prompt;"
                                                  " select it again to start.").to_json())
        if job.state != DONE:
            return _status_only(job.status())
        if job.payload is None:
            job.payload = self._outputs(job.result, job_counts, {}, job.status())
        return job.payload

    def _matrix(self, request: requests.MatrixRequest) -> JsonDict:
        """Starts (or finds) an extra method's per-token matrix job (`detail="<method>_matrix"`) and answers
        its status; never waits for the model."""
        extra, counts, client = request.extra, request.counts, clients.current()
        kind = _job_kind(counts, extra)
        self._shared.jobs.focus(request.group, client)
        job = self._shared.jobs.submit(request.group, kind,
                                       self._run_with(request.chat, request.target, _job_counts(counts, extra)),
                                       replaces=extra.kind, job_id=f"{kind}-{next(_MATRIX_IDS)}", client=client)
        return _status_only(job.status())

    def _span(self, request: requests.SpanRequest) -> JsonDict:
        """The exact salience of one span (default: the whole response) now (`detail="span"`), as a span job
        that "span_progress" polls read and "span_cancel" stops; then the gradient matrices in the background."""
        shared, group, client = self._shared, request.group, clients.current()
        chat, target, counts = request.chat, request.target, request.counts
        # Latest wins, within one client (lit_app/edge/clients.py): a span request (first highlight or clicked
        # span) stops within one chunk of IG steps or SmoothGrad samples once its HTTP client disconnects,
        # its client selects another datapoint, a newer span request of this datapoint arrives from its
        # client (another span, method or count: the job it replaces in the table's span lane), or a
        # `span_cancel` names it. It enters the table on arrival, before anything waits for the model. A request
        # without a client id supersedes nothing and nothing supersedes it. Its clock starts now (not at the first
        # report).
        job = Job(group, "span", heartbeat_s=None, job_id=f"span-{next(_SPAN_IDS)}",
                  reasons=(cancel.client_gone(), cancel.focus_moved(shared.jobs, group, client)))
        job.start()
        # One selection at a time per client: its older datapoint's entry is stale (that span stops as its focus
        # moved); its older span of this datapoint is superseded.
        older = shared.jobs.track(SPAN_LANE, (client, group), job, drop=lambda key: key[0] == client)
        if older is not None and client:
            older.cancel(cancel.SUPERSEDED)
        shared.jobs.focus(group, client)
        # The span's range is checked by the core library once the target is tokenized.
        t0, t1 = request.span if request.span is not None else (0, None)

        # What the job's units are now, for the cancellation message: the layers of the one gradient pass first,
        # then the IG steps or SmoothGrad samples.
        units = ["IG steps or SmoothGrad samples"]
        # The steps or samples after the gradient pass, each a share of the pass's cost (sampling.span_point_cost):
        # the pass's time left counts them (was: "42 % · about 1 s left" of the pass with 112 IG steps to run).
        methods, config = shared.methods_and_config(counts)
        steps = sum(ss.get_method(m).span_units(config) for m in methods if m in _COUNTED_METHODS)
        after_pass = time_left.Then(steps, *span_point_cost(config)) if steps else None

        def report(method: str, done: int, total: int) -> None:
            # The job's units are the IG steps or SmoothGrad samples, and, while it runs, the layers of the one
            # gradient pass before them (a long prompt's first highlight takes minutes: issue 43). The pass's
            # end is not shown as "100 % · finishing…" before the first step (issue 35): it starts the steps'
            # sequence and estimate (0 of 0 until the first step).
            if method in _COUNTED_METHODS or done < total:
                units[0] = ("IG steps or SmoothGrad samples" if method in _COUNTED_METHODS
                            else "units of the gradient pass (its forward, then two per layer of its backward)")
                job.report(done, total, then=None if method in _COUNTED_METHODS else after_pass)
            else:
                job.begin_sequence()

        check = job.check
        try:
            result = shared.quick(chat, target, t0, t1, counts, cancel=check, progress=report, job=job)
        except ss.ComputationCancelled:
            job.end_cancelled(f"{CANCELLED_PREFIX} {check.reason}.")
            if check.client_gone:
                raise check.error("the span was computed") from None
            raise check.stopped_after(job.done, job.total, units[0]) from None
        except Exception as e:
            job.fail(str(e))
            raise
        job.succeed()
        complete = shared.cached_salience(chat, target)
        if complete is not None:
            status = Status.done_now("grad", 1).to_json()
        else:
            off = _job_counts(counts, None)
            status = shared.jobs.submit(group, "grad", self._run_with(chat, target, off), client=client).status()
        span = (t0, result.num_targets if t1 is None else t1)
        values = {m: compact(result.span_salience(m, *span)) for m in methods if result.has_span(m, *span)}
        if request.span is not None:
            # A clicked span: the client has the text and tokens already; send only the values.
            errors = {span_key(*k): float(v) for k, v in result.span_ig_errors.items() if k == span}
            return {**_status_only(status), fields.SALIENCE: {"detail": status, "span_ig_errors": errors,
                                                              "completeness": completeness_payload(result)},
                    fields.SPAN_SALIENCE: values}
        if complete is not None:
            result = complete.merged(result)
        return self._outputs(result, counts, values, status)


# request type -> the salience model's handler (every type a parser of lit_app/wrappers/salience_requests.py returns).
HANDLERS: Mapping[type, Callable[[SalienceModel, Any], JsonDict]] = {
    requests.CompleteRequest: SalienceModel._complete,
    requests.MaskedRequest: SalienceModel._masked,
    requests.StreamRequest: SalienceModel._stream,
    requests.SpanProgressRequest: SalienceModel._span_progress,
    requests.SpanCancelRequest: SalienceModel._span_cancel,
    requests.MatrixCancelRequest: SalienceModel._matrix_cancel,
    requests.PageClosedRequest: SalienceModel._page_closed,
    requests.SegmentsRequest: SalienceModel._segments,
    requests.SegmentsKnownRequest: SalienceModel._segments_known,
    requests.SpanRequest: SalienceModel._span,
    requests.PollRequest: SalienceModel._poll,
    requests.MatrixRequest: SalienceModel._matrix,
}


def _job_counts(counts: Mapping[str, int], extra: ExtraMethod | None) -> dict[str, int]:
    """The counts a background matrix job computes: every extra method off but `extra` (None: the gradients)."""
    off = {field: 0 for field in counts}
    return off if extra is None else {**off, extra.field: counts[extra.field]}


def _job_kind(counts: Mapping[str, int], extra: ExtraMethod | None) -> str:
    """A background matrix job's kind: "grad", or the extra method's kind and count ("ig16")."""
    return "grad" if extra is None else f"{extra.kind}{counts[extra.field]}"


# The methods whose units a span job's progress counts (`detail="span_progress"`): those with a count.
_COUNTED_METHODS = frozenset(e.method for e in EXTRA_METHODS)
# Ids of span jobs (`span_cancel` names the one it stops).
_SPAN_IDS = itertools.count(1)
# Ids of per-token matrix jobs (`matrix_cancel` names the one it stops).
_MATRIX_IDS = itertools.count(1)


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

