"""load_model(device_map=...): a model sharded by accelerate gives the salience of the whole model.

This machine has no GPU, so the model is split between CPU memory and disk offload
(accelerate keeps offloaded weights on disk and loads each module's weights for its
forward through hooks): the same dispatch hooks that move activations between GPUs,
but not true multi-device execution: execution across two GPUs has not been run. The top-level
module returns its outputs to the input device, so salience only needs `lm.device`; the embedding
table must stay in memory (an offloaded one is a SalienceError); code that reads other weights
directly (inside/: FFN value vectors, the unembedding) sees `meta` tensors for modules offloaded to disk.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sequence_salience as ss
from sequence_salience import model as model_lib
from tests.unit.tiny_models import tiny_llama, tiny_tokenizer

PROMPT = "The capital of France is"
TARGET = " Paris. The capital of Italy is Rome."
METHODS = ("grad_norm", "grad_x_input", "integrated_gradients")
CONFIG = ss.SalienceConfig(ig_steps=4)
# With this budget accelerate keeps the embedding and layer 0 in CPU memory and offloads
# layer 1, the final norm and lm_head to disk (the float32 model is 151 kB).
SPLIT_IN_TWO = {"cpu": 120_000, "disk": "1GB"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_llama")
    tiny_llama(seed=0).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def whole(folder):
    return ss.load_model(str(folder))


@pytest.fixture(scope="module")
def whole_result(whole):
    return ss.compute_salience(whole, PROMPT, TARGET, methods=METHODS, config=CONFIG)


def _assert_same_salience(sharded, whole_result):
    got = ss.compute_salience(sharded, PROMPT, TARGET, methods=METHODS, config=CONFIG)
    assert got.tokens == whole_result.tokens
    np.testing.assert_allclose(got.target_logprobs, whole_result.target_logprobs, rtol=1e-5, atol=1e-6)
    for method in METHODS:
        want = whole_result.matrices[method]  # [T, N]
        assert np.abs(want).max() > 0
        np.testing.assert_allclose(got.matrices[method], want, rtol=1e-4, atol=1e-6, err_msg=method)


def test_auto_device_map_split_by_max_memory_gives_the_same_salience(folder, whole_result):
    sharded = ss.load_model(str(folder), device_map="auto", max_memory=SPLIT_IN_TWO)
    placement = sharded.model.hf_device_map
    assert set(placement.values()) == {"cpu", "disk"}, placement  # really split in two
    assert placement["model.embed_tokens"] == "cpu"
    assert sharded.device == torch.device("cpu")  # inputs go where the input embedding is
    # Offloaded weights are not in memory between forward passes.
    assert sharded.model.lm_head.weight.device.type == "meta"
    _assert_same_salience(sharded, whole_result)


def test_explicit_per_module_device_map_gives_the_same_salience_and_generation(folder, whole, whole_result):
    device_map = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.layers.0": "disk",
                  "model.layers.1": "cpu", "model.norm": "disk", "lm_head": "cpu"}
    sharded = ss.load_model(str(folder), device_map=device_map)
    assert sharded.model.hf_device_map == device_map
    assert sharded.model.model.layers[0].mlp.up_proj.weight.device.type == "meta"
    _assert_same_salience(sharded, whole_result)
    config = ss.GenerationConfig(max_new_tokens=6)
    assert sharded.generate(PROMPT, config).ids == whole.generate(PROMPT, config).ids


def test_offloaded_input_embedding_is_a_clear_error(folder):
    # Too little CPU memory for even the first module: accelerate offloads everything.
    with pytest.raises(ss.SalienceError, match="input embedding") as info:
        ss.load_model(str(folder), device_map="auto", max_memory={"cpu": 60_000, "disk": "1GB"})
    assert "Fix" in str(info.value)


def test_device_and_device_map_together_is_an_error(folder):
    with pytest.raises(ss.SalienceError, match="pass one of them"):
        ss.load_model(str(folder), device="cuda", device_map="auto")
    with pytest.raises(ss.SalienceError, match="only apply with device_map"):
        ss.load_model(str(folder), max_memory={"cpu": "1GiB"})


def test_parse_max_memory():
    assert model_lib.parse_max_memory("0=20GiB, 1=20GiB,cpu=60GiB") == {0: "20GiB", 1: "20GiB", "cpu": "60GiB"}
    with pytest.raises(ss.SalienceError, match="DEVICE=SIZE"):
        model_lib.parse_max_memory("cpu:60GiB")
