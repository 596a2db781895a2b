"""The Inside-the-model LIT wrappers (lit_app/inside.py) over a tiny random Llama: inputs, payloads, errors."""

from __future__ import annotations

import json

import pytest

from sequence_salience import inside
from lit_app import inside as lit_inside
from lit_app import models
from tests.unit.tiny_models import tiny_llama, tiny_tokenizer, wrap

PROMPT, TARGET = "The capital of France is", " Paris. The capital"


@pytest.fixture(scope="module")
def wrappers():
    lm = wrap(tiny_llama(seed=0), "llama")
    shared = models.SharedLM(lm, max_new_tokens=4)
    return lm, lit_inside.make_inside_models(shared, "tiny")


def _one(wrapper, **data):
    return wrapper.predict([data])[0]


@pytest.mark.parametrize("value,expected", [
    pytest.param("", [], id="empty"),
    pytest.param(None, [], id="none"),
    pytest.param('[{"layer": 1, "index": 3, "mode": "on"}]', [inside.Intervention(1, 3, "on")], id="json"),
    pytest.param([[0, 2]], [inside.Intervention(0, 2, "off")], id="pair"),
])
def test_parse_interventions(value, expected):
    assert lit_inside.parse_interventions(value) == expected


@pytest.mark.parametrize("value,match", [
    pytest.param("[{", "not JSON", id="json"),
    pytest.param('{"layer": 1}', "must be a JSON list", id="object"),
    pytest.param(json.dumps([[0, i] for i in range(65)]), "at most 64", id="too-many"),
])
def test_parse_interventions_errors(value, match):
    with pytest.raises(models.RequestError, match=match):
        lit_inside.parse_interventions(value)


def test_trace_wrapper_matches_the_library(wrappers):
    lm, lit = wrappers
    trace_model = lit["_tiny_inside_trace"]
    out = _one(trace_model, prompt=PROMPT, target=TARGET, inside_t=2)[lit_inside.TRACE]
    ref = inside.trace(lm, PROMPT, TARGET, t=2, config=lit_inside.TRACE_CONFIG)
    assert out["t"] == 2 and out["n_targets"] == len(tiny_tokenizer()(TARGET, add_special_tokens=False)["input_ids"])
    assert out["target_id"] == ref.target_id and out["position"] == ref.position
    assert [l["after"]["target_rank"] for l in out["layers"]] == ref.ranks()
    json.dumps(out)  # JSON-able as LIT sends it
    # Under an intervention, the trace wrapper follows apply_interventions.
    off = _one(trace_model, prompt=PROMPT, target=TARGET, inside_t=2,
               interventions='[{"layer": 1, "index": 5, "mode": "off"}]')[lit_inside.TRACE]
    with inside.apply_interventions(lm, [(1, 5, "off")]):
        ref_off = inside.trace(lm, PROMPT, TARGET, t=2, config=lit_inside.TRACE_CONFIG)
    assert off["output"]["probs"] == pytest.approx(list(ref_off.output.probs), rel=1e-9)
    assert inside.count_hooks(lm.model) == 0


def test_intervene_wrapper_payload(wrappers):
    lm, lit = wrappers
    out = _one(lit["_tiny_inside_intervene"], prompt=PROMPT, target=TARGET, inside_t=1,
               interventions='[{"layer": 0, "index": 1, "mode": "on"}]')[lit_inside.INTERVENTION]
    assert out["interventions"] == [{"layer": 0, "index": 1, "mode": "on"}]
    for side in ("before", "after"):
        assert set(out[side]) >= {"trace", "generation", "top_salient", "salience_method", "salience_total"}
        assert "salience" not in out[side] and "tokens" not in out[side]  # big arrays stay on the server
        assert out[side]["trace"]["t"] == 1
    json.dumps(out)
    assert inside.count_hooks(lm.model) == 0


def test_wrapper_errors_are_one_line_request_errors(wrappers):
    _, lit = wrappers
    with pytest.raises(models.RequestError, match="inside_t.* is 99 but the response has"):
        _one(lit["_tiny_inside_trace"], prompt=PROMPT, target=TARGET, inside_t=99)
    with pytest.raises(models.RequestError, match="whole number"):
        _one(lit["_tiny_inside_trace"], prompt=PROMPT, target=TARGET, inside_t=1.5)
    with pytest.raises(models.RequestError, match="No interventions"):
        _one(lit["_tiny_inside_intervene"], prompt=PROMPT, target=TARGET, inside_t=0)
    with pytest.raises(models.RequestError, match="listed twice"):
        _one(lit["_tiny_inside_intervene"], prompt=PROMPT, target=TARGET,
             interventions=[[0, 1, "off"], [0, 1, "on"]])
    with pytest.raises(models.RequestError, match="search text is empty"):
        _one(lit["_tiny_inside_search"], query="  ")


def test_search_wrapper_starts_the_index_and_reports_progress(wrappers, monkeypatch, tmp_path):
    monkeypatch.setenv("SEQUENCE_SALIENCE_CACHE", str(tmp_path))
    _, lit = wrappers
    search = lit["_tiny_inside_search"]
    first = _one(search, query="is", limit=5)[lit_inside.SEARCH]
    assert first["index"]["state"] in ("loading", "building", "ready")
    assert [t for _, t in first["tokens"]] == ["is", " is"]
    assert search.state.index.wait(timeout=120)
    done = _one(search, query="is", limit=5)[lit_inside.SEARCH]
    assert done["index"]["state"] == "ready" and done["layers_searched"] == done["num_layers"] == 2
    assert done["index"]["size_bytes"] > 0 and done["index"]["path"].startswith(str(tmp_path))
    assert len(done["hits"]) <= 5 and done["total"] >= len(done["hits"])
