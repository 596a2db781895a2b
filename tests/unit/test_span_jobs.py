"""Span requests are jobs of the table's span lane (lit_app/model/jobs_table.py, issue 43 §1): a client's newer span
of a datapoint supersedes its older one (the one it replaces in the lane), another client's or an anonymous
request's never does, and "span_progress" reads the newest. Tiny random llama (tests/unit/tiny_models.py); the
model lock is held while the requests arrive, so each waits for the model and none can end before the next
arrives (no timing involved)."""

from __future__ import annotations

import threading

import pytest

from lit_app.model import cancel
from lit_app.edge import clients
from lit_app import errors
from lit_app.schema import fields, inputs
from lit_app.serving import model_group
from lit_app.model.jobs_table import SPAN_LANE
from lit_app.model.shared_model import SharedLM
from tests.unit.tiny_models import MODEL_BUILDERS, wrap
from tests.unit.waiting import wait_until

EX = {"prompt": "one two three four", "target": " five six seven", "chat": False, fields.DETAIL: "span"}
GROUP = inputs.datapoint_group(EX)


@pytest.fixture()
def tiny():
    shared = SharedLM(wrap(MODEL_BUILDERS["llama"](seed=0), "llama"), max_new_tokens=4, disk_cache=False)
    yield shared, model_group.lit_models(shared, "tiny")["_tiny_salience"]
    shared.jobs.cancel_all()


def _send(model, client: str, answers: dict, name: str, **extra) -> threading.Thread:
    def run() -> None:
        with clients.acting_as(client):
            try:
                answers[name] = model.predict([{**EX, **extra}])[0]
            except errors.RequestError as e:
                answers[name] = e

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def _tracked(shared, client: str):
    return shared.jobs.tracked(SPAN_LANE, (client, GROUP))


@pytest.mark.parametrize("second_client, superseded", [
    pytest.param("tab-1", True, id="same-client"),
    pytest.param("tab-2", False, id="another-client"),
])
def test_a_clients_newer_span_supersedes_its_older_one_only(tiny, second_client, superseded):
    shared, model = tiny
    answers: dict = {}
    with shared.lock:  # the model is busy: both requests wait for it
        first = _send(model, "tab-1", answers, "first")
        wait_until(lambda: _tracked(shared, "tab-1") is not None, "the first span job")
        first_job = _tracked(shared, "tab-1")
        second = _send(model, second_client, answers, "second", target_span="0:2")
        wait_until(lambda: _tracked(shared, second_client) not in (None, first_job), "the second span job")
        if superseded:  # told to stop as its successor entered the lane
            wait_until(lambda: first_job.cancelled, "the first span job to be told to stop")
            assert first_job.cancel_reason == cancel.SUPERSEDED
        else:
            assert not first_job.cancelled
    first.join(120)
    second.join(120)
    if superseded:
        assert isinstance(answers["first"], errors.Cancelled) and cancel.SUPERSEDED in str(answers["first"])
        assert first_job.state == "cancelled"
    else:
        assert first_job.state == "done" and fields.SPAN_SALIENCE in answers["first"]
    assert fields.SPAN_SALIENCE in answers["second"] and answers["second"][fields.SPAN_SALIENCE]


def test_requests_without_a_client_id_supersede_nothing(tiny):
    shared, model = tiny
    answers: dict = {}
    with shared.lock:
        first = _send(model, clients.ANONYMOUS, answers, "first")
        wait_until(lambda: _tracked(shared, clients.ANONYMOUS) is not None, "the first span job")
        first_job = _tracked(shared, clients.ANONYMOUS)
        second = _send(model, clients.ANONYMOUS, answers, "second", target_span="0:2")
        wait_until(lambda: _tracked(shared, clients.ANONYMOUS) is not first_job, "the second span job")
        assert not first_job.cancelled
    first.join(120)
    second.join(120)
    assert first_job.state == "done"
    assert all(fields.SPAN_SALIENCE in answers[name] for name in ("first", "second"))
