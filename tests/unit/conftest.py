"""Fixtures shared by the unit tests: the seeded tiny random models (tests/unit/tiny_models.py).

A module may define its own `tiny_lm` or `llama` (another seed, a saved copy); pytest then uses that.
"""

from __future__ import annotations

import pytest

import sequence_salience as ss
from tests.unit.tiny_models import MODEL_BUILDERS, wrap


@pytest.fixture(scope="module", params=sorted(MODEL_BUILDERS))
def tiny_lm(request) -> ss.LanguageModel:
    """Each tiny model in turn (gpt2, llama), seed 0, float64; one per test module."""
    return wrap(MODEL_BUILDERS[request.param](seed=0), request.param)


@pytest.fixture(scope="module")
def llama() -> ss.LanguageModel:
    """The tiny Llama alone (seed 0, float64); one per test module."""
    return wrap(MODEL_BUILDERS["llama"](seed=0), "llama")
