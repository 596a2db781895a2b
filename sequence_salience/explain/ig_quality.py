"""IG auto-steps: raise the integrated-gradients step count until completeness holds.

Completeness (Sundararajan et al. 2017): the attributions of F = log p(target span) sum to
F(x) - F(x'). With too few quadrature steps they do not; the relative error

    |sum_i IG_i - (F(x) - F(x'))| / |F(x) - F(x')|

says by how much. `ig_auto_steps` runs IG for the span (compute_span_result) at
start_steps, start_steps * growth, ... until the relative error is below `tolerance` or
the next count would exceed `max_steps`, and reports which happened ("tolerance" or "cap")
with every count tried.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sequence_salience.errors import SalienceError
from sequence_salience.explain import scoring
from sequence_salience.explain.scoring import Cancel, Progress
from sequence_salience.methods.base import SalienceConfig
from sequence_salience.model import Generation, LanguageModel
from sequence_salience.salience import SalienceResult, compute_span_result
from sequence_salience.text import ChatPrompt

IG = "integrated_gradients"


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
      steps: the step count of the returned attributions (the last one tried).
      converged: relative error <= tolerance; stopped_by: "tolerance" or "cap".
      delta: F(x) - F(x') for the span (log-prob at the input minus at the baseline).
      tried: every run, in order.
      result: the span SalienceResult at `steps` (result.span_salience("integrated_gradients", t0, t1)).
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

    @property
    def attributions(self) -> np.ndarray:
        return self.result.span_salience(IG, *self.span)


def ig_auto_steps(
    lm: LanguageModel,
    prompt: str | ChatPrompt,
    target: str | Generation,
    *,
    span: tuple[int, int] | None = None,
    tolerance: float = 0.05,
    start_steps: int = 8,
    max_steps: int = 256,
    growth: int = 2,
    config: SalienceConfig = SalienceConfig(),
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> IGQuality:
    """Integrated gradients of a target span with as many steps as completeness needs (up to a cap).

    Args:
      span: (t0, t1) target tokens; None: the whole target.
      tolerance: largest acceptable relative completeness error (0.05 = 5 %).
      start_steps, growth, max_steps: counts tried are start_steps * growth^k <= max_steps.
      config: other IG settings (baseline, quadrature rule, chunking); its ig_steps is ignored.
      progress: progress("ig_steps", steps tried so far, max_steps) after each run.
    """
    import time

    if not (1 <= start_steps <= max_steps) or growth < 2 or tolerance <= 0:
        raise SalienceError(f"start_steps={start_steps}, max_steps={max_steps}, growth={growth}, "
                            f"tolerance={tolerance}. Fix: use 1 <= start_steps <= max_steps, growth >= 2, tolerance > 0.")
    t0, t1 = scoring.resolve_span(span, len(scoring.target_ids(lm, target)))
    tried: list[IGStep] = []
    steps = start_steps
    while True:
        scoring.check_cancel(cancel, "IG auto-steps")
        start = time.perf_counter()
        result = compute_span_result(lm, prompt, target, methods=(IG,), t0=t0, t1=t1,
                                     config=dataclasses.replace(config, ig_steps=steps), cancel=cancel)
        error = float(result.span_ig_errors[(t0, t1)])
        delta = float(np.asarray(result.span_salience(IG, t0, t1), np.float64).sum()) - error
        relative = abs(error) / max(abs(delta), 1e-12)
        tried.append(IGStep(steps, error, relative, time.perf_counter() - start))
        if progress is not None:
            progress("ig_steps", steps, max_steps)
        if relative <= tolerance:
            stopped_by = "tolerance"
            break
        if steps * growth > max_steps:
            stopped_by = "cap"
            break
        steps *= growth
    return IGQuality(steps=steps, converged=stopped_by == "tolerance", stopped_by=stopped_by, tolerance=tolerance,
                     delta=delta, relative_error=relative, span=(t0, t1), tried=tuple(tried), result=result)
