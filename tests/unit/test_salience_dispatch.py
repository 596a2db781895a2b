"""The salience model's requests are parsed once at the edge and dispatched through a table (issue 43 §1;
lit_app/wrappers/salience_requests.py `PARSERS`, lit_app/wrappers/salience.py `HANDLERS`): every `detail` mode has a parser,
every request type a handler; an unknown mode and a malformed field are a 400 naming the field before any
work starts (the model never taken, no span job, no background job). Tiny random llama
(tests/unit/tiny_models.py)."""

from __future__ import annotations

import typing

import pytest

from lit_app import errors
from lit_app.schema import fields, inputs
from lit_app.serving import model_group
from lit_app.wrappers import salience as lit_salience, salience_requests as requests
from lit_app.model.jobs_table import SPAN_LANE
from lit_app.schema.method_registry import EXTRA_METHODS, SEGMENT_DETAIL, SEGMENT_KNOWN_DETAIL
from lit_app.model.scheduler import ModelScheduler, Priority
from lit_app.model.shared_model import SharedLM
from tests.unit.tiny_models import MODEL_BUILDERS, wrap

EX = {"prompt": "one two three four", "target": " five six seven", "chat": False}


class CountingScheduler(ModelScheduler):
    """The real scheduler, counting how often the model is taken."""

    def __init__(self):
        super().__init__()
        self.taken = 0

    def acquire(self, priority: Priority = Priority.INTERACTIVE, graph: bool = False) -> bool:
        self.taken += 1
        return super().acquire(priority, graph)


@pytest.fixture(scope="module")
def tiny():
    shared = SharedLM(wrap(MODEL_BUILDERS["llama"](seed=0), "llama"), max_new_tokens=4, disk_cache=False,
                      lock=CountingScheduler())
    return shared, model_group.lit_models(shared, "tiny")["_tiny_salience"]


def test_every_detail_mode_has_a_parser_and_every_request_type_a_handler():
    assert set(requests.PARSERS) == set(inputs.DETAIL_MODES)
    assert set(lit_salience.HANDLERS) == set(typing.get_args(requests.Request))


IG = EXTRA_METHODS[0]


@pytest.mark.parametrize("extra, kind", [
    pytest.param({}, requests.CompleteRequest, id="all-matrices"),
    pytest.param({fields.TARGET_MASK: [0, 1, 1]}, requests.MaskedRequest, id="lit-target-mask"),
    pytest.param({fields.DETAIL: "stream", fields.TARGET: ""}, requests.StreamRequest, id="stream"),
    pytest.param({fields.DETAIL: "span_progress"}, requests.SpanProgressRequest, id="span-progress"),
    pytest.param({fields.DETAIL: "span_cancel", fields.SPAN_JOB: "span-3"}, requests.SpanCancelRequest,
                 id="span-cancel"),
    pytest.param({fields.DETAIL: "matrix_cancel", fields.MATRIX_JOB: "ig8-1"}, requests.MatrixCancelRequest,
                 id="matrix-cancel"),
    pytest.param({fields.DETAIL: SEGMENT_DETAIL, fields.SEGMENT_METHOD: "leave_one_out"}, requests.SegmentsRequest,
                 id="segments"),
    pytest.param({fields.DETAIL: SEGMENT_KNOWN_DETAIL, fields.SEGMENT_METHOD: "leave_one_out"},
                 requests.SegmentsKnownRequest, id="segments-known"),
    pytest.param({fields.DETAIL: "span", fields.TARGET_SPAN: "0:2"}, requests.SpanRequest, id="span"),
    pytest.param({fields.DETAIL: "poll"}, requests.PollRequest, id="poll"),
    pytest.param({fields.DETAIL: IG.matrix_detail, IG.field: 8}, requests.MatrixRequest, id="matrix"),
])
def test_each_mode_parses_into_its_request(tiny, extra, kind):
    shared, _ = tiny
    request = requests.parse({**EX, **extra}, shared)
    assert type(request) is kind
    if hasattr(request, "group"):
        assert request.group == inputs.datapoint_group({**EX, **extra})


def test_a_clicked_span_and_a_matrix_request_carry_their_parsed_fields(tiny):
    shared, _ = tiny
    span = requests.parse({**EX, fields.DETAIL: "span", fields.TARGET_SPAN: " 1 : 3 ", IG.field: "4"}, shared)
    assert span.span == (1, 3) and span.counts[IG.field] == 4 and span.target == EX["target"]
    matrix = requests.parse({**EX, fields.DETAIL: IG.matrix_detail, IG.field: 8}, shared)
    assert matrix.extra == IG and matrix.counts[IG.field] == 8


def test_an_unknown_mode_is_a_400_naming_detail_before_any_work(tiny):
    shared, model = tiny
    taken = shared.lock.taken
    with pytest.raises(errors.RequestError) as e:
        model.predict([{**EX, fields.DETAIL: "spam"}])
    assert e.value.status == 400 and f'"{fields.DETAIL}" is \'spam\'' in str(e.value)
    assert shared.lock.taken == taken  # the model was never taken


@pytest.mark.parametrize("extra, field", [
    pytest.param({fields.DETAIL: "span", fields.TARGET_SPAN: "3:1"}, fields.TARGET_SPAN, id="span-backwards"),
    pytest.param({fields.DETAIL: "span", IG.field: -2}, IG.field, id="negative-count"),
    pytest.param({fields.DETAIL: IG.matrix_detail}, IG.field, id="matrix-without-count"),
    pytest.param({fields.DETAIL: "span_cancel"}, fields.SPAN_JOB, id="cancel-without-id"),
    pytest.param({fields.DETAIL: "stream", fields.STREAM_AFTER: "x", fields.TARGET: ""}, fields.STREAM_AFTER,
                 id="stream-after"),
    pytest.param({fields.TARGET_SPAN: "two"}, fields.TARGET_SPAN, id="blocking-span-form"),
])
def test_a_malformed_field_is_a_400_naming_it_before_any_work(tiny, extra, field):
    shared, model = tiny
    ex, taken = {**EX, **extra}, shared.lock.taken
    with pytest.raises(errors.RequestError) as e:
        model.predict([ex])
    assert e.value.status == 400 and f'"{field}"' in str(e.value)
    assert shared.lock.taken == taken  # the model was never taken
    group = inputs.datapoint_group(ex)
    assert shared.jobs.tracked(SPAN_LANE, ("", group)) is None  # no span job was registered
    assert shared.jobs.idle() and shared.jobs.get(group, "grad") is None  # no background job either
