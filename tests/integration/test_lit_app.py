"""The LIT app in-process on the embedded default model: specs, predictions, errors, concurrency.

Requests go through LIT's real WSGI app (werkzeug's test client), so they
exercise LIT's handler, its caching wrapper and its error handling exactly as
the browser does.
"""

import json
import re
import threading

import numpy as np
import pytest
from werkzeug.test import Client

import sequence_salience as ss
from lit_app.serving import client_build, layouts, model_group
from lit_app.data import datasets
from lit_app.schema import fields
from lit_app import server
from lit_app.model import shared_model
from tests import frontend_source

MODEL = "smollm2"
GEN, SAL, TOK = fields.model_group_names(MODEL)
QUESTION = "What is the capital of France?"
# LIT's client shows an error's message only if this matches (one line before "Details:").
_CLIENT_MESSAGE = re.compile(r"^.*?(?=\n\nDetails:)")


@pytest.fixture(scope="module")
def shared(make_shared):
    return make_shared(max_new_tokens=12)


@pytest.fixture()
def client(lit):
    return Client(lit)


def _post(client, model, examples, **params):
    inputs = [{"id": f"ex{i}", "data": ex} for i, ex in enumerate(examples)]
    query = "&".join(f"{k}={v}" for k, v in {"model": model, **params}.items())
    return client.post(f"/get_preds?{query}", data=json.dumps({"inputs": inputs}))


def _preds(client, model, *examples, **params):
    response = _post(client, model, examples, **params)
    assert response.status_code == 200, response.get_data(as_text=True)[:500]
    return json.loads(response.data)


def _error_message(response) -> str:
    assert response.status_code == 500
    match = _CLIENT_MESSAGE.match(response.get_data(as_text=True))
    assert match, "LIT's client would show 'Unknown error' for this body"
    return match.group(0)


def test_get_info_declares_models_datasets_and_default_layout(client):
    info = json.loads(client.get("/get_info").data)
    assert list(info["models"])[:3] == [GEN, SAL, TOK]  # LIT selects the first model
    out = info["models"][SAL]["spec"]["output"]
    assert out[fields.SALIENCE]["__name__"] == "LitType"
    assert out[fields.GRAD_L2_MAP]["__name__"] == "SequenceSalience"
    assert out[fields.GRAD_DOT_INPUT_MAP]["__name__"] == "SequenceSalience"
    # LIT's prompt-debugging names, as TokenScores over `tokens` (read by LIT's Sequence Salience module).
    assert out[fields.GRAD_L2]["__name__"] == "TokenScores" and out[fields.GRAD_L2]["align"] == fields.TOKENS
    assert out[fields.GRAD_DOT_INPUT]["__name__"] == "TokenScores"
    assert info["models"][SAL]["spec"]["input"][fields.TARGET_MASK]["__name__"] == "TokenScores"
    assert info["models"][GEN]["spec"]["output"][fields.RESPONSE]["__name__"] == "GeneratedText"
    assert datasets.CASE_STUDIES_NAME in info["models"][GEN]["datasets"]
    assert datasets.CASE_STUDIES_NAME in info["models"][SAL]["datasets"]
    assert info["defaultLayout"] == layouts.DEFAULT_LAYOUT
    layout = info["layouts"][layouts.DEFAULT_LAYOUT]
    modules = [m["module"] if isinstance(m, dict) else m
               for group in (layout["left"], layout["upper"], layout["lower"])
               for tab in group.values() for m in tab]
    assert layouts.SALIENCE_MODULE_TAG in modules
    assert {"data-table-module", "single-datapoint-editor-module", "generated-text-module"} <= set(modules)


def test_generation(client):
    (pred,) = _preds(client, GEN, {fields.PROMPT: QUESTION})
    assert "Paris" in pred[fields.RESPONSE]
    assert "".join(pred[fields.RESPONSE_TOKENS]) == pred[fields.RESPONSE]


def test_salience_payload_follows_the_contract(client):
    (gen,) = _preds(client, GEN, {fields.PROMPT: QUESTION})
    (pred,) = _preds(client, SAL, {fields.PROMPT: QUESTION, fields.TARGET: ""})
    # Empty target: the wrapper explains the same greedy response the generation model gave.
    assert pred[fields.RESPONSE] == gen[fields.RESPONSE]

    s = pred[fields.SALIENCE]
    assert set(s) == {"text", "prompt_end", "tokens", "offsets", "special", "n_prompt_tokens",
                      "role_spans", "target_logprobs", "methods", "spans", "span_ig_errors", "completeness", "dtype"}
    assert s["spans"] == {} and s["span_ig_errors"] == {} and s["dtype"] == "float32"
    # IG did not run: its tolerance is published, no span is checked.
    assert s["completeness"] == {"integrated_gradients": {"tolerance": 0.05, "spans": {}}}
    n, p = len(s["tokens"]), s["n_prompt_tokens"]
    t = n - p
    assert t == len(s["target_logprobs"]) > 0
    assert s["text"][s["prompt_end"]:] == pred[fields.RESPONSE]
    assert len(s["offsets"]) == len(s["special"]) == n
    assert all(0 <= a <= b <= len(s["text"]) for a, b in s["offsets"])
    assert all(s["offsets"][i][0] >= s["prompt_end"] for i in range(p, n))
    assert {r for _, _, r in s["role_spans"]} <= {"system", "user", "assistant", "markup"}
    assert any(r == "user" and s["text"][a:b] == QUESTION for a, b, r in s["role_spans"])

    assert set(s["methods"]) == {"grad_norm", "grad_x_input"}  # ig_steps defaults to 0
    gn, gxi = s["methods"]["grad_norm"], s["methods"]["grad_x_input"]
    assert gn["signed"] is False and gxi["signed"] is True
    for m in (gn, gxi):
        matrix = np.asarray(m["matrix"])
        assert matrix.shape == (t, n)
        for k in range(t):  # causality: nothing at or after the predicted token
            assert not matrix[k, p + k:].any()
    assert np.asarray(gn["gram_packed"]).shape == (n, t * (t + 1) // 2)
    assert pred[fields.TOKENS] == s["tokens"]

    # LIT-native maps for LIT's own modules.
    for field, method in ((fields.GRAD_L2_MAP, gn), (fields.GRAD_DOT_INPUT_MAP, gxi)):
        smap = pred[field]
        assert smap["tokens_in"] == s["tokens"][:p] and smap["tokens_out"] == s["tokens"][p:]
        np.testing.assert_allclose(smap["salience"], method["matrix"], rtol=1e-5, atol=1e-12)


def test_span_requests_reuse_the_cached_result(client, shared):
    (full,) = _preds(client, SAL, {fields.PROMPT: QUESTION})
    s = full[fields.SALIENCE]
    t = len(s["target_logprobs"])
    cached = len(shared.store.complete)
    t0, t1 = 1, t
    (pred,) = _preds(client, SAL, {fields.PROMPT: QUESTION, fields.TARGET_SPAN: f"{t0}:{t1}"},
                     requested_fields=fields.SPAN_SALIENCE)
    assert set(pred) == {fields.SPAN_SALIENCE}
    assert len(shared.store.complete) == cached
    span = pred[fields.SPAN_SALIENCE]
    assert set(span) == {"grad_norm", "grad_x_input"}
    # Linear method: the span is the sum of its rows.
    np.testing.assert_allclose(span["grad_x_input"], np.asarray(s["methods"]["grad_x_input"]["matrix"])[t0:t1].sum(0),
                               rtol=1e-4, atol=1e-9)
    # grad_norm: the client's formula over gram_packed gives the server's exact span value.
    packed = np.asarray(s["methods"]["grad_norm"]["gram_packed"])
    rows, cols = np.triu_indices(t)
    inside = (rows >= t0) & (rows < t1) & (cols >= t0) & (cols < t1)
    weights = np.where(rows == cols, 1.0, 2.0) * inside  # off-diagonal pairs appear once in the triangle
    np.testing.assert_allclose(span["grad_norm"], np.sqrt(np.clip(packed @ weights, 0, None)), rtol=1e-3, atol=1e-6)


def test_typed_target_and_integrated_gradients(client):
    target = "Paris is the capital."
    # Two steps (was 4): the matrix costs one backward per target per step; its shape and fields do not depend on them.
    (pred,) = _preds(client, SAL, {fields.PROMPT: QUESTION, fields.TARGET: target, fields.IG_STEPS: 2})
    assert pred[fields.RESPONSE] == target
    s = pred[fields.SALIENCE]
    t = len(s["target_logprobs"])
    ig = s["methods"]["integrated_gradients"]
    assert ig["signed"] is True and ig["steps"] == 2
    assert np.asarray(ig["matrix"]).shape == (t, len(s["tokens"]))
    assert len(ig["completeness_error"]) == t
    (tok,) = _preds(client, TOK, {fields.PROMPT: QUESTION, fields.TARGET: target})
    assert tok[fields.TOKENS] == s["tokens"]


def test_raw_text_without_chat_template(client):
    (pred,) = _preds(client, SAL, {fields.PROMPT: "The capital of France is", fields.TARGET: " Paris",
                                   fields.CHAT: False})
    s = pred[fields.SALIENCE]
    assert s["text"] == "The capital of France is Paris"
    assert s["role_spans"] == [[0, len("The capital of France is"), "user"]]


def test_shipped_examples_and_an_edited_prompt(client):
    indexed = json.loads(client.get(f"/get_dataset?dataset_name={datasets.CASE_STUDIES_NAME}").data)
    example = next(ex for ex in indexed if ex["data"][fields.CASE] == "simple question")
    # The UI sends dataset examples by id ...
    body = json.dumps({"inputs": [example["id"]]})
    r = client.post(f"/get_preds?model={GEN}&dataset_name={datasets.CASE_STUDIES_NAME}", data=body)
    assert r.status_code == 200, r.get_data(as_text=True)[:300]
    first = json.loads(r.data)[0][fields.RESPONSE]
    # ... and an edited, added datapoint in full, with a new id.
    edited = dict(example["data"], **{fields.PROMPT: "What is the capital of Italy?", "_id": "edited1"})
    body = json.dumps({"inputs": [{"id": "edited1", "data": edited, "meta": {"added": True}}]})
    responses = []
    for model in (GEN, SAL):
        r = client.post(f"/get_preds?model={model}&dataset_name={datasets.CASE_STUDIES_NAME}", data=body)
        assert r.status_code == 200, r.get_data(as_text=True)[:300]
        responses.append(json.loads(r.data)[0][fields.RESPONSE])
    assert responses[0] != first  # a new generation for the new prompt ...
    assert responses[1] == responses[0]  # ... and the salience explains it


@pytest.mark.parametrize(
    "model, example, expected",
    [
        pytest.param("no_such_model", {fields.PROMPT: "x"}, "Unknown model 'no_such_model'", id="unknown-model"),
        pytest.param(GEN, {fields.SYSTEM: "x"}, 'Input field "prompt" is missing', id="missing-field"),
        pytest.param(GEN, {fields.PROMPT: ""}, "The prompt is empty", id="empty-prompt"),
        pytest.param(SAL, {fields.PROMPT: "  \n "}, "The prompt is empty", id="blank-prompt-salience"),
        pytest.param(GEN, {fields.PROMPT: "word " * 9000}, "context is 8,192 tokens", id="over-long-prompt"),
        pytest.param(SAL, {fields.PROMPT: "word " * 9000, fields.TARGET: "x"}, "context is 8,192",
                     id="over-long-prompt-salience"),
        pytest.param(SAL, {fields.PROMPT: QUESTION, fields.TARGET_SPAN: "5"}, '"t0:t1"', id="bad-span"),
        pytest.param(SAL, {fields.PROMPT: QUESTION, fields.TARGET_SPAN: "0:999"}, "token(s)", id="span-too-long"),
        pytest.param(SAL, {fields.PROMPT: QUESTION, fields.IG_STEPS: -3}, "ig_steps", id="negative-ig-steps"),
        pytest.param(GEN, {fields.PROMPT: 42}, "must be a string", id="prompt-not-text"),
    ],
)
def test_bad_requests_get_a_clear_message_and_the_server_keeps_answering(client, model, example, expected):
    message = _error_message(_post(client, model, [example]))
    assert expected in message
    assert client.get("/get_info").status_code == 200
    assert _preds(client, GEN, {fields.PROMPT: QUESTION})[0][fields.RESPONSE]


def test_malformed_body_gets_a_clear_message(client):
    r = client.post(f"/get_preds?model={GEN}", data=json.dumps({"examples": []}))
    assert '"inputs"' in _error_message(r)
    r = client.post("/get_preds", data=json.dumps({"inputs": []}))
    assert "?model=" in _error_message(r)


def test_concurrent_requests_are_serialized_not_broken(lit):
    # Two prompts, four requests at once (was three prompts, six): each salience request computes its matrices.
    prompts = [f"Name a color that starts with the letter {c}." for c in "BG"]
    results, errors = {}, []

    def work(model, prompt):
        try:
            results[(model, prompt)] = _preds(Client(lit), model, {fields.PROMPT: prompt})[0]
        except Exception as e:  # pylint: disable=broad-except
            errors.append(e)

    threads = [threading.Thread(target=work, args=(m, p)) for p in prompts for m in (SAL, GEN)]
    for th in threads:
        th.start()
    info = Client(lit).get("/get_info")  # metadata is served while models run
    for th in threads:
        th.join()
    assert info.status_code == 200
    assert not errors
    for p in prompts:
        assert results[(SAL, p)][fields.RESPONSE] == results[(GEN, p)][fields.RESPONSE]


# ---------------------------------------------------------------------------
# Client root (no model needed) and the real server process.


def test_client_root_is_offline_and_loads_the_bundle_after_main_js(tmp_path):
    bundle = tmp_path / "dist" / "sequence_salience.js"
    bundle.parent.mkdir()
    bundle.write_text("console.log('bundle');", encoding="utf-8")
    root = tmp_path / "root"
    client_build.build_client_root(str(root), bundle_path=str(bundle))
    html = (root / "static" / "index.html").read_text(encoding="utf-8")
    assert not re.search(r"""(href|src)=["']https?://""", html)
    assert re.search(r'<script src="main\.js"></script>\s*<script src="sequence_salience\.js"></script>', html)
    assert (root / "main.js").is_file() and (root / "sequence_salience.js").is_file()
    css = (root / "fonts" / "fonts.css").read_text(encoding="utf-8")
    for family in ("Roboto", "Roboto Mono", "Material Icons", "Material Icons Outlined", "Google Sans"):
        assert f"font-family: '{family}';" in css
    for url in re.findall(r'url\("([^"]+)"\)', css):
        assert (root / "fonts" / url).is_file()
    # Rebuilding copies nothing unless a source changed.
    stamp = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    client_build.build_client_root(str(root), bundle_path=str(bundle))
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()} == stamp
    bundle.write_text("console.log('bundle v2');", encoding="utf-8")
    client_build.build_client_root(str(root), bundle_path=str(bundle))
    assert (root / "sequence_salience.js").read_text(encoding="utf-8") == "console.log('bundle v2');"


def test_client_root_without_bundle_still_builds_and_warns(tmp_path, caplog):
    root = tmp_path / "root"
    client_build.build_client_root(str(root), bundle_path=str(tmp_path / "missing.js"))
    html = (root / "static" / "index.html").read_text(encoding="utf-8")
    assert "sequence_salience.js" not in html and '<script src="main.js">' in html
    assert "npm run build" in caplog.text


@pytest.mark.parametrize("ts_name,layout_tag", [
    pytest.param("TAG", layouts.SALIENCE_MODULE_TAG, id="salience"),
    pytest.param("INSIDE_TAG", layouts.INSIDE_MODULE_TAG, id="inside"),
    pytest.param("EXPLAIN_TAG", layouts.EXPLAIN_MODULE_TAG, id="explain"),
])
def test_layout_tags_match_the_frontend_modules(ts_name, layout_tag):
    # No skip: a module whose declaration moved or vanished fails here (it used to skip when
    # frontend/src/element.ts was absent, which hid exactly that).
    assert frontend_source.exported_string(ts_name) == layout_tag


def test_frontend_constant_lookup_follows_moves_and_fails_when_missing(tmp_path):
    (tmp_path / "salience").mkdir()
    (tmp_path / "salience" / "module.ts").write_text("export const TAG = 'moved-module';\n", encoding="utf-8")
    assert frontend_source.exported_string("TAG", tmp_path) == "moved-module"
    with pytest.raises(AssertionError, match="declared 0 times"):
        frontend_source.exported_string("INSIDE_TAG", tmp_path)
    (tmp_path / "copy.ts").write_text("export const TAG = 'other';\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="declared 2 times"):
        frontend_source.exported_string("TAG", tmp_path)


def test_without_the_bundle_the_layouts_leave_out_the_module(shared, tmp_path):
    root = client_build.build_client_root(str(tmp_path / "root"), bundle_path=str(tmp_path / "missing.js"))
    bare = server.build_app(model_group.lit_models(shared, MODEL), datasets.get_datasets(), root)
    info = json.loads(Client(bare).get("/get_info").data)
    assert layouts.SALIENCE_MODULE_TAG not in json.dumps(info["layouts"])
    assert "generated-text-module" in json.dumps(info["layouts"][layouts.DEFAULT_LAYOUT])


def test_app_serves_the_rewritten_page_and_local_fonts(client):
    page = client.get("/").get_data(as_text=True)
    assert '<script src="main.js">' in page and "fonts.googleapis" not in page
    assert client.get("/fonts/fonts.css").status_code == 200
    assert client.get("/main.js").status_code == 200


def test_server_command_rejects_a_malformed_data_file_naming_the_line(tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": \n', encoding="utf-8")
    # A process of its own: the start-up refusal and its exit status are what is tested.
    proc = subprocess.run([sys.executable, "-m", "lit_app.server", "--data", str(bad), "--port", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert f"{bad}, line 2" in proc.stderr


def test_span_requests_without_a_gram_tensor_fall_back_to_one_backward(default_lm, client, tmp_path):
    target = "Paris is the capital."
    example = {fields.PROMPT: QUESTION, fields.TARGET: target, fields.TARGET_SPAN: "1:3"}
    (expected,) = _preds(client, SAL, example)
    # A result too large to keep its Gram tensor (gram_max_elements=0).
    small = shared_model.SharedLM(default_lm, max_new_tokens=12, salience_config=ss.SalienceConfig(gram_max_elements=0))
    root = client_build.build_client_root(str(tmp_path / "root"), bundle_path=str(tmp_path / "none.js"))
    bare = server.build_app(model_group.lit_models(small, MODEL), datasets.get_datasets(), root)
    (pred,) = _preds(Client(bare), SAL, example)
    assert pred[fields.SALIENCE]["methods"]["grad_norm"]["gram_packed"] is None
    for method in ("grad_norm", "grad_x_input"):
        np.testing.assert_allclose(pred[fields.SPAN_SALIENCE][method], expected[fields.SPAN_SALIENCE][method],
                                   rtol=1e-3, atol=1e-6)
