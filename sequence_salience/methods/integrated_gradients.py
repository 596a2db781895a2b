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


def _setup(inputs: ModelInputs, config: SalienceConfig):
    alphas, weights = paths.quadrature(config.ig_steps, config.ig_rule)
    baseline = paths.baseline_embeddings(config.ig_baseline, inputs.embeds, inputs.embedding_matrix, inputs.pad_id)
    dev = inputs.embeds.device
    return torch.tensor(alphas, device=dev), torch.tensor(weights, device=dev, dtype=torch.float32), baseline


def _step_chunks(config: SalienceConfig):
    for s0 in range(0, config.ig_steps, config.ig_step_chunk_size):
        yield slice(s0, min(s0 + config.ig_step_chunk_size, config.ig_steps))


def compute(inputs: ModelInputs, config: SalienceConfig, cache: dict) -> MethodOutput:
    alphas, weights, baseline = _setup(inputs, config)
    batch, seq_len, dim = inputs.embeds.shape
    num_t = inputs.target_ids.shape[1]
    avg_grads = torch.zeros(num_t, batch, seq_len, dim, device=inputs.embeds.device)  # [T, B, L, D]
    progress = cache.get("progress")
    for steps in _step_chunks(config):
        n = steps.stop - steps.start
        path = paths.interpolate(baseline, inputs.embeds, alphas[steps])  # [B * n, L, D]
        row_weights = weights[steps].repeat(batch)  # [B * n]
        # Keep (targets per backward) x (rows per forward) roughly constant.
        chunk = max(1, (config.target_chunk_size * 2) // (batch * n))
        _, g = per_target_gradients(
            inputs.repeat(n), path, chunk, row_weights=row_weights,
            reduce=lambda g: g.view(g.shape[0], batch, n, seq_len, dim).sum(2),
            backward=resolve_backward(config.backward, inputs.embeds.device),
            on_chunk=(lambda c, n=n: progress(c * n)) if progress is not None else None,
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


def compute_span(inputs: ModelInputs, target_weights: torch.Tensor, config: SalienceConfig) -> np.ndarray:
    alphas, weights, baseline = _setup(inputs, config)
    batch, seq_len, dim = inputs.embeds.shape
    total = torch.zeros(batch, seq_len, dim, device=inputs.embeds.device)  # [B, L, D]
    for steps in _step_chunks(config):
        n = steps.stop - steps.start
        path = paths.interpolate(baseline, inputs.embeds, alphas[steps])  # [B * n, L, D]
        _, g = weighted_gradient(
            inputs.repeat(n), path, target_weights.repeat_interleave(n, 0), row_weights=weights[steps].repeat(batch)
        )  # [B * n, L, D]
        total += g.view(batch, n, seq_len, dim).sum(1)
    return (total * (inputs.embeds - baseline).float()).sum(-1).cpu().numpy()  # [B, L]


METHOD = SalienceMethod(
    name="integrated_gradients",
    title="Integrated gradients",
    signed=True,
    linear=True,
    compute=compute,
    compute_span=compute_span,
    paper="https://arxiv.org/abs/1703.01365",
)
