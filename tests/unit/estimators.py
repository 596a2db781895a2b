"""A random attention estimator for a tiny model, saved where AblationConfig(attention_estimator=...) reads it."""

from __future__ import annotations

import pathlib

import numpy as np

import sequence_salience as ss
from sequence_salience.attention import attention_shape
from sequence_salience.attention.estimator import Estimator
from sequence_salience.methods import AblationConfig


def saved_random_estimator(lm: ss.LanguageModel, path: pathlib.Path, seed: int,
                           quality: dict | None = None) -> tuple[Estimator, AblationConfig]:
    """(an estimator of `lm`'s shape with seeded normal weights, saved at `path`; the AblationConfig that reads it)."""
    shape = attention_shape(lm.model)
    est = Estimator(weight=np.random.default_rng(seed).normal(size=shape.n_features), model=lm.name, shape=shape,
                    alpha=1.0, quality=quality or {}, recipe={}, seed=0, training_hash="0" * 64)
    est.save(path)
    return est, AblationConfig(attention_estimator=str(path))
