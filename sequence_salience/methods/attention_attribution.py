"""Learned attention attribution: per-head attention to each segment, weighted by a per-model linear estimator.

The AT2 idea (Cohen-Wang, Chuang & Madry, "Learning to Attribute with Attention", 2025,
https://arxiv.org/abs/2504.13752), written here: one forward pass captures, for every layer and head, the
attention that the target span's rows pay to each segment (sequence_salience/attention/features.py); a linear
estimator fitted on the same model's own leave-one-out and random-mask ablations (attention/estimator.py,
`sequence-salience calibrate`) maps them to the segment's effect on log p(target span), in nats, the scale of
leave one segment out. Signed. No ablated prompt is scored: the cost is one forward, whatever the number of
segments.

The estimator: AblationConfig.attention_estimator (a file from `sequence-salience calibrate`), else the one
shipped for the embedded default model; any other model without a file gets an error naming the command.
It estimates leave-one-out; how well, on held-out prompts, is in docs/benchmarks.md.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sequence_salience.attention import (FeatureInputs, attention_shape, capture_feature_sets, capture_features,
                                         estimator_for, load_estimator, span_rows)
from sequence_salience.errors import SalienceError
from sequence_salience.methods.base import AblationConfig, SegmentMethod, SegmentOutput, SegmentProblem


def check_estimator_file(path: str | None) -> None:
    """SalienceError naming the file and the fix unless `path` is None or an estimator file (its flag's check)."""
    if path:
        load_estimator(path)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Learned attention attribution's settings (fields of AblationConfig once registered).

    Attributes:
      attention_estimator: the estimator file (`sequence-salience calibrate`); None: the one shipped for the
        embedded default model (sequence_salience/attention/).
    """

    attention_estimator: str | None = dataclasses.field(default=None, metadata={
        "flag": "--attention-estimator", "metavar": "PATH", "check": check_estimator_file,
        "help": "attention_attribution: the estimator file `sequence-salience calibrate` wrote for --model (default: "
                "the one shipped for the embedded model)"})


def rows(n_segments: int, config: AblationConfig) -> int:
    """Ablated prompts scored: none (one forward with the attention hooks, whatever the segments)."""
    return 0


def compute(problem: SegmentProblem, config: AblationConfig) -> SegmentOutput:
    tokens = problem.tokens
    if tokens is None:
        raise SalienceError("attention_attribution reads the model's attention, and this problem carries no model. "
                            "Fix: compute it with sequence_salience.ablation.segment_salience.")
    lm = tokens.lm
    estimator = estimator_for(lm.name, config.attention_estimator)
    estimator.check_model(attention_shape(lm.model), lm.name)
    rows_of_span = span_rows(tokens.n_prompt_tokens, tokens.span)
    if tokens.span_features is not None and not estimator.needs_question:  # recorded in the unedited prompt's forward
        span_f, question_f = tokens.span_features, None
    elif estimator.needs_question:  # also the last segment's own rows (the question), in the same forward
        span_f, question_f = capture_feature_sets(lm.model, tokens.ids, [rows_of_span, list(tokens.segment_tokens[-1])],
                                                  tokens.segment_tokens)  # [S, L*H] each
    else:
        span_f, question_f = capture_features(lm.model, tokens.ids, rows_of_span, tokens.segment_tokens), None
    inputs = FeatureInputs(span=span_f, question=question_f, sizes=np.array([len(t) for t in tokens.segment_tokens]))
    values = estimator.values(inputs, problem.span_tokens)  # [S]
    quality = {f"estimator_{k}": float(v) for k, v in estimator.quality.items() if k in ("cv_r2",)}
    return SegmentOutput(values=values, kept=np.zeros((0, problem.n_segments), dtype=bool), logprobs=np.zeros(0),
                         quality=quality)


NAME = "attention_attribution"

METHOD = SegmentMethod(
    name=NAME, label="Learned attention attribution", short="Attention (learned)",
    menu="Learned attention", signed=True, compute=compute,
    rows=rows, paper="https://arxiv.org/abs/2504.13752", settings=Settings, reads_attention=True,
    cost_unit="one forward (per-head attention to each segment, recorded in the unedited prompt's forward; a linear "
              "estimator fitted per model)",
    trust="An estimate learned from this model's leave-one-out maps, almost free: trust it for a first look where its "
          "held-out agreement with leave-one-out is high, and confirm the top segments before relying on them.",
)
