"""Coarse-to-fine leave one out (methods/coarse_to_fine.py) on tiny random models and on a problem by hand.

References, each independent of the code under test:
* brute-force leave one out: the test's own filler removal (every token whose characters lie in the
  segment becomes the filler) and one plain full forward per ablated prompt (no cache, no batching, no
  scoring module);
* the stop rule and the rows it scores: a hand-built additive problem whose values are known.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sequence_salience import aggregate, methods
from sequence_salience.ablation import AblationConfig, segment_salience
from sequence_salience.display.segments import SegmentFacts
from sequence_salience.errors import SalienceError
from sequence_salience.methods import coarse_to_fine, leave_one_out
from sequence_salience.methods.base import SegmentProblem
from tests.unit.tiny_models import MODEL_BUILDERS, wrap

PROMPT = ("The capital of France is Paris. The capital of Italy is Rome.\n\n"
          "Alice has three apples and Bob has two apples. Q: What is 2 + 3?")
TARGET = " A: 5. Paris."


@pytest.fixture(scope="module")
def lm():
    return wrap(MODEL_BUILDERS["llama"](), "llama")


def plain_logprob(lm, ids, n_prompt) -> float:
    """log p(target | prompt) from one full forward of `ids` (prompt + target)."""
    with torch.no_grad():
        logits = lm.model(input_ids=torch.tensor([ids])).logits[0]  # [N, V]
    logp = torch.log_softmax(logits.double(), dim=-1)  # [N, V]
    return float(sum(logp[t - 1, ids[t]] for t in range(n_prompt, len(ids))))


def removed_ids(lm, result, spans) -> list[int]:
    """The prompt + target ids with every prompt token whose first non-space character lies in one of `spans`
    (characters; a word's span holds its trailing space, the next word's token its leading one) set to the filler."""
    filler = lm.tokenizer(" ", add_special_tokens=False)["input_ids"][0]
    ids = [int(i) for i in result.ids]
    for t in range(result.n_prompt_tokens):
        a, b = (int(x) for x in result.offsets[t])
        piece = result.text[a:b]
        first = a + (len(piece) - len(piece.lstrip()) if piece.strip() else 0)
        if not result.special[t] and b > a and any(s <= first < e for s, e in spans):
            ids[t] = filler
    return ids


def brute_force(lm, seg, spans) -> float:
    """log p(target | prompt) - log p(target | prompt without `spans`), plain forwards."""
    r = seg.result
    P = r.n_prompt_tokens
    return plain_logprob(lm, [int(i) for i in r.ids], P) - plain_logprob(lm, removed_ids(lm, r, spans), P)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_refined_words_equal_brute_force_leave_one_out_and_the_rest_carry_their_units_value(lm, k):
    got = segment_salience(lm, PROMPT, TARGET, coarse_to_fine.NAME, granularity="word",
                           config=AblationConfig(refine_top_k=k))
    measured = got.measured_mask()
    assert measured.any() and len(got.values) == len(got.segments)
    for s in np.flatnonzero(measured):
        assert got.values[s] == pytest.approx(brute_force(lm, got, [got.segments[s]]), abs=1e-5)
        assert np.isnan(got.coarse_values[s]) and got.coarse_granularity[s] == ""
    # Each unmeasured word lies in a unit (its sentence or paragraph) whose value is brute-force leave one out of
    # all the unit's words, shared evenly among them; the unit did not matter: it is not above max(v_k, 0).
    text, result = got.text, got.result
    kth = max(np.sort(got.values[measured])[::-1][k - 1] if measured.sum() >= k else -np.inf, 0.0)
    for s in np.flatnonzero(~measured):
        gran = got.coarse_granularity[s]
        owner = aggregate.segment(text, result.offsets, gran).token_segment
        unit = [i for i in range(len(got.segments))
                if owner[got.segment_tokens[i][0]] == owner[got.segment_tokens[s][0]]]
        assert not measured[unit].any()
        want = brute_force(lm, got, [got.segments[i] for i in unit])
        assert got.coarse_values[s] == pytest.approx(want, abs=1e-5)
        assert got.values[s] == pytest.approx(want / len(unit), abs=1e-5)
        assert got.coarse_values[s] <= kth + 1e-12
        assert got.coarse_note(s).startswith(f"inside a {gran} that did not matter (coarse value ")
    # The measured top k are full leave one out's top k (the stop rule's promise when parts matter no more than
    # their whole); here only checked where it holds: every measured value is exact, checked above.
    loo = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="word")
    np.testing.assert_allclose(got.values[measured], loo.values[measured], rtol=0, atol=1e-9)


def test_a_large_k_refines_everything_into_full_leave_one_out(lm):
    got = segment_salience(lm, PROMPT, TARGET, coarse_to_fine.NAME, granularity="sentence",
                           config=AblationConfig(refine_top_k=100))
    loo = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="sentence")
    measured = got.measured_mask()
    # Units with a value <= 0 are never refined; every other sentence is measured, as in full leave one out.
    for s in np.flatnonzero(~measured):
        assert got.coarse_values[s] <= 0 and got.coarse_granularity[s] == "paragraph"
    np.testing.assert_allclose(got.values[measured], loo.values[measured], rtol=0, atol=1e-9)
    assert got.stats.reuse and got.stats.computed < got.stats.tokens  # coarse and fine rows share the prefix


def test_json_marks_each_segment_measured_or_not_with_its_coarse_value(lm):
    got = segment_salience(lm, PROMPT, TARGET, coarse_to_fine.NAME, granularity="word",
                           config=AblationConfig(refine_top_k=1))
    js = got.to_json()["segments"]
    assert [s["measured"] for s in js] == got.measured_mask().tolist()
    assert not all(s["measured"] for s in js)  # k = 1 on this prompt leaves units unrefined
    for s, seg in enumerate(js):
        if seg["measured"]:
            assert "coarse_value" not in seg
        else:
            assert seg["coarse_value"] == float(got.coarse_values[s])
            assert seg["coarse_granularity"] in ("sentence", "paragraph")
    loo = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="word")
    assert all(s["measured"] and "coarse_value" not in s for s in loo.to_json()["segments"])
    # The terminal and HTML views say how many were measured (from the object or its saved JSON).
    n = int(got.measured_mask().sum())
    for facts in (SegmentFacts.of(got), SegmentFacts.of(got.to_json())):
        assert f"; {n} of {len(js)} words measured exactly, the others inside a " in facts.cost_text()
    assert "measured exactly" not in SegmentFacts.of(loo).cost_text()


def test_progress_says_coarse_pass_then_refining_with_a_total_that_grows(lm):
    seen = []
    got = segment_salience(lm, PROMPT, TARGET, coarse_to_fine.NAME, granularity="word",
                           config=AblationConfig(batch_size=2), progress=lambda *a: seen.append(a))
    stages = [s for s, _, _ in seen]
    assert stages[0] == "coarse pass" and "refining" in stages
    assert stages == sorted(stages, key=lambda s: s != "coarse pass")  # the coarse pass first, then refining
    done = [d for _, d, _ in seen]
    assert done == sorted(done) and all(d <= t for _, d, t in seen)
    assert seen[-1][1] == seen[-1][2] == len(got.logprobs) >= got.stats.rows - 1  # the unedited row apart, repeats once
    coarse_total = max(t for s, _, t in seen if s == "coarse pass")
    assert max(t for s, _, t in seen if s == "refining") > coarse_total


def test_a_granularity_without_coarser_units_is_refused_with_the_fix(lm):
    with pytest.raises(SalienceError, match="use leave_one_out at 'paragraph'"):
        segment_salience(lm, PROMPT, TARGET, coarse_to_fine.NAME, granularity="paragraph")


def test_registered_as_a_segment_method():
    assert coarse_to_fine.NAME in methods.list_segment_methods()
    record = methods.get_segment_method(coarse_to_fine.NAME)
    assert record.kind == "segment" and record.signed and record.coarser("word") == ("paragraph", "sentence")


# -- the search on a problem by hand ----------------------------------------------------------------------------

def additive_problem(weights, sentence, paragraph, frames=None):
    """Removing segments lowers log p by the sum of their weights; log p(unedited) = 0."""
    weights = np.asarray(weights, dtype=np.float64)
    scored = []

    def score(prompts):
        scored.append(list(prompts))
        return np.array([-weights[list(p)].sum() for p in prompts])

    problem = SegmentProblem(n_segments=len(weights), edit=lambda removed: tuple(sorted(removed)), score=score,
                             original_logprob=0.0, span_tokens=1,
                             parents=(np.asarray(paragraph), np.asarray(sentence)),
                             parent_granularities=("paragraph", "sentence"),
                             frame=(lambda *a: frames.append(a)) if frames is not None else (lambda *a: None))
    return problem, scored


def test_the_search_refines_best_first_and_stops_when_no_unit_can_beat_the_kth_value():
    # Two paragraphs: P0 = sentences S0 (words 0-2), S1 (words 3-4); P1 = sentence S2 (words 5-7).
    w = [0.5, 0.1, 0.0, 0.05, 0.02, 0.3, 0.25, -0.1]
    sentence = [0, 0, 0, 1, 1, 2, 2, 2]
    paragraph = [0, 0, 0, 0, 0, 1, 1, 1]
    frames = []
    problem, scored = additive_problem(w, sentence, paragraph, frames)
    out = coarse_to_fine.compute(problem, AblationConfig(refine_top_k=2))
    # Coarse pass: P0 = 0.67, P1 = 0.45. Refine P0 (its sentences: 0.6, 0.07), then S0 (words 0.5, 0.1, 0.0):
    # v_2 = 0.1 < P1's 0.45: refine P1 (a single sentence: straight to its words 0.3, 0.25, -0.1): v_2 = 0.3,
    # above S1's 0.07: stop. S1 is left with its value shared by words 3 and 4.
    assert scored == [[(0, 1, 2, 3, 4), (5, 6, 7)], [(0, 1, 2), (3, 4)], [(0,), (1,), (2,)], [(5,), (6,), (7,)]]
    assert out.measured.tolist() == [True, True, True, False, False, True, True, True]
    np.testing.assert_allclose(out.values, [0.5, 0.1, 0.0, 0.035, 0.035, 0.3, 0.25, -0.1])
    np.testing.assert_allclose(out.coarse_values[3:5], [0.07, 0.07])
    assert out.coarse_granularity == ("", "", "", "sentence", "sentence", "", "", "")
    assert out.kept.shape == (10, 8) and not out.kept[0, :5].any() and out.kept[0, 5:].all()
    np.testing.assert_allclose(out.logprobs[:2], [-0.67, -0.45])
    assert frames == [("coarse pass", 0, 2), ("refining", 2, 4), ("refining", 4, 7), ("refining", 7, 10)]


def test_units_whose_removal_does_not_lower_p_are_not_refined():
    w = [0.2, 0.1, -0.3, 0.05, -0.2, -0.1]
    problem, scored = additive_problem(w, sentence=[0, 0, 1, 1, 2, 2], paragraph=[0, 0, 0, 0, 0, 0])
    out = coarse_to_fine.compute(problem, AblationConfig(refine_top_k=5))
    # One paragraph: skipped (the whole prompt). Sentences 0.3, -0.25, -0.3: only the first is refined, although
    # fewer than k words are measured then.
    assert scored == [[(0, 1), (2, 3), (4, 5)], [(0,), (1,)]]
    assert out.measured.tolist() == [True, True, False, False, False, False]
    np.testing.assert_allclose(out.coarse_values[2:], [-0.25, -0.25, -0.3, -0.3])


def test_without_coarser_units_it_is_leave_one_out():
    w = [0.2, -0.1, 0.4]
    problem, scored = additive_problem(w, sentence=[0, 0, 0], paragraph=[0, 0, 0])
    out = coarse_to_fine.compute(problem, AblationConfig())
    assert scored == [[(0,), (1,), (2,)]] and out.measured.all()
    np.testing.assert_allclose(out.values, w)
