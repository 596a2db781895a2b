"""Progressive salience through the real LIT app on the default model (issue 10).

First highlight from one forward + backward, matrices from a background job that
yields to clicked spans, stops when another prompt is selected or nobody polls,
and generations that survive a restart without a generation storm.
"""

import json
import threading
import time

import numpy as np
import pytest
from werkzeug.test import Client

import sequence_salience as ss
from lit_app.edge import clients
from lit_app.data import datasets
from lit_app.schema import fields, inputs
from lit_app.serving import model_group
from lit_app.model import progressive, shared_model
from lit_app import server
from tests.unit.waiting import wait_until

MODEL = "smollm2"
GEN, SAL, _ = fields.model_group_names(MODEL)
QUESTION = "What is the capital of France?"
STEPS = 2  # integrated gradients' steps in the IG test
SAMPLES = 2  # SmoothGrad's samples in the SmoothGrad test
LONGER = ("Read the notes and answer. Notes: the museum opens at nine. Tickets cost twelve euros. "
          "The cafe closes at five. Parking is free on Sundays. Question: when does the museum open?")


def _app(shared, client_root: str):
    return server.build_app(model_group.lit_models(shared, MODEL), datasets.get_datasets(), client_root)


@pytest.fixture(scope="module")
def shared(default_lm, tmp_path_factory):
    # Two targets per chunk: the jobs report progress, yield and can stop several times.
    return shared_model.SharedLM(default_lm, max_new_tokens=10, disk_cache=str(tmp_path_factory.mktemp("gens")),
                           salience_config=ss.SalienceConfig(target_chunk_size=2, ig_step_chunk_size=2))


@pytest.fixture(scope="module")
def client(shared, stub_client_root):
    return Client(_app(shared, stub_client_root))


_counter = iter(range(10**9))


def _request(client, model, data, **params):
    inputs = [{"id": f"r{next(_counter)}", "data": data}]
    query = "&".join(f"{k}={v}" for k, v in {"model": model, **params}.items())
    # One page: its newer selections supersede its older work (lit_app/edge/clients.py).
    return client.post(f"/get_preds?{query}", data=json.dumps({"inputs": inputs}),
                       content_type="application/json", headers={clients.CLIENT_HEADER: "page"})


def _salience(client, prompt, **extra):
    response = _request(client, SAL, {"prompt": prompt, **extra})
    assert response.status_code == 200, response.get_data(as_text=True)[:400]
    return json.loads(response.data)[0]


def _poll_until_done(client, prompt, timeout_s=600, **extra):
    deadline = time.monotonic() + timeout_s
    seen = []
    while time.monotonic() < deadline:
        out = _salience(client, prompt, detail="poll", **extra)
        detail = out[fields.SALIENCE]["detail"]
        seen.append(detail)
        if detail["state"] == "done":
            return out, seen
        assert detail["state"] in ("queued", "running"), detail
        time.sleep(0.2)
    raise AssertionError(f"not done after {timeout_s} s: {seen[-1]}")


def test_first_highlight_is_exact_and_the_matrices_follow(client, default_lm):
    quick = _salience(client, QUESTION, detail="span")
    payload = quick[fields.SALIENCE]
    num_t = len(payload["target_logprobs"])
    assert payload["methods"]["grad_norm"]["matrix"] is None  # not waiting for the matrices
    assert payload["detail"]["kind"] == "grad" and payload["detail"]["state"] in ("queued", "running", "done")
    assert payload["dtype"] == "float32"
    span = payload["spans"][f"0:{num_t}"]
    assert set(span) == {"grad_norm", "grad_x_input"}

    full, seen = _poll_until_done(client, QUESTION)
    fp = full[fields.SALIENCE]
    assert fp["detail"]["state"] == "done" and fp["detail"]["done"] == fp["detail"]["total"] == num_t
    assert fp["text"] == payload["text"] and fp["tokens"] == payload["tokens"]
    # The first highlight equals the whole-response span of the full matrices:
    # grad_x_input is the sum of the rows; grad_norm comes from the packed Gram tensor.
    gxi = np.asarray(fp["methods"]["grad_x_input"]["matrix"]).sum(0)
    np.testing.assert_allclose(span["grad_x_input"], gxi, rtol=2e-3, atol=2e-5)
    t = num_t
    packed = np.asarray(fp["methods"]["grad_norm"]["gram_packed"])  # [N, T(T+1)/2]
    rows, cols = np.triu_indices(t)
    weights = np.where(rows == cols, 1.0, 2.0)
    np.testing.assert_allclose(span["grad_norm"], np.sqrt(np.clip(packed @ weights, 0, None)), rtol=2e-3, atol=2e-5)
    # Progress was reported while it ran (or it was already done).
    assert all(d["done"] <= d["total"] for d in seen)


def test_a_span_request_during_the_job_is_served_before_the_job_ends(client, shared):
    _salience(client, LONGER, detail="span")
    job = shared.jobs.get(SalienceGroup(LONGER), "grad")
    assert job is not None
    t = time.perf_counter()
    out = _salience(client, LONGER, detail="span", target_span="1:3")
    took = time.perf_counter() - t
    state_after = job.state
    print(f"span 1:3 while the matrices were computing: {took:.2f} s; job state {state_after} "
          f"({job.done}/{job.total})")
    assert set(out[fields.SPAN_SALIENCE]) == {"grad_norm", "grad_x_input"}
    # The clicked span got the model between two chunks, not after the whole job.
    assert state_after in ("running", "queued"), "the job finished before the span request was served"
    full, _ = _poll_until_done(client, LONGER)
    rows = np.asarray(full[fields.SALIENCE]["methods"]["grad_x_input"]["matrix"])[1:3].sum(0)
    np.testing.assert_allclose(out[fields.SPAN_SALIENCE]["grad_x_input"], rows, rtol=2e-3, atol=2e-5)


def SalienceGroup(prompt: str) -> tuple:
    return inputs.datapoint_group({"prompt": prompt})


def test_selecting_another_prompt_stops_the_old_job(client, shared):
    first = LONGER + " Also: what does a ticket cost?"
    _salience(client, first, detail="span")
    old = shared.jobs.get(SalienceGroup(first), "grad")
    deadline = time.monotonic() + 300
    while old.done == 0 and time.monotonic() < deadline:  # let it finish its first chunk
        time.sleep(0.05)
    assert old.state == "running" and 0 < old.done < old.total, old.status()
    t = time.perf_counter()
    _salience(client, "Name a color.", detail="span")
    _poll_until_done(client, "Name a color.")
    with_old = time.perf_counter() - t
    # The old job stopped within one chunk: it is cancelled, not finished.
    deadline = time.monotonic() + 120
    while old.state not in ("cancelled", "done", "error") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert old.state == "cancelled", old.status()
    assert old.done < old.total and old.result is None
    print(f"new selection after a long request: {with_old:.2f} s")


def test_a_job_nobody_polls_is_cancelled(default_lm):
    shared = shared_model.SharedLM(default_lm, max_new_tokens=8, disk_cache=False, heartbeat_s=0.0)
    chat = shared.lm.format_prompt(LONGER)
    job = shared.jobs.submit(("unpolled",), "grad", lambda j: shared.salience(chat, "", job=j))
    deadline = time.monotonic() + 120
    while job.state not in ("cancelled", "done", "error") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.state == "cancelled"
    assert shared.cached_salience(chat, "") is None  # nothing half-done was cached


def test_integrated_gradients_by_span_reports_its_completeness(client):
    # Two steps (was 4): the full matrix costs one backward per target per step, and what is checked (the span's
    # completeness error, the matrix only on request, its rows summing to the span) holds for any count.
    out = _salience(client, QUESTION, detail="span", ig_steps=STEPS, target_span="0:2")
    payload = out[fields.SALIENCE]
    assert "methods" not in payload  # a clicked span carries only its values, not the whole payload again
    assert set(out[fields.SPAN_SALIENCE]) == {"grad_norm", "grad_x_input", "integrated_gradients"}
    err = payload["span_ig_errors"]["0:2"]
    assert np.isfinite(err)
    # The full IG matrix is computed only when asked for.
    status = _salience(client, QUESTION, detail="ig_matrix", ig_steps=STEPS)[fields.SALIENCE]["detail"]
    assert status["kind"] == f"ig{STEPS}"
    full, _ = _poll_until_done(client, QUESTION, ig_steps=STEPS)
    ig = full[fields.SALIENCE]["methods"]["integrated_gradients"]
    rows = np.asarray(ig["matrix"])[0:2].sum(0)
    np.testing.assert_allclose(out[fields.SPAN_SALIENCE]["integrated_gradients"], rows, rtol=5e-3, atol=5e-5)


def test_smooth_grad_by_span_equals_the_library_and_its_matrix_comes_on_request(client, default_lm):
    prompt = "Name a planet."
    # Two samples (was 4): each costs one backward per target, in the matrix and in both library references;
    # what is checked (the library's values, the matrix on request, its rows summing to the spans) holds for any count.
    # The reference: the core library on its own greedy generation, default chunking
    # (the server's config chunks by 2; SmoothGrad's values do not depend on chunking).
    chat = default_lm.format_prompt(prompt)
    gen = default_lm.generate(chat, ss.GenerationConfig(max_new_tokens=10))
    config = ss.SalienceConfig(smooth_grad_samples=SAMPLES)

    first = _salience(client, prompt, detail="span", smooth_grad_samples=SAMPLES)[fields.SALIENCE]
    num_t = len(first["target_logprobs"])
    assert first["text"].endswith(gen.text) and num_t == len(gen.ids)
    assert first["methods"]["smooth_grad"] == {"signed": True, "matrix": None, "samples": SAMPLES}
    whole = np.asarray(first["spans"][f"0:{num_t}"]["smooth_grad"])
    np.testing.assert_allclose(whole, ss.compute_span_salience(default_lm, chat, gen, "smooth_grad", config=config),
                               rtol=2e-3, atol=2e-5)
    clicked = _salience(client, prompt, detail="span", smooth_grad_samples=SAMPLES, target_span="1:3")
    assert set(clicked[fields.SPAN_SALIENCE]) == {"grad_norm", "grad_x_input", "smooth_grad"}
    span = np.asarray(clicked[fields.SPAN_SALIENCE]["smooth_grad"])
    np.testing.assert_allclose(span, ss.compute_span_salience(default_lm, chat, gen, "smooth_grad", 1, 3, config),
                               rtol=2e-3, atol=2e-5)

    # The per-token matrix only when asked for; its rows sum to the spans.
    status = _salience(client, prompt, detail="smooth_grad_matrix",
                       smooth_grad_samples=SAMPLES)[fields.SALIENCE]["detail"]
    assert status["kind"] == f"sg{SAMPLES}"
    full, seen = _poll_until_done(client, prompt, smooth_grad_samples=SAMPLES)
    assert all(d["kind"] == f"sg{SAMPLES}" for d in seen)
    sg = full[fields.SALIENCE]["methods"]["smooth_grad"]
    assert sg["signed"] is True and sg["samples"] == SAMPLES
    matrix = np.asarray(sg["matrix"])  # [T, N]
    assert matrix.shape == (num_t, len(full[fields.SALIENCE]["tokens"]))
    np.testing.assert_allclose(matrix.sum(0), whole, rtol=2e-3, atol=2e-5)
    np.testing.assert_allclose(matrix[1:3].sum(0), span, rtol=2e-3, atol=2e-5)


def test_no_generation_storm_and_generations_survive_a_restart(default_lm, tmp_path, stub_client_root):
    store = tmp_path / "gens"
    shared = shared_model.SharedLM(default_lm, max_new_tokens=6, disk_cache=str(store))
    client = Client(_app(shared, stub_client_root))
    rows = [{"prompt": f"Say the number {k}."} for k in range(5)]
    calls = []
    original = default_lm.generate
    default_lm.generate = lambda *a, **kw: calls.append(1) or original(*a, **kw)
    try:
        inputs = [{"id": f"row{k}", "data": r} for k, r in enumerate(rows)]
        response = client.post(f"/get_preds?model={GEN}", data=json.dumps({"inputs": inputs}),
                               content_type="application/json")
        assert response.status_code == 200
        assert [p[fields.RESPONSE] for p in json.loads(response.data)] == [""] * 5
        assert calls == []  # opening the table generated nothing
        one = _request(client, GEN, rows[2])
        text = json.loads(one.data)[0][fields.RESPONSE]
        assert text and len(calls) == 1
        # A restarted server (a new SharedLM on the same store) has it at once, without the model.
        restarted = shared_model.SharedLM(default_lm, max_new_tokens=6, disk_cache=str(store))
        client2 = Client(_app(restarted, stub_client_root))
        response = client2.post(f"/get_preds?model={GEN}", data=json.dumps({"inputs": inputs}),
                                content_type="application/json")
        listed = [p[fields.RESPONSE] for p in json.loads(response.data)]
        assert listed == ["", "", text, "", ""]
        assert len(calls) == 1
    finally:
        default_lm.generate = original


def test_a_newer_clicked_span_cancels_an_older_ig_span(client, shared):
    """Latest wins: the IG span the user clicked away from stops within one chunk of steps."""
    prompt = "Name three rivers."
    _salience(client, prompt, detail="span")
    answers = {}

    def old_click():
        answers["old"] = _request(client, SAL, {"prompt": prompt, "detail": "span", "ig_steps": 32,
                                                "target_span": "0:2"})

    thread = threading.Thread(target=old_click)
    thread.start()
    # The old request is the datapoint's span (running, or waiting for the model; the first highlight's is done).
    # Was a fixed 1 s, which a busy machine can outlast: the newer click then ran first and the old one ended 200.
    wait_until(lambda: _salience(client, prompt, detail="span_progress")[fields.SALIENCE]["detail"]["state"]
               == "running" or not thread.is_alive(), "the old click's span to start", guard_s=300, poll_s=0.05)
    # The newer click replaces the old one whatever its count (another span, method or count of this datapoint,
    # lit_app/wrappers/salience.py): 8 steps, one chunk, where 32 ran 24 more steps that nothing here reads.
    new = _salience(client, prompt, detail="span", ig_steps=8, target_span="1:2")
    thread.join(300)
    assert "integrated_gradients" in new[fields.SPAN_SALIENCE]
    old = answers["old"]
    assert old.status_code == 500
    assert "Cancelled: a newer selection replaced this request." in old.get_data(as_text=True).split("\n")[0]


def test_the_background_queue_is_bounded():
    jobs = progressive.DetailJobs()
    gate = threading.Event()
    submitted = [jobs.submit(("g", k), "grad", lambda job: gate.wait(30)) for k in range(progressive.MAX_LIVE_JOBS + 3)]
    live = [j for j in submitted if not j._cancel.is_set()]
    assert len(live) == progressive.MAX_LIVE_JOBS
    assert live == submitted[-progressive.MAX_LIVE_JOBS:]  # the newest survive
    gate.set()


def test_generation_store_keeps_at_most_max_files(default_lm, tmp_path):
    from lit_app.model import generation_cache

    store = generation_cache.GenerationStore(default_lm, tmp_path, max_files=3)
    gen = ss.Generation(text=" x", ids=(1,), offsets=((0, 2),), stopped_by="eos")
    for k in range(5):
        store.put(f"prompt {k}", True, "settings", gen)
        time.sleep(0.01)
    store.prune()
    assert len(list(tmp_path.glob("*.json"))) == 3
    assert store.get("prompt 4", True, "settings") == gen and store.get("prompt 0", True, "settings") is None


def test_bad_detail_mode_is_a_clear_error(client):
    response = _request(client, SAL, {"prompt": QUESTION, "detail": "everything"})
    assert response.status_code == 500
    assert 'Input field "detail"' in response.get_data(as_text=True).split("\n")[0]
