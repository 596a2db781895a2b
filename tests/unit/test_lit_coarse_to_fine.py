"""Coarse-to-fine leave one out as a background segment job of the salience model (`detail="segments"`): the
payload marks which segments were measured (with their coarser unit's value) and the job's status names its
stage. The core library, called directly, is the reference. A tiny random Llama; no weights.
"""

from __future__ import annotations

import numpy as np
import pytest

from sequence_salience.ablation import segment_salience
from sequence_salience.methods import coarse_to_fine, leave_one_out
from lit_app import errors
from lit_app.schema import fields, inputs, method_registry
from lit_app.model import progressive
from tests.unit.tiny_lit import tiny_salience_lit
from tests.unit.waiting import wait_until

PROMPT = ("Alice has three apples. Bob has two apples. Carol has none.\n\n"
          "The capital of France is Paris. The capital of Italy is Rome.\nHow many apples are there?")
TARGET = " Five apples in all."


tiny = pytest.fixture(scope="module", name="tiny")(tiny_salience_lit)


def _until_done(model, **extra) -> dict:
    data = {"prompt": PROMPT, "target": TARGET, "chat": False, fields.DETAIL: method_registry.SEGMENT_DETAIL, **extra}
    answer = {}

    def done() -> bool:
        answer["out"] = model.predict([data])[0][fields.SALIENCE]
        return answer["out"]["detail"]["state"] == "done"

    wait_until(done, "the segment job")
    return answer["out"]


def test_the_payload_marks_unmeasured_segments_with_their_units_value_and_the_status_names_the_stage(tiny):
    lm, _, model = tiny
    out = _until_done(model, **{fields.SEGMENT_METHOD: coarse_to_fine.NAME, fields.GRANULARITY: "word"})
    seg = out[fields.SEGMENTS]
    want = segment_salience(lm, lm.format_prompt(PROMPT, chat=False), TARGET, coarse_to_fine.NAME, granularity="word")
    measured = want.measured_mask()
    assert measured.any() and not measured.all()  # this prompt and seed leave units unrefined
    np.testing.assert_allclose(seg["values"], want.values, rtol=1e-5, atol=1e-9)
    assert seg["measured"] == measured.tolist()
    for m, v, g, wv, wg in zip(seg["measured"], seg["coarse_values"], seg["coarse_granularity"], want.coarse_values,
                               want.coarse_granularity):
        assert (v is None and g == "") if m else (v == pytest.approx(wv, rel=1e-6) and g == wg != "")
    assert out["detail"]["done"] == out["detail"]["total"] == want.stats.rows - 1
    # Leave one out measures every segment: no marks, no stage.
    loo = _until_done(model, **{fields.SEGMENT_METHOD: leave_one_out.NAME, fields.GRANULARITY: "word"})
    assert "measured" not in loo[fields.SEGMENTS] and "stage" not in loo["detail"]


def test_the_jobs_status_names_its_stage_and_counts_every_row_so_far(tiny):
    lm, shared, _ = tiny
    request = inputs.segment_request({fields.SEGMENT_METHOD: coarse_to_fine.NAME, fields.GRANULARITY: "word",
                                      fields.REMOVAL: "delete"})
    seen = []
    job = progressive.Job(group="g", kind=request.job_kind, run=lambda j: None)
    report = job.report
    job.report = lambda done, total, **kw: (seen.append((job.stage, done, total)), report(done, total, **kw))[-1]
    seg = shared.segment_salience(lm.format_prompt(PROMPT, chat=False), TARGET, request, job=job)
    assert seen[0][0] == coarse_to_fine.COARSE_STAGE and seen[-1][0] == coarse_to_fine.REFINE_STAGE
    assert seen[-1][1:] == (len(seg.logprobs), len(seg.logprobs))
    assert job.status()["stage"] == coarse_to_fine.REFINE_STAGE and job.status()["total"] == len(seg.logprobs)
    loo = progressive.Job(group="g", kind="other", run=lambda j: None)
    shared.segment_salience(lm.format_prompt(PROMPT, chat=False), TARGET,
                            inputs.segment_request({fields.SEGMENT_METHOD: leave_one_out.NAME}), job=loo)
    assert loo.done == loo.total > 0 and "stage" not in loo.status()


def test_a_granularity_it_cannot_refine_is_refused_with_the_fix(tiny):
    _, _, model = tiny
    with pytest.raises(errors.RequestError, match="use leave_one_out at 'paragraph'"):
        _until_done(model, **{fields.SEGMENT_METHOD: coarse_to_fine.NAME, fields.GRANULARITY: "paragraph"})
