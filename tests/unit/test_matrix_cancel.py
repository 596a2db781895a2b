"""`detail="matrix_cancel"` (issue 35 point 4): the page stops a per-token IG / SmoothGrad matrix job it no longer
shows, by the id the job's status named; a cancel naming another id stops nothing. Tiny random llama
(tests/unit/tiny_models.py); the model lock is held while the job is started and cancelled, so the job cannot
finish before the cancel arrives (no timing involved)."""

from __future__ import annotations

import pytest

from lit_app.schema import fields, inputs
from lit_app.edge import limits
from lit_app.serving import model_group
from lit_app.model.shared_model import SharedLM
from tests.unit.tiny_models import MODEL_BUILDERS, wrap
from tests.unit.waiting import wait_until

EX = {"prompt": "one two three four", "target": " five six seven", "chat": False}


@pytest.fixture()
def tiny():
    shared = SharedLM(wrap(MODEL_BUILDERS["llama"](seed=0), "llama"), max_new_tokens=4, disk_cache=False)
    return shared, model_group.lit_models(shared, "tiny")["_tiny_salience"]


def _detail(model, **extra) -> dict:
    return model.predict([{**EX, **extra}])[0][fields.SALIENCE]["detail"]


def test_a_matrix_job_is_cancelled_by_its_id_and_only_by_it(tiny):
    shared, sal = tiny
    with shared.lock:  # the job waits for the model: it cannot end before the cancels below
        started = _detail(sal, detail="ig_matrix", ig_steps=8)
        assert started["kind"] == "ig8" and started["job_id"].startswith("ig8-"), started
        # A poll names it too (what the page reads the id from when its first answer had none).
        assert _detail(sal, detail="poll", ig_steps=8)["job_id"] == started["job_id"]
        stale = _detail(sal, detail="matrix_cancel", matrix_job="ig8-0")  # an id that names no job of this prompt
        assert stale["state"] == "none" and "ig8-0" in stale["error"]
        other = _detail(sal, detail="matrix_cancel", matrix_job=started["job_id"],
                        prompt="another prompt")  # another datapoint's cancel: not its job
        assert other["state"] == "none"
        assert not shared.jobs.get(inputs.datapoint_group(EX), "ig8").cancelled
        mine = _detail(sal, detail="matrix_cancel", matrix_job=started["job_id"])
        assert mine["job_id"] == started["job_id"]
    wait_until(lambda: _detail(sal, detail="poll", ig_steps=8)["state"] in ("cancelled", "done", "error"), "the job ends")
    assert _detail(sal, detail="poll", ig_steps=8)["state"] == "cancelled"


def test_a_matrix_cancel_is_a_poll_and_its_field_is_a_string():
    body = {"inputs": [{"id": "a", "data": {**EX, "detail": "matrix_cancel", "matrix_job": "ig8-1"}}]}
    assert limits.is_poll("/get_preds", body)  # answered while the server is full: it frees the model
    with pytest.raises(limits.Rejected, match='"matrix_job" must be a string'):
        limits.validate_example({**EX, "detail": "matrix_cancel", "matrix_job": 3}, limits.Limits(), "inputs[0]")
