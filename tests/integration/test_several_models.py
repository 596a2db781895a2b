"""The real server with two models side by side (`--models a:default,b:<folder>`), LIT's datasets flag.

Model b is a tiny random Llama saved to a folder, built from a config over the default model's tokenizer
(tests/unit/tiny_models.py `save_tiny_llama_for`): it loads through the same `load_model` path as any HF
folder, formats prompts with the same chat template, and its (nonsense) greedy answers differ from the
default model's, so a mix-up of models, locks or caches shows. A real second model (e.g. a base and an
instruct SmolLM2, or a 360M beside the 135M) would add meaningful differences to compare and about its
own weight size in memory; nothing in the serving path depends on the size.
"""

import json

import numpy as np
import pytest
import torch

import sequence_salience as ss
from lit_app.data import datasets
from lit_app.schema import fields
from tests.server_process import ServerProcess
from tests.unit.tiny_models import save_tiny_llama_for

PROMPT = "What is the capital of France?"
MAX_NEW = 8


@pytest.fixture(scope="module")
def tiny_folder(default_lm, tmp_path_factory) -> str:
    return save_tiny_llama_for(default_lm.tokenizer, tmp_path_factory.mktemp("tiny_llama"))


@pytest.fixture(scope="module")
def two_models(tiny_folder, tmp_path_factory):
    """Its own process, not the session's `lit_server`: the start-up flags are what is tested (--models,
    --datasets, --max_examples, --warm_start)."""
    with ServerProcess(["--models", f"a:default,b:{tiny_folder}", "--max_new_tokens", str(MAX_NEW),
                        "--datasets", "sample_prompts,case_studies", "--max_examples", "3", "--warm_start", "1"],
                       tmp_path_factory.mktemp("server")) as proc:
        yield proc


def _preds(server, model: str, data: dict) -> dict:
    status, _, body = server.post_json(f"/get_preds?model={model}", {"inputs": [{"id": "x", "data": data}]})
    assert status == 200, body
    return json.loads(body)[0]


def _greedy(lm, prompt: str) -> str:
    """Greedy decoding with plain transformers over the core's formatted prompt (independent of the server)."""
    chat = lm.format_prompt(prompt)
    ids = lm.tokenizer(chat.text, return_tensors="pt", add_special_tokens=False).input_ids
    with torch.no_grad():
        out = lm.model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False, pad_token_id=lm.tokenizer.pad_token_id)
    return lm.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


def test_both_models_are_served_each_with_its_own_wrappers(two_models):
    status, _, body = two_models.post_json("/get_info", {})
    assert status == 200, body
    info = json.loads(body)
    names = list(info["models"])
    assert names[:2] == ["a", "b"]  # the generation models first: LIT selects "a"
    for m in ("a", "b"):
        for companion in (f"_{m}_salience", f"_{m}_tokenizer", f"_{m}_explain", f"_{m}_inside_trace"):
            assert companion in names, companion
    assert list(info["datasets"])[:2] == ["sample_prompts", "case_studies"]
    log = two_models.log_tail(20000)
    for m, spec in (("a", "default"), ("b", "tiny_llama")):
        assert any(line.count(f"Model {m!r} (") and spec in line and "MiB of weights" in line
                   for line in log.splitlines()), log
        for d in ("sample_prompts", "case_studies"):  # LIT's --warm_start 1: every example, each model
            assert f"Warm start of model {m!r} on dataset {d!r}: 3 generation(s)" in log, log


def test_each_model_answers_with_its_own_weights_and_caches(two_models, default_lm, tiny_folder):
    tiny = ss.load_model(tiny_folder)
    want = {"a": _greedy(default_lm, PROMPT), "b": _greedy(tiny, PROMPT)}
    assert want["a"] != want["b"]
    for _ in range(2):  # the second round comes from each model's own cache
        for m in ("a", "b"):
            assert _preds(two_models, m, {fields.PROMPT: PROMPT})[fields.RESPONSE] == want[m]
    for m in ("a", "b"):
        s = _preds(two_models, f"_{m}_salience", {fields.PROMPT: PROMPT})[fields.SALIENCE]
        assert s["text"][s["prompt_end"]:] == want[m]
        t, n = len(s["target_logprobs"]), len(s["tokens"])
        assert np.asarray(s["methods"]["grad_norm"]["matrix"]).shape == (t, n)


def test_warm_start_left_every_response_cached(two_models):
    """After --warm_start 1 the data table's one request for all rows gets every response (a request for
    several rows answers from the caches only: lit_app/wrappers/generation.py)."""
    _, _, body = two_models.post_json("/get_dataset?dataset_name=case_studies", {})
    rows = [{"id": r["id"], "data": r["data"]} for r in json.loads(body)]
    for m in ("a", "b"):
        status, _, out = two_models.post_json(f"/get_preds?model={m}&dataset_name=case_studies", {"inputs": rows})
        assert status == 200, out
        assert all(p[fields.RESPONSE] for p in json.loads(out)), out


def test_max_examples_caps_each_dataset(two_models):
    _, _, body = two_models.post_json("/get_dataset?dataset_name=sample_prompts", {})
    rows = json.loads(body)
    assert len(rows) == 3
    lit = datasets.load_datasets([("s", datasets.LIT_SAMPLE_PATH)])["s"].examples[:3]
    assert [r["data"][fields.PROMPT] for r in rows] == [ex[fields.PROMPT] for ex in lit]
    assert [r["data"][fields.CASE] for r in rows] == [ex[fields.CASE] for ex in lit]
