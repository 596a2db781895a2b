"""SmoothGrad: zero noise equals grad_x_input; seeded; chunking-invariant; matches a per-target reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sequence_salience as ss
from sequence_salience.methods import smooth_grad
from sequence_salience.methods.base import SalienceConfig
from tests.unit.reference import reference_smooth_grad


PROMPT, TARGET = "The capital of France is", " Paris. The capital"


def test_registered_signed_and_linear():
    assert "smooth_grad" in ss.list_methods()
    m = ss.get_method("smooth_grad")
    assert m.signed and m.linear


def test_zero_noise_equals_the_gradient_methods(tiny_lm):
    cfg = SalienceConfig(smooth_grad_noise=0.0, smooth_grad_samples=3, ig_step_chunk_size=2)
    r = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=("grad_x_input", "smooth_grad"), config=cfg)
    np.testing.assert_allclose(r.matrices["smooth_grad"], r.matrices["grad_x_input"], rtol=1e-5, atol=1e-7)
    span = ss.compute_span_salience(tiny_lm, PROMPT, TARGET, "smooth_grad", 1, 3, config=cfg)
    np.testing.assert_allclose(span, r.span_salience("grad_x_input", 1, 3), rtol=1e-5, atol=1e-7)


def test_seeded_repeatable_and_independent_of_chunking(llama):
    tiny_lm = llama
    base = dict(smooth_grad_noise=0.3, smooth_grad_samples=4)
    a = ss.compute_salience(tiny_lm, PROMPT, TARGET, ("smooth_grad",), SalienceConfig(**base, ig_step_chunk_size=4))
    b = ss.compute_salience(tiny_lm, PROMPT, TARGET, ("smooth_grad",), SalienceConfig(**base, ig_step_chunk_size=1))
    c = ss.compute_salience(tiny_lm, PROMPT, TARGET, ("smooth_grad",), SalienceConfig(**base, smooth_grad_seed=5))
    np.testing.assert_allclose(a.matrices["smooth_grad"], b.matrices["smooth_grad"], rtol=1e-6, atol=1e-9)
    assert not np.allclose(a.matrices["smooth_grad"], c.matrices["smooth_grad"])
    # Batched with another pair, left or right padded: the same values.
    for side in ("left", "right"):
        both = ss.compute_salience_batch(tiny_lm, [("Q: What is 2 + 3? A:", " 5."), (PROMPT, TARGET)], ("smooth_grad",),
                                         SalienceConfig(**base), padding_side=side)
        np.testing.assert_allclose(both[1].matrices["smooth_grad"], a.matrices["smooth_grad"], rtol=1e-5, atol=1e-8)
    # Linear: a span computed directly equals the sum of its rows.
    span = ss.compute_span_salience(tiny_lm, PROMPT, TARGET, "smooth_grad", 0, 3, config=SalienceConfig(**base))
    np.testing.assert_allclose(span, a.span_salience("smooth_grad", 0, 3), rtol=1e-5, atol=1e-8)


def test_matches_a_per_target_reference_with_the_same_noise(llama):
    tiny_lm = llama
    cfg = SalienceConfig(smooth_grad_noise=0.5, smooth_grad_samples=3)
    r = ss.compute_salience(tiny_lm, PROMPT, TARGET, ("smooth_grad",), cfg)
    ids = r.ids.tolist()
    P, N = r.n_prompt_tokens, len(ids)
    x = tiny_lm.model.get_input_embeddings().weight[torch.tensor(ids)].detach()  # [N, D]
    noisy = smooth_grad.noised_embeddings(x[None], torch.ones(1, N, dtype=torch.long), 3, 0.5, 0)  # [3, N, D]
    # Noise size: about noise x the token's embedding norm.
    ratio = (noisy - x[None]).norm(dim=-1) / x.norm(dim=-1)
    assert 0.2 < float(ratio.mean()) < 0.8
    want = reference_smooth_grad(tiny_lm.model, ids, P, noisy)  # [T, N]
    np.testing.assert_allclose(r.matrices["smooth_grad"], want, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("span", [pytest.param((0, None), id="whole"), pytest.param((1, 3), id="1:3")])
def test_span_result_equals_the_sum_of_the_matrix_rows(tiny_lm, span):
    """What the server's first highlight uses (compute_span_result) against compute_salience's matrix."""
    cfg = SalienceConfig(smooth_grad_noise=0.3, smooth_grad_samples=3, ig_step_chunk_size=2)
    full = ss.compute_salience(tiny_lm, PROMPT, TARGET, ("smooth_grad",), cfg)
    t0, t1 = span
    t1 = full.num_targets if t1 is None else t1
    seen = []
    part = ss.compute_span_result(tiny_lm, PROMPT, TARGET, ("grad_x_input", "smooth_grad"), t0, span[1], cfg,
                                  progress=lambda m, done, total: seen.append((m, done, total)))
    assert part.matrices == {} and part.has_span("smooth_grad", t0, t1)
    rows = full.matrices["smooth_grad"][t0:t1].sum(0)  # [N]
    np.testing.assert_allclose(part.span_salience("smooth_grad", t0, t1), rows, rtol=1e-5, atol=1e-7)
    # Progress counts samples (announced, then two chunks of at most 2), ending at the sample count.
    assert [s for s in seen if s[0] == "smooth_grad"] == [("smooth_grad", 0, 3), ("smooth_grad", 2, 3),
                                                          ("smooth_grad", 3, 3)]
