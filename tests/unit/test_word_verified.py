"""word_verified (methods/word_verified.py): a quarter of the words, those the proxies rank highest, measured exactly."""

from __future__ import annotations

import numpy as np

import sequence_salience as ss
from sequence_salience import scoring
from sequence_salience.ablation import segment_salience
from sequence_salience.methods import attention_attribution, word_verified
from sequence_salience.methods.attention_verified import segment_sums
from tests.unit.estimators import saved_random_estimator
from tests.unit.test_ablation import PROMPT, TARGET, brute_force
from tests.unit.tiny_models import tiny_llama, wrap


def test_the_budget_is_a_quarter_of_the_words_at_least_five_at_most_all():
    assert [word_verified.budget(n) for n in (3, 5, 20, 21, 24, 25, 100, 343, 4000)] == [3, 5, 5, 5, 6, 6, 25, 85, 1000]
    assert word_verified.rows(100, None) == 25


def test_the_candidates_come_in_the_chosen_proxys_order():
    estimate = np.array([0.9, -0.2, 0.5, 0.1, 0.7])
    gradient = np.array([0.1, 3.0, 0.2, 2.0, 0.3])
    want = {"estimate": [0, 4, 2, 3, 1],  # largest estimate first
            "alternate": [0, 1, 4, 3, 2]}  # estimate's 1st, gradient's 1st, estimate's 2nd, gradient's 2nd, ...
    assert word_verified.order(estimate, lambda: gradient) == want[word_verified.ORDER]


def test_the_verified_words_are_the_budgets_first_candidates_with_plain_forward_leave_one_out_values(tmp_path):
    lm = wrap(tiny_llama(seed=0), "llama")
    _, config = saved_random_estimator(lm, tmp_path / "e.npz", seed=5)
    got = segment_salience(lm, PROMPT, TARGET, word_verified.NAME, granularity="word", config=config)
    S = len(got.segments)
    n = word_verified.budget(S)
    assert 5 < n < S
    measured = got.measured_mask()
    # The candidates, from the two proxies computed on their own.
    estimate = segment_salience(lm, PROMPT, TARGET, attention_attribution.NAME, granularity="word", config=config)
    result = ss.compute_span_result(lm, PROMPT, TARGET, methods=("grad_norm",))
    segs = scoring.prompt_segments(result, "word").matches_only()
    target_len = len(result.ids) - result.n_prompt_tokens
    gradient = segment_sums(ss.compute_span_salience(lm, PROMPT, TARGET, "grad_norm", 0, target_len), segs.tokens)
    assert sorted(np.flatnonzero(measured)) == sorted(word_verified.order(estimate.values, lambda: gradient)[:n])
    assert got.stats.rows - 1 == n  # one forward per verified word (the unedited prompt apart)
    # Exactly leave one out's values where measured: one plain forward per removed word, no cache.
    want, brute_segs = brute_force(lm, PROMPT, TARGET, "word", "filler")
    assert got.segments == brute_segs.spans
    np.testing.assert_allclose(got.values[measured], want[measured], rtol=0, atol=1e-5)
    assert (got.values[~measured] < got.values[measured].min()).all()  # the estimate, capped below the verified
