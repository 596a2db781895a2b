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

import numpy as np

from sequence_salience import field_rules
from sequence_salience.methods import lasso
from sequence_salience.methods.base import AblationConfig, SegmentMethod, SegmentOutput, SegmentProblem


def masks(n_segments: int, config: AblationConfig) -> np.ndarray:
    """<bool>[k, S] the seeded random ablations (True = kept)."""
    rng = np.random.default_rng(config.seed)
    return rng.random((config.surrogate_masks, n_segments)) < config.surrogate_keep


def rows(n_segments: int, config: AblationConfig) -> int:
    return config.surrogate_masks


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

METHOD = SegmentMethod(name=NAME, label="Ablation surrogate (ContextCite)", short="Surrogate", signed=True,
                       paper="https://arxiv.org/abs/2409.00729", cost_unit="one forward per random ablation",
                       compute=compute, rows=rows, count=field_rules.SURROGATE_MASKS, count_unit="ablations")
