"""Our per-token matrices against an independent peer: captum's LLMGradientAttribution.

captum (pytorch/captum) explains a generated response one target token at a time: for target
k it runs the model on prompt + target[:k], takes the log probability of target k, and
attributes it to the output of the embedding layer with a wrapped layer method, summed over
the embedding dimension. With LayerGradientXActivation that is our definition of grad_x_input,
restricted to the prompt's columns, computed by a different code base with one backward per
target. Tiny random models in float64 (our matrices are stored in float32, hence rtol 1e-5).

captum's LayerIntegratedGradients is a different quantity, so it is not compared: its baseline
is the prompt re-tokenized as token id 0 (not the zero vector) and the response prefix stays
fixed on the path, whereas ours moves every position (completeness over all N columns).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from captum import attr as captum_attr  # a dev dependency (pyproject.toml), installed by make setup

import sequence_salience as ss
from tests.unit.tiny_models import MODEL_BUILDERS, tiny_tokenizer, wrap


PAIRS = [
    ("The capital of France is", " Paris. The capital of Italy is Rome."),
    ("Alice has three apples and Bob has two apples;", " together they have five."),
]


def _embedding_layer(model: torch.nn.Module) -> torch.nn.Module:
    return model.get_input_embeddings()


def _captum_matrix(lm: ss.LanguageModel, layer_method, result) -> np.ndarray:
    """captum's [T, n_prompt] token attributions for the same prompt ids and target ids."""
    tokenizer = tiny_tokenizer()
    prompt_ids = result.ids[: result.n_prompt_tokens].tolist()
    text = tokenizer.decode(prompt_ids, skip_special_tokens=True)
    inp = captum_attr.TextTokenInput(text, tokenizer)
    assert inp.to_model_input().view(-1).tolist() == prompt_ids, "captum must see the same prompt tokens"
    llm_attr = captum_attr.LLMGradientAttribution(layer_method, tokenizer)
    target = torch.tensor(result.ids[result.n_prompt_tokens:].tolist())
    out = llm_attr.attribute(inp, target=target)
    return out.token_attr.detach().double().numpy()  # [T, n_prompt]


@pytest.fixture(scope="module", params=sorted(MODEL_BUILDERS))
def tiny_lm(request) -> ss.LanguageModel:
    return wrap(MODEL_BUILDERS[request.param](seed=1), request.param)


@pytest.mark.parametrize("prompt,target", PAIRS)
def test_grad_x_input_matrix_equals_captum_layer_gradient_x_activation(tiny_lm, prompt, target):
    result = ss.compute_salience(tiny_lm, prompt, target, methods=("grad_x_input",))
    layer = captum_attr.LayerGradientXActivation(tiny_lm.model, _embedding_layer(tiny_lm.model))
    peer = _captum_matrix(tiny_lm, layer, result)
    ours = result.matrices["grad_x_input"][:, : result.n_prompt_tokens]
    assert peer.shape == ours.shape
    assert np.abs(peer).max() > 1e-6  # a non-trivial comparison
    np.testing.assert_allclose(ours, peer, rtol=1e-5, atol=1e-8)
