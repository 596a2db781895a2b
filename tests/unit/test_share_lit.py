"""The "share this view" LIT wrapper (lit_app/wrappers/share.py) on a tiny random llama: the page is
display/share.py's page of the salience model's own result for the same datapoint and settings, and a
request it cannot answer names the fix."""

from __future__ import annotations

import numpy as np
import pytest

from sequence_salience.display import share
from lit_app.errors import RequestError
from lit_app.model.shared_model import SharedLM
from lit_app.schema import fields
from lit_app.serving import model_group
from tests.unit.tiny_models import MODEL_BUILDERS, wrap

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
    assert page == share.share_html(result, "grad_x_input", "word", (1, 3), model=shared.name)
    assert "ss-matrix" in page


def test_a_segment_method_or_a_method_without_matrix_is_refused_with_the_fix(tiny):
    _, models = tiny
    with pytest.raises(RequestError, match="segment method.*Fix: share the view of a gradient method"):
        models["_tiny_share"].predict([{**EX, fields.SHARE_METHOD: "leave_one_out"}])
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
