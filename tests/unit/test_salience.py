"""Salience engine vs. an independent per-target reference, toy cases derived by hand, invariances."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest
import torch

import sequence_salience as ss
from sequence_salience.methods.base import MethodContext, SalienceConfig, SharedWork
from sequence_salience.methods import paths
from sequence_salience.salience import build_inputs
from tests.unit.reference import reference_salience
from tests.unit.tiny_models import MODEL_BUILDERS, tiny_tokenizer

PROMPTS = [
    ("The capital of France is", " Paris. The capital of Italy is Rome."),
    ("Q: What is 2 + 3? A:", " 5."),
    ("Alice has three apples and Bob has two apples;", " together they have five."),
]
# The methods with a per-target reference in tests/unit/reference.py (smooth_grad has its own,
# tests/unit/test_explain_smooth_grad.py).
METHODS = ["grad_norm", "grad_x_input", "integrated_gradients"]
# The invariance tests run over every registry key (SmoothGrad included).
ALL_METHODS = ss.list_methods()


# --------------------------------------------------------------------------- reference agreement


@pytest.mark.parametrize("prompt,target", [pytest.param(p, t, id=f"pair{k}") for k, (p, t) in enumerate(PROMPTS)])
def test_all_methods_match_per_target_reference(tiny_lm, prompt, target):
    steps = 6
    config = SalienceConfig(ig_steps=steps, ig_rule="riemann_middle", target_chunk_size=3, ig_step_chunk_size=4)
    result = ss.compute_salience(tiny_lm, prompt, target, methods=METHODS, config=config)
    ref = reference_salience(tiny_lm.model, result.ids.tolist(), result.n_prompt_tokens, ig_steps=steps)
    for method in METHODS:
        np.testing.assert_allclose(result.matrices[method], ref[method], rtol=1e-5, atol=1e-7, err_msg=method)
    np.testing.assert_allclose(result.target_logprobs, ref["logp"], rtol=1e-5)
    np.testing.assert_allclose(result.extras["ig_completeness_error"], ref["ig_delta"], rtol=1e-4, atol=1e-6)


def test_salience_is_zero_at_and_after_the_predicting_position(tiny_lm):
    result = ss.compute_salience(tiny_lm, *PROMPTS[0], methods=("grad_norm",))
    matrix = result.matrices["grad_norm"]  # [T, N]
    for t in range(result.num_targets):
        assert np.all(matrix[t, result.n_prompt_tokens + t:] == 0)
        assert np.all(matrix[t, 1:result.n_prompt_tokens + t] > 0)


# --------------------------------------------------------------------------- hand-derived toy case


class _BagOfEmbeddings(torch.nn.Module):
    """logits_j = W (sum_{i <= j} x_i): a causal model whose gradients are easy to derive by hand."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(2, 2)
        self.embed.weight.data = torch.eye(2, dtype=torch.float64)
        self.config = types.SimpleNamespace(max_position_embeddings=16)

    def get_input_embeddings(self):
        return self.embed

    def forward(self, inputs_embeds, attention_mask, position_ids, use_cache=False):
        h = (inputs_embeds * attention_mask[..., None]).cumsum(1)  # [B, L, 2]
        return types.SimpleNamespace(logits=h @ self.embed.weight.T)


def test_hand_derived_toy_values():
    """Prompt [0, 0], target [1]: h = (2, 0), p = softmax(2, 0) = (e^2, 1) / (1 + e^2).

    d log p_1 / d h = e_1 - p = (-p0, p0) for both tokens, so
      grad_norm = sqrt(2) p0, grad_x_input = (-p0, p0) . (1, 0) = -p0,
      IG (zero baseline) per token = (f(1) - f(0)) / 2 with f(a) = -log(1 + e^(2a)).
    """
    model = _BagOfEmbeddings()
    lm = ss.from_modules(model, tokenizer=None, name="toy")
    inputs = build_inputs(lm, [([0, 0], [1])])
    p0 = math.exp(2) / (1 + math.exp(2))
    expected = {
        "grad_norm": [math.sqrt(2) * p0, math.sqrt(2) * p0, 0.0],
        "grad_x_input": [-p0, -p0, 0.0],
        "integrated_gradients": [(-math.log(1 + math.exp(2)) + math.log(2)) / 2] * 2 + [0.0],
    }
    config = SalienceConfig(ig_steps=64)
    for method, values in expected.items():
        out = ss.get_method(method).compute(inputs, config, MethodContext())
        np.testing.assert_allclose(out.matrix[0, 0], values, rtol=1e-6, atol=1e-12, err_msg=method)
    ig = ss.get_method("integrated_gradients").compute(inputs, config, MethodContext())
    assert abs(ig.extras["completeness_error"][0, 0]) < 1e-9


def test_method_context_shares_one_backward_and_reports_progress():
    """Two gradient-at-the-input methods handed one SharedWork run one backward: the second reads the
    first's gradients (the same tensor object), and each method's progress callback gets its units."""
    model = _BagOfEmbeddings()
    lm = ss.from_modules(model, tokenizer=None, name="toy")
    inputs = build_inputs(lm, [([0, 0, 1], [1, 0])])  # T = 2 target tokens
    config = SalienceConfig()
    work = SharedWork()
    units: list[int] = []
    norm = ss.get_method("grad_norm").compute(inputs, config, MethodContext(progress=units.append, shared=work))
    first = work.target_gradients
    assert first is not None and sum(units) == 2  # one unit per target token
    units.clear()
    xin = ss.get_method("grad_x_input").compute(inputs, config, MethodContext(progress=units.append, shared=work))
    assert work.target_gradients is first and units == []  # no second backward
    fresh = ss.get_method("grad_x_input").compute(inputs, config, MethodContext())
    np.testing.assert_array_equal(xin.matrix, fresh.matrix)
    _, grads = first  # [T, B, L, D]
    np.testing.assert_allclose(norm.matrix, grads.norm(dim=-1).permute(1, 0, 2).numpy(), rtol=1e-12)


# --------------------------------------------------------------------------- IG convergence


@pytest.mark.parametrize(
    "rule,steps",
    [
        pytest.param("gausslegendre", (2, 8, 256), id="gausslegendre"),
        pytest.param("riemann_trapezoid", (4, 32, 256), id="trapezoid"),
    ],
)
def test_ig_completeness_error_shrinks_with_steps(tiny_lm, rule, steps):
    """With a zero baseline, RMSNorm/LayerNorm make the path steep right next to alpha = 0; rules
    with nodes near 0 (Gauss-Legendre, trapezoid) converge, the midpoint rule barely does."""
    floor = 1e-5  # results are float32
    errors = []
    for n in steps:
        r = ss.compute_salience(tiny_lm, *PROMPTS[1], methods=("integrated_gradients",),
                                config=SalienceConfig(ig_steps=n, ig_rule=rule))
        errors.append(float(np.abs(r.extras["ig_completeness_error"]).max()))
    assert errors[0] > 10 * floor, errors  # the coarse rule is visibly wrong ...
    assert errors[1] < errors[0] and errors[2] <= max(errors[1], floor), errors  # ... and refining helps
    assert errors[2] < 0.2 * errors[0], errors


@pytest.mark.parametrize("rule", paths.QUADRATURE_RULES)
def test_quadrature_weights_integrate_polynomials(rule):
    alphas, weights = paths.quadrature(16, rule)
    assert weights.sum() == pytest.approx(1.0)
    assert np.all((alphas >= 0) & (alphas <= 1))
    assert float(weights @ alphas) == pytest.approx(0.5, abs=1 / 16)  # integral of a over [0, 1]


@pytest.mark.parametrize("baseline", paths.BASELINES)
def test_ig_baselines_satisfy_completeness(tiny_lm, baseline):
    r = ss.compute_salience(tiny_lm, *PROMPTS[1], methods=("integrated_gradients",),
                            config=SalienceConfig(ig_steps=128, ig_baseline=baseline))
    assert np.abs(r.extras["ig_completeness_error"]).max() < 0.02


# --------------------------------------------------------------------------- invariances


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_batched_equals_one_by_one(tiny_lm, padding_side):
    config = SalienceConfig(ig_steps=4, target_chunk_size=2, ig_step_chunk_size=3, smooth_grad_samples=4)
    batched = ss.compute_salience_batch(tiny_lm, PROMPTS, methods=ALL_METHODS, config=config,
                                        padding_side=padding_side)
    for (prompt, target), got in zip(PROMPTS, batched):
        single = ss.compute_salience(tiny_lm, prompt, target, methods=ALL_METHODS, config=config)
        assert got.tokens == single.tokens
        for method in ALL_METHODS:
            np.testing.assert_allclose(got.matrices[method], single.matrices[method], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(got.extras["grad_gram"], single.extras["grad_gram"], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("method", ALL_METHODS)
@pytest.mark.parametrize("span", [(0, None), (1, 3), (2, 3)], ids=["whole", "middle", "one"])
def test_span_salience_equals_direct_span_computation(tiny_lm, method, span):
    config = SalienceConfig(ig_steps=5, smooth_grad_samples=3)
    prompt, target = PROMPTS[0]
    result = ss.compute_salience(tiny_lm, prompt, target, methods=(method,), config=config)
    direct = ss.compute_span_salience(tiny_lm, prompt, target, method, *span, config=config)
    np.testing.assert_allclose(result.span_salience(method, *span), direct, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("backward", ["vmap", "loop"])
def test_chunk_size_and_backward_strategy_do_not_change_results(tiny_lm, backward):
    a = ss.compute_salience(tiny_lm, *PROMPTS[2], methods=ALL_METHODS, config=SalienceConfig(
        target_chunk_size=1, ig_steps=3, ig_step_chunk_size=1, smooth_grad_samples=3, backward="vmap"))
    b = ss.compute_salience(tiny_lm, *PROMPTS[2], methods=ALL_METHODS, config=SalienceConfig(
        target_chunk_size=64, ig_steps=3, ig_step_chunk_size=3, smooth_grad_samples=3, backward=backward))
    for method in ALL_METHODS:
        np.testing.assert_allclose(a.matrices[method], b.matrices[method], rtol=1e-8, atol=1e-12)


# --------------------------------------------------------------------------- registry and bad input


def test_registry_lists_methods_with_metadata():
    assert ss.list_methods() == ["grad_norm", "grad_x_input", "integrated_gradients", "smooth_grad"]
    assert not ss.get_method("grad_norm").signed and not ss.get_method("grad_norm").linear
    assert ss.get_method("grad_x_input").linear and ss.get_method("integrated_gradients").signed


@pytest.mark.parametrize(
    "prompt,target,methods,match",
    [
        pytest.param("", "x", ("grad_norm",), "prompt is empty", id="empty-prompt"),
        pytest.param("   ", "x", ("grad_norm",), "prompt is empty", id="blank-prompt"),
        pytest.param("Hello", "", ("grad_norm",), "target is empty", id="empty-target"),
        pytest.param("Hello " * 200, "x", ("grad_norm",), r"context is 128", id="over-long"),
        pytest.param("Hello", "x", ("saliency_magic",), r"grad_norm, grad_x_input, integrated_gradients", id="unknown-method"),
        pytest.param("Hello", "x", (), "No salience methods", id="no-methods"),
    ],
)
def test_bad_input_raises_one_clear_error(tiny_lm, prompt, target, methods, match):
    with pytest.raises(ss.SalienceError, match=match):
        ss.compute_salience(tiny_lm, prompt, target, methods=methods)


@pytest.mark.parametrize(
    "config,match",
    [
        pytest.param(SalienceConfig(ig_steps=0), "at least 1", id="zero-steps"),
        pytest.param(SalienceConfig(ig_baseline="noise"), "zero, pad, mean", id="bad-baseline"),
        pytest.param(SalienceConfig(ig_rule="simpson"), "gausslegendre", id="bad-rule"),
    ],
)
def test_bad_ig_config_is_a_clear_error(tiny_lm, config, match):
    with pytest.raises(ss.SalienceError, match=match):
        ss.compute_salience(tiny_lm, *PROMPTS[1], methods=("integrated_gradients",), config=config)


def test_span_out_of_range_is_a_clear_error(tiny_lm):
    r = ss.compute_salience(tiny_lm, *PROMPTS[1])
    with pytest.raises(ss.SalienceError, match="outside"):
        r.span_salience("grad_x_input", 0, r.num_targets + 1)


def test_bfloat16_model_gives_float32_results_close_to_float32():
    """The dtype path: a bf16 model computes in bf16 and returns float32 arrays near the fp32 ones."""
    ref_lm = ss.from_modules(MODEL_BUILDERS["llama"](seed=0).float(), tiny_tokenizer(), name="fp32")
    bf_lm = ss.from_modules(MODEL_BUILDERS["llama"](seed=0).to(torch.bfloat16), tiny_tokenizer(), name="bf16")
    assert bf_lm.dtype == torch.bfloat16
    a = ss.compute_salience(ref_lm, *PROMPTS[0], methods=METHODS, config=SalienceConfig(ig_steps=4))
    b = ss.compute_salience(bf_lm, *PROMPTS[0], methods=METHODS, config=SalienceConfig(ig_steps=4))
    for method in METHODS:
        assert b.matrices[method].dtype == np.float32 and np.isfinite(b.matrices[method]).all()
        scale = np.abs(a.matrices[method]).max()
        assert np.abs(a.matrices[method] - b.matrices[method]).max() < 0.1 * scale, method


def test_progress_reports_every_method_up_to_its_total(tiny_lm):
    calls = []
    config = SalienceConfig(ig_steps=4, target_chunk_size=2, ig_step_chunk_size=2)
    r = ss.compute_salience(tiny_lm, *PROMPTS[0], methods=METHODS, config=config,
                            progress=lambda m, done, total: calls.append((m, done, total)))
    for method in METHODS:
        seen = [(d, t) for m, d, t in calls if m == method]
        total = r.num_targets * (4 if method == "integrated_gradients" else 1)
        assert seen and seen[-1] == (total, total), (method, seen)
        assert [d for d, _ in seen] == sorted(d for d, _ in seen)  # never goes back
    assert len([c for c in calls if c[0] == "grad_norm"]) > 1  # reported per chunk, not only at the end
