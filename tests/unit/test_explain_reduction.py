"""Input reduction on a tiny random model; every result is re-checked independently."""

from __future__ import annotations

import pytest

import sequence_salience as ss
from sequence_salience import explain as ex
from tests.unit import explain_reference as ref
from tests.unit.tiny_models import MODEL_BUILDERS, wrap

PROMPT = "The capital of France is Paris. The capital of Italy is Rome. Alice has three apples."
GEN = ss.GenerationConfig(max_new_tokens=6)


@pytest.fixture(scope="module")
def llama() -> ss.LanguageModel:
    return wrap(MODEL_BUILDERS["llama"](seed=0), "llama")


@pytest.fixture(scope="module")
def generation(llama):
    return llama.generate(PROMPT, GEN)


def test_reduced_prompt_regenerates_the_same_response(llama, generation):
    red = ex.reduce_prompt(llama, PROMPT, generation, config=ex.ReductionConfig(granularity="word", max_seconds=None))
    assert red.stopped_by == "done"
    assert len(red.removed) >= 3, red  # the test means something only if words were removed
    assert len(red.reduced_text) < len(PROMPT)
    # Independent re-check: generate again from the reduced text.
    again = llama.generate(red.reduced_text, GEN)
    assert again.ids == generation.ids, (red.reduced_text, again.text, generation.text)
    assert red.reduce_range(0, len(PROMPT)) == red.reduced_text
    assert red.n_checks >= len(red.removed) + len(red.rejected)


def test_logprob_criterion_keeps_the_logprob_within_tolerance(llama, generation):
    red = ex.reduce_prompt(llama, PROMPT, generation,
                           config=ex.ReductionConfig(granularity="word", criterion="logprob", tolerance=0.5))
    assert red.removed
    target = list(generation.ids)
    before = ref.span_logprob(llama.model, llama.encode_prompt(PROMPT).ids, target, 0, len(target))
    after = ref.span_logprob(llama.model, llama.encode_prompt(red.reduced_text).ids, target, 0, len(target))
    assert after >= before - 0.5 - 1e-6
    assert red.reduced_logprob == pytest.approx(after, rel=1e-5)
    assert red.original_logprob == pytest.approx(before, rel=1e-5)


def test_step_budget_stops_the_search(llama, generation):
    red = ex.reduce_prompt(llama, PROMPT, generation,
                           config=ex.ReductionConfig(granularity="word", max_steps=3, batch_size=2))
    assert red.stopped_by == "steps"
    assert red.n_checks == 3
    seen = []
    ex.reduce_prompt(llama, PROMPT, generation, config=ex.ReductionConfig(granularity="sentence"),
                     progress=lambda stage, done, total: seen.append((stage, done, total)))
    assert seen and seen[-1][1] == seen[-1][2] == 3  # every sentence decided


def test_greedy_criterion_needs_the_greedy_response(llama):
    with pytest.raises(ss.SalienceError, match="criterion='logprob'"):
        ex.reduce_prompt(llama, PROMPT, " apples apples apples", config=ex.ReductionConfig(granularity="word"))


def test_cancel_stops_between_batches(llama, generation):
    with pytest.raises(ss.ComputationCancelled):
        ex.reduce_prompt(llama, PROMPT, generation, cancel=lambda: True)
