"""Progress of a span computed on request (`detail="span_progress"`), through the LIT app on the default model.

While integrated gradients runs for a clicked span (a "span" request), a poll of the same datapoint
answers how many steps are done, of how many, and the time left, without waiting for the model;
the page shows that as "… 50 % · about 3 s left" (frontend/src/salience/span_requests.ts). The poll
is made from inside the computation, between two chunks of steps (the core library's progress
callback), so what it must see is known exactly: the steps the core reported so far.
"""

import json

import pytest
from werkzeug.test import Client

from lit_app.data import datasets
from lit_app.schema import fields
from lit_app.edge import limits
from lit_app.serving import model_group
from lit_app import server
from lit_app.model import shared_model
from sequence_salience.methods.sampling import points_per_forward
from sequence_salience.salience import prepare_pair

MODEL = "smollm2"
GEN, SAL, _ = fields.model_group_names(MODEL)
DATA = {"prompt": "What is the capital of France?", "target": " Paris is the capital."}
STEPS = 24  # several chunks of steps (methods/sampling.py points_per_forward: 8 per forward on this pair)


class PollingSharedLM(shared_model.SharedLM):
    """Polls the app (set `poll`) every time the core reports progress, and records both."""

    poll = None

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.seen: list[tuple[int, int, dict]] = []

    def quick(self, *a, progress=None, **kw):
        def wrapped(method: str, done: int, total: int) -> None:
            if progress is not None:
                progress(method, done, total)
            if self.poll is not None and method == "integrated_gradients" and done:  # (not its announcement, 0)
                self.seen.append((done, total, self.poll()))
        return super().quick(*a, progress=wrapped, **kw)


@pytest.fixture()
def shared(default_lm):
    return PollingSharedLM(default_lm, max_new_tokens=8)


@pytest.fixture()
def client(shared, stub_client_root):
    return Client(server.build_app(model_group.lit_models(shared, MODEL), datasets.get_datasets(), stub_client_root))


def _post(client, data, id_):
    body = json.dumps({"inputs": [{"id": id_, "data": data}]})
    response = client.post(f"/get_preds?model={SAL}", data=body, content_type="application/json")
    assert response.status_code == 200, response.get_data(as_text=True)[:400]
    return json.loads(response.data)[0]


def test_a_poll_during_an_ig_span_sees_the_steps_done_and_after_it_done(client, shared):
    n = iter(range(10**6))

    def progress() -> dict:
        return _post(client, {**DATA, "detail": "span_progress"}, f"p{next(n)}")[fields.SALIENCE]["detail"]

    assert progress()["state"] == "none"  # nothing computed yet for this datapoint
    shared.poll = progress
    out = _post(client, {**DATA, "detail": "span", "target_span": "0:2", "ig_steps": STEPS}, "span")
    shared.poll = None
    assert len(out[fields.SPAN_SALIENCE]["integrated_gradients"]) > 0
    reports = [(done, total) for done, total, _ in shared.seen]
    assert reports and reports[-1] == (STEPS, STEPS) and all(t == STEPS for _, t in reports), reports
    for done, total, status in shared.seen:
        # The poll answered from inside the computation: the steps the core had reported.
        assert status["kind"] == "span" and status["state"] == "running", status
        assert (status["done"], status["total"]) == (done, total), (done, total, status)
        if done < total:  # the measured time per step x steps left (None only once that estimate ran out)
            assert status["eta_s"] is None or status["eta_s"] > 0
    final = progress()
    assert final["state"] == "done" and (final["done"], final["total"]) == (STEPS, STEPS), final


def test_a_cancel_stops_the_span_job_it_names_and_no_other(client, shared):
    n = iter(range(10**6))
    answers = []

    def cancel_at_first_report() -> dict:
        status = _post(client, {**DATA, "detail": "span_progress"}, f"p{next(n)}")[fields.SALIENCE]["detail"]
        if not answers:
            # A late cancel naming an older job (one a newer span request superseded) stops nothing.
            stale = _post(client, {**DATA, "detail": "span_cancel", "span_job": "span-0"}, f"c{next(n)}")
            answers.append(stale[fields.SALIENCE]["detail"])
            mine = _post(client, {**DATA, "detail": "span_cancel", "span_job": status["job_id"]}, f"c{next(n)}")
            answers.append(mine[fields.SALIENCE]["detail"])
        return status

    shared.poll = cancel_at_first_report
    body = json.dumps({"inputs": [{"id": "span", "data": {**DATA, "detail": "span", "target_span": "0:2",
                                                          "ig_steps": STEPS}}]})
    response = client.post(f"/get_preds?model={SAL}", data=body, content_type="application/json")
    shared.poll = None
    stale, mine = answers
    assert stale["state"] == "none" and "span-0" in stale["error"], stale
    assert mine["state"] == "running" and mine["job_id"].startswith("span-"), mine
    text = response.get_data(as_text=True)
    assert response.status_code != 200 and "Cancelled: a cancel request" in text, text[:300]
    # It stopped within one chunk of steps after the cancel (the first report was the first chunk).
    pair = prepare_pair(shared.lm, shared.lm.format_prompt(DATA["prompt"]), DATA["target"])
    chunk = points_per_forward(shared.salience_config, 1, len(pair.prompt.ids) + len(pair.target_ids), span=True)
    assert 0 < chunk < STEPS and [done for done, _, _ in shared.seen] == [chunk], (chunk, shared.seen)


def test_span_progress_is_a_poll_and_a_known_detail_mode():
    body = {"inputs": [{"id": "a", "data": {**DATA, "detail": "span_progress"}}]}
    assert limits.is_poll("/get_preds", body)  # not counted against max_pending: visible while the server is full
    from lit_app.schema import inputs
    assert "span_progress" in inputs.DETAIL_MODES
    cancel = {"inputs": [{"id": "a", "data": {**DATA, "detail": "span_cancel", "span_job": "span-1"}}]}
    assert limits.is_poll("/get_preds", cancel) and "span_cancel" in inputs.DETAIL_MODES
