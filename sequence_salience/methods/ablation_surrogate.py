"""A ContextCite surrogate: a sparse linear model of the target's log-odds over random segment ablations.

Cohen-Wang, Shah, Georgiev & Madry, "ContextCite: Attributing Model Generation to Context" (2024,
https://arxiv.org/abs/2409.00729): k random masks keep each segment with probability 1/2 (seeded);
each edited prompt is scored (forward passes only), and a Lasso (methods/lasso.py, ContextCite's
LassoRegression) fits log p / (1 - p) of the target span on the masks. The coefficients are the
segment values: the change in log-odds when the segment is kept. Signed. The fit's quality on
ablations it was not fitted on (R^2 and correlation, mean and spread over 20 random 4-fold splits)
comes with the values; a poor
fit (R^2 < AblationConfig.min_r2) says the linear surrogate does not explain the model here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from sequence_salience.field_rules import FieldRule
from sequence_salience.methods import lasso
from sequence_salience.methods.base import AblationConfig, SegmentMethod, SegmentOutput, SegmentProblem

# The count: random ablations it is fitted on. ContextCite's default is 64; 32 here: on the shipped rows 64 were
# no more faithful, at twice the cost.
MASKS = FieldRule("surrogate_masks", int, 32, 1, 256, "ablation surrogate: random ablations it is fitted on"
                  " (one forward each)", flag="--ablations")


@dataclasses.dataclass(frozen=True)
class Settings:
    """The surrogate's settings (fields of AblationConfig once registered).

    Attributes:
      surrogate_masks: k, the random ablations the surrogate is fitted on (the count, MASKS).
      surrogate_keep: probability that a segment is kept in a random ablation (ContextCite: 0.5).
      surrogate_alpha: the Lasso's L1 weight on standardized masks and log-odds per target token
        (ContextCite's LassoRegression: 0.01).
      surrogate_folds: folds of the cross-validated fit quality (held-out R^2 and correlation).
      surrogate_repeats: random splits into those folds; the quality is their mean, with the spread
        (smallest and largest split's R^2), as one split of 32 ablations is a noisy figure.
      min_r2: below this held-out R^2 the surrogate's values come with a warning.
    """

    surrogate_masks: int = MASKS.default
    surrogate_keep: float = 0.5
    surrogate_alpha: float = 0.01
    surrogate_folds: int = 4
    surrogate_repeats: int = 20
    min_r2: float = 0.5



def masks(n_segments: int, config: AblationConfig) -> np.ndarray:
    """<bool>[k, S] the seeded random ablations (True = kept)."""
    rng = np.random.default_rng(config.seed)
    return rng.random((config.surrogate_masks, n_segments)) < config.surrogate_keep


def rows(n_segments: int, config: AblationConfig) -> int:
    return config.surrogate_masks


def fit_warning(quality: Mapping[str, float], config: AblationConfig) -> str:
    """What makes the surrogate's values doubtful, with what to do; "" for a good fit or no fit (its record's
    `warning`, ablation.fit_warning)."""
    r2 = quality.get("r2")
    if r2 is None:
        return ""
    if not np.isfinite(r2):
        return ("The surrogate's fit could not be checked (its random ablations barely change the target's "
                "probability). Fix: use leave one segment out, or a coarser granularity.")
    low, high = quality.get("r2_low", r2), quality.get("r2_high", r2)
    spread = f" (from {low:.2f} to {high:.2f} over random splits)" if high > low else ""
    if r2 < config.min_r2:
        return (f"The surrogate explains only R\u00b2 = {r2:.2f}{spread} of the held-out ablations (below "
                f"{config.min_r2:.2f}): segments interact, and a linear model of them is a poor summary. Fix: "
                f"read leave one segment out beside it, or raise the number of ablations "
                f"(now {config.surrogate_masks}).")
    if low < config.min_r2:
        return (f"The surrogate's held-out R\u00b2 is {r2:.2f} on average, but it ranges from {low:.2f} to "
                f"{high:.2f} over random splits of its ablations, below {config.min_r2:.2f} on some: the fit is "
                "not settled. Fix: read leave one segment out beside it, or "
                f"raise the number of ablations (now {config.surrogate_masks}).")
    return ""


def compute(problem: SegmentProblem, config: AblationConfig) -> SegmentOutput:
    kept = masks(problem.n_segments, config)  # [k, S]
    prompts = [problem.edit(np.flatnonzero(~row)) for row in kept]
    logp = problem.score(prompts)  # [k]
    y = lasso.log_odds(logp)  # [k]
    fit = lasso.fit_lasso(kept, y, config.surrogate_alpha, problem.span_tokens)
    quality = lasso.cross_validated(kept, y, config.surrogate_alpha, problem.span_tokens, config.surrogate_folds,
                                     config.surrogate_repeats, config.seed)
    quality["intercept"] = fit.bias
    return SegmentOutput(values=fit.weight, kept=kept, logprobs=logp, quality=quality)


NAME = "ablation_surrogate"

METHOD = SegmentMethod(name=NAME, label="Ablation surrogate (ContextCite)", short="Surrogate",
                       menu="Ablation surrogate", signed=True,
                       paper="https://arxiv.org/abs/2409.00729", cost_unit="one forward per random ablation",
                       trust="When its R² is high: the linear fit then explains the random removals; with a low "
                             "R² segments interact and its values are not reliable (more ablations or coarser "
                             "segments help).",
                       compute=compute, rows=rows, count=MASKS, count_unit="ablations", settings=Settings,
                       warning=fit_warning)
