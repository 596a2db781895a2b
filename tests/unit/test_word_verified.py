"""word_verified (methods/word_verified.py): a quarter of the words, those the proxies rank highest, measured exactly."""

from __future__ import annotations

import numpy as np

import sequence_salience as ss
from sequence_salience import scoring
from sequence_salience.ablation import segment_salience
from sequence_salience.methods import attention_attribution, attention_verified, word_verified
from sequence_salience.methods.attention_verified import segment_sums
from tests.unit.estimators import saved_random_estimator
from tests.unit.test_ablation import PROMPT, TARGET, brute_force
from tests.unit.tiny_models import tiny_llama, wrap


def test_the_budget_is_a_quarter_of_the_words_at_least_five_at_most_all():
    assert [word_verified.budget(n) for n in (3, 5, 20, 21, 24, 25, 100, 343, 4000)] == [3, 5, 5, 5, 6, 6, 25, 85, 1000]
    assert word_verified.rows(100, None) == 25


def test_the_progress_names_each_batch_and_counts_toward_the_whole_budget():
    # 48 words: budget 12; the first batch round(2/3 x 12) = 8, the second 4. 25 words: budget 6, the first batch at
    # least five. 20 words: budget 5, all in one batch.
    frames = word_verified.stages(word_verified.budget(48))
    assert (word_verified.first_batch(12), frames(0, 8), frames(8, 4)) == (8, ("batch 1 of 2", 12), ("batch 2 of 2", 12))
    assert word_verified.first_batch(word_verified.budget(25)) == 5
    assert word_verified.stages(word_verified.budget(20))(0, 5) == ("batch 1 of 1", 5)
    assert word_verified.METHOD.budget == (0.25, 5) and word_verified.METHOD.to_json()["budget"] == {
        "share": 0.25, "at_least": 5}


def test_unverified_words_keep_the_rescaled_estimate_clipped_below_the_verified_top_five():
    # Verified words 0 and 1 (4.0, -1.0; fewer than five: the bounds are the smallest value, -1.0, not positive: 0,
    # and the smallest |value|, 1.0); the estimate there is 2 and 0, so c = (2 x 4 + 0 x -1) / (2 x 2 + 0) = 2, and the
    # others' rescaled estimates 1.0, -8.0, 0.2 become 0, just above -1.0, 0. attention_verified.combine (the cap
    # below the smallest verified value, -1.0) put all three below -1.0: the largest magnitude on the map, for words
    # nobody measured.
    estimate, exact = np.array([2.0, 0.0, 0.5, -4.0, 0.1]), np.array([4.0, -1.0])
    np.testing.assert_array_equal(word_verified.merge(estimate, [0, 1], exact),
                                  [4.0, -1.0, 0.0, -np.nextafter(1.0, 0.0), 0.0])
    assert (attention_verified.combine(estimate, [0, 1], exact)[2:] < -1.0).all()  # the bug this rule fixes
    # Six verified: the fifth largest value is 1.0, the fifth largest |value| 2.5; c = 11.5 / 6 from the six ones, so
    # words 6 and 7 (10 and -10 x c) are clipped to just below 1.0 and just above -2.5.
    got = word_verified.merge(np.array([1.0] * 6 + [10.0, -10.0]), [0, 1, 2, 3, 4, 5],
                              np.array([6.0, -5, 4, 3, 2.5, 1.0]))
    assert (got[6], got[7]) == (np.nextafter(1.0, -np.inf), -np.nextafter(2.5, 0.0))
    np.testing.assert_array_equal(word_verified.merge(estimate, [], np.array([])), estimate)  # nothing verified yet


def test_the_first_ranking_mixes_the_two_proxies_z_scores():
    # z of [1, 0, -1] is [1, 0, -1] / sqrt(2/3); the gradient enters by its log: log [1, e, 1/e] = [0, 1, -1].
    z = 1 / np.sqrt(2 / 3)
    got = word_verified.scores(np.array([1.0, 0.0, -1.0]), np.array([1.0, np.e, 1 / np.e]), alpha=0.7)
    np.testing.assert_allclose(got, [0.7 * z, 0.3 * z, -z], rtol=1e-12)
    assert (word_verified.standard(np.array([2.0, 2.0])) == 0).all()  # no spread: zeros, not a division by 0


def test_neighbours_are_next_to_a_positive_word_of_the_verified_top_five():
    # values 6..1 at words 0, 2, ..., 10: the top five are words 0-8; word 10 (1.0, sixth) gives no neighbour.
    near = word_verified.neighbours([0, 2, 4, 6, 8, 10], np.array([6.0, 5, 4, 3, 2, 1]), 12)
    assert np.flatnonzero(near).tolist() == [1, 3, 5, 7, 9]
    assert not word_verified.neighbours([3], np.array([-1.0]), 5).any()  # a negative value is no reason
    assert not word_verified.neighbours([], np.array([]), 3).any()


def test_neighbours_by_size_follow_the_largest_values_either_sign():
    # values 6, -5, 4, 3, 2, 1 at words 0, 2, ..., 10: the top five by |value| are words 0-8 (|1| sixth); by value,
    # positive: words 0, 4, 6, 8, 10 (-5 is not among them). Session 40's GRID_40 (benchmarks/bench_word_verified.py).
    picked, exact = [0, 2, 4, 6, 8, 10], np.array([6.0, -5, 4, 3, 2, 1])
    assert np.flatnonzero(word_verified.neighbours(picked, exact, 12, near="abs")).tolist() == [1, 3, 5, 7, 9]
    assert np.flatnonzero(word_verified.neighbours(picked, exact, 12, near="value")).tolist() == [1, 3, 5, 7, 9, 11]
    assert np.flatnonzero(word_verified.neighbours(picked, exact, 12, near="either")).tolist() == list(range(1, 12, 2))
    assert np.flatnonzero(word_verified.neighbours([3], np.array([-1.0]), 5, near="abs")).tolist() == [2, 4]


def test_the_second_batch_favours_the_neighbour_of_a_large_verified_word():
    first = np.array([5, 4, 3, 2, 1, -0.45, -0.1, -0.2, -0.3, -0.9])
    values = np.array([-1, -1, -1, -1, 10, 0, 0, 0, 0, 0], dtype=float)
    batches = []

    def measure(words):
        batches.append(list(words))
        return values[words]

    picked, exact = word_verified.select(first, 7, measure, share=2 / 3, bonus=0.5)
    # round(2/3 * 7) = 5 first, by `first`; then 2: word 5 (-0.45 + 0.5, next to word 4's 10) before word 7 (-0.2).
    assert batches == [[0, 1, 2, 3, 4], [5, 6]]
    assert picked == [0, 1, 2, 3, 4, 5, 6]
    np.testing.assert_array_equal(exact, values[picked])
    picked, _ = word_verified.select(first, 7, lambda w: values[w], share=2 / 3, bonus=0.0)
    assert picked[5:] == [6, 7]  # without the bonus: the first ranking's order


def test_the_verified_words_are_the_rules_picks_with_plain_forward_leave_one_out_values(tmp_path):
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
    assert got.stats.rows - 1 == n  # one forward per verified word (the unedited prompt apart): the budget
    # Exactly leave one out's values where measured: one plain forward per removed word, no cache.
    want, brute_segs = brute_force(lm, PROMPT, TARGET, "word", "filler")
    assert got.segments == brute_segs.spans
    # The rule replayed on the independent proxies and values picks the same words (its second batch reads them).
    picked, _ = word_verified.select(word_verified.scores(estimate.values, gradient), n, lambda w: want[w])
    assert sorted(np.flatnonzero(measured)) == sorted(picked)
    np.testing.assert_allclose(got.values[measured], want[measured], rtol=0, atol=1e-5)
    # The estimate elsewhere, rescaled and clipped below the verified top five, by value and by |value| (`merge`).
    np.testing.assert_allclose(got.values, word_verified.merge(estimate.values, list(np.flatnonzero(measured)),
                                                               got.values[measured]), rtol=1e-6, atol=1e-9)
    verified = got.values[measured]
    assert (np.abs(got.values[~measured]) < np.sort(np.abs(verified))[::-1][4]).all()
    assert (got.values[~measured] < max(np.sort(verified)[::-1][4], np.nextafter(0.0, 1.0))).all()
