"""Streaming the greedy response (`detail="stream"`) through the LIT app on the default model.

While the selected datapoint's generation runs, a poll answers the text generated so far without
waiting for the model; the streamed text grows by appending and ends with exactly the final
generation's text, which is also what the salience request explains.
"""

import json
import threading

import pytest
from werkzeug.test import Client

from lit_app import datasets, fields, model_group, server, shared_model

MODEL = "smollm2"
GEN, SAL, _ = fields.model_group_names(MODEL)
PROMPT = ("A train leaves at 2:15 pm and the trip takes 1 hour and 50 minutes. At what time does it arrive?"
          " Think step by step, then give the answer.")


class RecordingSharedLM(shared_model.SharedLM):
    """Keeps every stream state the generation publishes (what any poll could have read)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.published: list[shared_model.GenerationStream] = []

    def _set_stream(self, key, stream):
        self.published.append(stream)
        super()._set_stream(key, stream)


@pytest.fixture()
def shared(default_lm, tmp_path):
    shared = RecordingSharedLM(default_lm, max_new_tokens=24, disk_cache=str(tmp_path / "gens"))
    yield shared
    shared.jobs.cancel_all()  # the first highlight's background job: stopped before the next test uses the model
    while not shared.jobs.idle():
        threading.Event().wait(0.05)


@pytest.fixture()
def client(shared, stub_client_root):
    return Client(server.build_app(model_group.make_models(shared, MODEL), datasets.get_datasets(), stub_client_root))


_ids = iter(range(10**9))


def _post(client, model, data):
    body = json.dumps({"inputs": [{"id": f"s{next(_ids)}", "data": data}]})
    response = client.post(f"/get_preds?model={model}", data=body, content_type="application/json")
    return response.status_code, response.get_data(as_text=True)


def _stream(client, **data):
    status, text = _post(client, SAL, {"prompt": PROMPT, "detail": "stream", **data})
    assert status == 200, text[:400]
    return json.loads(text)[0]


def test_streamed_text_grows_and_ends_with_the_explained_generation(shared, client):
    assert _stream(client)[fields.SALIENCE]["stream"]["state"] == "none"  # nobody asked yet
    seen = []
    answer = {}

    def first_highlight():
        answer["status"], answer["text"] = _post(client, SAL, {"prompt": PROMPT, "detail": "span"})

    worker = threading.Thread(target=first_highlight)
    worker.start()
    while worker.is_alive():  # polls while the generation and the span run; none waits for the model
        seen.append(_stream(client))
        # Poll like the module (every 250 ms; here 50 ms): a loop without a pause keeps the GIL busy
        # formatting prompts, and the generation thread, which needs it between torch ops, crawls.
        worker.join(0.05)
    worker.join()
    assert answer["status"] == 200, answer["text"][:400]
    final = _stream(client)
    stream = final[fields.SALIENCE]["stream"]
    payload = json.loads(answer["text"])[0][fields.SALIENCE]
    gen = shared.cached_generation(shared.format_prompt({"prompt": PROMPT}))
    assert stream["state"] == "done" and stream["text"] == gen.text and stream["tokens"] == len(gen.ids)
    assert payload["text"][payload["prompt_end"]:] == gen.text  # what the salience explains
    assert final[fields.RESPONSE] == gen.text

    # What the generation published: one state per token, the last one exactly the final text.
    running = [s for s in shared.published if s.state == "running" and s.tokens > 0]
    assert [s.tokens for s in running] == list(range(1, len(running) + 1))
    assert running[-1].text == gen.text and running[-1].tokens == len(gen.ids)
    assert all(gen.text.startswith(s.text) for s in running)

    # What the polls saw: states in order, texts that only grow, each a prefix of the final text.
    states = [s[fields.SALIENCE]["stream"]["state"] for s in seen]
    order = {"none": 0, "queued": 1, "running": 2, "done": 3}
    assert [order[s] for s in states] == sorted(order[s] for s in states)
    texts = [s[fields.SALIENCE]["stream"]["text"] for s in seen]
    assert all(gen.text.startswith(t) for t in texts)
    assert all(len(a) <= len(b) for a, b in zip(texts, texts[1:]))
    assert any(0 < len(t) < len(gen.text) for t in texts), "no poll saw a partial response"


def test_a_queued_generation_reports_queued_until_it_has_the_model(shared, client):
    with shared.lock:  # the model is busy (a background job, another request)
        worker = threading.Thread(target=lambda: shared.generate(shared.format_prompt({"prompt": PROMPT})))
        worker.start()
        while not shared.published:
            threading.Event().wait(0.01)
        stream = _stream(client)[fields.SALIENCE]["stream"]
        assert stream == {"state": "queued", "text": "", "tokens": 0, "max_new_tokens": 24, "stopped_by": ""}
    worker.join()
    assert _stream(client)[fields.SALIENCE]["stream"]["state"] == "done"


def test_stream_with_a_typed_target_is_a_clear_error(client):
    status, text = _post(client, SAL, {"prompt": PROMPT, "target": " 4:05 pm", "detail": "stream"})
    assert status == 500 and 'leave "target" empty' in text.split("\n")[0]


def test_unknown_detail_names_stream(client):
    status, text = _post(client, SAL, {"prompt": PROMPT, "detail": "streaming"})
    assert status == 500 and '"stream" (the response generated so far)' in text.split("\n")[0]
