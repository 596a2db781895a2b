"""IG auto-steps: raise the integrated-gradients step count until completeness holds.

Completeness (Sundararajan et al. 2017): the attributions of F = log p(target span) sum to
F(x) - F(x'). With too few quadrature steps they do not; the relative error

    |sum_i IG_i - (F(x) - F(x'))| / |F(x) - F(x')|

says by how much. `ig_auto_steps` runs IG for the span (compute_span_result) at
start_steps, start_steps * growth, ... until the relative error is below `tolerance` or
the next count would exceed `max_steps`, and reports which happened ("tolerance" or "cap")
with every count tried.

At the cap the result is the count with the smallest error (`steps`, `relative_error`,
`result`): the best figure reached, not merely the last one tried. `needed_steps` says how many
steps would reach the tolerance at the rate of the last doubling (error ~ steps^-p), only when each
of the last two doublings at least halved the error (FALLING_RATIO); otherwise None: the error is
not falling steadily, and no step count can honestly be advised. The error need not fall monotonically
before it converges (a tiny random Llama: 242 %, 108 %, 206 %, 36 %, 1.5 % at 8 ... 128 steps; on
SmolLM2 with the zero baseline it jumps between 63 % and 4,400 % up to 64 steps: docs/benchmarks.md),
so the search never stops early on a guess. `on_tried` sees the counts tried so far after each
one, for a caller that shows the best result while the search runs.

Progress counts IG steps computed, out of the steps of every count that may be tried
(`step_schedule`: 8 + 16 + ... + 256 = 504 for the defaults); a run that stops at the
tolerance finishes early, below the total.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from sequence_salience import field_rules, scoring
from sequence_salience.errors import SalienceError
from sequence_salience.methods import integrated_gradients
from sequence_salience.methods.base import SalienceConfig
from sequence_salience.model import Generation, LanguageModel
from sequence_salience.result import SalienceResult
from sequence_salience.salience import compute_span_result
from sequence_salience.scoring import Cancel, Progress
from sequence_salience.text import ChatPrompt

IG = integrated_gradients.NAME
FALLING_RATIO = 0.5  # needed_steps: only after two doublings that each left at most this share of the error


@dataclasses.dataclass(frozen=True)
class IGStep:
    """One IG run: steps, its completeness error (nats) and relative error, seconds taken."""

    steps: int
    error: float
    relative_error: float
    seconds: float


@dataclasses.dataclass(frozen=True)
class IGQuality:
    """The outcome of ig_auto_steps.

    Attributes:
      steps: the step count of the returned attributions: the one with the smallest error tried
        (the last one when the tolerance was met).
      converged: relative error <= tolerance; stopped_by: "tolerance" or "cap".
      delta: F(x) - F(x') for the span (log-prob at the input minus at the baseline).
      relative_error: that of `steps`.
      tried: every run, in order.
      result: the span SalienceResult at `steps` (result.span_salience("integrated_gradients", t0, t1)).
      needed_steps: not converged: the steps the last doubling's rate says would reach the tolerance,
        or None when the error was not falling steadily (module docstring).
    """

    steps: int
    converged: bool
    stopped_by: str
    tolerance: float
    delta: float
    relative_error: float
    span: tuple[int, int]
    tried: tuple[IGStep, ...]
    result: SalienceResult
    needed_steps: int | None = None

    @property
    def attributions(self) -> np.ndarray:
        return self.result.span_salience(IG, *self.span)


def step_schedule(start_steps: int = 8, max_steps: int = 256, growth: int = 2) -> list[int]:
    """The step counts ig_auto_steps may try, in order: start_steps * growth^k <= max_steps."""
    if not (1 <= start_steps <= max_steps) or growth < 2:
        raise SalienceError(f"start_steps={start_steps}, max_steps={max_steps}, growth={growth}. "
                            "Fix: use 1 <= start_steps <= max_steps and growth >= 2.")
    out = [start_steps]
    while out[-1] * growth <= max_steps:
        out.append(out[-1] * growth)
    return out


def ig_auto_steps(
    lm: LanguageModel,
    prompt: str | ChatPrompt,
    target: str | Generation,
    *,
    span: tuple[int, int] | None = None,
    tolerance: float = field_rules.IG_TOLERANCE.default,
    start_steps: int = 8,
    max_steps: int = 256,
    growth: int = 2,
    config: SalienceConfig = SalienceConfig(),
    progress: Progress | None = None,
    cancel: Cancel | None = None,
    on_tried: Callable[[tuple[IGStep, ...]], None] | None = None,
) -> IGQuality:
    """Integrated gradients of a target span with as many steps as completeness needs (up to a cap).

    Args:
      span: (t0, t1) target tokens; None: the whole target.
      tolerance: largest acceptable relative completeness error (0.05 = 5 %).
      start_steps, growth, max_steps: counts tried are start_steps * growth^k <= max_steps.
      config: other IG settings (baseline, quadrature rule, chunking); its ig_steps is ignored.
      progress: progress("ig_steps", IG steps computed, sum(step_schedule(...))) after every
        batch of steps; cancel: () -> bool, checked between batches (raises ComputationCancelled).
      on_tried: called with every count tried so far, after each count.
    """
    import time

    if tolerance <= 0:
        raise SalienceError(f"tolerance={tolerance}. Fix: use a relative error > 0 (0.05 = 5 %).")
    schedule = step_schedule(start_steps, max_steps, growth)
    total = sum(schedule)
    t0, t1 = scoring.resolve_span(span, len(scoring.target_ids(lm, target)))
    tried: list[IGStep] = []
    best: tuple[IGStep, SalienceResult] | None = None
    stopped_by = "cap"
    done = 0
    if progress is not None:
        progress("ig_steps", 0, total)
    for steps in schedule:
        scoring.check_cancel(cancel, "IG auto-steps")
        start = time.perf_counter()
        on_steps = None
        if progress is not None:
            def on_steps(_method: str, n: int, _total: int, before: int = done) -> None:
                progress("ig_steps", before + n, total)
        result = compute_span_result(lm, prompt, target, methods=(IG,), t0=t0, t1=t1,
                                     config=dataclasses.replace(config, ig_steps=steps), progress=on_steps,
                                     cancel=cancel)
        done += steps
        error = float(result.span_ig_errors[(t0, t1)])
        delta = float(np.asarray(result.span_salience(IG, t0, t1), np.float64).sum()) - error
        relative = abs(error) / max(abs(delta), 1e-12)
        tried.append(IGStep(steps, error, relative, time.perf_counter() - start))
        if best is None or relative < best[0].relative_error:
            best = (tried[-1], result)
        if on_tried is not None:
            on_tried(tuple(tried))
        if relative <= tolerance:
            stopped_by = "tolerance"
            break
    chosen, result = (tried[-1], result) if stopped_by == "tolerance" else best
    needed = None if stopped_by == "tolerance" else needed_steps([t.steps for t in tried],
                                                                  [t.relative_error for t in tried], tolerance)
    return IGQuality(steps=chosen.steps, converged=stopped_by == "tolerance", stopped_by=stopped_by,
                     tolerance=tolerance, delta=delta, relative_error=chosen.relative_error, span=(t0, t1),
                     tried=tuple(tried), result=result, needed_steps=needed)


def needed_steps(steps: Sequence[int], relative_errors: Sequence[float], tolerance: float,
                 ratio: float = FALLING_RATIO) -> int | None:
    """The steps at which the error would reach `tolerance` if it kept falling at the rate of the
    last doubling (error ~ steps^-p); None unless each of the last two doublings left at most
    `ratio` of the error before it (a steady fall: one good doubling after a spike, as on SmolLM2's
    4,426 % -> 63 %, promises nothing)."""
    if len(steps) < 3 or not relative_errors[-1] > 0:
        return None
    e = relative_errors
    per_doubling = []
    for k in (-2, -1):
        n0, n1, e0, e1 = steps[k - 1], steps[k], e[k - 1], e[k]
        per_doubling.append((e1 / e0) ** (np.log(2) / np.log(n1 / n0)) if e0 > 0 else 1.0)
    if not all(r <= ratio for r in per_doubling):
        return None
    p = -np.log2(per_doubling[-1])  # error ~ steps^-p
    return int(np.ceil(steps[-1] * (e[-1] / tolerance) ** (1 / p)))
