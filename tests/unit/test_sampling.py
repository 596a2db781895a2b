"""IG and SmoothGrad share one chunked sampling loop with one budget rule (methods/sampling.py).

Every forward and every backward of either method is recorded on a tiny model: with budgets of
three sequences' worth of tokens, (targets x rows x sequence length) per backward stays within
chunk_token_budget and (rows x sequence length) per forward within graph_token_budget (each
bound alone too), and the values equal the unconstrained run and an independent per-target reference.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import sequence_salience as ss
from sequence_salience.methods import smooth_grad
from sequence_salience.methods.base import SalienceConfig
from tests.unit.reference import reference_salience, reference_smooth_grad


PROMPT, TARGET = "The capital of France is", " Paris. The capital of Italy"
SAMPLED = ("integrated_gradients", "smooth_grad")
WIDE = SalienceConfig(ig_steps=6, ig_rule="riemann_middle", smooth_grad_samples=6, smooth_grad_noise=0.3)


@pytest.fixture(scope="module")
def seq_len(llama) -> int:
    return len(llama.encode_prompt(PROMPT).ids) + len(llama.tokenize(TARGET, add_special_tokens=False).ids)


class _Recorder:
    """Tokens of every forward (rows x length) and every backward (targets x rows x length)."""

    def __init__(self, monkeypatch, model: torch.nn.Module):
        self.forwards: list[int] = []
        self.backwards: list[int] = []
        real = torch.autograd.grad

        def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
                 allow_unused=None, is_grads_batched=False, **kw):
            e = inputs[0] if isinstance(inputs, (tuple, list)) else inputs  # [M, L, D]
            targets = grad_outputs.shape[0] if is_grads_batched else 1
            self.backwards.append(targets * e.shape[0] * e.shape[1])
            return real(outputs, inputs, grad_outputs=grad_outputs, retain_graph=retain_graph,
                        create_graph=create_graph, only_inputs=only_inputs, allow_unused=allow_unused,
                        is_grads_batched=is_grads_batched, **kw)

        def forward(module, args, kwargs):
            embeds = kwargs.get("inputs_embeds")
            if embeds is not None:
                self.forwards.append(embeds.shape[0] * embeds.shape[1])

        monkeypatch.setattr(torch.autograd, "grad", grad)
        self.handle = model.register_forward_pre_hook(forward, with_kwargs=True)

    def close(self) -> None:
        self.handle.remove()


def _record(monkeypatch, lm, method: str, config: SalienceConfig) -> _Recorder:
    """The forwards and backwards of `method`'s matrix and of its span 1:4, computed with `config`."""
    rec = _Recorder(monkeypatch, lm.model)
    try:
        ss.compute_salience(lm, PROMPT, TARGET, methods=(method,), config=config)
        ss.compute_span_salience(lm, PROMPT, TARGET, method, 1, 4, config=config)
    finally:
        rec.close()
    return rec


@pytest.mark.parametrize("method", SAMPLED)
@pytest.mark.parametrize("backward", ["vmap", "loop"])
def test_the_budget_bounds_every_forward_and_backward(llama, seq_len, monkeypatch, method, backward):
    budget = 3 * seq_len  # three sequences' worth: 3 samples of 1 target, or 1 sample of 3 targets
    config = SalienceConfig(ig_steps=6, smooth_grad_samples=6, chunk_token_budget=budget, graph_token_budget=budget,
                            backward=backward)
    rec = _record(monkeypatch, llama, method, config)
    assert rec.backwards and rec.forwards
    assert max(rec.backwards) <= budget, rec.backwards
    assert max(rec.forwards) <= budget, rec.forwards
    # The budget is used: 3 steps (samples) per forward, one target each per backward.
    assert max(rec.forwards) == budget and max(rec.backwards) == budget


@pytest.mark.parametrize("method", SAMPLED)
def test_the_graph_budget_alone_bounds_the_points_per_forward(llama, seq_len, monkeypatch, method):
    """A forward's graph lives until its backward (about 1.5 MB per row-token on the default model): the graph
    budget alone, with the backward's budget wide, caps the steps (samples) per forward."""
    config = SalienceConfig(ig_steps=6, smooth_grad_samples=6, graph_token_budget=2 * seq_len)
    assert config.chunk_token_budget >= 6 * 6 * seq_len and config.ig_step_chunk_size >= 6  # neither binds
    rec = _record(monkeypatch, llama, method, config)
    assert rec.forwards and max(rec.forwards) == 2 * seq_len, rec.forwards  # 2 points per forward, never 6


@pytest.mark.parametrize("method", SAMPLED)
def test_a_span_takes_fewer_points_per_forward_with_the_same_values(llama, seq_len, monkeypatch, method):
    """A clicked span's steps (samples) run beside paused work while a person waits: span_graph_token_budget caps
    its points per forward (one here) and not the matrix's (all 6, the graph budget wide); the span's values equal
    the one-batch span's and, for IG (linear in the target), the sum of the reference matrix's rows 1-3."""
    one_batch = dataclasses.replace(WIDE, span_graph_token_budget=WIDE.graph_token_budget)
    narrow = dataclasses.replace(WIDE, span_graph_token_budget=seq_len)
    assert WIDE.graph_token_budget >= 6 * seq_len and WIDE.ig_step_chunk_size >= 6  # the graph budget binds neither
    spans = {}
    for name, config in (("one batch", one_batch), ("narrow", narrow)):
        rec = _Recorder(monkeypatch, llama.model)
        try:
            spans[name] = ss.compute_span_salience(llama, PROMPT, TARGET, method, 1, 4, config=config)
            span_forwards = list(rec.forwards)
            ss.compute_salience(llama, PROMPT, TARGET, methods=(method,), config=config)
        finally:
            rec.close()
        assert max(rec.forwards[len(span_forwards):]) == 6 * seq_len, rec.forwards  # the matrix: 6 points at once
        assert max(span_forwards) == (seq_len if name == "narrow" else 6 * seq_len), (name, span_forwards)
    np.testing.assert_allclose(spans["narrow"], spans["one batch"], rtol=1e-5, atol=1e-7)
    if method == "integrated_gradients":
        ids = ss.compute_salience(llama, PROMPT, TARGET, methods=(method,), config=WIDE)
        want = reference_salience(llama.model, ids.ids.tolist(), ids.n_prompt_tokens, ig_steps=6)[method]
        np.testing.assert_allclose(spans["narrow"], want[1:4].sum(0), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("method", SAMPLED)
def test_a_tight_budget_gives_the_same_values(llama, seq_len, method):
    tight = dataclasses.replace(WIDE, chunk_token_budget=3 * seq_len, graph_token_budget=seq_len)
    wide = ss.compute_salience(llama, PROMPT, TARGET, methods=(method,), config=WIDE)
    narrow = ss.compute_salience(llama, PROMPT, TARGET, methods=(method,), config=tight)
    np.testing.assert_allclose(narrow.matrices[method], wide.matrices[method], rtol=1e-5, atol=1e-7)
    span_wide = ss.compute_span_salience(llama, PROMPT, TARGET, method, 1, 4, config=WIDE)
    span_tight = ss.compute_span_salience(llama, PROMPT, TARGET, method, 1, 4, config=tight)
    np.testing.assert_allclose(span_tight, span_wide, rtol=1e-5, atol=1e-7)
    # Against the independent per-target reference (tests/unit/reference.py).
    ids, P = narrow.ids.tolist(), narrow.n_prompt_tokens
    if method == "integrated_gradients":
        want = reference_salience(llama.model, ids, P, ig_steps=6)[method]
    else:
        x = llama.model.get_input_embeddings().weight[torch.tensor(ids)].detach()  # [N, D]
        noisy = smooth_grad.noised_embeddings(x[None], torch.ones(1, len(ids), dtype=torch.long), 6, 0.3, 0)
        want = reference_smooth_grad(llama.model, ids, P, noisy)
    np.testing.assert_allclose(narrow.matrices[method], want, rtol=1e-4, atol=1e-6)
