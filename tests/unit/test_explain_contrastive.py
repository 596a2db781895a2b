"""Contrastive salience: linear methods equal the difference of two single-target results;
grad_norm equals the norm of the difference of independently computed gradients."""

from __future__ import annotations

import numpy as np
import pytest

import sequence_salience as ss
from sequence_salience import explain as ex
from sequence_salience.methods.base import SalienceConfig
from tests.unit import explain_reference as ref
from tests.unit.tiny_models import MODEL_BUILDERS, wrap

PROMPT = "Q: What is 2 + 3? A:"
TARGET, FOIL = " 5.", " 7 apples"  # different lengths on purpose


@pytest.fixture(scope="module", params=sorted(MODEL_BUILDERS))
def tiny_lm(request) -> ss.LanguageModel:
    return wrap(MODEL_BUILDERS[request.param](seed=0), request.param)


def test_linear_methods_are_the_difference_of_two_single_target_results(tiny_lm):
    config = SalienceConfig(ig_steps=4, smooth_grad_samples=3, smooth_grad_noise=0.2)
    methods = ("grad_x_input", "integrated_gradients", "smooth_grad")
    res = ex.contrastive_salience(tiny_lm, PROMPT, TARGET, FOIL, methods=methods, config=config)
    a = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=methods, config=config)
    b = ss.compute_salience(tiny_lm, PROMPT, FOIL, methods=methods, config=config)
    P = a.n_prompt_tokens
    assert len(res.tokens) == P and res.offsets.shape == (P, 2)
    for m in methods:
        want = a.span_salience(m)[:P].astype(np.float64) - b.span_salience(m)[:P]
        np.testing.assert_allclose(res.values[m], want, rtol=1e-4, atol=1e-6, err_msg=m)
    assert res.target_logprob == pytest.approx(float(a.target_logprobs.sum()), rel=1e-5)
    assert res.foil_logprob == pytest.approx(float(b.target_logprobs.sum()), rel=1e-5)


def test_grad_norm_is_the_norm_of_the_gradient_difference(tiny_lm):
    res = ex.contrastive_salience(tiny_lm, PROMPT, TARGET, FOIL, methods=("grad_norm",))
    prompt_ids = tiny_lm.encode_prompt(PROMPT).ids
    g_t = ref.span_gradient(tiny_lm.model, prompt_ids, tiny_lm.tokenize(TARGET).ids)
    g_f = ref.span_gradient(tiny_lm.model, prompt_ids, tiny_lm.tokenize(FOIL).ids)
    want = (g_t - g_f).norm(dim=-1).numpy()
    np.testing.assert_allclose(res.values["grad_norm"], want, rtol=1e-5, atol=1e-8)
    # Not the difference of the two norms: the norm of the difference.
    assert not np.allclose(res.values["grad_norm"], np.abs(g_t.norm(dim=-1) - g_f.norm(dim=-1)).numpy())


def test_contrastive_errors(tiny_lm):
    with pytest.raises(ss.SalienceError, match="same text"):
        ex.contrastive_salience(tiny_lm, PROMPT, TARGET, TARGET)
    with pytest.raises(ss.SalienceError, match="target is empty"):
        ex.contrastive_salience(tiny_lm, PROMPT, TARGET, "")


@pytest.mark.parametrize("methods", [
    pytest.param(("grad_norm", "grad_x_input"), id="gradient-methods"),
    pytest.param(("grad_x_input", "integrated_gradients"), id="with-ig"),
])
def test_progress_counts_units_up_to_the_announced_total(tiny_lm, methods):
    config = SalienceConfig(ig_steps=6, ig_step_chunk_size=2) if "integrated_gradients" in methods else SalienceConfig()
    seen = []
    res = ex.contrastive_salience(tiny_lm, PROMPT, TARGET, FOIL, methods=methods, config=config,
                                  progress=lambda stage, done, total: seen.append((stage, done, total)))
    total = ex.contrastive_units(methods, config)
    # Hand-counted: grad_norm one backward; per continuation one gradient pass (+ 6 IG steps).
    assert total == (3 if "grad_norm" in methods else 2 * (1 + 6))
    assert {s for s, _, _ in seen} == {"contrastive"} and {t for _, _, t in seen} == {total}
    dones = [d for _, d, _ in seen]
    assert dones[0] == 0 and dones[-1] == total and dones == sorted(dones)
    if "integrated_gradients" in methods:
        assert len(set(dones)) > 4  # IG reports within its run, not only at the end
    assert list(res.values) == list(methods)


def test_cancel_stops_within_the_work(tiny_lm):
    calls = []

    def cancel():
        calls.append(1)
        return len(calls) > 2

    with pytest.raises(ss.ComputationCancelled):
        ex.contrastive_salience(tiny_lm, PROMPT, TARGET, FOIL, methods=("grad_norm", "integrated_gradients"),
                                config=SalienceConfig(ig_steps=8, ig_step_chunk_size=2), cancel=cancel)
