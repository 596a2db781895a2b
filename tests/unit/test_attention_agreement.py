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
from sequence_salience.salience import compute_span_result, compute_span_salience
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
    picked = [0, 3]  # the estimate's top two
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


# Ten sentences within the tiny model's 128 tokens.
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


def one_at_a_time(order, values, kmin, patience, kmax) -> list[int]:
    """The stop rule written out as the lead's simulation states it (verify one candidate at a time; after each,
    the verified top three by exact value; stop at kmax, or once at least kmin are verified and the top three was
    the same after `patience` consecutive verifications): an independent reference for attention_verified.verify."""
    verified, stable, top = [], 0, None
    for x in list(order)[:kmax]:
        verified.append(x)
        now = tuple(sorted(sorted(verified, key=lambda j: -values[j])[:3]))
        stable = stable + 1 if now == top else 0
        top = now
        if len(verified) >= kmin and stable >= patience:
            break
    return verified


def test_candidates_alternate_between_the_estimate_and_the_gradient_skipping_repeats():
    estimate = np.array([5.0, 4.0, 3.0, 2.0, 1.0])  # order 0 1 2 3 4
    gradient = np.array([0.1, 0.9, 0.2, 0.8, 0.0])  # order 1 3 2 0 4
    # est#1 0, grad#1 1, est#2 1 (repeat), grad#2 3, est#3 2, grad#3 2 (repeat), est#4 3 (repeat), grad#4 0 ... 4
    assert attention_verified.candidates(estimate, gradient) == [0, 1, 3, 2, 4]
    assert attention_verified.candidates(np.zeros(3), np.zeros(3)) == [0, 1, 2]  # ties: text order


@pytest.mark.parametrize("settles", range(3, 12))
def test_a_top_three_that_settles_after_n_verifications_stops_at_n_plus_3_or_at_the_cap(settles):
    # each of the first `settles` candidates is larger than all before it (it enters the top three), the rest small
    S = 20
    values = np.where(np.arange(S) < settles, np.arange(S) + 1.0, -1.0)
    batches = []

    def measure(segments):
        batches.append(len(segments))
        return values[segments]

    picked, exact = attention_verified.verify(list(range(S)), measure)  # verify_min 4, patience 3, verify_max 12
    assert len(picked) == min(settles + 3, 12)
    assert picked == list(range(len(picked))) and list(exact) == list(values[:len(picked)])
    assert batches[0] == 6 and sum(batches) == len(picked)  # nothing scored past the stop


def test_fewer_than_four_segments_are_all_verified_and_verify_min_holds_back_the_stop():
    for S in (1, 2, 3):
        picked, _ = attention_verified.verify(list(range(S)), lambda seg: np.arange(len(seg), dtype=float))
        assert picked == list(range(S))
    values = np.array([3.0, 2.0, 1.0] + [0.0] * 17)  # settled after 3: stops at 6, unless verify_min is larger
    assert len(attention_verified.verify(list(range(20)), lambda seg: values[seg])[0]) == 6
    settings = attention_verified.Settings(verify_min=9, verify_patience=3, verify_max=12)
    assert len(attention_verified.verify(list(range(20)), lambda seg: values[seg], settings)[0]) == 9


@pytest.mark.parametrize("seed", range(40))
def test_batched_verification_stops_where_one_at_a_time_does(seed):
    rng = np.random.default_rng(seed)
    S = int(rng.integers(1, 30))
    values = rng.normal(size=S) * rng.choice([0.1, 1.0, 10.0], size=S)
    order = list(rng.permutation(S))
    kmin, patience, kmax = int(rng.integers(1, 7)), int(rng.integers(1, 5)), int(rng.integers(1, 25))
    kmax = max(kmin, kmax)
    settings = attention_verified.Settings(kmin, patience, kmax)
    picked, exact = attention_verified.verify(order, lambda seg: values[seg], settings)
    assert picked == [int(x) for x in one_at_a_time(order, values, kmin, patience, kmax)]
    np.testing.assert_array_equal(exact, values[picked])


def test_a_stop_rule_out_of_bounds_is_an_error_naming_the_fix():
    from sequence_salience.errors import SalienceError
    from sequence_salience.methods import AblationConfig

    for bad in (dict(verify_min=0), dict(verify_min=13), dict(verify_patience=0)):
        with pytest.raises(SalienceError, match="verify_min.*Fix: set them in AblationConfig"):
            attention_verified.checked_settings(AblationConfig(**bad))


def segment_gradient(llama, seg) -> np.ndarray:
    """Gradient norm of log p(target) at each token, summed over each segment's tokens (the benchmark's grad_norm)."""
    grad = compute_span_salience(llama, PROMPT, TARGET, "grad_norm")  # [N]
    return np.array([grad[t].sum() for t in seg.segment_tokens])


@pytest.mark.parametrize("verify_max", [12, 5, 2])
def test_verified_values_are_brute_force_leave_one_out_where_the_rule_verified(llama, tmp_path, verify_max):
    _, config = saved_random_estimator(llama, tmp_path / "e.npz", seed=5, quality={"cv_r2": 0.5})
    verify_min = min(4, verify_max)
    config = dataclasses.replace(config, verify_min=verify_min, verify_max=verify_max)
    estimate = segment_salience(llama, PROMPT, TARGET, "attention_attribution", granularity="sentence", config=config)
    seg = segment_salience(llama, PROMPT, TARGET, "attention_verified", granularity="sentence", config=config)
    S = len(seg.values)
    assert S == 10
    loo = brute_force_loo(llama, seg, range(S))  # [S] every segment, plain forwards
    order = attention_verified.candidates(estimate.values, segment_gradient(llama, seg))
    picked = one_at_a_time(order, loo, verify_min, 3, verify_max)
    assert 2 <= len(picked) <= min(verify_max, S)
    assert sorted(np.flatnonzero(seg.measured_mask())) == sorted(picked)
    np.testing.assert_allclose(seg.values[picked], loo[picked], atol=1e-5)
    rest = [s for s in range(S) if s not in picked]
    np.testing.assert_allclose(seg.values, attention_verified.combine(estimate.values, picked, seg.values[picked]),
                               atol=1e-12)
    if rest:
        assert max(seg.values[rest]) < min(seg.values[picked])  # every verified segment ranks above the rest
    assert all(seg.coarse_granularity[s] == attention_verified.ESTIMATE for s in rest)
    np.testing.assert_allclose(seg.coarse_values[rest], estimate.values[rest], atol=1e-9)
    assert seg.kept.shape == (len(picked), S) and seg.stats.rows == 1 + len(picked)
    assert seg.quality["verified"] == len(picked)


def test_the_map_so_far_is_heard_first_as_the_estimate_then_after_each_verification_batch(llama, tmp_path):
    """Issue 42 (session 37): `partial` hears the estimate alone first (learned attention attribution's values,
    nothing measured), then after each batch the verified segments so far with their brute-force leave-one-out
    values, each a prefix of the final order; the last equals the result."""
    _, config = saved_random_estimator(llama, tmp_path / "e.npz", seed=5, quality={"cv_r2": 0.5})
    estimate = segment_salience(llama, PROMPT, TARGET, "attention_attribution", granularity="sentence", config=config)
    heard = []
    seg = segment_salience(llama, PROMPT, TARGET, "attention_verified", granularity="sentence", config=config,
                           partial=heard.append)
    first = heard[0]
    np.testing.assert_allclose(first.values, estimate.values, atol=1e-12)
    assert not first.measured_mask().any() and first.quality["verified"] == 0
    assert set(first.coarse_granularity) == {attention_verified.ESTIMATE}
    loo = brute_force_loo(llama, seg, range(len(seg.values)))  # [S]
    counts = [int(h.quality["verified"]) for h in heard]
    assert counts == sorted(counts) and counts[0] == 0 and len(set(counts)) == len(counts) >= 3  # one per batch
    final = np.flatnonzero(seg.measured_mask())
    for h in heard[1:]:
        measured = np.flatnonzero(h.measured_mask())
        assert set(measured) <= set(final) and len(measured) == h.quality["verified"]
        np.testing.assert_allclose(h.values[measured], loo[measured], atol=1e-5)
    np.testing.assert_allclose(heard[-1].values, seg.values, atol=1e-12)
    assert heard[-1].measured_mask().tolist() == seg.measured_mask().tolist()


def test_the_span_gradient_comes_from_a_result_that_holds_it_without_a_backward(llama, tmp_path, monkeypatch):
    """The server passes its first highlight's result: the candidates' gradient is read from it, not recomputed."""
    from sequence_salience.ablation import engine

    _, config = saved_random_estimator(llama, tmp_path / "e.npz", seed=5, quality={"cv_r2": 0.5})
    fresh = segment_salience(llama, PROMPT, TARGET, "attention_verified", granularity="sentence", config=config)
    highlight = compute_span_result(llama, PROMPT, TARGET, methods=("grad_norm",))
    assert highlight.has_span("grad_norm")

    def no_backward(*args, **kwargs):
        raise AssertionError("the span's gradient was recomputed although the result holds it")

    monkeypatch.setattr(engine, "compute_span_salience", no_backward)
    reused = segment_salience(llama, PROMPT, TARGET, "attention_verified", granularity="sentence", config=config,
                              result=highlight)
    np.testing.assert_allclose(reused.values, fresh.values, atol=1e-9)
    np.testing.assert_array_equal(reused.measured_mask(), fresh.measured_mask())
