"""`_<model>_compare` (lit_app/wrappers/compare.py) through LIT's real WSGI app on the embedded default model: the pinned
response's log p under the selected prompt equals a plain teacher-forced forward; one forward when the pinned
datapoint's salience was shown before (and its salience from the caches); bad input is a one-line error naming the field."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch
from werkzeug.test import Client

from lit_app.data import datasets
from lit_app.schema import fields
from lit_app.serving import model_group
from lit_app import server
from lit_app.model import shared_model

MODEL = "smollm2"
GEN, SAL, _ = fields.model_group_names(MODEL)
COMPARE = fields.compare_model_name(MODEL)
PROMPT_A = "Alice has 3 apples and Bob gives her 2 more. How many apples does Alice have?"
PROMPT_B = PROMPT_A.replace("3", "5")


@pytest.fixture(scope="module")
def shared(default_lm):
    return shared_model.SharedLM(default_lm, max_new_tokens=10, disk_cache=False)


@pytest.fixture(scope="module")
def client(shared, stub_client_root):
    return Client(server.build_app(model_group.lit_models(shared, MODEL), datasets.get_datasets(), stub_client_root))


def _post(client, model, data):
    return client.post(f"/get_preds?model={model}", data=json.dumps({"inputs": [{"id": "ex", "data": data}]}))


def _preds(client, model, data):
    response = _post(client, model, data)
    assert response.status_code == 200, response.get_data(as_text=True)[:800]
    return json.loads(response.data)[0]


def _teacher_forced(lm, chat, target_ids) -> list[float]:
    ids = list(lm.encode_prompt(chat).ids) + list(target_ids)
    with torch.no_grad():
        logp = torch.log_softmax(lm.model(input_ids=torch.tensor([ids])).logits[0].double(), -1)
    p = len(ids) - len(target_ids)
    return [logp[p + t - 1, tid].item() for t, tid in enumerate(target_ids)]


def test_spec_lists_the_compare_model(client):
    info = json.loads(client.get("/get_info").data)
    spec = info["models"][COMPARE]["spec"]
    assert spec["output"][fields.COMPARE]["__name__"] == "LitType"
    assert {fields.PINNED_PROMPT, fields.PINNED_SYSTEM, fields.PINNED_TARGET} <= set(spec["input"])


def test_pinned_response_under_the_edited_prompt(client, shared, default_lm):
    # The salience module showed the pinned datapoint first (its first highlight: the whole response).
    first = _preds(client, SAL, {fields.PROMPT: PROMPT_A, fields.DETAIL: "span"})
    payload = first[fields.SALIENCE]
    out = _preds(client, COMPARE, {fields.PROMPT: PROMPT_B, fields.PINNED_PROMPT: PROMPT_A,
                                   fields.WITH_PINNED_SALIENCE: True})[fields.COMPARE]
    assert out["forwards"] == 1  # A's log-probs came from the cached first highlight
    assert out["pinned_salience_passes"] == 0  # and its salience too: the same payload as the first highlight
    pinned = out["pinned_salience"]
    assert pinned["text"] == payload["text"] and pinned["spans"] == payload["spans"]
    gen = shared.generate(shared.format_prompt({fields.PROMPT: PROMPT_A}))
    assert out["under_a"]["response"] == gen.text == payload["text"][payload["prompt_end"]:]
    assert out["under_a"]["ids"] == list(gen.ids) == out["under_b"]["ids"]
    chat_a = default_lm.format_prompt(PROMPT_A)
    chat_b = default_lm.format_prompt(PROMPT_B)
    np.testing.assert_allclose(out["under_a"]["logprobs"], _teacher_forced(default_lm, chat_a, gen.ids), atol=2e-3)
    np.testing.assert_allclose(out["under_b"]["logprobs"], _teacher_forced(default_lm, chat_b, gen.ids), atol=2e-3)
    assert out["delta"] == pytest.approx(sum(out["under_b"]["logprobs"]) - sum(out["under_a"]["logprobs"]), abs=1e-4)
    np.testing.assert_allclose(out["per_token_delta"],
                               np.subtract(out["under_b"]["logprobs"], out["under_a"]["logprobs"]), atol=1e-6)
    # Log-probs only (as frontend/src/salience/compare_models/ asks): no salience, the same numbers.
    bare = _preds(client, COMPARE, {fields.PROMPT: PROMPT_B, fields.PINNED_PROMPT: PROMPT_A})[fields.COMPARE]
    assert bare["pinned_salience"] is None and bare["forwards"] == 1
    np.testing.assert_allclose(bare["under_b"]["logprobs"], out["under_b"]["logprobs"], atol=1e-6)
    # A typed pinned target nobody explained yet: log-probs only take two forwards; with its salience, the
    # salience's forward gives A's log-probs.
    cold = _preds(client, COMPARE, {fields.PROMPT: PROMPT_B, fields.PINNED_PROMPT: PROMPT_A,
                                    fields.PINNED_TARGET: " Alice has 5 apples."})[fields.COMPARE]
    assert cold["forwards"] == 2
    typed = _preds(client, COMPARE, {fields.PROMPT: PROMPT_B, fields.PINNED_PROMPT: PROMPT_A,
                                     fields.WITH_PINNED_SALIENCE: True,
                                     fields.PINNED_TARGET: " Alice has 5 apples."})[fields.COMPARE]
    assert typed["forwards"] == 1 and typed["pinned_salience_passes"] == 1  # one forward + backward, one forward
    assert typed["under_a"]["response"] == " Alice has 5 apples."
    assert typed["pinned_salience"]["text"].endswith(" Alice has 5 apples.")
    assert typed["old_answer_salience"] is None  # only on request:
    old = _preds(client, COMPARE, {fields.PROMPT: PROMPT_B, fields.PINNED_PROMPT: PROMPT_A,
                                   fields.PINNED_TARGET: " Alice has 5 apples.", fields.OLD_ANSWER: True})[fields.COMPARE]
    assert old["pinned_salience"] is None  # not asked for
    salience = old["old_answer_salience"]
    assert salience["text"] == default_lm.format_prompt(PROMPT_B).text + " Alice has 5 apples."
    # Its own forward's log-probs are the pinned answer's under the selected prompt.
    np.testing.assert_allclose(salience["target_logprobs"], old["under_b"]["logprobs"], atol=1e-4)
    whole = f"0:{len(old['under_b']['ids'])}"
    assert set(salience["spans"][whole]) >= {"grad_norm", "grad_x_input"}


@pytest.mark.parametrize("data, message", [
    ({fields.PROMPT: PROMPT_B}, fields.PINNED_PROMPT),
    ({fields.PROMPT: PROMPT_B, fields.PINNED_PROMPT: 3}, fields.PINNED_PROMPT),
])
def test_bad_input_names_the_field(client, data, message):
    response = _post(client, COMPARE, data)
    assert response.status_code == 500  # LIT's own app; behind security.SecureApp (main()) it is 400
    assert message in response.get_data(as_text=True)


def _segments_of(client, data):
    """The salience model's segment request (as the module polls it) until its values are there."""
    for _ in range(600):
        out = _preds(client, SAL, data)
        values = out[fields.SALIENCE].get(fields.SEGMENTS)
        if values is not None:
            return values
        assert out[fields.SALIENCE]["detail"]["state"] not in ("error", "cancelled"), out[fields.SALIENCE]
        time.sleep(0.1)
    raise AssertionError("the segment job did not finish")


def test_segment_method_on_both_sides(client, default_lm):
    # A segment method on screen: values live on a segmentation, so the comparison measures both prompts.
    seg = {fields.SEGMENT_METHOD: "leave_one_out", fields.GRANULARITY: "sentence", fields.REMOVAL: "delete"}
    out = _preds(client, COMPARE, {fields.PROMPT: PROMPT_B, fields.PINNED_PROMPT: PROMPT_A,
                                   fields.WITH_PINNED_SALIENCE: True, **seg})[fields.COMPARE]
    pinned, selected = out["pinned_segments"][fields.SEGMENTS], out["selected_segments"][fields.SEGMENTS]
    assert out["old_answer_segments"] is None  # only with old_answer
    # Each side is what the salience model's own segment request of that datapoint answers.
    for side, prompt in ((pinned, PROMPT_A), (selected, PROMPT_B)):
        alone = _segments_of(client, {fields.PROMPT: prompt, fields.DETAIL: "segments", **seg})
        assert side["method"] == "leave_one_out" and side["granularity"] == "sentence"
        assert side["spans"] == alone["spans"] and len(side["values"]) == 3  # system prompt, 2 sentences
        np.testing.assert_allclose(side["values"], alone["values"], atol=1e-6)
        # The spread over tokens keeps each segment's sum.
        assert sum(side["token_values"]) == pytest.approx(sum(side["values"]), abs=1e-4)
    # The unedited prompt's log p of the pinned response is the teacher-forced one (an independent forward).
    assert pinned["original_logprob"] == pytest.approx(sum(out["under_a"]["logprobs"]), abs=2e-3)
    # Deleting the question leaves the answer less likely (hand check of the sign on this prompt).
    text = out["pinned_salience"]["text"]
    question = [i for i, (s, e) in enumerate(pinned["spans"]) if text[s:e].startswith("How many")]
    assert len(question) == 1 and pinned["values"][question[0]] > 0
    old = _preds(client, COMPARE, {fields.PROMPT: PROMPT_B, fields.PINNED_PROMPT: PROMPT_A,
                                   fields.WITH_PINNED_SALIENCE: True, fields.OLD_ANSWER: True, **seg})[fields.COMPARE]
    assert old["old_answer_segments"][fields.SEGMENTS]["original_logprob"] == pytest.approx(
        sum(old["under_b"]["logprobs"]), abs=2e-3)


def test_unknown_segment_method_names_the_field(client):
    response = _post(client, COMPARE, {fields.PROMPT: PROMPT_B, fields.PINNED_PROMPT: PROMPT_A,
                                       fields.WITH_PINNED_SALIENCE: True, fields.SEGMENT_METHOD: "nope"})
    assert response.status_code == 500  # LIT's own app; behind security.SecureApp it is 400
    assert fields.SEGMENT_METHOD in response.get_data(as_text=True)
