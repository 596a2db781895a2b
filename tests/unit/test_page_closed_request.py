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


def test_a_page_closed_request_about_a_never_generated_prompt_releases_and_generates_nothing(tiny):
    """Whatever datapoint fields a page_closed carries (a prompt never generated, no target), it only releases the
    client's jobs: the salience model's answer is the release count, and no response of that prompt is generated
    (none in the response cache after it, none streaming). Checks the claim of session 32's closing note (a
    page_closed generated its datapoint's response first): not so for the salience model (the generation model,
    which has no `detail`, does generate; the page never sends page_closed there: controller.ts exitRequest)."""
    shared, sal = tiny
    never = {"prompt": "Hi", "chat": False}  # no target: a request that needs a response would generate it
    chat = shared.format_prompt(never)
    assert shared.cached_generation(chat) is None
    with shared.lock:  # the job waits for the model: it cannot end before the request below
        assert _detail(sal, {**EX, "detail": "ig_matrix", "ig_steps": 8}, "tab-1")["state"] == "queued"
        with clients.acting_as("tab-1"):
            out = sal.predict([{**never, **PAGE_CLOSED}])[0]
    assert (out[fields.SALIENCE]["detail"]["kind"], out[fields.SALIENCE]["detail"]["done"]) == ("page_closed", 1), out
    assert out[fields.RESPONSE] == "" and out[fields.TOKENS] == [], out
    assert shared.jobs.get(inputs.datapoint_group(EX), "ig8").cancel_reason == "its page was closed"
    assert shared.cached_generation(chat) is None  # nothing generated for the prompt it carried
    assert shared.generation_stream(chat).state == "none"  # nor queued or running
