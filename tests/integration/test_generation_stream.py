"""Streaming the greedy response (`detail="stream"`) through the LIT app on the default model.

While the selected datapoint's generation runs, a poll answers the text generated so far without
waiting for the model; the streamed text grows by appending and ends with exactly the final
generation's text, which is also what the salience request explains.
"""

import json
import threading

import pytest
from werkzeug.test import Client

from lit_app.data import datasets
from lit_app.schema import fields
from lit_app.serving import model_group
from lit_app.model import responses, shared_model
from lit_app import server
from lit_app.wrappers import salience as salience_wrapper

MODEL = "smollm2"
GEN, SAL, _ = fields.model_group_names(MODEL)
PROMPT = ("A train leaves at 2:15 pm and the trip takes 1 hour and 50 minutes. At what time does it arrive?"
          " Think step by step, then give the answer.")


class RecordingStreams(responses.StreamTable):
    """Keeps every stream state the generation publishes (what any poll could have read)."""

    def __init__(self):
        super().__init__()
        self.published: list[responses.GenerationStream] = []

    def set(self, key, stream):
        self.published.append(stream)
        super().set(key, stream)


@pytest.fixture()
def shared(default_lm, tmp_path):
    shared = shared_model.SharedLM(default_lm, max_new_tokens=24, disk_cache=str(tmp_path / "gens"))
    shared.responses.streams = RecordingStreams()
    yield shared
    shared.jobs.cancel_all()  # the first highlight's background job: stopped before the next test uses the model
    while not shared.jobs.idle():
        threading.Event().wait(0.05)


@pytest.fixture()
def client(shared, stub_client_root):
    return Client(server.build_app(model_group.lit_models(shared, MODEL), datasets.get_datasets(), stub_client_root))


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
    running = [s for s in shared.responses.streams.published if s.state == "running" and s.tokens > 0]
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
        while not shared.responses.streams.published:
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


def test_long_polls_answer_only_with_news(shared, client, monkeypatch):
    """With `stream_after` (the tokens the page shows) a request waits for more tokens or the end, so
    back-to-back requests never see the same token count twice while the generation runs (fixed-rate
    polls do: several answers per token)."""
    monkeypatch.setattr(salience_wrapper, "STREAM_WAIT_S", 5.0)  # longer than any token takes here
    answer = {}

    def first_highlight():
        answer["status"], answer["text"] = _post(client, SAL, {"prompt": PROMPT, "detail": "span"})

    worker = threading.Thread(target=first_highlight)
    worker.start()
    shown, seen = 0, []
    while True:
        stream = _stream(client, stream_after=shown)[fields.SALIENCE]["stream"]
        seen.append((shown, stream))
        if stream["state"] == "done":
            break
        shown = stream["tokens"]
    worker.join()
    assert answer["status"] == 200, answer["text"][:400]
    gen = shared.cached_generation(shared.format_prompt({"prompt": PROMPT}))
    assert seen[-1][1]["text"] == gen.text and seen[-1][1]["tokens"] == len(gen.ids)
    for after, stream in seen[:-1]:  # each answer before the end brought more tokens than were shown
        assert stream["state"] == "running" and stream["tokens"] > after, (after, stream)
        assert gen.text.startswith(stream["text"])
    assert len(seen) <= len(gen.ids) + 1  # at most one answer per token, plus the end


def test_a_long_poll_answers_at_once_when_done_and_after_the_wait_when_nothing_comes(shared, client, monkeypatch):
    monkeypatch.setattr(salience_wrapper, "STREAM_WAIT_S", 0.3)
    # Nobody asked for this prompt's generation: after the wait, what there is ("none").
    assert _stream(client, stream_after=0)[fields.SALIENCE]["stream"]["state"] == "none"
    gen = shared.generate(shared.format_prompt({"prompt": PROMPT}))
    # Generated (cached): "done" at once, whatever the page shows.
    stream = _stream(client, stream_after=len(gen.ids))[fields.SALIENCE]["stream"]
    assert stream["state"] == "done" and stream["text"] == gen.text


@pytest.mark.parametrize("value", ["x", -2, 1.5, 10**6, True, [], {}])
def test_a_bad_stream_after_names_the_field(client, value):
    status, text = _post(client, SAL, {"prompt": PROMPT, "detail": "stream", "stream_after": value})
    assert status == 500 and f'"{fields.STREAM_AFTER}"' in text.split("\n")[0], text[:300]
