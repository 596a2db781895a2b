"""The "share this view" LIT wrapper (lit_app/wrappers/share.py) on a tiny random llama: the page is
display/share.py's page of the salience model's own result for the same datapoint and settings, and a
request it cannot answer names the fix."""

from __future__ import annotations

import html

import numpy as np
import pytest

from sequence_salience.display import share
from lit_app.errors import RequestError
from lit_app.model.shared_model import SharedLM
from lit_app.schema import fields, inputs, method_registry
from lit_app.serving import model_group
from tests.unit.tiny_models import MODEL_BUILDERS, wrap
from tests.unit.waiting import wait_until

EX = {fields.PROMPT: "one two three. four five", fields.CHAT: False}


@pytest.fixture(scope="module")
def tiny():
    shared = SharedLM(wrap(MODEL_BUILDERS["llama"](seed=0), "llama"), max_new_tokens=6, disk_cache=False)
    return shared, model_group.lit_models(shared, "tiny")


def test_the_page_is_the_shared_view_of_the_salience_models_result(tiny):
    shared, models = tiny
    assert fields.share_model_name("tiny") == "_tiny_share" and "_tiny_share" in models
    sal = models["_tiny_salience"].predict([EX])[0]  # every matrix, as the module's background job
    ex = {**EX, fields.SHARE_METHOD: "grad_x_input", fields.GRANULARITY: "word", fields.TARGET_SPAN: "1:3"}
    page = models["_tiny_share"].predict([ex])[0][fields.SHARE]["html"]
    result = shared.cached_salience(shared.format_prompt(EX), "", None)
    assert result is not None  # the page came from this result, not from a second computation
    np.testing.assert_array_equal(np.asarray(result.matrices["grad_x_input"]),
                                  np.asarray(sal[fields.GRAD_DOT_INPUT_MAP].salience))
    assert page == share.share_html(result, "grad_x_input", "word", (1, 3), model=shared.source)
    assert "ss-matrix" in page


def test_a_segment_methods_page_holds_the_values_the_module_was_sent(tiny):
    """The page of leave one sentence out (removal delete) and of the surrogate at its count: the values of the
    salience model's own segment request with the same fields (one cached job), with the cell's settings."""
    shared, models = tiny
    for method, extra in (("leave_one_out", {fields.REMOVAL: "delete"}),
                          ("ablation_surrogate", {fields.SEGMENT_COUNT_FIELDS["ablation_surrogate"]: 9})):
        ask = {fields.GRANULARITY: "sentence", fields.TARGET_SPAN: "0:2", **extra}
        seg_ex = {**EX, fields.DETAIL: method_registry.SEGMENT_DETAIL, fields.SEGMENT_METHOD: method, **ask}
        answer: dict = {}

        def done() -> bool:  # the page's poll of the segment job, until it answers the values
            answer.update(models["_tiny_salience"].predict([seg_ex])[0][fields.SALIENCE])
            return answer["detail"]["state"] == "done"

        wait_until(done, f"the {method} job")
        sent = answer[fields.SEGMENTS]["values"]
        page = models["_tiny_share"].predict([{**EX, fields.SHARE_METHOD: method, **ask}])[0][fields.SHARE]["html"]
        request = inputs.segment_request({**EX, fields.SEGMENT_METHOD: method, **ask})
        values = shared.cached_segments(shared.format_prompt(EX), "", request)
        assert values is not None and list(values.values) == pytest.approx(sent, rel=1e-5, abs=1e-6)  # as sent (rounded)
        assert page == share.share_html(values, method, "sentence", None, model=shared.source,
                                        ablation=shared.segment_config(request))
        text = html.unescape(page)
        assert "ss-matrix" in page and f"segment_salience(lm, prompt, target, {method!r}" in text
        assert ("'removal': 'delete'" in text) == (method == "leave_one_out")
        assert ("'surrogate_masks': 9" in text) == (method == "ablation_surrogate")


def test_the_faithfulness_test_sent_is_on_the_page_and_a_malformed_one_is_refused(tiny):
    _, models = tiny
    row = {"mode": "deletion", "name": "grad_norm", "aopc": 0.123456, "random_aopc": 0.01, "random_std": 0.002,
           "length_aopc": 0.05, "verdict": "beats random and length"}
    ex = {**EX, fields.SHARE_METHOD: "grad_norm", fields.GRANULARITY: "word", fields.TARGET_SPAN: "0:2"}
    faith = {"table": [row], "granularity": "word", "removal": "filler", "span": [0, 2]}
    page = models["_tiny_share"].predict([{**ex, fields.FAITHFULNESS: faith}])[0][fields.SHARE]["html"]
    assert 'data-name="grad_norm"' in page and 'data-value="0.123456"' in page and "beats random and length" in page
    with pytest.raises(RequestError, match='"faithfulness" is a str. Fix: send the explanation test'):
        models["_tiny_share"].predict([{**ex, fields.FAITHFULNESS: "0.12"}])
    with pytest.raises(RequestError, match="tested target tokens 0:1, the view explains 0:2"):
        models["_tiny_share"].predict([{**ex, fields.FAITHFULNESS: {**faith, "span": [0, 1]}}])


def test_a_method_without_matrix_is_refused_with_the_fix(tiny):
    _, models = tiny
    with pytest.raises(RequestError, match="no matrix in this result.*Fix: send the method shown"):
        models["_tiny_share"].predict([{**EX, fields.SHARE_METHOD: "integrated_gradients"}])
    with pytest.raises(RequestError, match="target_span"):
        models["_tiny_share"].predict([{**EX, fields.SHARE_METHOD: "grad_norm", fields.TARGET_SPAN: "x"}])


def test_an_unknown_method_is_refused_before_any_model_work(tiny, monkeypatch):
    shared, models = tiny

    def no_work(*args, **kwargs):
        raise AssertionError("the model was asked for salience before the method name was checked")

    monkeypatch.setattr(shared, "salience", no_work)
    monkeypatch.setattr(shared, "cached_salience", no_work)
    with pytest.raises(RequestError, match="'nope' is not a method. Fix: use one of grad_norm"):
        models["_tiny_share"].predict([{**EX, fields.SHARE_METHOD: "nope"}])
