"""sequence_salience.compare_models: two models on one prompt (tiny random Llama and GPT-2 over one tokenizer).

The cross log-probs (each model's log p of the other's answer) are checked against tests/unit/reference.py's
plain per-token forwards; the values and scales against compare_results' own definition, recomputed here.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import sequence_salience as ss
from sequence_salience import aggregate
from tests.unit.reference import reference_salience
from tests.unit.tiny_models import MODEL_BUILDERS, wrap

PROMPT = "Alice has three apples and Bob has two"


@pytest.fixture(scope="module")
def pair():
    return wrap(MODEL_BUILDERS["llama"](seed=0), "llama"), wrap(MODEL_BUILDERS["gpt2"](seed=0), "gpt2")


def _reference_logp(lm, prompt_ids, target_ids) -> np.ndarray:
    ids = list(prompt_ids) + list(target_ids)
    return reference_salience(lm.model, ids, len(prompt_ids))["logp"]


def test_cross_logprobs_against_plain_teacher_forced_forwards(pair):
    lm_a, lm_b = pair
    ans_a, ans_b = " apples; together they have five.", " Paris is the capital of France."
    mc = ss.compare_models(lm_a, lm_b, PROMPT, response_a=ans_a, response_b=ans_b, chat=False)
    assert mc.labels == ("llama", "gpt2") and mc.same_tokenizer
    ids_a, ids_b = lm_a.encode_prompt(PROMPT).ids, lm_b.encode_prompt(PROMPT).ids
    t_a, t_b = lm_a.tokenize(ans_a).ids, lm_b.tokenize(ans_b).ids
    # A's answer under A and under B; B's answer under A and under B.
    np.testing.assert_allclose(mc.cross_a.under_a.logprobs, _reference_logp(lm_a, ids_a, t_a), atol=1e-6)
    np.testing.assert_allclose(mc.cross_a.under_b.logprobs, _reference_logp(lm_b, ids_b, t_a), atol=1e-6)
    np.testing.assert_allclose(mc.cross_b.under_a.logprobs, _reference_logp(lm_a, ids_a, t_b), atol=1e-6)
    np.testing.assert_allclose(mc.cross_b.under_b.logprobs, _reference_logp(lm_b, ids_b, t_b), atol=1e-6)
    assert mc.cross_a.delta == pytest.approx(mc.cross_a.under_b.total - mc.cross_a.under_a.total)
    # Both maps on one shared scale per aligned segment; the difference B - A.
    cmp = mc.comparison
    assert cmp.response_a == ans_a and cmp.response_b == ans_b and cmp.responses.changed
    assert all(s.kind == "equal" for s in cmp.prompts.segments)  # one prompt, the same template (none)
    for result, values in ((cmp.result_a, cmp.values_a), (cmp.result_b, cmp.values_b)):
        seg = aggregate.segment(result.text, result.offsets, "word")
        per_seg = aggregate.aggregate(result.span_salience("grad_x_input"), seg)
        in_prompt = [s for s in range(len(seg)) if seg.starts[s] < result.prompt_end]
        np.testing.assert_allclose(values, per_seg[in_prompt])
    np.testing.assert_allclose(cmp.difference, cmp.values_b - cmp.values_a)
    both = np.abs(np.concatenate([cmp.values_a, cmp.values_b]))
    assert cmp.scale.scale == pytest.approx(np.nanmax(both))


def test_generated_answers_json_and_html(pair, tmp_path):
    lm_a, lm_b = pair
    gen = ss.GenerationConfig(max_new_tokens=4)
    mc = ss.compare_models(lm_a, lm_b, PROMPT, chat=False, generation=gen, labels=("base", "tuned"))
    assert mc.comparison.response_a == lm_a.generate(lm_a.format_prompt(PROMPT, chat=False), gen).text
    assert mc.comparison.response_b == lm_b.generate(lm_b.format_prompt(PROMPT, chat=False), gen).text
    data = json.loads(open(mc.to_json(tmp_path / "m.json", meta={"prompt": PROMPT}), encoding="utf-8").read())
    assert data["format"] == "sequence_salience.ModelComparison" and data["labels"] == ["base", "tuned"]
    assert data["cross_b"]["under_b"]["total"] == pytest.approx(mc.cross_b.under_b.total)
    page = open(mc.to_html(tmp_path / "m.html"), encoding="utf-8").read()
    assert "Each answer under both models" in page and "base's answer" in page and "<script" not in page
    assert f"{mc.cross_b.under_a.total:.3f}" in page
    with pytest.raises(ss.SalienceError, match="empty"):
        ss.compare_models(lm_a, lm_b, "  ")
