"""Agreement figures of a segment map (sequence_salience/attention/agreement.py) against hand-derived values, and
learned attention attribution verified (methods/attention_verified.py) against brute-force leave one out on a tiny
Llama."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sequence_salience.ablation import segment_salience
from sequence_salience.attention import capture_feature_sets, capture_features
from sequence_salience.attention import agreement
from sequence_salience.methods import attention_verified
import torch
from tests.unit.estimators import saved_random_estimator
from tests.unit.tiny_models import MODEL_BUILDERS


def test_aopc_by_hand():
    # values rank segment 2 first, then 0, then 3, then 1 (S = 4, k = 3: K = 3)
    values = np.array([0.5, -1.0, 2.0, 0.1])
    deletion, insertion = agreement.perturbation_sets(values, 3)
    assert deletion == [(2,), (0, 2), (0, 2, 3)]
    assert insertion == [(0, 1, 3), (1, 3), (1,)]
    logp = {(): -1.0, (0, 1, 2, 3): -9.0,
            (2,): -4.0, (0, 2): -5.0, (0, 2, 3): -7.0,  # deletion: drops 3, 4, 6 -> mean 13/3
            (0, 1, 3): -6.0, (1, 3): -3.0, (1,): -2.0}  # insertion: gains 3, 6, 7 -> mean 16/3
    d, i = agreement.aopc(values, logp, 3)
    assert d == pytest.approx(13 / 3) and i == pytest.approx(16 / 3)
    # K is capped at S - 1: two segments give one step each way
    assert agreement.perturbation_sets(np.array([1.0, 3.0]), 3) == ([(1,)], [(0,)])


def test_rank_figures_by_hand():
    a, b = np.array([3.0, 2.0, 1.0, 0.0]), np.array([0.0, 2.0, 1.0, 3.0])
    # ranks (0-based) of a: 3,2,1,0; of b: 0,2,1,3; d = 3,0,0,3; rho = 1 - 6*18/(4*15) = -0.8
    assert agreement.spearman(a, b) == pytest.approx(-0.8)
    assert agreement.top_overlap(a, b, 1) == 0.0
    assert agreement.top_overlap(a, b, 3) == pytest.approx(2 / 3)  # {0,1,2} and {3,1,2}
    assert np.isnan(agreement.spearman(a, np.ones(4)))
    assert list(agreement.ranks(np.array([1.0, 1.0, 0.0]))) == [1.5, 1.5, 0.0]


def test_paired_bootstrap_is_seeded_and_drops_nan_pairs():
    a, b = [1.0, 2.0, np.nan, 4.0], [0.0, 1.0, 5.0, 2.0]
    mean, low, high, n = agreement.paired_bootstrap(a, b, seed=3)
    assert n == 3 and mean == pytest.approx(4 / 3)
    assert 1.0 <= low <= mean <= high <= 2.0
    assert agreement.paired_bootstrap(a, b, seed=3) == (mean, low, high, n)


def test_feature_sets_of_one_forward_equal_separate_captures():
    model = MODEL_BUILDERS["llama"](seed=2).double().eval()
    ids = np.random.default_rng(4).integers(3, 290, size=36).tolist()
    segments = [[1, 2, 3], [4, 5, 6, 7], [20, 21, 22]]
    rows_a, rows_b = [33, 34, 35], [20, 21, 22]
    a, b = capture_feature_sets(model, ids, [rows_a, rows_b], segments)
    np.testing.assert_allclose(a, capture_features(model, ids, rows_a, segments), atol=1e-12)
    np.testing.assert_allclose(b, capture_features(model, ids, rows_b, segments), atol=1e-12)


def plain_logprob(model, prompt_ids, target_ids) -> float:
    """log p(target | prompt) from one full forward of the plain model (no cache, no batching)."""
    ids = torch.tensor([list(prompt_ids) + list(target_ids)])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].double(), dim=-1)  # [N, V]
    P = len(prompt_ids)
    return float(sum(logp[P + t - 1, tok] for t, tok in enumerate(target_ids)))


def test_unverified_estimates_are_rescaled_to_the_verified_and_capped_below_them():
    estimate = np.array([4.0, 2.0, 1.0, 3.0, -1.0])
    picked = attention_verified.picks(estimate, 2)
    assert picked == [0, 3]
    # exact 2.0 and 1.0 where the estimate said 4 and 3: c = (4*2 + 3*1) / (16 + 9) = 0.44
    got = attention_verified.combine(estimate, picked, np.array([2.0, 1.0]))
    np.testing.assert_allclose(got, [2.0, min(0.88, 1.0), min(0.44, 1.0), 1.0, -0.44])
    # a verified segment that raises p(target) when removed (-0.5): the others stay below it too, strictly, so that
    # the verified rank first (they were capped at 0, above it, before)
    got = attention_verified.combine(estimate, picked, np.array([3.0, -0.5]))
    np.testing.assert_allclose(got, [3.0, -0.5, -0.5, -0.5, -0.5])  # c = 0.42: 0.84, 0.42, -0.42, all capped
    assert max(got[[1, 2, 4]]) < -0.5
    assert agreement.order(got)[:2] == [0, 3]
    # estimates that the verification contradicts (c < 0) are scaled to 0, then capped below the verified
    got = attention_verified.combine(estimate, picked, np.array([-1.0, -2.0]))
    np.testing.assert_allclose(got, [-1.0, -2.0, -2.0, -2.0, -2.0])
    assert max(got[[1, 2, 4]]) < -2.0


def test_noise_level_and_top_overlap_within_noise_by_hand():
    ref = np.array([5.0, 0.1, -0.2, 0.0, -0.4, -0.1, 2.0])
    # top 3: 0 (5.0), 6 (2.0), 1 (0.1); the rest 0.0, -0.1, -0.2, -0.4: median -0.15, |dev| 0.15 0.05 0.05 0.25
    assert agreement.noise_level(ref, 3) == pytest.approx(1.4826 * 0.1)
    a = np.array([9.0, 0.0, 0.0, 8.0, 0.0, 0.0, 7.0])  # top 3: 0, 3, 6; segment 3 is at 0.0, 0.1 below the 3rd
    assert agreement.top_overlap(a, ref, 3) == pytest.approx(2 / 3)
    assert agreement.top_overlap_within(a, ref, 3, 0.0) == pytest.approx(2 / 3)
    assert agreement.top_overlap_within(a, ref, 3, 0.1) == pytest.approx(1.0)
    assert agreement.top_overlap_within(a, ref, 3, 0.09) == pytest.approx(2 / 3)
    assert agreement.noise_level(np.array([1.0, 2.0, 3.0, 4.0]), 3) == 0.0


# Ten sentences (k = 7 of them verified) within the tiny model's 128 tokens.
PROMPT = "A is 1. B is 2. C is 3. D is 4. E is 5. F is 6. G is 7. H is 8. I is 9.\n\nWhat is C?"
TARGET = " C is 3"


def brute_force_loo(llama, seg, picked) -> np.ndarray:
    """Leave one out of each picked segment: its tokens replaced by the filler, one plain full forward of the model
    (no prefix reuse, no batching) against the unedited prompt's."""
    r = seg.result
    filler = llama.tokenize(" ").ids[0]
    prompt_ids = np.asarray(r.ids[:r.n_prompt_tokens])
    rows = []
    for s in picked:
        ids = prompt_ids.copy()
        ids[seg.segment_tokens[s]] = filler
        rows.append(ids.tolist())
    target_ids = [int(i) for i in r.ids[r.n_prompt_tokens:]]
    plain = np.array([plain_logprob(llama.model, p, target_ids) for p in [prompt_ids.tolist()] + rows])  # [1 + V]
    return plain[0] - plain[1:]


def test_verified_values_are_brute_force_leave_one_out_where_verified(llama, tmp_path):
    _, config = saved_random_estimator(llama, tmp_path / "e.npz", seed=5, quality={"cv_r2": 0.5})
    estimate = segment_salience(llama, PROMPT, TARGET, "attention_attribution", granularity="sentence", config=config)
    seg = segment_salience(llama, PROMPT, TARGET, "attention_verified", granularity="sentence", config=config)
    S, k = len(seg.values), attention_verified.VERIFY
    assert config.verify_top_k == k == 7
    assert S == 10 > k
    picked = list(np.argsort(-estimate.values, kind="stable")[:k])
    assert sorted(np.flatnonzero(seg.measured_mask())) == sorted(picked)
    np.testing.assert_allclose(seg.values[picked], brute_force_loo(llama, seg, picked), atol=1e-5)  # float32 model
    rest = [s for s in range(S) if s not in picked]
    np.testing.assert_allclose(seg.values, attention_verified.combine(estimate.values, picked, seg.values[picked]),
                               atol=1e-12)
    assert max(seg.values[rest]) < min(seg.values[picked])  # every verified segment ranks above the rest
    assert all(seg.coarse_granularity[s] == attention_verified.ESTIMATE for s in rest)
    np.testing.assert_allclose(seg.coarse_values[rest], estimate.values[rest], atol=1e-9)
    assert seg.kept.shape == (k, S) and seg.stats.rows == 1 + k


def test_verify_top_k_sets_how_many_are_measured(llama, tmp_path):
    _, config = saved_random_estimator(llama, tmp_path / "e.npz", seed=5, quality={"cv_r2": 0.5})
    config = dataclasses.replace(config, verify_top_k=2)
    estimate = segment_salience(llama, PROMPT, TARGET, "attention_attribution", granularity="sentence", config=config)
    seg = segment_salience(llama, PROMPT, TARGET, "attention_verified", granularity="sentence", config=config)
    picked = list(np.argsort(-estimate.values, kind="stable")[:2])
    assert sorted(np.flatnonzero(seg.measured_mask())) == sorted(picked)
    np.testing.assert_allclose(seg.values[picked], brute_force_loo(llama, seg, picked), atol=1e-5)
    assert seg.kept.shape == (2, len(seg.values)) and seg.stats.rows == 1 + 2
