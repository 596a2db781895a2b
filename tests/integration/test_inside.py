"""Inside the model on the embedded default model (SmolLM2-135M-Instruct): the library and the LIT wrappers (the
value index's build beside another page's clicks, plumbing of the job table, is a unit test on a tiny random Llama:
tests/unit/test_value_index_job.py).

Prints the rank of " Paris" after each layer for "The capital of France is";
asserts only what is robust: the last layer's logit lens is the model's own
output, so its top token is the greedy next token.
"""

from __future__ import annotations

import json
import time

import pytest
import torch
from werkzeug.test import Client

import sequence_salience as ss
from sequence_salience import inside
from lit_app.data import datasets
from lit_app.schema import fields
from lit_app.serving import model_group
from lit_app import server
from lit_app.model import shared_model
from lit_app.wrappers import inside as lit_inside
from tests import frontend_source
from tests.server_process import client_header

PROMPT = "The capital of France is"
MODEL = "smollm2"
TRACE, INTERVENE, SEARCH = lit_inside.model_names(MODEL)


def test_paris_rises_through_the_layers(default_lm):
    paris = default_lm.tokenize(" Paris").ids
    assert len(paris) == 1, "' Paris' is one token in SmolLM2's vocabulary"
    tr = inside.trace(default_lm, PROMPT, " Paris", t=0)
    ranks_after, ranks_before = tr.ranks("after"), tr.ranks("before")
    print("\nrank of ' Paris' by layer (before FFN / after FFN):")
    for i, (b, a) in enumerate(zip(ranks_before, ranks_after)):
        top = tr.layers[i].after.tokens[0]
        print(f"  layer {i:2d}: {b:6d} / {a:6d}   top after: {top!r}")
    print(f"trace of one position: {tr.seconds:.2f} s")
    gen = default_lm.generate(PROMPT, ss.GenerationConfig(max_new_tokens=1))
    assert tr.layers[-1].after.ids[0] == tr.output.ids[0] == gen.ids[0]
    if gen.ids[0] == paris[0]:
        assert ranks_after[-1] == 0
    # The final rank is the model's own rank of " Paris".
    with torch.no_grad():
        logits = default_lm.model(input_ids=torch.tensor([tr.ids])).logits[0, -1]
    assert ranks_after[-1] == int((logits > logits[paris[0]]).sum())


def test_switching_off_the_top_sub_update_changes_the_prediction_only_under_hooks(default_lm):
    tr = inside.trace(default_lm, PROMPT, " Paris", t=0)
    layer = max(range(len(tr.layers)), key=lambda i: tr.layers[i].sub_updates[0].score)
    top = tr.layers[layer].sub_updates[0]
    with inside.apply_interventions(default_lm, [(layer, top.index, "off")]):
        off = inside.trace(default_lm, PROMPT, " Paris", t=0)
    assert off.output.target_prob != tr.output.target_prob
    assert inside.count_hooks(default_lm.model) == 0
    again = inside.trace(default_lm, PROMPT, " Paris", t=0)
    assert again.output.probs == tr.output.probs  # bit-identical once the hooks are gone


# --------------------------------------------------------------------------- LIT wrappers, in process


@pytest.fixture(scope="module")
def client(default_lm, stub_client_root):
    shared = shared_model.SharedLM(default_lm, max_new_tokens=12)
    lit_models = model_group.lit_models(shared, MODEL)
    yield Client(server.build_app(lit_models, datasets.get_datasets(), stub_client_root))
    index = lit_models[SEARCH].state.index
    index.cancel("the test module ended")  # the build's job ends between layers
    index.wait(timeout_s=60)


def _preds(client, model, data, id_="ex", page=""):
    """The one output of a LIT request sent as page `page` (its client id; "" none)."""
    body = json.dumps({"inputs": [{"id": id_, "data": data}]})
    response = client.post(f"/get_preds?model={model}", data=body, headers=client_header(page))
    assert response.status_code == 200, response.get_data(as_text=True)[:800]
    return json.loads(response.data)[0]


def _error(client, model, data, id_="bad"):
    body = json.dumps({"inputs": [{"id": id_, "data": data}]})
    response = client.post(f"/get_preds?model={model}", data=body)
    assert response.status_code == 500
    return response.get_data(as_text=True).split("\n\nDetails:")[0]


def test_lit_trace_follows_the_salience_target(client, default_lm):
    data = {"prompt": "What is the capital of France?", "system": "", "target": "", "chat": True}
    tokens = _preds(client, fields.model_group_names(MODEL)[0], data)["response_tokens"]
    t = next(i for i, tok in enumerate(tokens) if tok.strip() == "Paris")
    out = _preds(client, TRACE, {**data, "inside_t": t}, id_=f"trace{t}")["inside_trace"]
    assert out["t"] == t and out["target_token"].strip() == "Paris"
    assert len(out["layers"]) == 30 and out["family"] == "llama"
    last = out["layers"][-1]["after"]
    assert last["ids"][0] == out["output"]["ids"][0]
    # The response is the model's greedy output, so its token t is the top prediction.
    assert out["output"]["target_rank"] == 0 and last["target_rank"] == 0
    # The salience module's first highlight: the whole response, IG on (starts the background matrices).
    _preds(client, fields.model_group_names(MODEL)[1], {**data, "detail": "span", "ig_steps": 4}, id_="first")
    sub = out["layers"][-1]["sub_updates"][0]
    off = json.dumps([{"layer": sub["layer"], "index": sub["index"], "mode": "off"}])
    res = _preds(client, INTERVENE, {**data, "inside_t": t, "interventions": off}, id_="iv")["inside_intervention"]
    assert res["before"]["trace"]["output"]["target_prob"] == pytest.approx(out["output"]["target_prob"], rel=1e-6)
    assert res["after"]["trace"]["output"]["target_prob"] != res["before"]["trace"]["output"]["target_prob"]
    assert res["before"]["generation"]["text"].strip() and res["before"]["top_salient"]
    assert res["interventions"] == [{"layer": sub["layer"], "index": sub["index"], "mode": "off", "scope": "all",
                                     "value": None, "position": None}]
    # In steps; the before side reused what the server had (the trace just requested, the generation and
    # the first highlight's whole-response salience).
    assert [(s["name"], s["state"]) for s in res["steps"]] == [("trace", "done"), ("generate", "done"),
                                                                ("salience", "done")]
    assert [s["before"] for s in res["steps"]] == ["cached"] * 3  # trace, generation, whole-response salience
    assert res["before"]["trace"] == out
    # LM-Debugger's "on": one constant, the layer's largest |m|*||v|| at the traced position + 0.01 (the
    # trace's top sub-update score), at this position only.
    low = out["layers"][3]["sub_updates"][-1]
    on = json.dumps([{"layer": 3, "index": low["index"], "mode": "on", "scope": "position"}])
    res_on = _preds(client, INTERVENE, {**data, "inside_t": t, "interventions": on}, id_="ivon")["inside_intervention"]
    (iv,) = res_on["interventions"]
    assert iv["value"] == pytest.approx(out["layers"][3]["sub_updates"][0]["score"] + 0.01, rel=1e-5)
    assert iv["position"] == out["position"] and iv["scope"] == "position"
    status = _preds(client, INTERVENE, {**data, "inside_action": "status"}, id_="ivstatus")["inside_intervention"]
    assert status == {"action": "status", "job": None}  # the run is over
    assert "inside_t" in _error(client, TRACE, {**data, "inside_t": 999}, id_="t999")
    assert "not JSON" in _error(client, INTERVENE, {**data, "interventions": "[{"}, id_="badjson")
    assert "No interventions" in _error(client, INTERVENE, data, id_="none")
    # At once, while the first highlight's background matrices may still run: their forward's pauses and the cut at
    # the head are that thread's settings, not hooks on the shared model (methods/gradients.py `layer_pauses`; was
    # 31 hooks until their passes ended, e133d3d waited for them). An intervention's leaked hook fails it.
    assert inside.count_hooks(default_lm.model) == 0


def test_lit_search_builds_the_index_in_the_background(client, monkeypatch, tmp_path):
    monkeypatch.setenv("SEQUENCE_SALIENCE_CACHE", str(tmp_path))  # a cold build, not the user's cache
    first = _preds(client, SEARCH, {"query": "Paris", "limit": 5}, id_="s0")["inside_search"]
    assert first["index"]["state"] in ("queued", "running", "done")
    assert first["tokens"] and first["num_layers"] == 30
    deadline = time.monotonic() + 120
    poll = 0
    while True:  # wait for the first layers: searches answer from what is built
        poll += 1
        res = _preds(client, SEARCH, {"query": "the", "limit": 5}, id_=f"s{poll}")["inside_search"]
        if res["hits"] or res["index"]["state"] == "done" or time.monotonic() > deadline:
            break
        time.sleep(1)
    print(f"\nindex after {poll} polls: {res['index']}")
    assert res["hits"], res["index"]
    assert res["layers_searched"] >= 1
    assert all(h["layer"] < res["layers_searched"] for h in res["hits"])
    assert "search text is empty" in _error(client, SEARCH, {"query": "  "}, id_="empty")


def test_layout_shows_the_inside_module_as_a_tab_beside_the_salience_module():
    from lit_app.serving import layouts

    assert frontend_source.exported_string("INSIDE_TAG") == layouts.INSIDE_MODULE_TAG
    default = layouts.make_layouts()[layouts.DEFAULT_LAYOUT]
    # The salience module first (LIT opens the first tab); nothing below it to shrink it.
    assert [m.module for tab in default.upper.values() for m in tab] == [
        layouts.SALIENCE_MODULE_TAG, layouts.INSIDE_MODULE_TAG, layouts.EXPLAIN_MODULE_TAG]
    assert not default.lower and default.layoutSettings.mainHeight == 100
    split = layouts.make_layouts()[layouts.SPLIT_LAYOUT_NAME]
    assert [m.module for m in split.lower["Inside the model"]] == [layouts.INSIDE_MODULE_TAG]
    bare = layouts.make_layouts(with_salience_module=False)[layouts.DEFAULT_LAYOUT]
    assert layouts.INSIDE_MODULE_TAG not in str(bare)  # no bundle, no custom elements
