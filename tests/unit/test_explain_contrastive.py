"""Contrastive salience: linear methods equal the difference of two single-target results;
grad_norm equals the norm of the difference of independently computed gradients."""

from __future__ import annotations

import numpy as np
import pytest

import sequence_salience as ss
from sequence_salience import explain as ex
from sequence_salience.methods.base import SalienceConfig
from tests.unit import explain_reference as ref


PROMPT = "Q: What is 2 + 3? A:"
TARGET, FOIL = " 5.", " 7 apples"  # different lengths on purpose


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


@pytest.mark.parametrize("span", [(1, 3), (2, 3)], ids=["tokens1-3", "token2"])
def test_a_selected_span_is_contrasted_with_the_foil_at_the_same_position(tiny_lm, span):
    """log p(target[t0:t1] | prompt + target[:t0]) - log p(foil | prompt + target[:t0]), and its gradient,
    from plain unpadded passes (explain_reference), over the P + t0 context tokens."""
    t0, t1 = span
    res = ex.contrastive_salience(tiny_lm, PROMPT, TARGET, FOIL, methods=("grad_norm", "grad_x_input"), span=span)
    prompt_ids = list(tiny_lm.encode_prompt(PROMPT).ids)
    target_ids = list(tiny_lm.tokenize(TARGET).ids)
    foil_ids = list(tiny_lm.tokenize(FOIL).ids)
    context = prompt_ids + target_ids[:t0]
    span_ids = target_ids[t0:t1]
    want_t = ref.span_logprob(tiny_lm.model, context, span_ids, 0, len(span_ids))
    want_f = ref.span_logprob(tiny_lm.model, context, foil_ids, 0, len(foil_ids))
    assert res.target_logprob == pytest.approx(want_t, rel=1e-5)
    assert res.foil_logprob == pytest.approx(want_f, rel=1e-5)
    assert res.logprob_difference == pytest.approx(want_t - want_f, rel=1e-5)
    g = ref.span_gradient(tiny_lm.model, context, span_ids) - ref.span_gradient(tiny_lm.model, context, foil_ids)
    np.testing.assert_allclose(res.values["grad_norm"], g.norm(dim=-1).numpy(), rtol=1e-5, atol=1e-8)
    emb = tiny_lm.model.get_input_embeddings().weight[context].detach().double()
    np.testing.assert_allclose(res.values["grad_x_input"], (g * emb).sum(-1).numpy(), rtol=1e-4, atol=1e-7)
    # The context: the prompt, then the answer before the span; the span's own text is named.
    assert len(res.tokens) == len(context) == res.offsets.shape[0] and res.span == span
    assert res.n_prompt_tokens == len(prompt_ids)
    assert res.text == res.text[:res.prompt_end] + tiny_lm.tokenizer.decode(target_ids[:t0])
    assert res.target_text == tiny_lm.tokenizer.decode(span_ids)


def test_the_whole_answer_is_contrasted_only_when_it_is_selected(tiny_lm):
    T = len(tiny_lm.tokenize(TARGET).ids)
    whole = ex.contrastive_salience(tiny_lm, PROMPT, TARGET, FOIL, methods=("grad_norm",))
    same = ex.contrastive_salience(tiny_lm, PROMPT, TARGET, FOIL, methods=("grad_norm",), span=(0, T))
    part = ex.contrastive_salience(tiny_lm, PROMPT, TARGET, FOIL, methods=("grad_norm",), span=(0, 1))
    np.testing.assert_array_equal(whole.values["grad_norm"], same.values["grad_norm"])
    assert whole.target_logprob == same.target_logprob and whole.span == (0, T)
    assert part.target_logprob != pytest.approx(whole.target_logprob)
    with pytest.raises(ss.SalienceError, match="outside"):
        ex.contrastive_salience(tiny_lm, PROMPT, TARGET, FOIL, span=(0, T + 1))
