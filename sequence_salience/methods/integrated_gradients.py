"""Integrated gradients (Sundararajan et al. 2017, https://arxiv.org/abs/1703.01365).

IG_t,i = (x_i - x'_i) . integral_0^1 d log p(target_t) / d x_i (x' + a (x - x')) da,
approximated by quadrature (methods/paths.py). Steps run as one batch (in chunks
of `ig_step_chunk_size`), and all target tokens share each batched backward: the
sampling loop (methods/sampling.py) shared with SmoothGrad, with its budget rule.
Signed and linear in the target. Completeness: sum_i IG_t,i should equal
log p_t(x) - log p_t(x'); `extras["completeness_error"]` reports the difference.

Steps until completeness holds (`ig_search_tolerance` > 0): the rule on ig_steps points, then on twice
as many, and so on, until sum_t |error_t| <= ig_search_tolerance * sum_t |delta_t| for every example
(delta_t = log p_t(x) - log p_t(x'); for a span, its one error and delta) or the next count would pass
ig_search_max_steps. Progress counts every count up to the cap (`search_points`, the record's most_units): the bar
moves while later counts run and fills when the search stops. The
result says what it cost (`steps_used`: path points evaluated over every count tried, `forwards`: those
plus the two log-prob forwards) beside the completeness error of the last count. The counts are not
nested: a Riemann rule with the endpoint alpha = 0 would reuse its points, but at the zero baseline of
an RMSNorm model without biases the gradient there is ~1/sqrt(eps) times the input's, and its weight
1/(2n) makes the error fall only as 1/n (tiny random Llama: 134, 67, 33, ..., 1.7 nats at 5 ... 257
points); Gauss-Legendre never evaluates the endpoints.
Why it is needed (docs/benchmarks.md "Integrated gradients completeness"): on the default model
the zero baseline's log p is the uniform distribution's (no biases, RMSNorm(0) = 0: every logit 0),
and just above it the last RMSNorm rescales any tiny residual to full size, so log p jumps by
~20 nats within alpha < 0.003 and then swings by 65 nats around alpha = 0.4-0.6; a fixed 16-point
rule lands one node in the jump and reports thousands of nats.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from sequence_salience import field_rules
from sequence_salience.errors import SalienceError
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


def _check_tolerance(value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise SalienceError(f"ig_search_tolerance={value}. Fix: use 0 (exactly ig_steps) or a relative error "
                            "in (0, 1), e.g. 0.05 for 5 %.")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Integrated gradients' settings (fields of SalienceConfig once registered).

    Attributes:
      ig_steps: integration steps (the count, STEPS).
      ig_baseline: "zero" (default), "pad" or "mean" (see methods/paths.py).
      ig_rule: quadrature rule: "gausslegendre" (default) or a Riemann rule (paths.QUADRATURE_RULES).
      ig_search_tolerance: 0: exactly ig_steps; > 0: the largest relative completeness error accepted, the steps
        doubled from ig_steps until it holds or ig_search_max_steps (module docstring).
      ig_search_max_steps: the most steps of one count in that search.
    """

    ig_steps: int = STEPS.default
    ig_baseline: str = "zero"
    ig_rule: str = "gausslegendre"
    ig_search_tolerance: float = dataclasses.field(default=0.0, metadata={
        "flag": "--ig-search-tolerance", "type": float, "metavar": "REL", "check": _check_tolerance,
        "help": "integrated gradients: double the steps from --ig-steps until the completeness error is at most "
                "REL of the log-prob change (e.g. 0.05), or --ig-search-max-steps; 0 (default): exactly --ig-steps"})
    ig_search_max_steps: int = dataclasses.field(default=STEPS.hi, metadata={
        "flag": "--ig-search-max-steps", "type": int, "metavar": "N",
        "help": "integrated gradients with --ig-search-tolerance: the most steps tried (default 256)"})


def _setup(inputs: ModelInputs, config: SalienceConfig):
    _check_tolerance(config.ig_search_tolerance)
    alphas, weights = paths.quadrature(config.ig_steps, config.ig_rule)
    baseline = paths.baseline_embeddings(config.ig_baseline, inputs.embeds, inputs.embedding_matrix, inputs.pad_id)
    dev = inputs.embeds.device
    return torch.tensor(alphas, device=dev), torch.tensor(weights, device=dev, dtype=torch.float32), baseline


def _path(inputs: ModelInputs, baseline: torch.Tensor, alphas: torch.Tensor):
    """The sampling loop's points: steps sl of every example's path, <float>[B * n, L, D]."""
    return lambda sl: paths.interpolate(baseline, inputs.embeds, alphas[sl])


def _deltas(inputs: ModelInputs, baseline: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p_t(x) - log p_t(x') <float32>[B, T], log p_t(x') <float32>[B, T]): two forwards."""
    with torch.no_grad():
        lp_input = target_logprobs(inputs, inputs.embeds)  # [B, T]
        lp_base = target_logprobs(inputs, baseline)  # [B, T]
    return lp_input - lp_base, lp_base


def _within(error: torch.Tensor, delta: torch.Tensor, tolerance: float) -> bool:
    """sum |error| <= tolerance * sum |delta| over the last axis, for every example (error, delta: [B, ...])."""
    err, dlt = error.abs().reshape(error.shape[0], -1).sum(-1), delta.abs().reshape(delta.shape[0], -1).sum(-1)
    return bool((err <= tolerance * dlt).all())


def search_points(config: SalienceConfig) -> int:
    """The most path points a run may evaluate: ig_steps, or with the search every count up to its cap."""
    if config.ig_search_tolerance <= 0:
        return config.ig_steps
    n, points = config.ig_steps, config.ig_steps
    while 2 * n <= config.ig_search_max_steps:
        n *= 2
        points += n
    return points


def _doubling(config: SalienceConfig, device, gradients, converged):
    """`ig_rule` on n = ig_steps points, then on 2n, 4n, ... until converged(total) or 2n would pass
    ig_search_max_steps. gradients(alphas, weights) -> the weighted gradient sum; returns (total, points
    evaluated over all counts)."""
    n, points = config.ig_steps, 0
    while True:
        alphas, weights = paths.quadrature(n, config.ig_rule)
        total = gradients(torch.tensor(alphas, device=device), torch.tensor(weights, device=device,
                                                                             dtype=torch.float32))
        points += n
        if converged(total) or 2 * n > config.ig_search_max_steps:
            return total, points
        n *= 2


def compute(inputs: ModelInputs, config: SalienceConfig, context: MethodContext) -> MethodOutput:
    alphas, weights, baseline = _setup(inputs, config)
    diff = (inputs.embeds - baseline).float()  # [B, L, D]
    delta, lp_base = _deltas(inputs, baseline)
    mask = inputs.target_mask

    def gradients(alphas, weights):  # context.progress counts (target x step) units
        return sampled_target_gradients(inputs, config, len(alphas), _path(inputs, baseline, alphas), weights,
                                        on_units=context.progress, sizer=context.sizer)  # [T, B, L, D]

    def ig_of(grads):
        return (grads * diff[None]).sum(-1).permute(1, 0, 2)  # [B, T, L]

    if config.ig_search_tolerance > 0:
        grads, points = _doubling(config, inputs.embeds.device, gradients, lambda g: _within(
            (ig_of(g).sum(-1) - delta) * mask, delta * mask, config.ig_search_tolerance))
    else:
        grads, points = gradients(alphas, weights), config.ig_steps
    ig = ig_of(grads)
    error = (ig.sum(-1) - delta) * mask  # [B, T]
    return MethodOutput(
        matrix=ig.cpu().numpy(),
        extras={"completeness_error": error.cpu().numpy(), "baseline_logprobs": lp_base.cpu().numpy(),
                "steps_used": np.full(ig.shape[:2], points, np.float32),  # [B, T]: one search per batch
                "forwards": np.full(ig.shape[:2], points + 2, np.float32)},
    )


def compute_span(
    inputs: ModelInputs, target_weights: torch.Tensor, config: SalienceConfig, progress=None
) -> np.ndarray:
    """IG of sum_t target_weights[b, t] * log p(target_t): one batch of steps (in chunks).

    progress: optional callable, called with the number of steps finished after each chunk
      (it may raise to cancel the computation).
    """
    alphas, weights, baseline = _setup(inputs, config)
    diff = (inputs.embeds - baseline).float()  # [B, L, D]

    def gradients(alphas, weights):
        return sampled_span_gradient(inputs, target_weights, config, len(alphas), _path(inputs, baseline, alphas),
                                     weights, progress)  # [B, L, D]

    if config.ig_search_tolerance > 0:
        w = target_weights.to(inputs.embeds.device).float()
        delta = (_deltas(inputs, baseline)[0] * w).sum(-1)  # [B]
        total, _ = _doubling(config, inputs.embeds.device, gradients, lambda g: _within(
            (g * diff).sum((-1, -2)) - delta, delta, config.ig_search_tolerance))
    else:
        total = gradients(alphas, weights)
    return (total * diff).sum(-1).cpu().numpy()  # [B, L]


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


def accepted_error(config: SalienceConfig, default: float) -> float:
    """The relative completeness error a view accepts: the search's tolerance when it ran, else `default`."""
    return float(config.ig_search_tolerance) if config.ig_search_tolerance > 0 else default


def search_note(config: SalienceConfig, cost: tuple[int, int] | None) -> str:
    """What to say when the attributions do not add up: where the step search stopped, or how to run it."""
    if config.ig_search_tolerance > 0:
        spent = "" if cost is None else f" after {cost[0]} steps ({cost[1]} forwards)"
        return f"The step search stopped at its cap (ig_search_max_steps={config.ig_search_max_steps}){spent}; "
    return ("Set ig_search_tolerance (e.g. 0.05) to double the steps until they add up, up to "
            "ig_search_max_steps; ")


NAME = "integrated_gradients"
# The result extras it declares (SalienceResult.extras[...]), each <float32>[T]: the completeness error; the cost
# (path points evaluated; those plus the two log-prob forwards), the same for every target (one search).
COMPLETENESS_ERROR = "ig_completeness_error"
STEPS_USED = "ig_steps_used"
FORWARDS = "ig_forwards"

METHOD = SalienceMethod(
    name=NAME, label="Integrated gradients", short="IG", signed=True, linear=True,
    paper="https://arxiv.org/abs/1703.01365", cost_unit="one backward per target per step",
    trust="Only when its completeness check passes (the values sum to the log-prob change from the baseline within "
          "the stated tolerance); a failed check means the values are not meaningful at this step count.",
    compute=compute, compute_span=compute_span, span_error=span_completeness_error,
    result_extras=(ResultExtra(COMPLETENESS_ERROR, "completeness_error", "T", "sum of the attributions minus"
                               " (log p(x) - log p(baseline)) per target token", payload="completeness_error"),
                   ResultExtra(STEPS_USED, "steps_used", "T", "path points evaluated (ig_steps, or what the"
                               " ig_search_tolerance search used)", payload="steps_used"),
                   ResultExtra(FORWARDS, "forwards", "T", "forward rows run: the path points and the two"
                               " log-prob forwards", payload="forwards")),
    error_extra=COMPLETENESS_ERROR, count=STEPS, count_unit="steps", progress_counts=True, settings=Settings, job_tag="ig", matrix_detail="ig_matrix",
    most_units=search_points,
)
