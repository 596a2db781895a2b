"""Learned attention attribution, verified: the estimate picks the few likely segments, leave one out measures them.

AttriBoT's proxy-then-verify idea (Liu et al., ICLR 2025, https://arxiv.org/abs/2411.15102) with the learned
estimator as the proxy: one forward captures the per-head attention of the target span's rows to each segment and
the per-model estimator maps it to an estimate of every segment's leave-one-out value
(methods/attention_attribution.py); then the VERIFY segments of largest estimate are removed one at a time and
scored exactly (the same ablation as leave_one_out, each from its first changed token on over the cached prefix
of the unedited prompt). Their values are exact leave one out; every other segment keeps an estimate, marked
as not measured (SegmentOutput.measured False, coarse_values the estimator's own value, coarse_granularity
"estimate"):

    value[s] = min(c * estimate[s], max(smallest verified value, 0))     for s not verified

c rescales the estimate to the verified segments' exact values (least squares through 0 over the verified,
at least 0), so that estimates and measurements are in one unit on this prompt; the cap keeps every
unverified segment below the verified ones (the estimator ranked it below them; only where a verified
segment turned out to lower p(target) may an unverified one, at most 0, pass it). Without the cap, an
estimate larger than its prompt's exact values put unverified segments above the verified top one
(docs/benchmarks.md).

Why VERIFY = 3: the issue's goal reads the top three (the fact first and two of leave one out's top three), and
on held-out prompts the estimate's own top three holds most of leave one out's top one (docs/benchmarks.md,
"Learned attention attribution"); each verified segment costs at most one forward (less with prefix reuse), so
three keep the whole map near one forward + backward of the prompt.
"""

from __future__ import annotations

import numpy as np

from sequence_salience.methods import attention_attribution
from sequence_salience.methods.base import ESTIMATE_MARK, AblationConfig, SegmentMethod, SegmentOutput, SegmentProblem

VERIFY = 3
ESTIMATE = ESTIMATE_MARK  # coarse_granularity of an unverified segment: its value is the estimator's


def rows(n_segments: int, config: AblationConfig) -> int:
    """Ablated prompts scored: the VERIFY segments of largest estimate (all, when there are fewer)."""
    return min(VERIFY, n_segments)


def picks(estimate: np.ndarray, n: int = VERIFY) -> list[int]:
    """The segments verified: the n of largest estimate (ties: text order)."""
    return [int(i) for i in np.argsort(-np.asarray(estimate, dtype=np.float64), kind="stable")[:n]]


def combine(estimate: np.ndarray, picked: list[int], exact: np.ndarray) -> np.ndarray:
    """<float64>[S]: exact <[V]> at the picked segments, the rescaled and capped estimate elsewhere (module doc)."""
    estimate = np.asarray(estimate, dtype=np.float64)
    exact = np.asarray(exact, dtype=np.float64)
    e = estimate[picked]
    c = max(0.0, float(e @ exact) / float(e @ e)) if float(e @ e) > 0 else 0.0
    values = np.minimum(c * estimate, max(float(exact.min()), 0.0)) if len(picked) else estimate.copy()
    values[picked] = exact
    return values


def compute(problem: SegmentProblem, config: AblationConfig) -> SegmentOutput:
    estimate = attention_attribution.compute(problem, config)
    S = problem.n_segments
    picked = picks(estimate.values, rows(S, config))
    logp = problem.score([problem.edit((s,)) for s in picked])  # [V]
    values = combine(estimate.values, picked, problem.original_logprob - logp)  # [S]
    measured = np.zeros(S, dtype=bool)
    measured[picked] = True
    kept = np.ones((len(picked), S), dtype=bool)  # [V, S] row v keeps every segment but picked[v]
    kept[np.arange(len(picked)), picked] = False
    coarse = np.where(measured, np.nan, estimate.values)
    return SegmentOutput(values=values, kept=kept, logprobs=np.asarray(logp, dtype=np.float64),
                         quality={**estimate.quality, "verified": float(len(picked))},
                         measured=measured, coarse_values=coarse,
                         coarse_granularity=tuple("" if m else ESTIMATE for m in measured))


NAME = "attention_verified"

METHOD = SegmentMethod(
    name=NAME, label="Learned attention attribution, top 3 verified", short="Attention (verified)", signed=True,
    compute=compute, rows=rows, paper="https://arxiv.org/abs/2411.15102", reads_attention=True,
    cost_unit=f"one forward (the unedited prompt's, with the attention recorded) + one per verified segment "
              f"({VERIFY}, from the segment on, over the cached prefix)",
    trust="Its top segments are measured exactly (leave one out), so their values can be trusted; the rest are the "
          "learned estimate's, a first look only.",
)
