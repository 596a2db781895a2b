"""One row of a method evaluation: faithfulness curves vs. the baselines, as plain JSON-able data.

`evaluate_row(lm, row, config)` formats the row's prompt, takes its target (or generates
the greedy response), computes the salience of the whole response for every method ONCE
(compute_span_result: one forward + backward for the gradient methods, one batch of steps
for integrated gradients), then

* faithfulness curves (deletion and insertion) of every method and of every baseline the
  library computes (explain.faithfulness_curves: the seeded random orders, and any other
  reference curve it reports, e.g. a length baseline) from that salience -- no backward;
* optionally the input-reduction size per method (explain.reduce_prompt, same salience);
* optionally the integrated-gradients completeness error of the response span.

The outcome is a dict of lists and floats (see RowEvaluation) so that a row travels
unchanged between processes (a Ray worker and the driver) and into a JSON file; the
same row and config give the same numbers on any worker (no clock inside).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sequence_salience import field_rules
from sequence_salience.errors import SalienceError
from sequence_salience.explain.faithfulness import RANDOM, UPPER, CurvesRequest, FaithfulnessConfig, faithfulness_curves
from sequence_salience.explain.reduction import ReductionConfig, reduce_prompt
from sequence_salience.methods import DEFAULT_METHODS, get_any_method, integrated_gradients, is_segment_method
from sequence_salience.methods.base import SalienceConfig
from sequence_salience.model import GenerationConfig, LanguageModel
from sequence_salience.salience import compute_span_result, tokenized_result

IG = integrated_gradients.NAME

# A row dict from the batch file: prompt (required), system, target, chat.
Row = Mapping[str, Any]
RowEvaluation = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """What is evaluated for every row.

    Attributes:
      methods: salience methods compared (any registered method).
      faithfulness: granularity, steps, random orders, removal (FaithfulnessConfig).
      ig_steps: integrated-gradients steps (when IG is a method or ig_completeness is on).
      max_new_tokens: longest generated response for rows without a target (a row's own "max_new_tokens",
        e.g. the shipped chain-of-thought case's, replaces it for that row).
      raw: do not apply the chat template (else each row's "chat", default: if the model has one).
      reduction: also run input reduction per method and report the reduced size.
      reduction_config: its settings (its `method` is replaced by each method in turn).
      ig_completeness: also report IG's relative completeness error for the response.
    """

    methods: tuple[str, ...] = DEFAULT_METHODS
    faithfulness: FaithfulnessConfig = FaithfulnessConfig()
    ig_steps: int = field_rules.IG_STEPS.default
    max_new_tokens: int = field_rules.MAX_NEW_TOKENS.default
    raw: bool = False
    reduction: bool = False
    reduction_config: ReductionConfig = ReductionConfig(criterion="logprob", max_seconds=None)
    ig_completeness: bool = False

    def __post_init__(self):
        if isinstance(self.methods, str) or not self.methods:
            raise SalienceError(f"methods={self.methods!r}. Fix: give a tuple of method names, e.g. {DEFAULT_METHODS}.")
        for m in self.methods:
            get_any_method(m)
        if self.ig_steps < 1 or self.max_new_tokens < 1:
            raise SalienceError("ig_steps and max_new_tokens must be at least 1.")

    def fingerprint(self) -> dict[str, Any]:
        """Every setting as JSON-able data: a saved row is reused only when this is equal."""
        return json_ready(dataclasses.asdict(self))


def json_ready(value: Any) -> Any:
    """Tuples -> lists, numpy scalars/arrays -> Python numbers/lists, recursively."""
    if isinstance(value, Mapping):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_ready(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value


def ranked_of(report) -> list[str]:
    """The curve names of the methods in a FaithfulnessReport, each ordering the library ranks by
    (e.g. "grad_x_input" and "grad_x_input:abs" for a signed method, when it computes both)."""
    ranked = getattr(report, "ranked", None)
    return list(ranked()) if callable(ranked) else list(report.segment_scores)


def baselines_of(report) -> list[str]:
    """The reference curves of a FaithfulnessReport: every curve that is not a method's nor the upper
    bound (the best order found, which no method is expected to beat), random first."""
    ranked = set(ranked_of(report))
    names = [n for mode in report.curves.values() for n in mode if n not in ranked and n != UPPER]
    out = list(dict.fromkeys(names))
    return sorted(out, key=lambda n: (n != RANDOM, n))


def _row_target(lm: LanguageModel, prompt, row: Row, config: EvalConfig) -> tuple[Any, bool]:
    """(the row's target, or the model's greedy response within the row's budget; whether it was generated)."""
    target: Any = row.get("target") or None
    if target is not None:
        return target, False
    budget = row.get("max_new_tokens") or config.max_new_tokens
    target = lm.generate(prompt, GenerationConfig(max_new_tokens=budget))
    if not target.ids:
        raise SalienceError("The model generated an empty response (it ended its turn at once). "
                            "Fix: give the row a \"target\", or change the prompt.")
    return target, True


def _report_fields(report, result, generated: bool) -> RowEvaluation:
    """The RowEvaluation keys read off a faithfulness report (evaluate_row's docstring), the per-row verdicts
    and the upper bound included when the report has them."""
    baselines = baselines_of(report)
    ranked = ranked_of(report)
    curves = {mode: {name: {"logprobs": [float(v) for v in c.logprobs], "aopc": float(c.aopc)}
                     for name, c in by_name.items()} for mode, by_name in report.curves.items()}
    gaps = {mode: {m: {b: float(by_name[m].aopc - by_name[b].aopc) for b in baselines if b in by_name}
                   for m in ranked} for mode, by_name in report.curves.items()}
    first = next(iter(report.curves.values()))
    orderings = {m: getattr(first[m], "ordering", "value") for m in ranked}
    out: RowEvaluation = {
        "target": result.text[result.prompt_end:],
        "generated": generated,
        "num_targets": int(result.num_targets),
        "n_prompt_tokens": int(result.n_prompt_tokens),
        "n_segments": len(report.segments),
        "original_logprob": float(report.original_logprob),
        "empty_logprob": float(report.empty_logprob),
        "n_removed": [int(n) for n in report.n_removed],
        "baselines": baselines,
        "curves": curves,
        "gaps": gaps,
        "orderings": orderings,
    }
    if callable(getattr(report, "verdict", None)):  # the library's per-row verdict, when it gives one
        out["row_verdicts"] = {mode: {m: report.verdict(m, mode) for m in ranked} for mode in report.curves}
    if all(UPPER in by_name for by_name in report.curves.values()):
        out["upper_bound"] = {mode: float(by_name[UPPER].aopc) for mode, by_name in report.curves.items()}
        out["decidable"] = {mode: bool(report.decidable(mode)) for mode in report.curves}
        out["upper_bound_rows"] = int(report.upper_bound_rows)
    return out


def _reduction(lm: LanguageModel, prompt, target, span: tuple[int, int], method: str, config: EvalConfig,
               salience_config: SalienceConfig, result) -> dict:
    """{"kept", "n_segments", "kept_fraction", "stopped_by"} of input reduction by `method`'s salience, on the
    curves' segments."""
    rc = dataclasses.replace(config.reduction_config, method=method, granularity=config.faithfulness.granularity,
                             pattern=config.faithfulness.pattern)
    red = reduce_prompt(lm, prompt, target, span=span, config=rc, salience_config=salience_config, result=result)
    n = len(red.segments)
    kept = n - len(red.removed)
    return {"kept": kept, "n_segments": n, "kept_fraction": kept / n if n else 1.0, "stopped_by": red.stopped_by}


def evaluate_row(lm: LanguageModel, row: Row, config: EvalConfig = EvalConfig(), progress=None) -> RowEvaluation:
    """Evaluates every method of `config` on one row; returns a RowEvaluation dict.

    Keys: "target" (text), "generated" (bool), "num_targets", "n_segments", "original_logprob",
    "empty_logprob", "n_removed" [K+1], "baselines" [names], "curves" {mode: {name: {"logprobs":
    [K+1], "aopc": float}}}, "gaps" {mode: {curve: {baseline: AOPC(curve) - AOPC(baseline)}}} where
    a curve is a method's ordering (the method's name; a signed method may also have
    "<method>:abs", ranked by |value|, when the library computes it), "orderings" {curve: how it
    ranks}, "row_verdicts" (the library's per-row verdict, when it gives one), "upper_bound" {mode:
    AOPC of the best order the test found}, "decidable" {mode: whether that order beats random and
    length by the noise, i.e. whether any order can pass on this row} and "upper_bound_rows" (its
    forward rows) when the library searched it (its curve is in "curves" under "upper_bound"; it is
    not a baseline), and, when asked,
    "reduction" {method: {"kept", "n_segments", "kept_fraction", "stopped_by"}} and
    "ig_completeness" {"steps", "relative_error", "delta"}.

    Raises SalienceError for a row that cannot be evaluated (empty generation, too long, ...).
    """
    prompt = lm.format_prompt(row["prompt"], system=row.get("system") or None,
                              chat=False if config.raw else row.get("chat"))
    target, generated = _row_target(lm, prompt, row, config)
    methods = tuple(config.methods)
    token_methods = tuple(m for m in methods if not is_segment_method(m))  # segment methods: faithfulness_curves
    want_ig = config.ig_completeness and IG not in methods
    salience_config = SalienceConfig(ig_steps=config.ig_steps)
    with_ig = token_methods + ((IG,) if want_ig else ())
    result = (compute_span_result(lm, prompt, target, methods=with_ig, config=salience_config) if with_ig
              else tokenized_result(lm, prompt, target))
    span = (0, result.num_targets)
    report = faithfulness_curves(lm, CurvesRequest(
        prompt, target, methods, config=config.faithfulness,
        salience_config=salience_config, result=result,
        progress=None if progress is None else lambda s, d, t: progress("curves", d, t)))
    out = _report_fields(report, result, generated)
    if config.reduction:
        out["reduction"] = {}
        for m in token_methods:  # input reduction follows token salience; segment methods have none
            out["reduction"][m] = _reduction(lm, prompt, target, span, m, config, salience_config, result)
    if config.ig_completeness:
        error = float(result.span_ig_errors[span])
        delta = float(np.asarray(result.span_salience(IG, *span), np.float64).sum()) - error
        out["ig_completeness"] = {"steps": config.ig_steps, "relative_error": abs(error) / max(abs(delta), 1e-12),
                                  "delta": delta}
    return out


def row_methods(evaluation: RowEvaluation) -> list[str]:
    """The methods a RowEvaluation holds, in its order."""
    first = next(iter(evaluation["gaps"].values()))
    return list(first)


def check_rows(rows: Sequence[RowEvaluation]) -> None:
    """SalienceError unless every row has the same methods, modes and baselines (one config)."""
    if not rows:
        return
    def key(r):
        return row_methods(r), list(r["gaps"]), r["baselines"], sorted(r.get("reduction", {}))

    ref = key(rows[0])
    for i, r in enumerate(rows[1:], start=1):
        if key(r) != ref:
            raise SalienceError(f"row {i} was evaluated with other methods, modes or baselines than row 0. "
                                "Fix: evaluate every row with the same settings (rerun with --force).")
