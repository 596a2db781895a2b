"""The server's per-request state is bounded by bytes, not only by count (issue 33: RSS grew under load).

Each table a stream of requests can fill: finished background jobs (lit_app/model/progressive.py), the
shared model's caches (lit_app/model/lru_cache.py), LIT's saved datapoints (lit_app/server.py).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from lit_app.serving import client_build, model_group
from lit_app.data import datasets
from lit_app.model import lru_cache, progressive
from lit_app import server
from lit_app.model.lru_cache import LRUCache
from lit_app.model.shared_model import SharedLM
from tests.unit.tiny_models import MODEL_BUILDERS, wrap
from tests.unit.waiting import wait_until

MB = 1024**2


def _finish(jobs: progressive.DetailJobs, group: str, megabytes: int) -> progressive.Job:
    job = jobs.submit(group, "grad", lambda _job: np.zeros(megabytes * MB // 8))  # float64: 8 bytes each
    wait_until(lambda: job.state == progressive.DONE, f"the job of {group}")
    return job


def test_finished_jobs_are_bounded_by_bytes_and_the_newest_is_always_kept():
    jobs = progressive.DetailJobs(finished_bytes=10 * MB)
    for i in range(5):
        _finish(jobs, f"g{i}", 4)  # 4 MB each: the bound keeps two (8 MB), the count bound (16) would keep all
    wait_until(lambda: jobs.get("g2", "grad") is None, "the trim after the last job finished")
    kept = [g for g in (f"g{i}" for i in range(5)) if jobs.get(g, "grad") is not None]
    assert kept == ["g3", "g4"]
    assert jobs.finished_job_bytes() <= 10 * MB
    big = progressive.DetailJobs(finished_bytes=1 * MB)
    _finish(big, "a", 4)
    _finish(big, "b", 4)
    wait_until(lambda: big.get("a", "grad") is None, "the trim after b finished")
    assert big.get("a", "grad") is None and big.get("b", "grad").result.nbytes == 4 * MB  # newest kept, over the bound


def test_the_count_bound_still_holds_for_small_jobs():
    jobs = progressive.DetailJobs()
    for i in range(progressive._KEEP_FINISHED + 3):  # pylint: disable=protected-access
        _finish(jobs, f"g{i}", 0)
    assert sum(jobs.get(f"g{i}", "grad") is not None for i in range(progressive._KEEP_FINISHED + 3)) <= (  # pylint: disable=protected-access
        progressive._KEEP_FINISHED + 1)  # pylint: disable=protected-access


def test_nbytes_counts_numpy_arrays_and_torch_tensors_inside_containers():
    value = {"a": np.zeros(1000, dtype=np.float32), "t": torch.zeros(500, dtype=torch.float64),
             "nested": [np.zeros(10, dtype=np.int8)]}
    # 4,000 + 4,000 + 10 bytes of data, plus 1 KiB per container (dict, list)
    assert lru_cache.nbytes(value) == 4000 + 4000 + 10 + 1024 + 1024 + 16
    assert lru_cache.nbytes(torch.zeros(3, 4)) == 48


def test_lru_cache_evicts_by_bytes_before_count():
    cache = LRUCache(size=100, max_bytes=3 * MB)
    for i in range(5):
        cache.put(i, torch.zeros(MB // 4))  # 1 MB each (float32); torch tensors were counted as 1 KiB
    assert len(cache) == 3 and cache.total_bytes <= 3 * MB and cache.get(0) is None and cache.get(4) is not None


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    bundle = tmp_path_factory.mktemp("dist") / client_build.BUNDLE_NAME
    bundle.write_text("// stub\n", encoding="utf-8")
    root = client_build.build_client_root(str(tmp_path_factory.mktemp("root")), bundle_path=str(bundle))
    shared = SharedLM(wrap(MODEL_BUILDERS["llama"](seed=0), "llama"))
    return server.build_app(model_group.lit_models(shared, "tiny"), datasets.get_datasets(), root)


def _post(app, prompt: str) -> str:
    answer = app._post_new_data({"inputs": [{"prompt": prompt}]}, dataset_name="case_studies")  # pylint: disable=protected-access
    return answer["load"].split("=", 1)[1]


def test_lits_saved_datapoints_are_bounded_by_count(app, monkeypatch):
    monkeypatch.setattr(server, "MAX_SAVED_DATAPOINTS", 3)
    ids = [_post(app, f"prompt {i}") for i in range(6)]
    saved = app._saved_datapoints  # pylint: disable=protected-access
    assert [i for i in ids if i in saved] == ids[-3:]
    assert app._fetch_new_data(None, saved_datapoints_id=ids[-1])[0]["data"]["prompt"] == "prompt 5"  # pylint: disable=protected-access


def test_lits_saved_datapoints_are_bounded_by_bytes_and_the_newest_is_kept(app, monkeypatch):
    monkeypatch.setattr(server, "MAX_SAVED_DATAPOINTS_BYTES", 250_000)
    ids = [_post(app, "x" * 100_000) for _ in range(4)]  # ~100 KB of JSON each: two fit
    saved = app._saved_datapoints  # pylint: disable=protected-access
    assert [i for i in ids if i in saved] == ids[-2:]
    assert sum(len(json.dumps(saved[i], default=str)) for i in ids[-2:]) <= 250_000
    monkeypatch.setattr(server, "MAX_SAVED_DATAPOINTS_BYTES", 1000)
    newest = _post(app, "y" * 100_000)  # alone over the bound: kept, everything older dropped
    assert list(saved) == [newest]
