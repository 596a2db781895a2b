"""Learned attention attribution on the embedded default model with the estimator shipped for it."""

from __future__ import annotations

import numpy as np
import pytest

from lit_app.data import datasets
from sequence_salience.ablation import segment_salience
from sequence_salience.attention import SHIPPED, estimator_for
from sequence_salience.attention.prompts import generate_prompt
from sequence_salience.calibration import chat_prompt
from sequence_salience.methods import attention_verified
from sequence_salience.salience import compute_span_salience
from tests.unit.test_ablation import brute_force


def test_the_shipped_estimator_is_the_default_models_and_gives_a_finite_value_per_segment(default_lm):
    assert default_lm.name in SHIPPED
    est = estimator_for(default_lm.name)
    assert (est.shape.n_layers, est.shape.n_heads) == (30, 9) and est.recipe["prompts"] == 40
    row = next(r for r in datasets.shipped_rows() if r["case"].startswith("constitutional"))
    prompt = default_lm.format_prompt(row["prompt"], system=row.get("system") or None)
    seg = segment_salience(default_lm, prompt, row["target"], "attention_attribution", granularity="sentence")
    assert len(seg.values) == len(seg.segments) > 5 and np.all(np.isfinite(seg.values))
    assert seg.stats.rows == 1  # the unedited prompt (log p of the target), no ablated prompt


@pytest.fixture(scope="module")
def planted(default_lm):
    """A held-out notes prompt (evaluation split, seed 1: not in calibration, not a shipped row), ~310 tokens in
    7 paragraphs, one of which holds the code the closing question asks for."""
    count = lambda text: len(default_lm.tokenize(text).ids)
    item = generate_prompt(1, 0, "eval", 200, 400, count, kind="notes")
    return chat_prompt(default_lm, item), item.target


def test_a_planted_fact_is_ranked_first_as_leave_one_out_ranks_it(default_lm, planted):
    """True of this prompt, not of every one: on most held-out notes prompts of docs/benchmarks.md (seed 0, about
    450-850 tokens) the learned map ranks the fact's paragraph second, behind the closing question."""
    prompt, target = planted
    att = segment_salience(default_lm, prompt, target, "attention_attribution", granularity="paragraph")
    loo = segment_salience(default_lm, prompt, target, "leave_one_out", granularity="paragraph")
    start = att.text.index(target.strip())
    fact = next(k for k, (s, e) in enumerate(att.segments) if s <= start < e)
    assert att.ranked()[0] == fact
    assert loo.ranked()[0] == fact
    assert len(att.values) == 7


def test_verified_segments_are_leave_one_out_and_the_rule_stops_where_it_says(default_lm, planted):
    """attention_verified on the default model: its verified values are exact leave-one-out's (one plain forward
    of the prompt without each segment: `brute_force`, no batch, no cache) and it verifies what its stop rule says,
    replayed one at a time on those values over its own candidates (the estimate and the span's gradient norm,
    alternating). Only the segments the replay asks for are measured (7 of 20 sentences here; the engine's leave one
    sentence out of all 20 cost 10.4 s of CPU, these 6.6 s: docs/benchmarks.md, "Session 40 (h3)"), with one
    unedited prompt for all ("Session 42 (h3)")."""
    prompt, target = planted
    att = segment_salience(default_lm, prompt, target, "attention_attribution", granularity="sentence")
    seg = segment_salience(default_lm, prompt, target, "attention_verified", granularity="sentence")
    S = len(seg.values)
    assert S > attention_verified.DEFAULTS.verify_max
    grad = compute_span_salience(default_lm, prompt, target, "grad_norm")  # [N]
    order = attention_verified.candidates(att.values, [grad[t].sum() for t in seg.segment_tokens])

    # The sentences to measure: the rule replayed on the method's own values (its verified values are the exact ones
    # it measured), so that the unedited prompt is scored once for all of them, not once per batch of the rule.
    asked, _ = attention_verified.verify(order, lambda batch: seg.values[batch])
    values, segs = brute_force(default_lm, prompt, target, "sentence", "filler", only=asked)
    assert segs.spans == seg.segments  # the same S sentences
    exact_of = dict(zip(asked, values))

    def leave_one_out_of(segments: list[int]) -> list[float]:
        assert set(segments) <= set(exact_of), f"on exact values the rule asks for {segments}; measured: {asked}"
        return [exact_of[s] for s in segments]

    picked, exact = attention_verified.verify(order, leave_one_out_of)
    assert 6 <= len(picked) <= 12 and seg.quality["verified"] == len(picked)
    assert sorted(np.flatnonzero(seg.measured_mask())) == sorted(picked)
    np.testing.assert_allclose(seg.values[picked], exact, atol=2e-4)  # float32, batched vs one at a time
    rest = [s for s in range(S) if s not in picked]
    assert max(seg.values[rest]) < min(seg.values[picked])
    assert seg.stats.rows == 1 + len(picked)
