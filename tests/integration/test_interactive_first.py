"""Interactive requests, then user jobs, before background slices, through the real LIT app on the default model
(issues 16 and 35).

The per-token gradient job runs on the shipped chain-of-thought example; a trace and a clicked span
requested while it runs each complete before the job's next slice. The order is read from an event
log of the model scheduler (who queued, who got the model, who let go), never from a clock. The job
then finishes with the matrices of a plain, unsliced compute_salience.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
from werkzeug.test import Client

import sequence_salience as ss
from lit_app.data import datasets
from lit_app.schema import fields, inputs
from lit_app.serving import model_group
from lit_app.model import progressive, shared_model
from lit_app import server
from lit_app.wrappers import explain as lit_explain, inside as lit_inside
from lit_app.model.scheduler import ModelScheduler, Priority

MODEL = "smollm2"
GEN, SAL, _ = fields.model_group_names(MODEL)
TRACE, _, _ = lit_inside.model_names(MODEL)


class LoggedScheduler(ModelScheduler):
    """The real scheduler, with an event log: (event, thread name, background?) for queue/grant/release
    (background?: below the interactive level, i.e. a user job or automatic background work)."""

    def __init__(self):
        super().__init__()
        self.events: list[tuple[str, str, bool]] = []
        self._events_lock = threading.Lock()
        self._local = threading.local()

    def _log(self, event: str, background: bool) -> None:
        with self._events_lock:
            self.events.append((event, threading.current_thread().name, background))

    def acquire(self, priority: Priority = Priority.INTERACTIVE, graph: bool = False) -> bool:
        depth = getattr(self._local, "n", 0)
        background = priority != Priority.INTERACTIVE
        if depth == 0:
            self._log("queue", background)
        super().acquire(priority, graph)
        self._local.n = depth + 1
        if depth == 0:
            self._local.background, self._local.priority = background, Priority(priority)
            self._log("grant", background)
        return True

    def yield_to_waiting(self, holding_graph: bool = False, while_waiting=None) -> bool:
        """Logs a yield as a release, queue and grant (letting go and queueing again are one step inside the
        scheduler; the release is logged first when the public waiting counts say the holder will yield)."""
        background = self._local.background
        will = self._local.n == 1 and any(self.waiting(p) for p in Priority if p <= self._local.priority)
        if will:  # waiters cannot leave while this thread holds the model: it will yield
            self._log("release", background)
        yielded = super().yield_to_waiting(holding_graph, while_waiting=while_waiting)
        if yielded:
            if not will:
                self._log("release", background)
            self._log("queue", background)
            self._log("grant", background)
        return yielded

    def release(self) -> None:
        self._local.n -= 1
        if self._local.n == 0:
            self._log("release", self._local.background)
        super().release()


def _wait_until(condition, what: str, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s  # a hang guard, not a timing assertion
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


@pytest.fixture(scope="module")
def app(default_lm, stub_client_root, tmp_path_factory):
    root = stub_client_root
    # Short slices: the job yields after every target, so the test sees many slice boundaries. The tests read their
    # job's state from the table rather than polling it as the page does, so no heartbeat stops it: with the 30 s
    # default the first test's job was cancelled before its end at load ~12 (its call: 69 s of wall).
    shared = shared_model.SharedLM(default_lm, max_new_tokens=24, disk_cache=str(tmp_path_factory.mktemp("gens")),
                                   slice_s=0.05, lock=LoggedScheduler(), heartbeat_s=3600.0)
    lit_models = model_group.lit_models(shared, MODEL)
    yield shared, Client(server.build_app(lit_models, datasets.get_datasets(), root))
    shared.jobs.cancel_all()


def _post(client, model, data):
    body = json.dumps({"inputs": [{"id": f"{model}-{time.monotonic_ns()}", "data": data}]})
    response = client.post(f"/get_preds?model={model}", data=body, content_type="application/json")
    assert response.status_code == 200, response.get_data(as_text=True)[:800]
    return json.loads(response.data)[0]


def _cot_prompt() -> str:
    for dataset in datasets.get_datasets().values():
        for row in dataset.examples:
            if "train leaves" in row.get("prompt", ""):
                return row["prompt"]
    raise AssertionError("the shipped chain-of-thought example is missing")


def test_trace_and_clicked_span_complete_before_the_jobs_next_slice(app, default_lm):
    shared, client = app
    lock: LoggedScheduler = shared.lock
    prompt = _cot_prompt()
    first = _post(client, SAL, {"prompt": prompt, "detail": "span"})  # the first highlight starts the job
    n_targets = len(first[fields.SALIENCE]["target_logprobs"])
    group = inputs.datapoint_group({"prompt": prompt})
    job = shared.jobs.get(group, "grad")
    assert job is not None
    _wait_until(lambda: job.state == progressive.RUNNING and job.done >= 1, "the job's first slices")

    answers: dict[str, dict] = {}

    def request(name, model, data):
        answers[name] = _post(client, model, data)

    threads = [threading.Thread(target=request, name="trace", args=("trace", TRACE, {"prompt": prompt, "inside_t": 3})),
               threading.Thread(target=request, name="span",
                                args=("span", SAL, {"prompt": prompt, "detail": "span", "target_span": "2:5"}))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done_after_requests = job.done
    _wait_until(lambda: job.state in (progressive.DONE, progressive.ERROR, progressive.CANCELLED), "the job")
    assert job.state == progressive.DONE, (job.error, job.check.reason)

    events = list(lock.events)
    job_thread = "salience-detail"
    for name in ("trace", "span"):
        mine = [i for i, (_, who, _) in enumerate(events) if who == name]
        queued, released = mine[0], mine[-1]
        assert events[queued] == ("queue", name, False) and events[released] == ("release", name, False)
        # The job had started when the request queued (it was mid-job) ...
        assert ("grant", job_thread, True) in events[:queued]
        # ... and did not get the model again until the request had finished: no slice in between.
        between = [e for e in events[queued:released] if e[0] == "grant" and e[1] == job_thread]
        assert between == [], f"{name} waited for a job slice: {between}"
    # The job went on afterwards (the requests did not wait for its end).
    last_request = max(i for i, (_, who, _) in enumerate(events) if who in ("trace", "span"))
    assert any(e[0] == "grant" and e[1] == job_thread for e in events[last_request:])
    assert done_after_requests < n_targets

    assert answers["trace"][lit_inside.TRACE]["t"] == 3
    assert set(answers["span"][fields.SPAN_SALIENCE]) == {"grad_norm", "grad_x_input"}

    # The sliced job's matrices equal a plain, unsliced computation.
    chat = shared.format_prompt({"prompt": prompt})
    gen = shared.cached_generation(chat)
    reference = ss.compute_salience(default_lm, chat, gen)
    result = shared.cached_salience(chat, "")
    assert result is not None and result.matrices["grad_norm"].shape == (n_targets, len(reference.ids))
    for method in ("grad_norm", "grad_x_input"):
        np.testing.assert_allclose(result.matrices[method], reference.matrices[method], rtol=1e-4, atol=1e-6)
    # The Gram matrix sums products over the hidden size in float32; batched backwards of other
    # shapes round differently (up to ~1e-5 of its largest entry), a misassembled chunk by O(1).
    gram_scale = float(np.abs(reference.extras["grad_gram"]).max())
    np.testing.assert_allclose(result.extras["grad_gram"], reference.extras["grad_gram"], rtol=1e-4, atol=2e-5 * gram_scale)
    # The clicked span equals its rows of the finished matrices.
    rows = result.matrices["grad_x_input"][2:5].sum(0)
    np.testing.assert_allclose(answers["span"][fields.SPAN_SALIENCE]["grad_x_input"], rows, rtol=2e-3, atol=2e-5)


def test_an_explanation_test_goes_before_the_running_matrix_jobs_slices(app):
    """Issue 35 point 5: a test the user started (a user job) is not served alternately with the per-token
    matrix job that the first highlight started automatically; the job waits, then goes on. Fails with the
    two-level scheduler, where the test queued as background work and the two alternated slice by slice."""
    shared, client = app
    lock: LoggedScheduler = shared.lock
    # A typed target: a datapoint of its own, so the first highlight starts a fresh job (the previous
    # test's job on the generated response is done).
    data = {"prompt": _cot_prompt(), "target": "The train arrives at 5:45 pm, so the trip takes three and a half"
            " hours. Adding the wait of twenty minutes at the station, the traveller reaches home by 6:05 pm."}
    first = _post(client, SAL, {**data, "detail": "span"})
    n_targets = len(first[fields.SALIENCE]["target_logprobs"])
    job = shared.jobs.get(inputs.datapoint_group(data), "grad")
    assert job is not None
    _wait_until(lambda: job.state == progressive.RUNNING and job.done >= 1, "the job's first slices")

    answer: dict = {}
    test = threading.Thread(name="explain", target=lambda: answer.update(_post(
        client, lit_explain.explain_model_name(GEN), {**data, "explain_action": "contrastive", "methods": "grad_norm",
                                          "foil": "The train arrives at noon."})))
    test.start()
    test.join()
    done_after_test = job.done
    try:
        events = list(lock.events)
        job_thread = "salience-detail"
        mine = [i for i, (what, who, background) in enumerate(events) if who == "explain" and background]
        queued, released = mine[0], mine[-1]
        assert events[queued] == ("queue", "explain", True) and events[released] == ("release", "explain", True)
        # The job was mid-run when the test queued ...
        assert ("grant", job_thread, True) in events[:queued]
        # ... and got no slice until the test had finished (the two-level scheduler alternated them).
        between = [e for e in events[queued:released] if e[0] == "grant" and e[1] == job_thread]
        assert between == [], f"the explanation test let the matrix job run {len(between)} slice(s) in between"
        assert done_after_test < n_targets  # the job was not finished: it waited
        out = answer[lit_explain.EXPLAIN]
        assert not out.get("cancelled") and set(out["methods"]) == {"grad_norm"}
        # The job goes on afterwards.
        _wait_until(lambda: any(e[0] == "grant" and e[1] == job_thread for e in lock.events[released:]),
                    "the job's next slice")
    finally:
        job.cancel("test over")
