"""Segment methods (leave one segment out, the ContextCite surrogate) on tiny random models.

References, each independent of the code under test:
* leave one out = one plain forward per ablation through scoring.score (no KV cache,
  its own batching), and KV-prefix reuse = the same numbers without reuse;
* the surrogate's Lasso = scikit-learn's Lasso on the same masks, and ContextCite's own solver
  (context_cite/solver.py of the context-cite 0.0.4 wheel, loaded from its file);
* hand-derived values for the log-odds, the fit quality and the registry's facts.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib

import numpy as np
import pytest
import torch
from sklearn.linear_model import Lasso
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import sequence_salience as ss
from sequence_salience import ablation, aggregate, methods
from sequence_salience import scoring
from sequence_salience.ablation import AblationConfig, PrefixScorer, segment_salience
from sequence_salience.errors import ComputationCancelled, SalienceError
from sequence_salience.methods import ablation_surrogate, attention_verified, coarse_to_fine, lasso, leave_one_out
from sequence_salience.salience import pair_tokens
from tests.unit.estimators import saved_random_estimator
from tests.unit.tiny_models import MODEL_BUILDERS, tiny_llama, wrap

PROMPT = ("The capital of France is Paris. The capital of Italy is Rome.\n\n"
          "Alice has three apples and Bob has two apples. Q: What is 2 + 3?")
TARGET = " A: 5. Paris."


@pytest.fixture(scope="module", params=sorted(MODEL_BUILDERS))
def lm(request):
    return wrap(MODEL_BUILDERS[request.param](), request.param)


def brute_force(lm, prompt, target, granularity, removal, span=None, only=None):
    """Leave one out by plain forwards: one row per ablation, scored by scoring.score; `only`: the segments to score
    (their values in that order; None: every segment)."""
    result = pair_tokens(lm, prompt, target)  # the pair's tokens: no model pass
    segs = scoring.prompt_segments(result, granularity)
    edit = scoring.PromptEditor(lm, prompt, result, segs, removal, scoring.filler_id(lm, " "))
    t = tuple(int(i) for i in result.ids[result.n_prompt_tokens:])
    span = span or (0, len(t))
    rows = [edit(())] if removal == "filler" else [tuple(int(i) for i in result.ids[:result.n_prompt_tokens])]
    rows += [edit((s,)) for s in (range(len(segs)) if only is None else only)]
    lp = scoring.score(lm, rows, t, span, batch_size=1)
    return lp[0] - lp[1:], segs


@pytest.mark.parametrize("removal", ["filler", "delete"])
@pytest.mark.parametrize("granularity", ["word", "sentence", "paragraph"])
def test_leave_one_out_equals_one_plain_forward_per_ablation(lm, granularity, removal):
    want, segs = brute_force(lm, PROMPT, TARGET, granularity, removal)
    got = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity=granularity,
                           config=AblationConfig(removal=removal))
    assert got.segments == segs.spans
    np.testing.assert_allclose(got.values, want, rtol=0, atol=1e-9)
    assert got.stats.reuse and got.stats.computed < got.stats.tokens  # the cached prefix was used


@pytest.mark.parametrize("method", [leave_one_out.NAME, ablation_surrogate.NAME])
@pytest.mark.parametrize("removal", ["filler", "delete"])
def test_kv_prefix_reuse_gives_the_numbers_of_full_forwards(lm, method, removal):
    with_reuse = segment_salience(lm, PROMPT, TARGET, method, granularity="word",
                                  config=AblationConfig(removal=removal, batch_size=4))
    without = segment_salience(lm, PROMPT, TARGET, method, granularity="word",
                               config=AblationConfig(removal=removal, reuse_prefix=False))
    np.testing.assert_allclose(with_reuse.logprobs, without.logprobs, rtol=0, atol=1e-9)
    np.testing.assert_allclose(with_reuse.values, without.values, rtol=0, atol=1e-7)
    assert without.stats.saved == 0.0 and without.stats.computed == without.stats.tokens
    assert 0.0 < with_reuse.stats.saved < 1.0


def test_the_original_logprob_is_the_span_of_the_models_own_logprobs(lm):
    result = ss.compute_salience(lm, PROMPT, TARGET, methods=("grad_norm",))
    got = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, span=(1, 4))
    assert got.original_logprob == pytest.approx(float(result.target_logprobs[1:4].sum()), abs=1e-5)  # float32
    want, _ = brute_force(lm, PROMPT, TARGET, "sentence", "filler", span=(1, 4))
    np.testing.assert_allclose(got.values, want, atol=1e-9)


def test_every_batching_gives_the_same_values(lm):
    base = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="word")
    for cfg in (AblationConfig(batch_size=1), AblationConfig(chunk_token_budget=1), AblationConfig(batch_size=64)):
        got = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="word", config=cfg)
        np.testing.assert_allclose(got.values, base.values, atol=1e-9)
    sliced = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="word", slice_s=0.001)
    np.testing.assert_allclose(sliced.values, base.values, atol=1e-9)


def test_rows_reported_through_progress_and_cancel_stops_between_batches(lm):
    seen = []
    got = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="word",
                           config=AblationConfig(batch_size=2), progress=lambda *a: seen.append(a))
    S = len(got.segments)
    assert seen[-1] == (leave_one_out.NAME, S, S)
    assert [d for _, d, _ in seen] == sorted(d for _, d, _ in seen)
    calls = []

    def cancel():
        calls.append(1)
        return len(calls) > 2

    with pytest.raises(ComputationCancelled):
        segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="word",
                         config=AblationConfig(batch_size=1, reuse_prefix=False), cancel=cancel)
    assert len(calls) == 3  # checked before each batch: stopped at the third


def test_a_costed_progress_gets_the_positions_each_row_recomputes(lm):
    """Issue 43 (session 34): leave one word out's rows grow dearer along the job; a `costed` progress gets each
    report's known cost, the positions its rows recompute from their first changed token (what the job's time left
    is estimated from besides the rows). With one row a batch, that is what the forwards ran (the scorer's stats,
    less the unedited prompt's one forward); the cost is known ahead, the same whatever the batching."""
    seen = {}
    for batch_size in (1, 8):
        reports = seen[batch_size] = []
        got = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="word",
                               config=AblationConfig(batch_size=batch_size),
                               progress=ablation.costed(lambda *a, cost: reports.append((*a, cost))))
        if batch_size == 1:
            ran = got.stats.computed - got.n_tokens  # the edited rows' positions
            done = [c.done for *_a, c in reports]
            steps = np.diff([0, *done])
            assert reports[-1][-1] == ablation.Cost(ran, ran) and len(reports) == len(got.segments)
            assert (steps > 0).all() and (np.diff(steps) >= 0).all(), steps  # cheapest first: the rows grow dearer
        else:
            assert got.stats.computed - got.n_tokens >= reports[-1][-1].total  # padded batches run a little more
    assert {r[-1].total for r in seen[1]} == {r[-1].total for r in seen[8]}
    plain = []  # an unmarked callback is called as before
    segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="word", progress=lambda *a: plain.append(a))
    assert plain and all(len(a) == 3 for a in plain)


def test_token_values_sum_back_to_the_segment_values_at_their_granularity(lm):
    got = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="sentence")
    per_token = got.token_values()  # [N]
    seg = aggregate.segment(got.text, ss.compute_span_result(lm, PROMPT, TARGET, ("grad_norm",)).offsets,
                            "sentence")
    summed = aggregate.aggregate(per_token, seg, "sum", keep_excluded=True)[got.segment_index]
    np.testing.assert_allclose(summed, got.values, rtol=1e-5, atol=1e-6)


# --- the surrogate ----------------------------------------------------------------------------------


def contextcite_solver():
    """ContextCite's LassoRegression, from the installed wheel's file (its package __init__ imports
    datasets and transformers pipelines we do not install)."""
    spec = importlib.util.find_spec("context_cite")
    assert spec is not None, "context-cite is installed by `make setup` (pip install --no-deps context-cite==0.0.4)"
    path = pathlib.Path(spec.submodule_search_locations[0]) / "solver.py"
    module_spec = importlib.util.spec_from_file_location("context_cite_solver", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.LassoRegression()


def test_surrogate_equals_contextcites_solver_on_the_same_masks(lm):
    got = segment_salience(lm, PROMPT, TARGET, ablation_surrogate.NAME, granularity="word")
    cfg = AblationConfig()
    np.testing.assert_array_equal(got.kept, ablation_surrogate.masks(len(got.segments), cfg))
    y = lasso.log_odds(got.logprobs)
    n_tokens = got.span[1] - got.span[0]
    weight, bias = contextcite_solver().fit(got.kept, y, n_tokens)
    # sklearn's coordinate descent stops at its default tolerance (1e-4 of the duality gap); ours
    # runs to convergence, so agreement is to that tolerance.
    np.testing.assert_allclose(got.values, weight, rtol=0, atol=2e-2 * max(1.0, np.abs(weight).max()))
    assert got.quality["intercept"] == pytest.approx(float(bias), abs=2e-2 * max(1.0, abs(float(bias))))


@pytest.mark.parametrize("seed", range(5))
def test_lasso_equals_sklearn_at_a_tight_tolerance(seed):
    rng = np.random.default_rng(seed)
    masks = rng.random((32, 7)) < 0.5
    true = rng.normal(size=7) * (rng.random(7) < 0.6)
    y = masks @ true + 0.3 * rng.normal(size=32) - 2.0
    n_tokens = 5
    pipe = make_pipeline(StandardScaler(), Lasso(alpha=0.01, tol=1e-14, max_iter=1_000_000))
    pipe.fit(masks.astype(float), y / n_tokens)
    scaler, model = pipe.steps[0][1], pipe.steps[1][1]
    want = model.coef_ / scaler.scale_ * n_tokens
    want_bias = (model.intercept_ - (scaler.mean_ / scaler.scale_) @ model.coef_) * n_tokens
    fit = lasso.fit_lasso(masks, y, 0.01, n_tokens)
    np.testing.assert_allclose(fit.weight, want, atol=1e-8)
    assert fit.bias == pytest.approx(want_bias, abs=1e-8)


def test_lasso_with_no_penalty_recovers_an_exact_linear_law_and_cross_validates_perfectly():
    rng = np.random.default_rng(1)
    masks = rng.random((40, 5)) < 0.5
    w = np.array([2.0, -1.0, 0.0, 0.5, 3.0])
    y = masks @ w + 1.5
    fit = lasso.fit_lasso(masks, y, alpha=0.0)
    np.testing.assert_allclose(fit.weight, w, atol=1e-8)
    assert fit.bias == pytest.approx(1.5, abs=1e-8)
    q = lasso.cross_validated(masks, y, alpha=0.0, n_tokens=1, k=4)
    assert q["r2"] == pytest.approx(1.0, abs=1e-9) and q["correlation"] == pytest.approx(1.0, abs=1e-9)


def test_cross_validation_of_noise_is_poor_and_warned_about():
    rng = np.random.default_rng(2)
    masks = rng.random((32, 6)) < 0.5
    q = lasso.cross_validated(masks, rng.normal(size=32), 0.01, 1, 4)
    assert q["r2"] < 0.2
    assert "R\u00b2" in ablation.fit_warning(ablation_surrogate.NAME, q, AblationConfig())
    assert ablation.fit_warning(ablation_surrogate.NAME, {"r2": 0.9}, AblationConfig()) == ""
    assert ablation.fit_warning(leave_one_out.NAME, {}, AblationConfig()) == ""


def test_held_out_predictions_equal_sklearns_cross_val_predict_on_the_same_shuffled_folds():
    from sklearn.model_selection import KFold, cross_val_predict  # pylint: disable=import-outside-toplevel

    rng = np.random.default_rng(5)
    masks = rng.random((32, 6)) < 0.5
    y = masks @ rng.normal(size=6) + 0.5 * rng.normal(size=32)
    kfold = KFold(n_splits=4, shuffle=True, random_state=0)
    pipe = make_pipeline(StandardScaler(), Lasso(alpha=0.01, tol=1e-14, max_iter=1_000_000))
    want = cross_val_predict(pipe, masks.astype(float), y, cv=kfold)
    split = [held for _, held in kfold.split(masks)]
    got = lasso.held_out_predictions(masks, y, 0.01, 1, split)
    np.testing.assert_allclose(got, want, atol=1e-4)  # FISTA to a step of 1e-7 (held_out_predictions)


@pytest.mark.parametrize("segments", [5, 30])
def test_the_fista_lasso_reaches_the_coordinate_descent_optimum(segments):
    rng = np.random.default_rng(segments)
    masks = rng.random((32, segments)) < 0.5
    y = masks @ (rng.normal(size=segments) * (rng.random(segments) < 0.5)) + 0.3 * rng.normal(size=32) - 1.0
    exact, fast = lasso.fit_lasso(masks, y, 0.01, 4), lasso.fit_lasso_fista(masks, y, 0.01, 4)
    np.testing.assert_allclose(fast.predict(masks), exact.predict(masks), atol=1e-5)
    assert fast.bias == pytest.approx(exact.bias, abs=1e-4)


def test_repeated_cross_validation_reports_the_spread_of_one_split_and_is_seeded():
    rng = np.random.default_rng(7)
    masks = rng.random((32, 8)) < 0.5
    y = masks @ rng.normal(size=8) + 1.0 * rng.normal(size=32)
    q = lasso.cross_validated(masks, y, 0.01, 1, 4, repeats=20, seed=0)
    # Each figure recomputed by hand from 20 independent KFold shuffles would use other permutations;
    # what must hold: the mean lies inside the spread, the spread is real, and a seed fixes it.
    assert q["r2_low"] < q["r2"] < q["r2_high"]
    assert q == lasso.cross_validated(masks, y, 0.01, 1, 4, repeats=20, seed=0)
    assert q != lasso.cross_validated(masks, y, 0.01, 1, 4, repeats=20, seed=1)
    # One repeat's R^2 is that split's: 1 - SS_res / SS_tot of its held-out predictions.
    one = lasso.cross_validated(masks, y, 0.01, 1, 4, repeats=1, seed=3)
    pred = lasso.held_out_predictions(masks, y, 0.01, 1, lasso.folds(32, 4, np.random.default_rng(3)))
    assert one["r2"] == one["r2_low"] == one["r2_high"] == pytest.approx(
        1 - ((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum(), abs=1e-12)


def test_a_fit_whose_spread_crosses_the_warning_line_is_called_unsettled():
    cfg = AblationConfig()
    text = ablation.fit_warning(ablation_surrogate.NAME, {"r2": 0.55, "r2_low": 0.37, "r2_high": 0.66}, cfg)
    assert "not settled" in text and "0.37" in text and "0.66" in text
    assert ablation.fit_warning(ablation_surrogate.NAME, {"r2": 0.8, "r2_low": 0.6, "r2_high": 0.9}, cfg) == ""
    low = ablation.fit_warning(ablation_surrogate.NAME, {"r2": 0.3, "r2_low": 0.1, "r2_high": 0.45}, cfg)
    assert "only R\u00b2 = 0.30 (from 0.10 to 0.45" in low


def test_log_odds_by_hand():
    got = lasso.log_odds(np.log([0.5, 0.25, 0.9, 1e-30]))
    np.testing.assert_allclose(got[:3], [0.0, np.log(1 / 3), np.log(9)], atol=1e-12)
    assert got[3] == pytest.approx(np.log(1e-30), abs=1e-9)  # log(1 - p) ~ 0 for tiny p
    assert np.isfinite(lasso.log_odds(np.array([0.0]))).all()


def test_surrogate_masks_are_seeded_and_keep_about_half():
    cfg = AblationConfig(surrogate_masks=400, seed=3)
    a, b = ablation_surrogate.masks(9, cfg), ablation_surrogate.masks(9, cfg)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (400, 9) and 0.45 < a.mean() < 0.55
    assert not np.array_equal(a, ablation_surrogate.masks(9, AblationConfig(surrogate_masks=400, seed=4)))


# --- the registry and errors ------------------------------------------------------------------------


def test_segment_methods_are_in_the_registry_with_their_kind():
    assert methods.list_segment_methods() == [leave_one_out.NAME, ablation_surrogate.NAME, coarse_to_fine.NAME,
                                              "attention_attribution", "attention_verified", "word_verified"]
    every = methods.registry_json(("token", "segment"))
    assert [e["name"] for e in every] == ss.list_methods() + methods.list_segment_methods()
    assert {e["name"]: e["kind"] for e in every}[leave_one_out.NAME] == "segment"
    assert all(e["kind"] == "token" for e in methods.registry_json())
    surrogate = methods.get_segment_method(ablation_surrogate.NAME)
    assert (surrogate.count_field, surrogate.count_unit, surrogate.default_count) == (
        "surrogate_masks", "ablations", AblationConfig().surrogate_masks)
    assert surrogate.rows(7, AblationConfig()) == 32 and leave_one_out.METHOD.rows(7, AblationConfig()) == 7
    with pytest.raises(SalienceError, match="segment method.*segment_salience"):
        methods.get_method(leave_one_out.NAME)
    with pytest.raises(SalienceError, match="Unknown segment method 'grad_norm'"):
        methods.get_segment_method("grad_norm")


def test_bad_requests_name_the_fix(lm):
    with pytest.raises(SalienceError, match="Unknown removal 'erase'"):
        segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, config=AblationConfig(removal="erase"))
    with pytest.raises(SalienceError, match="no removable regex segments"):
        segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="regex", pattern="zzz+")
    with pytest.raises(SalienceError, match="outside"):
        segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, span=(0, 99))


def test_prefix_scorer_scores_the_unedited_prompt_without_a_forward(lm):
    pair_ids = lm.encode_prompt(PROMPT).ids
    target = lm.tokenize(TARGET, add_special_tokens=False).ids
    scorer = PrefixScorer(lm, pair_ids, target, (0, len(target)))
    rows_before = scorer.stats.rows
    assert scorer([pair_ids])[0] == scorer.original_logprob
    assert scorer.stats.rows == rows_before
    assert ablation.common_prefix([1, 2, 3], [1, 2, 4]) == 2 and ablation.common_prefix([1, 2], [1, 2, 5]) == 2
    with torch.no_grad():
        assert np.isfinite(scorer.original_logprob)


def test_at_regex_granularity_only_the_matches_are_removed(lm):
    got = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="regex", pattern=r"capital|apples")
    assert [got.text[s:e] for s, e in got.segments] == ["capital", "capital", "apples", "apples"]


def test_faithfulness_curves_rank_by_the_segment_methods_own_values(lm):
    from sequence_salience.explain import CurvesRequest, FaithfulnessConfig, faithfulness_curves

    cfg = FaithfulnessConfig(granularity="sentence", n_random=2, steps=3)
    report = faithfulness_curves(lm, CurvesRequest(PROMPT, TARGET, ("grad_norm", leave_one_out.NAME), config=cfg))
    loo = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="sentence")
    np.testing.assert_allclose(report.segment_scores[leave_one_out.NAME], loo.values, atol=1e-9)
    assert report.curves["deletion"][leave_one_out.NAME].ordering == "signed"
    assert leave_one_out.NAME + ":abs" in report.curves["deletion"]
    # Deleting the top-1 segment by leave-one-out lowers log p by exactly its leave-one-out value.
    top = int(np.argmax(loo.values))
    only = faithfulness_curves(lm, CurvesRequest(PROMPT, TARGET, (leave_one_out.NAME,), config=dataclasses.replace(
        cfg, steps=len(loo.values))))
    curve = only.curves["deletion"][leave_one_out.NAME]
    assert curve.order[0] == top
    assert only.original_logprob - curve.logprobs[1] == pytest.approx(loo.values[top], abs=1e-9)


def test_evaluate_row_compares_segment_methods_with_gradients(lm):
    from sequence_salience.evaluate.engine import EvalConfig, evaluate_row
    from sequence_salience.explain import FaithfulnessConfig

    cfg = EvalConfig(methods=("grad_norm", leave_one_out.NAME, ablation_surrogate.NAME),
                     faithfulness=FaithfulnessConfig(n_random=2, steps=3), reduction=True)
    row = evaluate_row(lm, {"prompt": PROMPT, "target": TARGET, "chat": False}, cfg)
    assert set(row["gaps"]["deletion"]) >= {"grad_norm", leave_one_out.NAME, ablation_surrogate.NAME}
    assert row["orderings"][leave_one_out.NAME] == "signed"
    assert set(row["reduction"]) == {"grad_norm"}  # input reduction ranks by token salience only
    only = evaluate_row(lm, {"prompt": PROMPT, "target": TARGET, "chat": False},
                        dataclasses.replace(cfg, methods=(leave_one_out.NAME,), reduction=False))
    assert only["curves"]["deletion"][leave_one_out.NAME] == row["curves"]["deletion"][leave_one_out.NAME]


def test_leave_one_out_given_the_first_maps_verified_values_scores_only_the_others(tmp_path):
    """Leave one out handed attention_verified's result (its verified segments are exact leave-one-out) equals full
    leave one out and scores only the segments it did not verify; a result of other settings is not used."""
    lm = wrap(tiny_llama(seed=0), "llama")
    _, config = saved_random_estimator(lm, tmp_path / "e.npz", seed=5)
    first = segment_salience(lm, PROMPT, TARGET, attention_verified.NAME, granularity="word", config=config)
    verified = int(first.measured_mask().sum())
    S = len(first.segments)
    assert 0 < verified < S  # word granularity: more segments than the stop rule verifies
    full = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="word", config=config)
    seen = []
    got = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="word", config=config, known=first,
                           progress=lambda *a: seen.append(a))
    np.testing.assert_allclose(got.values, full.values, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got.logprobs, full.logprobs, rtol=0, atol=1e-5)
    assert got.stats.rows - 1 == S - verified == full.stats.rows - 1 - verified  # the forwards of the others only
    assert seen[-1] == (leave_one_out.NAME, S - verified, S - verified)
    for other in (dict(config=dataclasses.replace(config, removal="delete")), dict(span=(0, 2)),
                  dict(config=dataclasses.replace(config, filler=".")), dict(granularity="sentence")):
        kwargs = {"granularity": "word", "config": config, **other}
        alone = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, **kwargs)
        given = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, known=first, **kwargs)
        assert given.stats.rows == alone.stats.rows == len(alone.segments) + 1  # every segment scored
        np.testing.assert_allclose(given.values, alone.values, rtol=0, atol=1e-9)
