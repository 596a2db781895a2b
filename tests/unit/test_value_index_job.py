"""The value index's build as one job of the model's job table (lit_app/model/value_index.py, issue 43 §1), on a
tiny random Llama: its status is the one job `Status`, a cancel stops it between layers, a client's newer
selection does not release it, and a search after a cancel builds it anew."""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np
import pytest

from sequence_salience import inside
from lit_app.model import jobs, time_left, value_index
from lit_app.model.jobs_table import JobTable
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
