"""The value index's build as one job of the model's job table (lit_app/model/value_index.py, issue 43 §1), on a
tiny random Llama: its status is the one job `Status`, a cancel stops it between layers, a client's newer
selection does not release it, and a search after a cancel builds it anew."""

from __future__ import annotations

import contextlib
import json
import threading
import time

import numpy as np
import pytest

from werkzeug.test import Client

from sequence_salience import inside
from lit_app import server
from lit_app.data import datasets
from lit_app.model import jobs, shared_model, time_left, value_index
from lit_app.schema import fields
from lit_app.serving import model_group
from lit_app.wrappers import inside as lit_inside
from lit_app.model.jobs_table import JobTable
from tests.server_process import client_header
from tests.unit.tiny_models import tiny_llama, wrap

TOP_K = 5


@pytest.fixture()
def lm(monkeypatch, tmp_path):
    monkeypatch.setenv("SEQUENCE_SALIENCE_CACHE", str(tmp_path))  # a cold build, not the user's cache
    return wrap(tiny_llama(seed=0), "llama")


class Gate:
    """A `hold` that lets layer 0 through and stops layer 1 until `open()`: the build is mid-way meanwhile."""

    def __init__(self):
        self.layers = 0
        self.at_second = threading.Event()
        self._open = threading.Event()

    @contextlib.contextmanager
    def __call__(self):
        self.layers += 1
        if self.layers == 1:
            # The tiny model's layer can take under time_left.FREE_S, which the estimate counts as found in a memo
            # (no sample of the rate): the first layer takes measurable time, as a real model's does.
            time.sleep(2 * time_left.FREE_S)
        if self.layers == 2:
            self.at_second.set()
            assert self._open.wait(60), "the test never opened the gate"
        yield

    def open(self):
        self._open.set()


def test_the_build_is_one_job_whose_status_is_a_status_and_a_cancel_stops_it(lm, tmp_path):
    table, gate = JobTable(), Gate()
    index = value_index.ValueIndexJob(lm, gate, table, TOP_K)
    before = index.status()
    assert isinstance(before, jobs.Status) and before.state == jobs.NONE and index.snapshot() is None
    job = index.start()
    assert table.get(index.group, value_index.KIND) is job and not job.about_datapoint
    assert gate.at_second.wait(60)
    mid = index.status()
    assert isinstance(mid, jobs.Status) and mid.eta is not None  # one layer measured: a time-left range
    assert (mid.kind, mid.state, mid.stage, mid.done, mid.total) == ("value_index", jobs.RUNNING, "building", 1, 2)
    assert mid.to_json()["done"] == 1 and index.snapshot().layers_built == 1  # searchable meanwhile
    table.focus(("another", "datapoint"), client="")  # no client: nothing moves
    table.focus(("another", "datapoint"), client="someone")  # a selection is not about the model's index
    assert not job.cancelled
    assert index.start() is job  # a second search finds the running build
    assert index.cancel("the test cancels it")
    gate.open()
    assert index.wait(timeout_s=60)
    assert job.state == jobs.CANCELLED and job.cancel_reason == "the test cancels it"
    assert index.status().state == jobs.CANCELLED and not index.cancel("again")
    assert index.snapshot().layers_built == 1 and not list(tmp_path.glob("value_index/*"))  # nothing written
    # The next search builds it anew, to the end; the one after finds it done.
    again = index.start()
    assert again is not job and index.wait(timeout_s=120)
    done = index.status()
    assert (done.state, done.done, done.total) == (jobs.DONE, 2, 2) and index.start() is again
    reference = inside.get_value_index(lm, top_k=TOP_K)  # loaded from the file the job wrote
    np.testing.assert_array_equal(index.snapshot().top_ids, reference.top_ids)


def test_a_cached_index_is_loaded_not_built(lm):
    inside.get_value_index(lm, top_k=TOP_K)  # on disk now
    table, gate = JobTable(), Gate()
    index = value_index.ValueIndexJob(lm, gate, table, TOP_K)
    index.start()
    assert index.wait(timeout_s=60)
    status = index.status()
    assert (status.state, status.stage, status.done, status.total) == (jobs.DONE, "loading", 2, 2)
    assert gate.layers == 0 and index.snapshot().complete

# The LIT app's side: page A's search builds the index while page B clicks spans (a unit test on the tiny model: the
# job table's plumbing, not the model's).
INDEX_LAYERS = 12  # the tiny model whose value index builds while another page clicks
MODEL = "smollm2"
SEARCH = lit_inside.model_names(MODEL)[2]


def _preds(client, model, data, id_="ex", page=""):
    """The one output of a LIT request sent as page `page` (its client id; "" none)."""
    body = json.dumps({"inputs": [{"id": id_, "data": data}]})
    response = client.post(f"/get_preds?model={model}", data=body, headers=client_header(page))
    assert response.status_code == 200, response.get_data(as_text=True)[:800]
    return json.loads(response.data)[0]


def test_another_clients_click_is_answered_while_the_index_builds(stub_client_root, monkeypatch, tmp_path):
    """Page A's search starts the value index's build (one job of the model's job table, at the user-job level of
    A) and A's page polls it as the module does; page B's span clicks on the salience module are answered between
    its layers, and the build goes on: the same job, never cancelled, its progress never going back, to the end
    (issue 43 §1). The job table's plumbing, not the model's: a tiny random Llama of INDEX_LAYERS layers through the
    same LIT app as the server's (was an integration test on the default model, whose 30 layers' build cost ~30 s
    of CPU)."""
    monkeypatch.setenv("SEQUENCE_SALIENCE_CACHE", str(tmp_path))  # a cold build, not the user's cache
    layer = inside.value_index.build_layer

    def slow_layer(*args):  # each layer holds the model a while, as a real model's does (~1 s for the default's)
        time.sleep(0.5)
        return layer(*args)

    monkeypatch.setattr(inside.value_index, "build_layer", slow_layer)
    shared = shared_model.SharedLM(wrap(tiny_llama(seed=0, layers=INDEX_LAYERS), "llama"), max_new_tokens=4,
                                   disk_cache=False)
    lit_models = model_group.lit_models(shared, MODEL)
    app = server.build_app(lit_models, datasets.get_datasets(), stub_client_root)
    page_a, page_b = Client(app), Client(app)
    index = lit_models[SEARCH].state.index
    sal = fields.model_group_names(MODEL)[1]
    polls: list[dict] = []
    failures: list[str] = []

    def poll_a() -> None:  # A's module asks again while the index builds (every 1.5 s there; 0.3 s here)
        deadline = time.monotonic() + 600  # a failure bound, not a timing assertion
        try:
            while time.monotonic() < deadline:
                polls.append(_preds(page_a, SEARCH, {"query": "Paris", "limit": 5}, id_=f"a{len(polls)}",
                                    page="page-a")["inside_search"])
                if polls[-1]["index"]["state"] not in ("queued", "running"):
                    return
                time.sleep(0.3)
        except AssertionError as e:
            failures.append(str(e)[:300])

    poller = threading.Thread(target=poll_a, daemon=True)
    poller.start()
    try:
        deadline = time.monotonic() + 300
        while not (polls and polls[-1]["index"]["done"] >= 1) and poller.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        job = shared.jobs.get(index.group, value_index.KIND)  # the build's one job in the model's job table
        assert job is not None and job.owners == {"page-a"}, polls[-1:]
        b_data = {fields.PROMPT: "Page B asks: name a river of Europe.", fields.TARGET: " The Rhine.",
                  fields.CHAT: False, fields.DETAIL: "span"}
        answers = [_preds(page_b, sal, {**b_data, fields.TARGET_SPAN: span}, id_=f"b{span}", page="page-b")
                   for span in ("0:1", "1:2", "0:3")]
        during = index.status()
        assert all(out[fields.SPAN_SALIENCE] for out in answers)  # every click answered (a failure is a 4xx/5xx)
        assert during.state == "running" and during.done < during.total, \
            f"the build had ended before B's clicks were answered: nothing was shared ({during})"
        poller.join(600)
        assert not failures, failures
        last = polls[-1]
        assert shared.jobs.get(index.group, value_index.KIND) is job and job.state == "done" and not job.cancelled
        assert last["index"]["state"] == "done" and last["index"]["done"] == last["index"]["total"] == INDEX_LAYERS
        assert last["layers_searched"] == INDEX_LAYERS and last["hits"]
        dones = [p["index"]["done"] for p in polls]
        assert dones == sorted(dones), f"the build restarted: its progress went back ({dones})"
    finally:
        index.cancel("the test ended")
        index.wait(timeout_s=60)
