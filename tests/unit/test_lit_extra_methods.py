"""The server's optional methods (IG, SmoothGrad): count fields, limits, job kinds and payloads.

Pure parsing needs no model; the salience wrapper runs on a tiny random Llama and is
compared with the core library called directly with the server's config.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from sequence_salience import field_rules
import sequence_salience as ss
from lit_app import errors
from lit_app.schema import fields, inputs
from lit_app.edge import limits
from lit_app.serving import model_group
from lit_app.model import shared_model
from lit_app.edge.limits import Limits, Rejected
from tests.unit.tiny_models import tiny_llama, wrap

SG = fields.SMOOTH_GRAD_SAMPLES
PROMPT, TARGET = "The capital of France is", " Paris. The capital"


@pytest.mark.parametrize("data,expected", [
    pytest.param({}, {fields.IG_STEPS: 0, SG: 0}, id="absent"),
    pytest.param({SG: ""}, {fields.IG_STEPS: 0, SG: 0}, id="empty"),
    pytest.param({SG: 8}, {fields.IG_STEPS: 0, SG: 8}, id="int"),
    pytest.param({SG: "8", fields.IG_STEPS: 4.0}, {fields.IG_STEPS: 4, SG: 8}, id="string-and-float"),
    pytest.param({SG: field_rules.SMOOTH_GRAD_SAMPLES.hi},
                 {fields.IG_STEPS: 0, SG: field_rules.SMOOTH_GRAD_SAMPLES.hi}, id="maximum"),
])
def test_extra_counts(data, expected):
    assert inputs.extra_counts(data) == expected


@pytest.mark.parametrize("field,value", [
    pytest.param(SG, -1, id="sg-negative"),
    pytest.param(SG, 1.5, id="sg-fraction"),
    pytest.param(SG, "many", id="sg-text"),
    pytest.param(SG, field_rules.SMOOTH_GRAD_SAMPLES.hi + 1, id="sg-too-many"),
    pytest.param(fields.IG_STEPS, -3, id="ig-negative"),
])
def test_bad_counts_are_one_line_errors_naming_the_field_and_the_fix(field, value):
    with pytest.raises(errors.RequestError) as e:
        inputs.extra_counts({field: value})
    message = str(e.value)
    assert f'"{field}"' in message and "whole number from 0 (off) to 256" in message and "\n" not in message


def test_detail_modes_and_which_job_a_request_follows():
    assert inputs.detail_field({fields.DETAIL: "smooth_grad_matrix"}) == "smooth_grad_matrix"
    with pytest.raises(errors.RequestError, match='"smooth_grad_matrix"'):
        inputs.detail_field({fields.DETAIL: "sg_matrix"})
    extra = inputs.job_extra({fields.IG_STEPS: 0, SG: 8}, "smooth_grad_matrix")
    assert (extra.method, extra.kind, extra.unit) == ("smooth_grad", "sg", "samples")
    assert inputs.job_extra({fields.IG_STEPS: 0, SG: 8}, "poll") is extra
    assert inputs.job_extra({fields.IG_STEPS: 4, SG: 0}, "poll").method == fields.IG_METHOD
    assert inputs.job_extra({fields.IG_STEPS: 0, SG: 0}, "poll") is None  # the gradient matrices
    with pytest.raises(errors.RequestError, match=f'needs "{SG}" > 0'):
        inputs.job_extra({fields.IG_STEPS: 4, SG: 0}, "smooth_grad_matrix")
    with pytest.raises(errors.RequestError, match="Fix: send only the count"):
        inputs.job_extra({fields.IG_STEPS: 4, SG: 8}, "poll")


def test_http_limit_on_samples():
    lim = Limits(max_smooth_grad_samples=4)
    limits.validate_example({"prompt": "p", SG: 4}, lim, "inputs[0]")
    limits.validate_example({"prompt": "p", SG: ""}, lim, "inputs[0]")
    for bad in (5, -1, "x", True):
        with pytest.raises(Rejected) as e:
            limits.validate_example({"prompt": "p", SG: bad}, lim, "inputs[0]")
        assert e.value.status == 400
        assert f'field "{SG}"' in e.value.message and "0 (off) to 4 (--max_smooth_grad_samples)" in e.value.message
    with pytest.raises(ValueError, match="max_smooth_grad_samples"):
        Limits(max_smooth_grad_samples=field_rules.SMOOTH_GRAD_SAMPLES.hi + 1)
    with pytest.raises(ValueError, match="max_smooth_grad_samples"):
        Limits(max_smooth_grad_samples=0)


# ---------------------------------------------------------------------------
# The salience wrapper on a tiny model.

CONFIG = ss.SalienceConfig(smooth_grad_noise=0.3, smooth_grad_seed=7, ig_step_chunk_size=2, target_chunk_size=2)


@pytest.fixture(scope="module")
def tiny():
    lm = wrap(tiny_llama(seed=0), "llama")
    shared = shared_model.SharedLM(lm, max_new_tokens=4, salience_config=CONFIG, disk_cache=False)
    return lm, shared, model_group.lit_models(shared, "tiny")["_tiny_salience"]


def _one(model, **data):
    return model.predict([{"prompt": PROMPT, "target": TARGET, "chat": False, **data}])[0]


def test_span_request_computes_smooth_grad_with_the_servers_noise_and_seed(tiny):
    lm, shared, model = tiny
    config = dataclasses.replace(CONFIG, smooth_grad_samples=3)
    want = ss.compute_span_salience(lm, lm.format_prompt(PROMPT, chat=False), TARGET, "smooth_grad", 1, 3, config)
    out = _one(model, detail="span", smooth_grad_samples=3, target_span="1:3")
    assert set(out[fields.SPAN_SALIENCE]) == {"grad_norm", "grad_x_input", "smooth_grad"}
    np.testing.assert_allclose(out[fields.SPAN_SALIENCE]["smooth_grad"], want, rtol=1e-5, atol=1e-9)
    # Another sample count is another computation (cache keys include the count).
    other = _one(model, detail="span", smooth_grad_samples=2, target_span="1:3")[fields.SPAN_SALIENCE]["smooth_grad"]
    assert not np.allclose(other, want)
    shared.jobs.cancel_all()


def test_first_highlight_payload_then_the_per_token_matrix_on_request(tiny):
    lm, shared, model = tiny
    first = _one(model, detail="span", smooth_grad_samples=3)[fields.SALIENCE]
    num_t = len(first["target_logprobs"])
    entry = first["methods"]["smooth_grad"]
    assert entry == {"signed": True, "matrix": None, "samples": 3}
    span = np.asarray(first["spans"][f"0:{num_t}"]["smooth_grad"])
    # Only the gradient job runs until the matrix is asked for.
    assert shared.jobs.get(inputs.datapoint_group({"prompt": PROMPT, "target": TARGET, "chat": False}),
                           "sg3") is None
    status = _one(model, detail="smooth_grad_matrix", smooth_grad_samples=3)[fields.SALIENCE]["detail"]
    assert status["kind"] == "sg3"
    deadline = time.monotonic() + 120
    while True:
        polled = _one(model, detail="poll", smooth_grad_samples=3)[fields.SALIENCE]
        if polled["detail"]["state"] == "done":
            break
        assert polled["detail"]["state"] in ("queued", "running") and time.monotonic() < deadline, polled
        time.sleep(0.05)
    sg = polled["methods"]["smooth_grad"]
    assert sg["signed"] is True and sg["samples"] == 3
    matrix = np.asarray(sg["matrix"])  # [T, N]
    assert matrix.shape == (num_t, len(polled["tokens"]))
    np.testing.assert_allclose(matrix.sum(0), span, rtol=1e-4, atol=1e-7)
    # The blocking request gives the same matrix (the payload's 6 significant digits).
    blocking = _one(model, smooth_grad_samples=3)[fields.SALIENCE]["methods"]["smooth_grad"]
    np.testing.assert_allclose(blocking["matrix"], matrix, rtol=1e-5, atol=1e-12)
    shared.jobs.cancel_all()
