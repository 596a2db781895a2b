"""`detail="page_closed"`: a page going away (frontend/src/salience/page_exit.ts) stops its client's background jobs at
once, not after the heartbeat; another client's jobs run on. Tiny random llama (tests/unit/tiny_models.py); the model
lock is held while the jobs are started and the request is sent, so no job can end before it (no timing involved)."""

from __future__ import annotations

import pytest

from lit_app.edge import clients, limits
from lit_app.schema import fields, inputs
from lit_app.serving import model_group
from lit_app.model.shared_model import SharedLM
from tests.unit.tiny_models import MODEL_BUILDERS, wrap
from tests.unit.waiting import wait_until

EX = {"prompt": "one two three four", "target": " five six seven", "chat": False}
# What the page sends (frontend/src/salience/request.ts `pageClosedInput`): no datapoint, no text.
PAGE_CLOSED = {"detail": "page_closed", "_id": "page-closed"}


@pytest.fixture()
def tiny():
    shared = SharedLM(wrap(MODEL_BUILDERS["llama"](seed=0), "llama"), max_new_tokens=4, disk_cache=False)
    return shared, model_group.lit_models(shared, "tiny")["_tiny_salience"]


def _detail(model, ex: dict, client: str) -> dict:
    with clients.acting_as(client):
        return model.predict([ex])[0][fields.SALIENCE]["detail"]


def test_a_closed_pages_jobs_stop_and_another_pages_run_on(tiny):
    shared, sal = tiny
    other_row = {**EX, "prompt": "eight nine ten"}
    with shared.lock:  # the jobs wait for the model: none can end before the request below
        mine = _detail(sal, {**EX, "detail": "ig_matrix", "ig_steps": 8}, "tab-1")
        theirs = _detail(sal, {**other_row, "detail": "ig_matrix", "ig_steps": 8}, "tab-2")
        assert mine["state"] == theirs["state"] == "queued", (mine, theirs)
        answer = _detail(sal, PAGE_CLOSED, "tab-1")
        assert (answer["kind"], answer["state"], answer["done"]) == ("page_closed", "done", 1), answer
        assert _detail(sal, PAGE_CLOSED, "")["done"] == 0  # a request without a client id owns nothing to stop
    group = inputs.datapoint_group
    assert shared.jobs.get(group(EX), "ig8").cancel_reason == "its page was closed"
    assert not shared.jobs.get(group(other_row), "ig8").cancelled
    wait_until(lambda: _detail(sal, {**EX, "detail": "poll", "ig_steps": 8}, "tab-3")["state"]
               in ("cancelled", "done", "error"), "the closed page's job ends")
    assert _detail(sal, {**EX, "detail": "poll", "ig_steps": 8}, "tab-3")["state"] == "cancelled"
    shared.jobs.get(group(other_row), "ig8").cancel("the test is over")


def test_a_page_closed_request_is_a_poll_and_passes_the_edge_without_text():
    body = {"inputs": [{"id": "page-closed", "data": PAGE_CLOSED, "meta": {"added": True}}]}
    assert limits.is_poll("/get_preds", body)  # answered while the server is full: it frees the model
    limits.validate_request("/get_preds", {"model": "_tiny_salience", "requested_fields": "salience"}, body,
                            limits.Limits())
