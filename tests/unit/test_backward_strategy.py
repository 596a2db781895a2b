"""The backward strategy: a model without a vmap batching rule falls back to one backward per
target, for that model only (methods/gradients.py); the values do not change."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from sequence_salience.methods.gradients import per_target_gradients, resolve_backward
from sequence_salience.salience import build_inputs
from tests.unit.tiny_models import MODEL_BUILDERS, wrap

PROMPT_IDS, TARGET_IDS = (1, 40, 41, 42, 43), (44, 45, 46)


class _NoBatchingRule(torch.autograd.Function):
    """The identity, whose backward reads a Python number from the gradient: vmap cannot batch it."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g * (1.0 + 0.0 * float(g.abs().sum().item() > -1))


class _VmapBreaker(torch.nn.Module):
    """A causal LM whose input passes through _NoBatchingRule first (same values, no vmap)."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, inputs_embeds, **kwargs):
        return self.inner(inputs_embeds=_NoBatchingRule.apply(inputs_embeds), **kwargs)


@pytest.fixture()
def models():
    lm = wrap(MODEL_BUILDERS["llama"](seed=0), "llama")
    return lm, _VmapBreaker(lm.model)


def _batched_calls(monkeypatch) -> list[bool]:
    calls: list[bool] = []
    real = torch.autograd.grad

    def grad(*args, is_grads_batched=False, **kwargs):
        calls.append(is_grads_batched)
        return real(*args, is_grads_batched=is_grads_batched, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", grad)
    return calls


def test_a_failed_vmap_turns_vmap_off_for_that_model_only(models, monkeypatch):
    lm, breaker = models
    inputs = build_inputs(lm, [(PROMPT_IDS, TARGET_IDS)])
    broken = dataclasses.replace(inputs, model=breaker)
    calls = _batched_calls(monkeypatch)
    _, want = per_target_gradients(inputs, inputs.embeds, 3, backward="loop")  # [T, 1, L, D]
    _, got = per_target_gradients(broken, broken.embeds, 3, backward=resolve_backward("auto", breaker))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10)  # the fallback's values
    # Another model still gets the vmapped backward: one batched call for its 3 targets.
    calls.clear()
    _, again = per_target_gradients(inputs, inputs.embeds, 3, backward="vmap")
    assert calls == [True]
    np.testing.assert_allclose(again.numpy(), want.numpy(), rtol=1e-10)
    # "auto" resolves per model: no second failing attempt for the one without a batching rule.
    assert resolve_backward("auto", breaker) == "loop"
    assert resolve_backward("auto", lm.model) == "vmap"


def test_explicit_strategies_are_kept_and_a_bad_one_is_a_clear_error(models):
    lm, _ = models
    assert resolve_backward("loop", lm.model) == "loop" and resolve_backward("vmap", lm.model) == "vmap"
    with pytest.raises(Exception, match="Unknown backward strategy 'magic'. Fix: use one of auto, vmap, loop"):
        resolve_backward("magic", lm.model)
