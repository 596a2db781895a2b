"""Integrated gradients (Sundararajan et al. 2017, https://arxiv.org/abs/1703.01365).

IG_t,i = (x_i - x'_i) . integral_0^1 d log p(target_t) / d x_i (x' + a (x - x')) da,
approximated by quadrature (methods/paths.py). Steps run as one batch (in chunks
of `ig_step_chunk_size`), and all target tokens share each batched backward: the
sampling loop (methods/sampling.py) shared with SmoothGrad, with its budget rule.
Signed and linear in the target. Completeness: sum_i IG_t,i should equal
log p_t(x) - log p_t(x'); `extras["completeness_error"]` reports the difference.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from sequence_salience import field_rules
from sequence_salience.field_rules import FieldRule
from sequence_salience.methods import paths
from sequence_salience.methods.base import (MethodContext, MethodOutput, ModelInputs, ResultExtra, SalienceConfig,
                                            SalienceMethod)
from sequence_salience.methods.gradients import target_logprobs
from sequence_salience.methods.sampling import sampled_span_gradient, sampled_target_gradients

# The count: integration steps (one backward per target per step).
STEPS = FieldRule("ig_steps", int, 16, 1, 256, "integrated gradients: integration steps (one backward per target"
                  " per step)")
# The explain model's "ig_auto" test reads the count's field as the most steps it tries (its own default).
AUTO_MAX_STEPS = dataclasses.replace(STEPS, default=64, help="IG auto steps: the most integration steps tried")
field_rules.add_method_rule(AUTO_MAX_STEPS, alias="IG_AUTO_MAX_STEPS", listed=False)  # the explain model reads it


@dataclasses.dataclass(frozen=True)
class Settings:
    """Integrated gradients' settings (fields of SalienceConfig once registered).

    Attributes:
      ig_steps: integration steps (the count, STEPS).
      ig_baseline: "zero" (default), "pad" or "mean" (see methods/paths.py).
      ig_rule: quadrature rule: "gausslegendre" (default) or a Riemann rule (paths.QUADRATURE_RULES).
    """

    ig_steps: int = STEPS.default
    ig_baseline: str = "zero"
    ig_rule: str = "gausslegendre"


def _setup(inputs: ModelInputs, config: SalienceConfig):
    alphas, weights = paths.quadrature(config.ig_steps, config.ig_rule)
    baseline = paths.baseline_embeddings(config.ig_baseline, inputs.embeds, inputs.embedding_matrix, inputs.pad_id)
    dev = inputs.embeds.device
    return torch.tensor(alphas, device=dev), torch.tensor(weights, device=dev, dtype=torch.float32), baseline


def _path(inputs: ModelInputs, baseline: torch.Tensor, alphas: torch.Tensor):
    """The sampling loop's points: steps sl of every example's path, <float>[B * n, L, D]."""
    return lambda sl: paths.interpolate(baseline, inputs.embeds, alphas[sl])


def compute(inputs: ModelInputs, config: SalienceConfig, context: MethodContext) -> MethodOutput:
    alphas, weights, baseline = _setup(inputs, config)
    # context.progress counts (target x step) units
    avg_grads = sampled_target_gradients(inputs, config, config.ig_steps, _path(inputs, baseline, alphas), weights,
                                         on_units=context.progress, sizer=context.sizer)  # [T, B, L, D]
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
    total = sampled_span_gradient(inputs, target_weights, config, config.ig_steps, _path(inputs, baseline, alphas),
                                  weights, progress)  # [B, L, D]
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
# The result extra it declares (SalienceResult.extras[COMPLETENESS_ERROR]): <float32>[T].
COMPLETENESS_ERROR = "ig_completeness_error"

METHOD = SalienceMethod(
    name=NAME, label="Integrated gradients", short="IG", signed=True, linear=True,
    paper="https://arxiv.org/abs/1703.01365", cost_unit="one backward per target per step",
    compute=compute, compute_span=compute_span, span_error=span_completeness_error,
    result_extras=(ResultExtra(COMPLETENESS_ERROR, "completeness_error", "T", "sum of the attributions minus"
                               " (log p(x) - log p(baseline)) per target token", payload="completeness_error"),),
    error_extra=COMPLETENESS_ERROR, count=STEPS, count_unit="steps", progress_counts=True, settings=Settings, job_tag="ig", matrix_detail="ig_matrix",
)
