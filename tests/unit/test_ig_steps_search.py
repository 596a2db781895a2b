"""Integrated gradients' steps search (ig_search_tolerance, methods/integrated_gradients.py) on a tiny random Llama.

The independent reference is captum's IntegratedGradients (its own path, quadrature and batching) over a
forward written here from the raw HF model: F(embeds) = sum of log p(target tokens), log_softmax of the
logits at the predicting positions. Ours moves every position along the path from the zero embedding,
as captum does when it is given the whole sequence's embeddings and a zero baseline.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from captum import attr as captum_attr  # a dev dependency (pyproject.toml)

import sequence_salience as ss
from sequence_salience.display.view import completeness_warning, facts_lines, make_view
from tests.unit.tiny_models import MODEL_BUILDERS, wrap

PROMPT, TARGET = "The capital of France is", " Paris. The capital"
IG = "integrated_gradients"


@pytest.fixture(scope="module")
def llama() -> ss.LanguageModel:
    return wrap(MODEL_BUILDERS["llama"](seed=0), "llama")


# Our matrices are float32 (captum's float64 here): rtol 1e-5.
def _captum_ig(lm: ss.LanguageModel, result, steps: int, t0: int = 0, t1: int | None = None) -> np.ndarray:
    """captum's IG of log p(target[t0:t1]) per token <float64>[N] (Gauss-Legendre, `steps` points)."""
    ids = torch.tensor(result.ids.tolist())[None]  # [1, N]
    p, t1 = result.n_prompt_tokens, result.num_targets if t1 is None else t1
    embeds = lm.model.get_input_embeddings()(ids).detach()  # [1, N, D]

    def forward(x):  # [S, N, D] -> [S]
        logp = torch.log_softmax(lm.model(inputs_embeds=x).logits, -1)  # [S, N, V]
        rows = torch.arange(p + t0 - 1, p + t1 - 1)
        return logp[:, rows, ids[0, p + t0: p + t1]].sum(-1)

    ig = captum_attr.IntegratedGradients(forward)
    out = ig.attribute(embeds, baselines=torch.zeros_like(embeds), n_steps=steps, method="gausslegendre")
    return out.sum(-1)[0].detach().double().numpy()


def _schedule_total(start: int, final: int) -> int:
    """Points evaluated by the doubling search from `start` to `final`: start + 2 start + ... + final."""
    total, n = 0, start
    while n <= final:
        total, n = total + n, 2 * n
    return total


@pytest.mark.parametrize("steps", [4, 16])
def test_fixed_steps_equal_captum(llama, steps):
    result = ss.compute_salience(llama, PROMPT, TARGET, methods=(IG,), config=ss.SalienceConfig(ig_steps=steps))
    ours = result.matrices[IG].sum(0)  # linear: the whole target's IG is the sum of the rows
    np.testing.assert_allclose(ours, _captum_ig(llama, result, steps), rtol=1e-5, atol=1e-7)
    assert int(result.extras["ig_steps_used"][0]) == steps and int(result.extras["ig_forwards"][0]) == steps + 2


def test_the_search_stops_at_the_first_count_within_the_tolerance_and_equals_captum_there(llama):
    tol, start = 0.05, 4
    errors = {}
    for n in (4, 8, 16, 32, 64, 128):  # the independent relative errors of each count
        r = ss.compute_salience(llama, PROMPT, TARGET, methods=(IG,), config=ss.SalienceConfig(ig_steps=n))
        err = np.asarray(r.extras["ig_completeness_error"], np.float64)
        delta = r.matrices[IG].sum(-1).astype(np.float64) - err
        errors[n] = np.abs(err).sum() / np.abs(delta).sum()
    first = next(n for n in sorted(errors) if errors[n] <= tol)
    assert first > start  # the search has work to do on this model
    result = ss.compute_salience(llama, PROMPT, TARGET, methods=(IG,),
                                 config=ss.SalienceConfig(ig_steps=start, ig_search_tolerance=tol))
    assert int(result.extras["ig_steps_used"][0]) == _schedule_total(start, first)
    assert int(result.extras["ig_forwards"][0]) == _schedule_total(start, first) + 2
    np.testing.assert_allclose(result.matrices[IG].sum(0), _captum_ig(llama, result, first), rtol=1e-5, atol=1e-7)
    view = make_view(result, IG, "word")
    assert view.completeness_relative <= tol and completeness_warning(view) is None
    assert f"IG cost: {_schedule_total(start, first)} steps, {_schedule_total(start, first) + 2} forwards" in (
        facts_lines(view))


def test_the_search_stops_at_the_cap_and_says_so(llama):
    result = ss.compute_salience(llama, PROMPT, TARGET, methods=(IG,),
                                 config=ss.SalienceConfig(ig_steps=2, ig_search_tolerance=1e-9, ig_search_max_steps=8))
    assert int(result.extras["ig_steps_used"][0]) == 2 + 4 + 8
    np.testing.assert_allclose(result.matrices[IG].sum(0), _captum_ig(llama, result, 8), rtol=1e-5, atol=1e-7)
    warning = completeness_warning(make_view(result, IG, "word"))
    assert "stopped at its cap (ig_search_max_steps=8) after 14 steps (16 forwards)" in warning


def test_span_search_reaches_the_tolerance_and_equals_captum(llama):
    tol = 0.01
    result = ss.compute_span_result(llama, PROMPT, TARGET, methods=(IG,), t0=1, t1=3,
                                    config=ss.SalienceConfig(ig_steps=4, ig_search_tolerance=tol))
    ours = result.span_salience(IG, 1, 3).astype(np.float64)
    err = result.span_ig_errors[(1, 3)]
    assert abs(err) <= tol * abs(ours.sum() - err)
    finals = [n for n in (4, 8, 16, 32, 64, 128, 256)
              if np.allclose(ours, _captum_ig(llama, result, n, 1, 3), rtol=1e-5, atol=1e-8)]
    assert len(finals) == 1  # the attributions are those of exactly one count of the schedule


@pytest.mark.parametrize("tolerance", [-0.1, 1.0])
def test_a_tolerance_out_of_range_names_the_fix(llama, tolerance):
    with pytest.raises(ss.SalienceError, match="ig_search_tolerance=.*Fix: use 0"):
        ss.compute_salience(llama, PROMPT, TARGET, methods=(IG,),
                            config=ss.SalienceConfig(ig_search_tolerance=tolerance))


def test_progress_moves_while_later_counts_run_and_fills_when_the_search_stops(llama):
    # Was: the total counted the first count's units only, so the bar sat full while 4 and 8 ran.
    seen = []
    result = ss.compute_salience(llama, PROMPT, TARGET, methods=(IG,), progress=lambda m, d, t: seen.append((d, t)),
                                 config=ss.SalienceConfig(ig_steps=2, ig_search_tolerance=1e-9, ig_search_max_steps=8))
    t = result.num_targets
    assert {total for _, total in seen} == {t * (2 + 4 + 8)}  # every count up to the cap
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == t * 14
    assert t * 2 in done and t * (2 + 4) in done  # after each count, the bar shows what ran (not full yet)


def test_a_search_that_stops_early_fills_the_bar(llama):
    seen = []
    ss.compute_span_result(llama, PROMPT, TARGET, methods=(IG,), t0=1, t1=3,
                           progress=lambda m, d, t: seen.append((d, t)),
                           config=ss.SalienceConfig(ig_steps=4, ig_search_tolerance=0.01))
    total = seen[-1][1]
    assert total == 4 + 8 + 16 + 32 + 64 + 128 + 256  # the most the search may run, up to the default cap
    assert seen[-1][0] == total  # filled at the end
    assert seen[-2][0] in {4, 12, 28, 60, 124, 252}  # from where the search stopped: a count's end before the cap
