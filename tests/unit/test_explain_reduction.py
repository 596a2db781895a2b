"""Input reduction on a tiny random model; every result is re-checked independently."""

from __future__ import annotations

import numpy as np
import pytest

import sequence_salience as ss
from sequence_salience import explain as ex
from tests.unit import explain_reference as ref


PROMPT = "The capital of France is Paris. The capital of Italy is Rome. Alice has three apples."
GEN = ss.GenerationConfig(max_new_tokens=6)


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


def _filler_reference(llama, generation, removed_spans) -> tuple[list[int], str]:
    """The original prompt's ids with every (non-special) token of a removed word replaced by the " " token, and
    the text of those ids. Words are aggregate's word segments of prompt + response (the last
    prompt word may run into the response; removal spans stop at the prompt's end)."""
    enc = llama.encode_prompt(PROMPT)
    P = len(PROMPT)
    offsets = list(enc.offsets) + [(s + P, e + P) for s, e in generation.offsets]
    seg = ss.aggregate.segment(PROMPT + generation.text, np.asarray(offsets), "word")
    removed = {k for k in range(len(seg.starts))
               if (int(seg.starts[k]), min(int(seg.ends[k]), P)) in set(removed_spans)}
    assert len(removed) == len(removed_spans)
    space = llama.tokenize(" ").ids
    assert len(space) == 1
    gone = [seg.token_segment[j] in removed and not enc.special[j] for j in range(len(enc.ids))]  # never BOS
    ids = [space[0] if g else i for g, i in zip(gone, enc.ids)]
    text = "".join(" " if g else PROMPT[s:e] for g, (s, e) in zip(gone, enc.offsets))
    return ids, text


def test_filler_reduction_keeps_positions_and_regenerates_the_response(llama, generation):
    red = ex.reduce_prompt(llama, PROMPT, generation,
                           config=ex.ReductionConfig(granularity="word", removal="filler", max_seconds=None))
    assert red.removal == "filler" and red.stopped_by == "done" and red.filler_text == " "
    assert len(red.removed) >= 3, red
    # Positions kept: the original ids with the removed words' tokens as " ".
    want_ids, want_text = _filler_reference(llama, generation, red.removed_spans)
    assert list(red.reduced_ids) == want_ids and len(want_ids) == len(llama.encode_prompt(PROMPT).ids)
    # Independent re-check: plain greedy decoding from the reduced ids gives the same response.
    assert ref.greedy_continuation(llama.model, red.reduced_ids, len(generation.ids)) == list(generation.ids)
    # The text is the reduced ids' text: each removed token spelled as the filler.
    assert red.reduced_text == want_text == red.reduce_range(0, len(PROMPT))
    assert llama.tokenizer.decode(red.reduced_ids, skip_special_tokens=True) == want_text
    assert red.reduce_range(0, 31) + red.reduce_range(31, len(PROMPT)) == want_text


def test_filler_reduction_with_the_logprob_criterion(llama, generation):
    red = ex.reduce_prompt(llama, PROMPT, generation, config=ex.ReductionConfig(
        granularity="word", criterion="logprob", tolerance=0.5, removal="filler"))
    assert red.removed
    target = list(generation.ids)
    before = ref.span_logprob(llama.model, llama.encode_prompt(PROMPT).ids, target, 0, len(target))
    after = ref.span_logprob(llama.model, _filler_reference(llama, generation, red.removed_spans)[0], target, 0, len(target))
    assert after >= before - 0.5 - 1e-6
    assert red.reduced_logprob == pytest.approx(after, rel=1e-5)


def test_unknown_removal_is_an_error(llama, generation):
    with pytest.raises(ss.SalienceError, match="Unknown removal 'blank'"):
        ex.reduce_prompt(llama, PROMPT, generation, config=ex.ReductionConfig(removal="blank"))


@pytest.mark.parametrize("spans,reps,start,end,want", [
    pytest.param([(4, 9)], ["_"], 0, None, "The _ fox", id="one"),
    pytest.param([(10, 13), (0, 3)], ["X", "Y"], 0, None, "Y quick X", id="unsorted"),
    pytest.param([(4, 6), (4, 6)], [" ", " "], 0, None, "The   ick fox", id="two-tokens-one-span"),
    pytest.param([(4, 9), (10, 13)], ["_", "_"], 2, 11, "e _ _", id="clipped-window"),
    pytest.param([(0, 3)], ["_"], 4, None, "quick fox", id="outside-window"),
])
def test_replace_spans(spans, reps, start, end, want):
    from sequence_salience import scoring
    assert scoring.replace_spans("The quick fox", spans, reps, start, end) == want
