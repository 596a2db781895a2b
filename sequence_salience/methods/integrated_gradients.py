"""Integrated gradients (Sundararajan et al. 2017, https://arxiv.org/abs/1703.01365).

IG_t,i = (x_i - x'_i) . integral_0^1 d log p(target_t) / d x_i (x' + a (x - x')) da,
approximated by quadrature (methods/paths.py). Steps run as one batch (in chunks
of `ig_step_chunk_size`), and all target tokens share each batched backward.
Signed and linear in the target. Completeness: sum_i IG_t,i should equal
log p_t(x) - log p_t(x'); `extras["completeness_error"]` reports the difference.
"""

from __future__ import annotations

import numpy as np
import torch

from sequence_salience.methods import paths
from sequence_salience.methods.base import MethodOutput, ModelInputs, SalienceConfig, SalienceMethod
from sequence_salience.methods.gradients import (
    per_target_gradients,
    resolve_backward,
    target_logprobs,
    weighted_gradient,
)
from sequence_salience.slices import SliceSizer, batches


def _setup(inputs: ModelInputs, config: SalienceConfig):
    alphas, weights = paths.quadrature(config.ig_steps, config.ig_rule)
    baseline = paths.baseline_embeddings(config.ig_baseline, inputs.embeds, inputs.embedding_matrix, inputs.pad_id)
    dev = inputs.embeds.device
    return torch.tensor(alphas, device=dev), torch.tensor(weights, device=dev, dtype=torch.float32), baseline


def _step_chunks(config: SalienceConfig, rows: int, seq_len: int, sizer: SliceSizer | None = None):
    """Slices of steps per forward batch: at most ig_step_chunk_size, fewer for long inputs."""
    size = max(1, min(config.ig_step_chunk_size, config.chunk_token_budget // max(1, rows * seq_len)))
    return batches(config.ig_steps, size, sizer)


def compute(inputs: ModelInputs, config: SalienceConfig, cache: dict) -> MethodOutput:
    alphas, weights, baseline = _setup(inputs, config)
    batch, seq_len, dim = inputs.embeds.shape
    num_t = inputs.target_ids.shape[1]
    avg_grads = torch.zeros(num_t, batch, seq_len, dim, device=inputs.embeds.device)  # [T, B, L, D]
    progress = cache.get("progress")
    sizer = cache.get("sizer")
    for steps in _step_chunks(config, batch, seq_len, sizer):
        n = steps.stop - steps.start
        path = paths.interpolate(baseline, inputs.embeds, alphas[steps])  # [B * n, L, D]
        row_weights = weights[steps].repeat(batch)  # [B * n]
        # Keep (targets per backward) x (rows per forward) roughly constant.
        chunk = max(1, min((config.target_chunk_size * 2) // (batch * n),
                           config.chunk_token_budget // (batch * n * seq_len)))
        _, g = per_target_gradients(
            inputs.repeat(n), path, chunk, row_weights=row_weights,
            reduce=lambda g: g.view(g.shape[0], batch, n, seq_len, dim).sum(2),
            backward=resolve_backward(config.backward, inputs.embeds.device),
            on_chunk=(lambda c, n=n: progress(c * n)) if progress is not None else None,
            sizer=sizer,
        )  # [T, B, L, D]
        avg_grads += g
    diff = (inputs.embeds - baseline).float()  # [B, L, D]
    ig = (avg_grads * diff[None]).sum(-1).permute(1, 0, 2)  # [B, T, L]
    with torch.no_grad():
        lp_input = target_logprobs(inputs, inputs.embeds)  # [B, T]
        lp_base = target_logprobs(inputs, baseline)  # [B, T]
    error = ig.sum(-1) - (lp_input - lp_base)  # [B, T]
    error = error * inputs.target_mask
    return MethodOutput(
        matrix=ig.cpu().numpy(),
        extras={"completeness_error": error.cpu().numpy(), "baseline_logprobs": lp_base.cpu().numpy()},
    )


def compute_span(
    inputs: ModelInputs, target_weights: torch.Tensor, config: SalienceConfig, progress=None
) -> np.ndarray:
    """IG of sum_t target_weights[b, t] * log p(target_t): one batch of steps (in chunks).

    progress: optional callable, called with the number of steps finished after each chunk
      (it may raise to cancel the computation).
    """
    alphas, weights, baseline = _setup(inputs, config)
    batch, seq_len, dim = inputs.embeds.shape
    total = torch.zeros(batch, seq_len, dim, device=inputs.embeds.device)  # [B, L, D]
    for steps in _step_chunks(config, batch, seq_len):
        n = steps.stop - steps.start
        path = paths.interpolate(baseline, inputs.embeds, alphas[steps])  # [B * n, L, D]
        _, g = weighted_gradient(
            inputs.repeat(n), path, target_weights.repeat_interleave(n, 0), row_weights=weights[steps].repeat(batch)
        )  # [B * n, L, D]
        total += g.view(batch, n, seq_len, dim).sum(1)
        if progress is not None:
            progress(n)
    return (total * (inputs.embeds - baseline).float()).sum(-1).cpu().numpy()  # [B, L]


def span_completeness_error(
    inputs: ModelInputs, target_weights: torch.Tensor, config: SalienceConfig, attributions: np.ndarray
) -> np.ndarray:
    """sum_i IG_i - (F(x) - F(x')) for F = sum_t target_weights[b, t] log p(target_t).

    attributions: <float32>[B, L] from compute_span. Returns <float32>[B]. Two forward passes.
    """
    _, _, baseline = _setup(inputs, config)
    with torch.no_grad():
        lp_input = target_logprobs(inputs, inputs.embeds)  # [B, T]
        lp_base = target_logprobs(inputs, baseline)  # [B, T]
    w = target_weights.to(lp_input.device).float()
    delta = ((lp_input - lp_base) * w).sum(-1).cpu().numpy()  # [B]
    return (np.asarray(attributions).sum(-1) - delta).astype(np.float32)


NAME = "integrated_gradients"

METHOD = SalienceMethod(
    name=NAME,
    label="Integrated gradients",
    short="IG",
    cost_unit="one backward per target per step",
    count_field="ig_steps",
    count_unit="steps",
    default_count=SalienceConfig.ig_steps,
    progress_counts=True,
    span_error=span_completeness_error,
    signed=True,
    linear=True,
    compute=compute,
    compute_span=compute_span,
    paper="https://arxiv.org/abs/1703.01365",
)
