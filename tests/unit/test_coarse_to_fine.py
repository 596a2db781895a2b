"""Coarse-to-fine leave one out (methods/coarse_to_fine.py) on tiny random models and on a problem by hand.

References, each independent of the code under test:
* brute-force leave one out: the test's own filler removal (every token whose characters lie in the
  segment becomes the filler) and one plain full forward per ablated prompt (no cache, no batching, no
  scoring module);
* the stop rule and the rows it scores: a hand-built additive problem whose values are known.
"""

from __future__ import annotations

import dataclasses

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


def scored_sets(got) -> list[set[int]]:
    """The segments each scored ablation removed, in the order scored (from `kept`)."""
    return [set(np.flatnonzero(~row).tolist()) for row in got.kept]


@pytest.mark.parametrize("k", [1, 3, 5])
def test_refined_words_equal_brute_force_leave_one_out_and_the_rest_carry_their_units_value(lm, k):
    got = segment_salience(lm, PROMPT, TARGET, coarse_to_fine.NAME, granularity="word",
                           config=AblationConfig(refine_top_k=k))
    measured = got.measured_mask()
    assert measured.any() and len(got.values) == len(got.segments)
    for s in np.flatnonzero(measured):
        assert got.values[s] == pytest.approx(brute_force(lm, got, [got.segments[s]]), abs=1e-5)
        assert np.isnan(got.coarse_values[s]) and got.coarse_granularity[s] == ""
    # Each unmeasured word lies in a unit (its sentence or paragraph, or a half of a sentence's words) whose value
    # is brute-force leave one out of all the unit's words, shared evenly among them; the unit did not matter: its
    # |value| is not above max(v_k, 0). The unit is the last scored ablation that removed the word (units are
    # scored coarse to fine).
    text, result = got.text, got.result
    kth = max(np.sort(got.values[measured])[::-1][k - 1] if measured.sum() >= k else -np.inf, 0.0)
    sets = scored_sets(got)
    for s in np.flatnonzero(~measured):
        gran = got.coarse_granularity[s]
        unit = sorted([r for r in sets if s in r][-1])
        assert not measured[unit].any()
        sentence = aggregate.segment(text, result.offsets, "sentence").token_segment
        if gran == "part of a sentence":  # contiguous words of one sentence, not all of them
            owners = {int(sentence[got.segment_tokens[i][0]]) for i in unit}
            whole = [i for i in range(len(got.segments)) if sentence[got.segment_tokens[i][0]] in owners]
            assert len(owners) == 1 and unit == list(range(unit[0], unit[-1] + 1)) and len(unit) < len(whole)
        else:
            owner = aggregate.segment(text, result.offsets, gran).token_segment
            assert unit == [i for i in range(len(got.segments))
                            if owner[got.segment_tokens[i][0]] == owner[got.segment_tokens[s][0]]]
        want = brute_force(lm, got, [got.segments[i] for i in unit])
        assert got.coarse_values[s] == pytest.approx(want, abs=1e-5)
        assert got.values[s] == pytest.approx(want / len(unit), abs=1e-5)
        assert abs(got.coarse_values[s]) <= kth + 1e-12
        assert got.coarse_note(s).startswith(f"inside a {gran} that did not matter (coarse value ")
    # The measured top k are full leave one out's top k (the stop rule's promise when parts matter no more than
    # their whole); here only checked where it holds: every measured value is exact, checked above.
    loo = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="word")
    np.testing.assert_allclose(got.values[measured], loo.values[measured], rtol=0, atol=1e-9)


def test_a_large_k_refines_everything_into_full_leave_one_out(lm):
    got = segment_salience(lm, PROMPT, TARGET, coarse_to_fine.NAME, granularity="sentence",
                           config=AblationConfig(refine_top_k=100))
    loo = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="sentence")
    # With k above the number of sentences the threshold stays 0: every unit whose removal changes log p at all
    # is refined, so every sentence is measured, as in full leave one out.
    assert got.measured_mask().all()
    np.testing.assert_allclose(got.values, loo.values, rtol=0, atol=1e-9)
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
            assert seg["coarse_granularity"] in ("sentence", "paragraph", "part of a sentence")
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
    out = coarse_to_fine.search(problem, 2, coarse_to_fine.Rule(magnitude=False, split_above=0))
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


def test_the_signed_rule_does_not_refine_units_whose_removal_does_not_lower_p():
    w = [0.2, 0.1, -0.3, 0.05, -0.2, -0.1]
    problem, scored = additive_problem(w, sentence=[0, 0, 1, 1, 2, 2], paragraph=[0, 0, 0, 0, 0, 0])
    out = coarse_to_fine.search(problem, 5, coarse_to_fine.Rule(magnitude=False))
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


# Sentences S0 = words 0-2 (+0.25), S1 = words 3-5 (-0.55: its removal raises p, yet word 4 lowers it by 0.45),
# S2 = words 6-7 (+0.5); one paragraph (skipped: it is the whole prompt). The top two words are 4 and 6.
HIDDEN = dict(weights=[0.1, 0.05, 0.1, -0.9, 0.45, -0.1, 0.3, 0.2], sentence=[0, 0, 0, 1, 1, 1, 2, 2],
              paragraph=[0] * 8)


def test_the_signed_rule_misses_a_word_inside_a_unit_whose_removal_raises_p():
    problem, scored = additive_problem(**HIDDEN)
    out = coarse_to_fine.search(problem, 2, coarse_to_fine.Rule(magnitude=False))
    # Coarse: 0.25, -0.55, 0.5. Refine S2 (0.5 > 0): 0.3, 0.2, v_2 = 0.2; S0 (0.25 > 0.2): 0.1, 0.05, 0.1;
    # S1 (-0.55) is not above 0.2: stop. The measured top two are 6 and 7, not 4 and 6.
    assert scored == [[(0, 1, 2), (3, 4, 5), (6, 7)], [(6,), (7,)], [(0,), (1,), (2,)]]
    assert out.measured.tolist() == [True, True, True, False, False, False, True, True]


def test_the_magnitude_rule_refines_a_unit_whose_removal_raises_p_a_lot():
    problem, scored = additive_problem(**HIDDEN)
    out = coarse_to_fine.search(problem, 2, coarse_to_fine.Rule(magnitude=True))
    # Coarse: 0.25, -0.55, 0.5. Largest |value| first: S1 (0.55 > 0): -0.9, 0.45, -0.1, v_2 = -0.1, threshold 0;
    # S2 (0.5 > 0): 0.3, 0.2, v_2 = 0.3; S0 (0.25) is not above 0.3: stop. The measured top two are 4 and 6.
    assert scored == [[(0, 1, 2), (3, 4, 5), (6, 7)], [(3,), (4,), (5,)], [(6,), (7,)]]
    assert out.measured.tolist() == [False, False, False, True, True, True, True, True]
    np.testing.assert_allclose(out.values, [0.25 / 3] * 3 + [-0.9, 0.45, -0.1, 0.3, 0.2])
    assert out.coarse_granularity[:3] == ("sentence",) * 3


def test_batched_refinement_refines_every_unit_above_the_threshold_at_once():
    frames = []
    problem, scored = additive_problem(**HIDDEN, frames=frames)
    out = coarse_to_fine.search(problem, 2, coarse_to_fine.Rule(magnitude=True, batch=True))
    # Threshold 0 after the coarse pass (no word measured yet): all three sentences, largest |value| first, in one
    # batch; every word is then measured.
    assert scored == [[(0, 1, 2), (3, 4, 5), (6, 7)], [(3,), (4,), (5,), (6,), (7,), (0,), (1,), (2,)]]
    assert out.measured.all() and frames == [("coarse pass", 0, 3), ("refining", 3, 11)]


def test_halves_cut_in_text_order_the_first_the_larger():
    assert coarse_to_fine.halves((3, 4, 5, 6, 7)) == ((3, 4, 5), (6, 7))
    assert coarse_to_fine.halves((0, 1, 2, 3)) == ((0, 1), (2, 3))
    assert coarse_to_fine.halves((8, 9)) == ((8,), (9,))


def test_a_long_sentence_is_split_in_halves_before_its_words():
    # One paragraph; sentences: words 0-6, words 7-8, word 9.
    parents = (np.zeros(10, dtype=np.int64), np.array([0] * 7 + [1, 1, 2]))
    U, finer = coarse_to_fine.Unit, coarse_to_fine.finer_units
    top = finer(U(-1, tuple(range(10))), parents, 3)
    # The paragraph is the whole prompt (skipped); a one-word sentence is its word, measured once.
    assert top == [U(1, (0, 1, 2, 3, 4, 5, 6)), U(1, (7, 8)), U(2, (9,))]
    assert finer(top[0], parents, 3) == [U(1, (0, 1, 2, 3), 1), U(1, (4, 5, 6), 1)]
    assert finer(U(1, (0, 1, 2, 3), 1), parents, 3) == [U(1, (0, 1), 2), U(1, (2, 3), 2)]
    assert finer(U(1, (4, 5, 6), 1), parents, 3) == [U(2, (4,)), U(2, (5,)), U(2, (6,))]  # not above 3: its words
    assert finer(top[1], parents, 3) == [U(2, (7,)), U(2, (8,))]
    assert finer(top[0], parents, 0) == [U(2, (s,)) for s in range(7)]  # 0: never split
    names = ("paragraph", "sentence")
    assert U(1, (0, 1), 2).name(names) == "part of a sentence" and top[0].name(names) == "sentence"


def test_the_search_measures_halves_and_leaves_a_half_that_did_not_matter():
    # One sentence of 8 words, all the weight in the first half.
    w = [0.6, 0.1, 0.3, 0.2, 0.01, -0.02, 0.0, 0.01]
    problem, scored = additive_problem(w, sentence=[0, 0, 0, 0, 1, 1, 1, 1], paragraph=[0] * 8)
    problem = dataclasses.replace(problem, parents=(np.zeros(8, dtype=np.int64), np.zeros(8, dtype=np.int64)))
    out = coarse_to_fine.search(problem, 2, coarse_to_fine.Rule(magnitude=True, split_above=2))
    # One sentence = the whole prompt: its halves first, 1.2 and 0.0. Refine (0..3): halves 0.7, 0.5;
    # refine (0, 1): 0.6, 0.1; v_2 = 0.1; refine (2, 3): 0.3, 0.2; v_2 = 0.3; the second half (0.0) stops.
    assert scored == [[(0, 1, 2, 3), (4, 5, 6, 7)], [(0, 1), (2, 3)], [(0,), (1,)], [(2,), (3,)]]
    assert out.measured.tolist() == [True] * 4 + [False] * 4
    assert out.coarse_granularity[4:] == ("part of a sentence",) * 4
    np.testing.assert_allclose(out.coarse_values[4:], [0.0] * 4, atol=1e-12)
