"""Learned attention attribution (the AT2 idea): per-head attention from the target span to each segment,
mapped to the segment's ablation effect by a linear estimator fitted on the model's own ablations.

    features.py   per-head attention of the span rows to each segment (one forward, hooks; no T x T kept)
    estimator.py  the linear map, its ridge fit and its .npz file
    prompts.py    seeded training / evaluation prompts (four kinds, 100-4,000 tokens)
    (sequence_salience/calibration.py: `sequence-salience calibrate`, ablations of the prompts -> the fit)

The method itself is sequence_salience/methods/attention_attribution.py. An estimator for the embedded
default model ships in this folder (SHIPPED); any other model needs its own file from
`sequence-salience calibrate --model ...`.
"""

from __future__ import annotations

import functools
import pathlib

from sequence_salience.attention.estimator import Estimator, FeatureInputs, load_estimator
from sequence_salience.attention.features import (FAMILIES, AttentionShape, attention_shape, capture_feature_sets,
                                                  capture_features, span_rows)
from sequence_salience.errors import SalienceError
from sequence_salience.model import DEFAULT_MODEL_DESCRIPTION

# LanguageModel.name -> the estimator file shipped in this folder (fitted with the recipe in docs/benchmarks.md).
SHIPPED: dict[str, str] = {DEFAULT_MODEL_DESCRIPTION: "smollm2_135m.npz"}


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, mtime: float) -> Estimator:
    return load_estimator(path)


def estimator_for(model_name: str, path: str | None = None) -> Estimator:
    """The estimator in `path`, else the shipped one for `model_name`; an unknown model gets a SalienceError
    naming `sequence-salience calibrate` as the fix."""
    if path is None:
        if model_name not in SHIPPED:
            raise SalienceError(
                f"No attention estimator for the model {model_name!r}: learned attention attribution needs one "
                "fitted on that model's own ablations (one ships for the embedded default model only). Fix: run "
                "`sequence-salience calibrate --model <the same model> --out DIR` (about 20 minutes on a CPU for "
                "the default recipe) and pass DIR/estimator.npz (--attention-estimator).")
        path = str(pathlib.Path(__file__).with_name(SHIPPED[model_name]))
    p = pathlib.Path(path)
    return _load_cached(str(p), p.stat().st_mtime if p.exists() else 0.0)


__all__ = ["FAMILIES", "SHIPPED", "AttentionShape", "Estimator", "FeatureInputs", "attention_shape", "capture_feature_sets",
           "capture_features", "estimator_for", "load_estimator", "span_rows"]
