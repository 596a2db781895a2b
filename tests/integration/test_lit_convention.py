"""Our salience wrapper answers LIT's prompt-debugging convention (`target_mask` -> TokenScores).

Reference: LIT's own `lit_nlp.examples.prompt_debugging.transformers_lms.HFSalienceModel`, loaded
from the same weights (the default model's converted folder), on the same raw text (no chat
template, as LIT's models take it). Both compute the gradient of the masked span's log-probability
with respect to the input embeddings, so `grad_l2` must agree; LIT's `grad_dot_input` is the
gradient of the *loss* (-log p) times the input, ours of log p (positive: the token supports the
target, as LIT's module's legend says), so the two differ in sign only.
"""

import json

import numpy as np
import pytest
from werkzeug.test import Client

from lit_app.serving import client_build
from lit_app.data import datasets
from lit_app.schema import fields
from lit_app.wrappers import lit_convention
from lit_app import server
from lit_app.serving.model_group import lit_models
from lit_app.model.shared_model import SharedLM

MODEL = "smollm2"
GEN, SAL, TOK = fields.model_group_names(MODEL)
PROMPT = "Question: What is the capital of France?\nAnswer:"
TARGET = " The capital of France is Paris."


@pytest.fixture(scope="module")
def client(default_lm, tmp_path_factory):
    bundle = tmp_path_factory.mktemp("dist") / client_build.BUNDLE_NAME
    bundle.write_text("// stub bundle for tests\n", encoding="utf-8")
    root = client_build.build_client_root(str(tmp_path_factory.mktemp("client_root")), bundle_path=str(bundle))
    shared = SharedLM(default_lm, max_new_tokens=8, disk_cache=False)
    return Client(server.build_app(lit_models(shared, MODEL), datasets.get_datasets(), root))


def _preds(client, model, ex, types=None):
    query = f"model={model}" + (f"&requested_types={types}" if types else "")
    r = client.post(f"/get_preds?{query}", data=json.dumps({"inputs": [{"id": "", "data": ex}]}))
    return r.status_code, (json.loads(r.data)[0] if r.status_code == 200 else r.get_data(as_text=True))


def test_mask_request_matches_lits_own_salience_model(client, default_lm):
    from lit_nlp.examples.prompt_debugging import transformers_lms

    ex = {"prompt": PROMPT, "target": TARGET, "chat": False}
    status, tok = _preds(client, TOK, ex)
    assert status == 200, tok
    tokens = tok[fields.TOKENS]
    n_prompt = len(_preds(client, TOK, {**ex, "target": ""})[1][fields.TOKENS])
    lit = transformers_lms.HFSalienceModel(model_name_or_path=default_lm.model.config._name_or_path,
                                           framework="torch")
    for t0, t1 in ((0, len(tokens) - n_prompt), (5, 7)):  # the whole response, then " Paris"
        mask = [0] * len(tokens)
        for i in range(n_prompt + t0, n_prompt + t1):
            mask[i] = 1
        status, ours = _preds(client, SAL, {**ex, fields.TARGET_MASK: mask}, types="TokenScores")
        assert status == 200, ours
        theirs = list(lit.predict([{"prompt": PROMPT, "target": TARGET, "target_mask": mask}]))[0]
        assert len(theirs["tokens"]) == len(tokens), (theirs["tokens"], tokens)
        # Two float32 forward+backward passes through 30 layers (their model copy and attention kernel may
        # differ): equal within 1% of the largest value (measured: at most 0.35%).
        for field, sign in ((fields.GRAD_L2, 1), (fields.GRAD_DOT_INPUT, -1)):
            ref = sign * np.asarray(theirs[field], dtype=np.float64)
            np.testing.assert_allclose(ours[field], ref, rtol=0, atol=1e-2 * np.abs(ref).max(), err_msg=field)
        assert max(ours[fields.GRAD_L2][:n_prompt]) > 0


def test_mask_errors_name_the_field_and_the_fix(client):
    ex = {"prompt": PROMPT, "target": TARGET, "chat": False}
    n = len(_preds(client, TOK, ex)[1][fields.TOKENS])
    for mask, expected in (([1] * (n + 1), "entries"), ([0] * n, "marks no token"), ([1] + [0] * (n - 1), "prompt token"),
                           ([0] * (n - 3) + [1, 0, 1], "gaps"), ([0] * (n - 1) + [2], "use 0 or 1")):
        status, body = _preds(client, SAL, {**ex, fields.TARGET_MASK: mask})
        assert status != 200 and expected in body and fields.TARGET_MASK in body, (mask, body[:300])


def test_mask_span_is_pure():
    assert lit_convention.mask_span([0, 0, 0, 1, 1, 0], 2, 6) == (1, 3)
    with pytest.raises(lit_convention.MaskError, match="list of 0/1"):
        lit_convention.mask_span("0011", 2, 4)
