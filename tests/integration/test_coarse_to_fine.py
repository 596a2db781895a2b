"""Coarse-to-fine leave one out on the embedded default model (SmolLM2-135M, float32): every word it refines has
the value of full leave one word out (the engine's leave_one_out), in fewer forwards."""

from __future__ import annotations

import numpy as np
import pytest

from lit_app.data import datasets
from sequence_salience.ablation import segment_salience
from sequence_salience.methods import coarse_to_fine, leave_one_out


@pytest.fixture(scope="module")
def constitutional(default_lm):
    row = next(r for r in datasets.shipped_rows() if r["case"].startswith("constitutional") and r.get("target"))
    return default_lm.format_prompt(row["prompt"], system=row.get("system") or None), row["target"]


def test_refined_words_equal_full_leave_one_word_out_in_fewer_forwards(default_lm, constitutional):
    prompt, target = constitutional
    got = segment_salience(default_lm, prompt, target, coarse_to_fine.NAME, granularity="word")
    full = segment_salience(default_lm, prompt, target, leave_one_out.NAME, granularity="word")
    measured = got.measured_mask()
    assert got.segments == full.segments and measured.sum() >= 5 and not measured.all()
    np.testing.assert_allclose(got.values[measured], full.values[measured], rtol=0, atol=1e-4)
    assert got.stats.rows < full.stats.rows  # forwards, the unedited row included in both
    # Every unmeasured word lies in a unit whose |value| is not above the fifth largest measured word's.
    kth = max(np.sort(got.values[measured])[::-1][4], 0.0)
    assert np.all(np.abs(got.coarse_values[~measured]) <= kth)
    # On this row (docs/benchmarks.md), the top five words are full leave one out's.
    top = lambda v: set(np.argsort(-v, kind="stable")[:5].tolist())
    assert top(np.where(measured, got.values, -np.inf)) == top(full.values)
