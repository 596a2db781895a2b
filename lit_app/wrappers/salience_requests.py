"""The salience model's requests, parsed once at the edge: one frozen dataclass per `detail` mode.

`parse(ex, shared)` reads the `detail` field of a LIT input example and hands the example to that mode's
parser (the table `PARSERS`, mode -> parser), which reads every field the mode uses with the per-field
parsers of lit_app/schema/inputs.py. A malformed field is a `RequestError` (HTTP 400) naming the field before any
work starts; an unknown mode is one naming `detail`. The salience model then runs the handler of the
request's type (lit_app/wrappers/salience.py `HANDLERS`). No parser waits for the model: the prompt is formatted with
the tokenizer copy (lit_app/model/prompt_tokens.py), and polls and cancels read no prompt at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import sequence_salience as ss
from lit_app.schema import fields
from lit_app.errors import RequestError
from lit_app.schema.inputs import (JsonDict, SegmentRequest, datapoint_group, detail_field, extra_counts,
                                   int_field, job_extra, job_id_field, parse_target_span, segment_request, text_field)
from lit_app.schema.method_registry import EXTRA_METHODS, SEGMENT_DETAIL, SEGMENT_KNOWN_DETAIL, ExtraMethod

# A span end no target reaches: a span's range is checked against the target once it is tokenized.
ANY_LENGTH = 1 << 30


class Prompts(Protocol):
    """What the parsers need of the shared model (lit_app/model/shared_model.py `SharedLM`); neither waits for it."""

    def format_prompt(self, ex: JsonDict) -> ss.ChatPrompt: ...

    def generation_config_for(self, chat: ss.ChatPrompt) -> ss.GenerationConfig: ...


@dataclasses.dataclass(frozen=True)
class RowRequest:
    """What the requests about one datapoint's prompt and target share: its group, the formatted prompt, the
    target and the extra methods' counts. Not a request itself: each mode's request extends it."""

    group: tuple
    chat: ss.ChatPrompt
    target: str
    counts: Mapping[str, int]


@dataclasses.dataclass(frozen=True)
class CompleteRequest(RowRequest):
    """`detail` "" (absent): every matrix at once, blocking; `span_text` the raw `target_span` (checked against
    the target's length once it is known)."""

    span_text: Any


@dataclasses.dataclass(frozen=True)
class MaskedRequest:
    """`detail` "" with a `target_mask`: LIT's convention, TokenScores of the masked span."""

    chat: ss.ChatPrompt
    target: str
    mask: Any


@dataclasses.dataclass(frozen=True)
class StreamRequest:
    """`detail` "stream": the greedy response so far; `after` the tokens the page shows (-1: answer at once)."""

    chat: ss.ChatPrompt
    max_new: int
    after: int


@dataclasses.dataclass(frozen=True)
class SpanProgressRequest:
    """`detail` "span_progress": the progress of the client's span of this datapoint."""

    group: tuple


@dataclasses.dataclass(frozen=True)
class SpanCancelRequest:
    """`detail` "span_cancel": stop the span job `job_id` names."""

    group: tuple
    job_id: str


@dataclasses.dataclass(frozen=True)
class MatrixCancelRequest:
    """`detail` "matrix_cancel": stop the per-token matrix job `job_id` names."""

    group: tuple
    job_id: str


@dataclasses.dataclass(frozen=True)
class PageClosedRequest:
    """`detail` "page_closed": the page is going away; every background job of its client stops."""


@dataclasses.dataclass(frozen=True)
class SegmentsRequest:
    """`detail` method_registry.SEGMENT_DETAIL: a segment method's values (`segment`: its settings)."""

    group: tuple
    chat: ss.ChatPrompt
    target: str
    segment: SegmentRequest


@dataclasses.dataclass(frozen=True)
class SegmentsKnownRequest(SegmentsRequest):
    """`detail` method_registry.SEGMENT_KNOWN_DETAIL: how many of `segment`'s segments are known exactly already."""


@dataclasses.dataclass(frozen=True)
class SpanRequest(RowRequest):
    """`detail` "span": the exact salience of one span now (`span` None: the whole response)."""

    span: tuple[int, int] | None


@dataclasses.dataclass(frozen=True)
class PollRequest:
    """`detail` "poll": the background job of `extra` (None: the gradient matrices)."""

    group: tuple
    counts: Mapping[str, int]
    extra: ExtraMethod | None


@dataclasses.dataclass(frozen=True)
class MatrixRequest(RowRequest):
    """`detail` "<method>_matrix": start (or find) the background job of that extra method's matrix."""

    extra: ExtraMethod


Request = (CompleteRequest | MaskedRequest | StreamRequest | SpanProgressRequest | SpanCancelRequest
           | MatrixCancelRequest | PageClosedRequest | SegmentsRequest | SegmentsKnownRequest | SpanRequest
           | PollRequest | MatrixRequest)


def _complete(ex: JsonDict, shared: Prompts) -> CompleteRequest | MaskedRequest:
    target = text_field(ex, fields.TARGET)
    if ex.get(fields.TARGET_MASK) is not None:
        return MaskedRequest(shared.format_prompt(ex), target, ex.get(fields.TARGET_MASK))
    group, counts = datapoint_group(ex), extra_counts(ex)
    span_text = ex.get(fields.TARGET_SPAN)
    parse_target_span(span_text, ANY_LENGTH)  # its form now; its range once the target's length is known
    return CompleteRequest(group, shared.format_prompt(ex), target, counts, span_text)


def _stream(ex: JsonDict, shared: Prompts) -> StreamRequest:
    if text_field(ex, fields.TARGET):
        raise RequestError(f'"{fields.DETAIL}": "stream" follows the generation of the response, but this input'
                           f' has a "{fields.TARGET}", so nothing is generated. Fix: leave "{fields.TARGET}" empty.')
    chat = shared.format_prompt(ex)
    max_new = shared.generation_config_for(chat).max_new_tokens  # this row's budget
    return StreamRequest(chat, max_new, int_field(ex, fields.STREAM_AFTER, -1, -1, max_new))


def _span_progress(ex: JsonDict, _shared: Prompts) -> SpanProgressRequest:
    return SpanProgressRequest(datapoint_group(ex))


def _span_cancel(ex: JsonDict, _shared: Prompts) -> SpanCancelRequest:
    return SpanCancelRequest(datapoint_group(ex), job_id_field(ex, fields.SPAN_JOB, "span_cancel"))


def _matrix_cancel(ex: JsonDict, _shared: Prompts) -> MatrixCancelRequest:
    return MatrixCancelRequest(datapoint_group(ex), job_id_field(ex, fields.MATRIX_JOB, "matrix_cancel"))


def _page_closed(_ex: JsonDict, _shared: Prompts) -> PageClosedRequest:
    return PageClosedRequest()


def _segments(ex: JsonDict, shared: Prompts) -> SegmentsRequest:
    segment = segment_request(ex)
    return SegmentsRequest(datapoint_group(ex), shared.format_prompt(ex), text_field(ex, fields.TARGET), segment)


def _segments_known(ex: JsonDict, shared: Prompts) -> SegmentsKnownRequest:
    r = _segments(ex, shared)
    return SegmentsKnownRequest(r.group, r.chat, r.target, r.segment)


def _span(ex: JsonDict, shared: Prompts) -> SpanRequest:
    group, counts = datapoint_group(ex), extra_counts(ex)
    span = parse_target_span(ex.get(fields.TARGET_SPAN), ANY_LENGTH)
    return SpanRequest(group, shared.format_prompt(ex), text_field(ex, fields.TARGET), counts, span)


def _poll(ex: JsonDict, _shared: Prompts) -> PollRequest:
    counts = extra_counts(ex)
    return PollRequest(datapoint_group(ex), counts, job_extra(counts, "poll"))


def _matrix(detail: str) -> Callable[[JsonDict, Prompts], MatrixRequest]:
    def parse_matrix(ex: JsonDict, shared: Prompts) -> MatrixRequest:
        group, counts = datapoint_group(ex), extra_counts(ex)
        extra = job_extra(counts, detail)
        return MatrixRequest(group, shared.format_prompt(ex), text_field(ex, fields.TARGET), counts, extra)

    return parse_matrix


# detail mode -> its parser (every mode of inputs.DETAIL_MODES has one: tests/unit/test_salience_dispatch.py).
PARSERS: Mapping[str, Callable[[JsonDict, Prompts], Request]] = {
    "": _complete, "stream": _stream, "span_progress": _span_progress, "span_cancel": _span_cancel,
    "matrix_cancel": _matrix_cancel, "page_closed": _page_closed, SEGMENT_DETAIL: _segments,
    SEGMENT_KNOWN_DETAIL: _segments_known, "span": _span,
    "poll": _poll,
    **{e.matrix_detail: _matrix(e.matrix_detail) for e in EXTRA_METHODS},
}


def parse(ex: JsonDict, shared: Prompts) -> Request:
    """The typed request of input example `ex` (module docstring); RequestError naming the field otherwise."""
    return PARSERS[detail_field(ex)](ex, shared)
