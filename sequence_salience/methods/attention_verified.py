"""Attention and gradient, verified: the estimate and the gradient pick the segments, leave one out measures them.

AttriBoT's proxy-then-verify idea (Liu et al., ICLR 2025, https://arxiv.org/abs/2411.15102) with two proxies: the
learned estimator (one forward captures the per-head attention of the target span's rows to each segment and the
per-model estimator maps it to an estimate of every segment's leave-one-out value, methods/attention_attribution.py)
and gradient norm (grad_norm's salience of the span, summed over each segment's tokens: the server's first
highlight when it has that span, else one forward + backward; SegmentTokens.span_gradient). The candidates, in
order, alternate between the two rankings: the estimate's 1st, the gradient's 1st, the estimate's 2nd, the
gradient's 2nd, ..., a segment already listed skipped (`candidates`). They are removed one at a time and scored
exactly (the same ablation as leave_one_out, each from its first changed token on over the cached prefix of the
unedited prompt) until the verified top three is stable (`verify`, the rule below). The verified values are exact
leave one out; every other segment keeps an estimate, marked as not measured (SegmentOutput.measured False,
coarse_values the estimator's own value, coarse_granularity "estimate"):

    value[s] = min(c * estimate[s], the largest float below the smallest verified value)     for s not verified

c rescales the estimate to the verified segments' exact values (least squares through 0 over the verified,
at least 0), so that estimates and measurements are in one unit on this prompt; the cap keeps every
unverified segment below every verified one, in the estimate's order. Without the cap, an estimate larger than
its prompt's exact values put unverified segments above the verified top one (docs/benchmarks.md). The cap was
max(smallest verified value, 0) before: an unverified segment could pass a verified one whose removal raised
p(target); but below leave-one-out's top two or three most segments' exact values are small and negative
(removing a segment that does not matter raises log p a little), so that cap put unverified segments, at 0, above
the verified ones that were leave-one-out's third: over 56 held-out prompts, verifying the estimate's top 7
reached a top-3 agreement of 0.60 with it, 0.66 with this one (which equals the share of leave-one-out's top three
among the verified: the most any verification of those segments can reach). The price is rank correlation:
verified segments whose removal raised p(target) rank above the unverified, not at the bottom where leave one out
has them.

The stop rule (`verify`; AblationConfig.verify_min, verify_patience, verify_max): after each verification, the
verified top three (the three verified segments of largest exact value); stop once at least `verify_min` are
verified and the top three has been the same after `verify_patience` consecutive verifications, or at
`verify_max`, or when every segment is verified. A top three that settles after N verifications (N >= 3) stops at
N + 3 (at least 6 with the defaults, at most 12). The ablated prompts are scored in the smallest batches that give
the same result as one at a time: each batch holds the verifications that must follow before the rule can stop
(`next_batch`: 6 first with the defaults, then 1-3).

Why this rule (session 32, docs/benchmarks.md "Session 32: the verified map's rule"; it replaced the estimate's top
k = 7): the first-map bar (first_map.py) asks for two of leave one out's top three on average, and the verified
map's top three can only hold the ones among the verified. The lead simulated the candidate rules exactly from the
stored leave-one-out, gradient norm and attention features of the 70 held-out prompts of index < 120 (the "choice
set"; `bench_attention_attribution.py verify` simulates the chosen one from the same arrays):

| rule | mean verified | top-3 | sentence | line | paragraph |
|---|---:|---:|---:|---:|---:|
| estimate top 7 (before) | 7.0 | 0.64 | 0.62 | 0.74 | 0.58 |
| gradient top 7 | 7.0 | 0.70 | 0.56 | 0.76 | 0.81 |
| estimate/gradient alternating, top 7 | 7.0 | 0.70 | 0.59 | 0.83 | 0.75 |
| **alternating, adaptive: >= 4, stop when the top 3 is unchanged for 3 verifications, <= 12** | 9.0 | 0.77 | 0.68 | 0.83 | 0.83 |
| estimate, adaptive (5, 3, 15) | 9.5 | 0.70 | 0.67 | 0.80 | 0.67 |

The estimate misses leave-one-out's top three most at paragraph granularity (long prompts), where the gradient
finds them; the gradient misses them at sentence granularity, where the estimate finds them: alternating takes the
best of both for the same 7 forwards, and the adaptive stop spends more forwards only where the top three still
moves. The bold rule was chosen on the choice set from a small grid (verify_min 3-6, patience 2-4, verify_max
7-99; all reported in docs/benchmarks.md) and pre-registered before the prompts of index >= 120 (the unseen test)
were read. Cost: one forward + backward (the gradient; none when the server's first highlight has the span), one
forward (the attention, recorded in the unedited prompt's), then one forward per verified segment, from the segment
on over the cached prefix: 4-12 (6-12 in practice), 9.0 on average on the choice set, against leave one out's one
per segment.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from sequence_salience.errors import SalienceError
from sequence_salience.methods import attention_attribution
from sequence_salience.methods.base import (ESTIMATE_MARK, AblationConfig, SegmentMethod, SegmentOutput, SegmentProblem,
                                            settings_of)


@dataclasses.dataclass(frozen=True)
class Settings:
    """attention_verified's settings (fields of AblationConfig once registered); the module docstring says why
    their defaults.

    Attributes:
      verify_min: the fewest segments verified before the rule may stop.
      verify_patience: stop when the verified top three has been the same after this many consecutive
        verifications.
      verify_max: the most segments verified.
    """

    verify_min: int = 4
    verify_patience: int = 3
    verify_max: int = 12


DEFAULTS = Settings()
TOP = 3  # the verified top three the stop rule watches (the first-map bar's top three, first_map.py)
ESTIMATE = ESTIMATE_MARK  # coarse_granularity of an unverified segment: its value is the estimator's


def checked_settings(config: AblationConfig) -> Settings:
    """The stop rule's settings in `config`, checked: SalienceError naming the fix unless 1 <= verify_min <=
    verify_max and verify_patience >= 1."""
    s = settings_of(Settings, config)
    if not 1 <= s.verify_min <= s.verify_max or s.verify_patience < 1:
        raise SalienceError(f"attention_verified's stop rule needs 1 <= verify_min <= verify_max and verify_patience "
                            f">= 1; got verify_min {s.verify_min}, verify_patience {s.verify_patience}, verify_max "
                            f"{s.verify_max}. Fix: set them in AblationConfig within those bounds (defaults "
                            f"{DEFAULTS.verify_min}, {DEFAULTS.verify_patience}, {DEFAULTS.verify_max}).")
    return s


def rows(n_segments: int, config: AblationConfig) -> int:
    """Ablated prompts scored, at most: verify_max (all the segments, when there are fewer); the rule stops earlier
    once the verified top three is stable (9.0 on average over the choice set's prompts, docstring)."""
    return min(max(1, int(config.verify_max)), n_segments)


def candidates(estimate: np.ndarray, gradient: np.ndarray) -> list[int]:
    """Every segment once, in the order they are verified: the estimate's 1st, the gradient's 1st, the estimate's
    2nd, the gradient's 2nd, ..., each ranking largest first (ties: text order), a segment already listed skipped."""
    by_estimate = np.argsort(-np.asarray(estimate, dtype=np.float64), kind="stable")
    by_gradient = np.argsort(-np.asarray(gradient, dtype=np.float64), kind="stable")
    out: dict[int, None] = {}
    for pair in zip(by_estimate, by_gradient):
        for s in pair:
            out.setdefault(int(s), None)
    return list(out)


def next_batch(n: int, stable: int, limit: int, settings: Settings, top: int = TOP) -> int:
    """How many verifications follow as one batch after `n` (the top `top` unchanged for the last `stable`): those
    before which the rule cannot stop, at least 1, at most `limit - n`. It can stop at n + j only when n + j >=
    verify_min, stable + j >= verify_patience, and n + j >= top + verify_patience (the top `top` grows, so it
    changes, with each of the first `top` verifications)."""
    need = max(1, settings.verify_min - n, settings.verify_patience - stable, top + settings.verify_patience - n)
    return min(need, limit - n)


def verify(order: Sequence[int], measure: Callable[[list[int]], np.ndarray], settings: Settings = DEFAULTS,
           top: int = TOP) -> tuple[list[int], np.ndarray]:
    """The stop rule of the module docstring over the candidates `order`.

    Args:
      order: the segments in the order they are verified (`candidates`).
      measure: segments -> <float64>[len] their exact leave-one-out values (one batch of ablated prompts).
      settings: verify_min, verify_patience, verify_max.
      top: the size of the verified top the rule watches (TOP; benchmarks/bench_word_verified.py replays it with five).
    Returns:
      (the verified segments in order, <float64>[V] their exact values).
    """
    limit = min(settings.verify_max, len(order))
    picked: list[int] = []
    exact: list[float] = []
    best: frozenset[int] | None = None
    stable = 0
    while len(picked) < limit:
        batch = list(order[len(picked):len(picked) + next_batch(len(picked), stable, limit, settings, top)])
        for s, v in zip(batch, np.asarray(measure(batch), dtype=np.float64)):
            picked.append(int(s))
            exact.append(float(v))
            now = frozenset(picked[i] for i in np.argsort(-np.array(exact), kind="stable")[:top])
            stable = stable + 1 if now == best else 0
            best = now
        if len(picked) >= settings.verify_min and stable >= settings.verify_patience:
            break
    return picked, np.array(exact, dtype=np.float64)


def rescale(estimate: np.ndarray, picked: list[int], exact: np.ndarray) -> float:
    """c of the module docstring: the least-squares factor through 0 from the estimate <[S]> at the picked segments
    to their exact values <[V]>, at least 0 (0 where the estimate is 0 there)."""
    e = np.asarray(estimate, dtype=np.float64)[picked]
    return max(0.0, float(e @ exact) / float(e @ e)) if float(e @ e) > 0 else 0.0


def combine(estimate: np.ndarray, picked: list[int], exact: np.ndarray) -> np.ndarray:
    """<float64>[S]: exact <[V]> at the picked segments, the rescaled and capped estimate elsewhere (module doc)."""
    estimate = np.asarray(estimate, dtype=np.float64)
    exact = np.asarray(exact, dtype=np.float64)
    c = rescale(estimate, picked, exact)
    values = np.minimum(c * estimate, np.nextafter(float(exact.min()), -np.inf)) if len(picked) else estimate.copy()
    values[picked] = exact
    return values


def segment_sums(token_values: np.ndarray, segment_tokens: Sequence[np.ndarray]) -> np.ndarray:
    """<float64>[S] a token map <[N]> summed over each segment's tokens."""
    token_values = np.asarray(token_values, dtype=np.float64)
    return np.array([token_values[np.asarray(t, dtype=np.int64)].sum() for t in segment_tokens])


def compute(problem: SegmentProblem, config: AblationConfig) -> SegmentOutput:
    settings = checked_settings(config)
    return verified_output(problem, config, NAME, lambda e, g, measure: verify(candidates(e, g()), measure, settings))


def gradient_sums(problem: SegmentProblem, stage: str) -> np.ndarray:
    """<float64>[S] the span's gradient norm summed over each segment's tokens (SegmentTokens.span_gradient: the
    caller's first highlight, else one forward + backward); SalienceError naming the fix where the problem has none."""
    tokens = problem.tokens
    if tokens is None or tokens.span_gradient is None:
        raise SalienceError(f"{stage} orders its candidates by the span's gradient, and this problem carries none. "
                            "Fix: compute it with sequence_salience.ablation.segment_salience.")
    return segment_sums(tokens.span_gradient(), tokens.segment_tokens)


def verified_output(problem: SegmentProblem, config: AblationConfig, stage: str,
                    select: Callable[[np.ndarray, Callable[[], np.ndarray], Callable[[list[int]], np.ndarray]],
                                     tuple[list[int], np.ndarray]],
                    frames: Callable[[int, int], tuple[str, int]] | None = None,
                    merge: Callable[[np.ndarray, list[int], np.ndarray], np.ndarray] = combine) -> SegmentOutput:
    """The verified map: the segments `select(estimate [S], () -> gradient [S], measure)` verifies (the gradient
    computed only when asked for; `measure`: segments -> their exact values, one batch; attention_verified: `verify`'s
    rule over `candidates`), their exact values, the rescaled and capped estimate elsewhere (`combine`); `stage`: the
    progress frame's name (the method's own name: the server shows no stage); `frames`: None, or (segments
    verified so far, the batch's size) -> (the batch's stage, the verifications known in all) for a method whose
    batches are known ahead (word_verified); `merge`: (estimate, verified, their exact values) -> the map (`combine`;
    word_verified its own). Before it returns, `problem.partial` hears the map so far: the estimate
    alone (nothing verified: the first look, no forward of its own when the unedited prompt's pass recorded the
    attention), then after each verification batch."""
    estimate = attention_attribution.compute(problem, config)  # raises without problem.tokens
    picked: list[int] = []  # the verified segments so far, in order
    exact: list[float] = []  # their exact values
    logps: list[float] = []  # log p(span) of each verified segment's ablated prompt, in order
    problem.partial(_output(estimate, picked, exact, logps, problem.n_segments, merge))

    def measure(segments: list[int]) -> np.ndarray:
        end = len(logps) + len(segments)
        label, total = (stage, end) if frames is None else frames(len(logps), len(segments))
        problem.frame(label, len(logps), total, end)
        lp = np.asarray(problem.score([problem.edit((s,)) for s in segments]), dtype=np.float64)  # [B]
        logps.extend(float(x) for x in lp)
        values = problem.original_logprob - lp
        picked.extend(int(s) for s in segments)
        exact.extend(float(v) for v in values)
        problem.partial(_output(estimate, picked, exact, logps, problem.n_segments, merge))
        return values

    verified, values = select(estimate.values, lambda: gradient_sums(problem, stage), measure)
    return _output(estimate, verified, values, logps, problem.n_segments, merge)


def _output(estimate: SegmentOutput, picked: list[int], exact: Sequence[float], logps: list[float],
            S: int, merge: Callable[[np.ndarray, list[int], np.ndarray], np.ndarray] = combine) -> SegmentOutput:
    """The map with `picked` verified (exact values `exact`, ablated log p `logps`), the estimate elsewhere (`merge`)."""
    values = merge(estimate.values, picked, np.asarray(exact, dtype=np.float64))  # [S]
    measured = np.zeros(S, dtype=bool)
    measured[picked] = True
    kept = np.ones((len(picked), S), dtype=bool)  # [V, S] row v keeps every segment but picked[v]
    kept[np.arange(len(picked)), picked] = False
    coarse = np.where(measured, np.nan, estimate.values)
    return SegmentOutput(values=values, kept=kept, logprobs=np.array(logps, dtype=np.float64),
                         quality={**estimate.quality, "verified": float(len(picked))},
                         measured=measured, coarse_values=coarse,
                         coarse_granularity=tuple("" if m else ESTIMATE for m in measured))


NAME = "attention_verified"

METHOD = SegmentMethod(
    name=NAME, label="Attention and gradient, verified", short="Attention (verified)",
    menu="Attention, verified", signed=True,
    compute=compute, rows=rows, paper="https://arxiv.org/abs/2411.15102", reads_attention=True, settings=Settings,
    exact_measured=True, first_look=attention_attribution.NAME,
    cost_unit=f"one forward + backward (gradient) and one forward (attention), then one forward per verified segment: "
              f"{DEFAULTS.verify_min}-{DEFAULTS.verify_max}, until the top three stop changing",
    trust="Its top segments are measured exactly (leave one out), so their values can be trusted; the rest are the "
          "learned estimate's, a first look only.",
)
