"""Faithfulness curves coarse, then refined (faithfulness_stages) on tiny random models.

The independent references are direct faithfulness_curves calls: the coarse report must be the
one of coarse_config(config), the refined one that of config, and the two stages together must run
no more forward rows than the direct call of config alone (when the coarse prompts are among its own).
"""

from __future__ import annotations

import numpy as np
import pytest

import sequence_salience as ss
from sequence_salience import explain as ex
from sequence_salience.explain import faithfulness as fa

PROMPT = "The capital of France is Paris. The capital of Italy is Rome. Alice has three apples."
TARGET = " Paris. The capital"
METHODS = ("grad_norm", "grad_x_input")


def _same(a: ex.FaithfulnessReport, b: ex.FaithfulnessReport, rtol: float) -> None:
    assert a.segments == b.segments and a.span == b.span
    np.testing.assert_array_equal(a.n_removed, b.n_removed)
    assert a.n_random == b.n_random
    for m in b.segment_scores:
        np.testing.assert_allclose(a.segment_scores[m], b.segment_scores[m], rtol=1e-6, atol=1e-9)
    assert {mode: set(c) for mode, c in a.curves.items()} == {mode: set(c) for mode, c in b.curves.items()}
    for mode, by_name in b.curves.items():
        for name, want in by_name.items():
            got = a.curves[mode][name]
            assert got.order == want.order, (mode, name)
            np.testing.assert_allclose(got.logprobs, want.logprobs, rtol=rtol, atol=1e-6, err_msg=f"{mode} {name}")
            assert got.aopc == pytest.approx(want.aopc, rel=rtol, abs=1e-6)
            if want.all_logprobs is not None:
                np.testing.assert_allclose(got.all_logprobs, want.all_logprobs, rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("granularity", ["word", "sentence"])
def test_coarse_and_refined_reports_equal_direct_calls_of_their_configs(tiny_lm, granularity):
    result = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=METHODS)
    config = ex.FaithfulnessConfig(granularity=granularity, steps=10, n_random=10)
    coarse = ex.coarse_config(config)
    assert (coarse.steps, coarse.n_random, coarse.upper_bound) == (4, 3, False)
    seen = []
    final = ex.faithfulness_stages(tiny_lm, ex.CurvesRequest(PROMPT, TARGET, METHODS, config=config, result=result),
                                   on_coarse=seen.append)
    assert len(seen) == 1
    direct_coarse = ex.faithfulness_curves(tiny_lm, ex.CurvesRequest(
        PROMPT, TARGET, METHODS, config=coarse, result=result))
    direct_full = ex.faithfulness_curves(tiny_lm, ex.CurvesRequest(
        PROMPT, TARGET, METHODS, config=config, result=result))
    _same(seen[0], direct_coarse, rtol=0)  # the same prompts in the same batches: the same numbers
    assert fa.UPPER not in seen[0].curves["deletion"]
    _same(final, direct_full, rtol=1e-5)  # other batches (memo): float noise only
    assert fa.UPPER in final.curves["deletion"]
    assert [r["verdict"] for r in final.table()] == [r["verdict"] for r in direct_full.table()]


class RowCounter:
    """Counts the rows of every forward pass of the model (a hook on the torch module)."""

    def __init__(self, lm):
        self.rows = 0
        self.handle = lm.model.register_forward_hook(self._hook, with_kwargs=True)

    def _hook(self, _module, args, kwargs, _out):
        x = kwargs.get("inputs_embeds", kwargs.get("input_ids", args[0] if args else None))
        self.rows += int(x.shape[0])

    def close(self):
        self.handle.remove()


def test_refinement_scores_only_rows_the_coarse_pass_lacked(llama):
    # Sentence segments (S = 3): every coarse point (K = 3) and its 3 random orders (the first 3 of
    # the 10, same seed) are among the full run's prompts, so both stages together cost the direct
    # call's forward rows, and the salience is not computed a second time.
    config = ex.FaithfulnessConfig(granularity="sentence", steps=10, n_random=10)
    counter = RowCounter(llama)
    try:
        ex.faithfulness_curves(llama, ex.CurvesRequest(PROMPT, TARGET, METHODS, config=config))
        direct = counter.rows
        counter.rows = 0
        stages: list[tuple[str, int, int]] = []
        rep = ex.faithfulness_stages(llama, ex.CurvesRequest(PROMPT, TARGET, METHODS, config=config,
                                                      progress=lambda s, d, t: stages.append((s, d, t))))
        both = counter.rows
    finally:
        counter.close()
    assert both == direct
    coarse_total = max(t for s, _, t in stages if s == fa.COARSE_STAGE)
    refine_total = max((t for s, _, t in stages if s == "curves"), default=0)
    # The progress totals are the rows each stage really scored: together the report's distinct prompts.
    assert coarse_total + refine_total + rep.upper_bound_rows == rep.n_scored


def test_coarse_report_comes_first_and_cancel_stops_either_stage(llama):
    events: list[str] = []
    config = ex.FaithfulnessConfig(granularity="word", steps=10, n_random=10)
    ex.faithfulness_stages(llama, ex.CurvesRequest(
        PROMPT, TARGET, METHODS, config=config,
        progress=lambda s, d, t: events.append(s)), on_coarse=lambda r: events.append("COARSE"))
    at = events.index("COARSE")
    assert events.count("COARSE") == 1
    assert fa.COARSE_STAGE in events[:at] and "curves" not in events[:at] and "upper_bound" not in events[:at]
    assert fa.COARSE_STAGE not in events[at:] and "curves" in events[at:] and "upper_bound" in events[at:]

    # Cancelled during the refinement: the coarse report was delivered, the call raises.
    got = []
    refining = {"on": False}

    def on_coarse(r):
        got.append(r)
        refining["on"] = True

    with pytest.raises(ss.ComputationCancelled):
        ex.faithfulness_stages(llama, ex.CurvesRequest(
            PROMPT, TARGET, METHODS, config=config,
            cancel=lambda: refining["on"]), on_coarse=on_coarse)
    assert len(got) == 1
    # Cancelled at once: no coarse report.
    with pytest.raises(ss.ComputationCancelled):
        ex.faithfulness_stages(llama, ex.CurvesRequest(PROMPT, TARGET, METHODS, config=config, cancel=lambda: True),
                               on_coarse=got.append)
    assert len(got) == 1


def test_one_pass_when_the_config_is_already_coarse(llama):
    config = ex.FaithfulnessConfig(granularity="sentence", steps=3, n_random=2, upper_bound=False)
    seen = []
    rep = ex.faithfulness_stages(llama, ex.CurvesRequest(PROMPT, TARGET, METHODS, config=config), on_coarse=seen.append)
    assert seen == []
    _same(rep, ex.faithfulness_curves(llama, ex.CurvesRequest(PROMPT, TARGET, METHODS, config=config)), rtol=0)


def test_segment_scores_of_another_segmentation_are_refused(llama):
    rep = ex.faithfulness_curves(llama, ex.CurvesRequest(
        PROMPT, TARGET, ("grad_norm",),
        config=ex.FaithfulnessConfig(granularity="sentence", steps=2, n_random=1)))
    with pytest.raises(ss.SalienceError, match="same granularity"):
        ex.faithfulness_curves(llama, ex.CurvesRequest(
            PROMPT, TARGET, ("grad_norm",),
            config=ex.FaithfulnessConfig(granularity="word", steps=2, n_random=1)),
            segment_scores=rep.segment_scores)


def test_coarse_pass_shrinks_with_the_tokens_of_a_row():
    # 4 ranked orders (grad_norm, grad_x_input signed and |value|, length), 2 modes: rows = 2 + 2 (K - 1) (4 + R).
    assert fa.coarse_rows(4, 3, 4, 2) == 44 and fa.coarse_rows(2, 3, 4, 2) == 16 and fa.coarse_rows(2, 1, 4, 2) == 12
    config = ex.FaithfulnessConfig(granularity="word", steps=10, n_random=10)

    def size(tokens):
        c = ex.coarse_config(config, tokens_per_row=tokens, n_ranked=4, max_tokens=4_000)
        assert not c.upper_bound
        return c.steps, c.n_random

    assert size(50) == (4, 3)  # 44 x 50 = 2,200 <= 4,000: the usual coarse pass (a short question)
    assert size(90) == (4, 3)  # 3,960
    assert size(91) == (3, 3)  # 44 x 91 = 4,004 > 4,000; 30 x 91 = 2,730
    assert size(213) == (2, 3)  # 30 x 213 = 6,390 > 4,000; 16 x 213 = 3,408 (the chain-of-thought row)
    assert size(300) == (2, 1)  # 16 x 300 = 4,800, 14 x 300 = 4,200, 12 x 300 = 3,600
    assert size(5_000) == (2, 1)  # never fewer than 2 points and 1 random order
    assert ex.coarse_config(config) == ex.coarse_config(config, tokens_per_row=None)  # no tokens: no budget
    small = ex.FaithfulnessConfig(steps=1, n_random=1)
    assert (ex.coarse_config(small, tokens_per_row=5_000).steps, ex.coarse_config(small, 5_000).n_random) == (1, 1)


def test_stages_size_the_coarse_pass_from_the_prompt_and_target_tokens(tiny_lm, monkeypatch):
    result = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=METHODS)
    tokens = len(result.ids)  # prompt + target tokens of one scored row (filler removal keeps the length)
    monkeypatch.setattr(fa, "COARSE_MAX_TOKENS", 16 * tokens, raising=False)  # room for 2 points and 3 random orders, not 3 points
    config = ex.FaithfulnessConfig(granularity="word", steps=10, n_random=10)
    seen = []
    final = ex.faithfulness_stages(tiny_lm, ex.CurvesRequest(PROMPT, TARGET, METHODS, config=config, result=result),
                                   on_coarse=seen.append)
    (coarse,) = seen
    assert len(coarse.n_removed) == 3 and coarse.n_random == 3  # steps 2: k = 0, half, all
    assert coarse.n_scored <= 16
    small = ex.FaithfulnessConfig(granularity="word", steps=2, n_random=3, upper_bound=False)
    _same(coarse, ex.faithfulness_curves(tiny_lm, ex.CurvesRequest(
        PROMPT, TARGET, METHODS, config=small, result=result)), rtol=0)
    _same(final, ex.faithfulness_curves(tiny_lm, ex.CurvesRequest(
        PROMPT, TARGET, METHODS, config=config, result=result)), rtol=1e-5)
