"""Segment methods on the embedded default model (SmolLM2-135M, float32): exact against plain forwards.

Leave one segment out with the KV-prefix reuse = one plain forward per ablation through
scoring.score (no cache, its own batching); the surrogate = ContextCite's own solver on the
same masks and log-odds.
"""

from __future__ import annotations

import numpy as np
import pytest

from lit_app.data import datasets
from sequence_salience import scoring
from sequence_salience.ablation import AblationConfig, segment_salience
from sequence_salience.methods import ablation_surrogate, lasso, leave_one_out
from tests.unit.test_ablation import contextcite_solver


@pytest.fixture(scope="module")
def few_shot(default_lm):
    row = next(r for r in datasets.shipped_rows() if r["case"].startswith("few-shot"))
    return default_lm.format_prompt(row["prompt"], system=row.get("system") or None), row["target"]


@pytest.mark.parametrize("removal", ["filler", "delete"])
def test_leave_one_sentence_out_equals_plain_forwards_on_the_default_model(default_lm, few_shot, removal):
    prompt, target = few_shot
    got = segment_salience(default_lm, prompt, target, leave_one_out.NAME, granularity="sentence",
                           config=AblationConfig(removal=removal))
    from sequence_salience.salience import tokenized_result

    result = tokenized_result(default_lm, prompt, target)
    segs = scoring.prompt_segments(result, "sentence")
    edit = scoring.PromptEditor(default_lm, prompt, result, segs, removal, scoring.filler_id(default_lm, " "))
    t = tuple(int(i) for i in result.ids[result.n_prompt_tokens:])
    original = tuple(int(i) for i in result.ids[:result.n_prompt_tokens])
    lp = scoring.score(default_lm, [original] + [edit((s,)) for s in range(len(segs))], t, (0, len(t)), batch_size=1)
    assert len(got.values) == len(segs) >= 8
    np.testing.assert_allclose(got.values, lp[0] - lp[1:], rtol=0, atol=2e-3)  # float32, other summation order
    assert got.stats.saved > 0.2  # the prefix of most sentences was not recomputed


def test_surrogate_on_the_default_model_equals_contextcites_solver(default_lm, few_shot):
    prompt, target = few_shot
    got = segment_salience(default_lm, prompt, target, ablation_surrogate.NAME, granularity="sentence",
                           config=AblationConfig(surrogate_masks=16))
    weight, bias = contextcite_solver().fit(got.kept, lasso.log_odds(got.logprobs), got.span[1] - got.span[0])
    np.testing.assert_allclose(got.values, weight, atol=2e-2 * max(1.0, float(np.abs(weight).max())))
    assert np.isfinite(got.quality["r2"])
