"""The faithfulness test's upper bound (explain/upper_bound.py) on tiny random models, against a
brute force over every order scored by plain unpadded forwards, and its verdicts by hand."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import sequence_salience as ss
from sequence_salience import explain as ex
from sequence_salience.explain import faithfulness as fa
from sequence_salience.explain import upper_bound as ub
from tests.unit import explain_reference as ref
from tests.unit.tiny_models import tiny_tokenizer

PROMPT = "The capital of France is Paris. The capital of Italy is Rome. Alice has three apples. Bob has two."
TARGET = " Paris. The capital"
METHODS = ("grad_norm", "grad_x_input")


def plain_subset_logprobs(lm, n_segments: int):
    """log p(target | the segments in `mask` replaced by the filler " "), for every bitmask: a dict
    mask -> float, each one plain unpadded forward (tests/unit/explain_reference.py)."""
    result = ss.compute_salience(lm, PROMPT, TARGET, methods=("grad_norm",))
    segs = ex.prompt_segments(result, "sentence")
    assert len(segs) == n_segments
    prompt_ids = list(result.ids[:result.n_prompt_tokens])
    target_ids = list(result.ids[result.n_prompt_tokens:])
    space = tiny_tokenizer()(" ", add_special_tokens=False)["input_ids"][0]
    out = {}
    for mask in range(1 << n_segments):
        ids = list(prompt_ids)
        for s in range(n_segments):
            if mask >> s & 1:
                for i in segs.tokens[s]:
                    ids[i] = space
        out[mask] = ref.span_logprob(lm.model, ids, target_ids, 0, len(target_ids))
    return out


def order_aopc(order, counts, lp, mode: str, S: int) -> float:
    """AOPC of one order from the plain subset log-probs (the definitions in faithfulness.py)."""
    full = (1 << S) - 1
    vals = []
    for n in counts:
        mask = sum(1 << int(s) for s in order[:n])
        if mode == "deletion":
            vals.append(lp[0] - lp[mask])
        else:
            vals.append(lp[full ^ mask] - lp[full])
    return float(np.mean(vals))


@pytest.mark.parametrize("steps", [10, 2], ids=["one-per-point", "two-per-point"])
def test_exhaustive_bound_equals_brute_force_over_every_order(llama, steps):
    S = 4
    rep = ex.faithfulness_curves(llama, ex.CurvesRequest(
        PROMPT, TARGET, METHODS,
        config=ex.FaithfulnessConfig(granularity="sentence", steps=steps, n_random=3)))
    lp = plain_subset_logprobs(llama, S)
    counts = list(rep.n_removed)
    assert counts == ([0, 1, 2, 3, 4] if steps == 10 else [0, 2, 4])
    for mode in ("deletion", "insertion"):
        brute = max(order_aopc(p, counts, lp, mode, S) for p in itertools.permutations(range(S)))
        bound = rep.curves[mode][fa.UPPER]
        assert bound.ordering == ub.EXHAUSTIVE
        assert bound.aopc == pytest.approx(brute, abs=2e-5), mode
        assert order_aopc(bound.order, counts, lp, mode, S) == pytest.approx(brute, abs=2e-5)
        assert sorted(bound.order) == list(range(S))
        # never below any order the test scored: every method ordering and every random order
        for name in rep.ranked() + [fa.LENGTH]:
            assert bound.aopc >= rep.aopc(name, mode) - 1e-9, (mode, name)
        assert bound.aopc >= rep.curves[mode][fa.RANDOM].all_aopc.max() - 1e-9
    # Filler removal: the test scored exactly the subsets of the curve points' sizes: all 2^S = 16 with one
    # segment per point; with two, the sizes 0, 2, 4: 1 + 6 + 1 = 8.
    assert rep.n_scored == (16 if steps == 10 else 8) == ub.exhaustive_rows(S, counts)
    assert 0 <= rep.upper_bound_rows <= rep.n_scored


def test_greedy_search_takes_the_best_next_segment_at_each_point(llama):
    S = 4
    cfg = ex.FaithfulnessConfig(granularity="sentence", steps=10, n_random=2, exhaustive_max_segments=0)
    rep = ex.faithfulness_curves(llama, ex.CurvesRequest(PROMPT, TARGET, METHODS, config=cfg))
    lp = plain_subset_logprobs(llama, S)
    full = (1 << S) - 1
    for mode in ("deletion", "insertion"):
        bound = rep.curves[mode][fa.UPPER]
        tested = max([rep.aopc(n, mode) for n in rep.ranked() + [fa.LENGTH]]
                     + list(rep.curves[mode][fa.RANDOM].all_aopc))
        assert bound.aopc >= tested - 1e-9
        if bound.ordering != ub.GREEDY:  # a tested order beat the greedy one: the bound is that order
            assert bound.ordering in rep.ranked() + [fa.LENGTH, fa.RANDOM]
            continue
        chosen = 0
        for s in bound.order[:-1]:  # the last one is forced
            def value(c):
                m = chosen | 1 << c
                return -lp[m] if mode == "deletion" else lp[full ^ m]
            rest = [c for c in range(S) if not chosen >> c & 1]
            best = max(value(c) for c in rest)
            assert value(int(s)) == pytest.approx(best, abs=1e-9), (mode, s)
            chosen |= 1 << int(s)
        assert bound.aopc == pytest.approx(order_aopc(bound.order, list(rep.n_removed), lp, mode, S), abs=2e-5)


def test_best_chain_finds_the_optimum_where_greedy_does_not():
    # S = 3, one segment per point. Greedy takes {0} (5) first and then only pairs holding 0 (0 each):
    # 0 + 5 + 0 + 0 = 5. The best chain {} -> {1} -> {1, 2} -> {0, 1, 2} sums to 0 + 4 + 10 + 0 = 14.
    values = np.zeros(8)
    values[0b001], values[0b010], values[0b100] = 5.0, 4.0, 0.0
    values[0b011], values[0b101], values[0b110] = 0.0, 0.0, 10.0
    chain = ub.best_chain(values, [0, 1, 2, 3])
    assert chain == [0b000, 0b010, 0b110, 0b111]
    assert list(ub.chain_order(chain)) == [1, 2, 0]
    # Two segments per point: the best pair, then the rest.
    assert ub.best_chain(values, [0, 2, 3]) == [0b000, 0b110, 0b111]


def test_greedy_rows_formula_by_hand():
    # S = 20, K = 10: counts 0, 2, ..., 20; candidates per point 20, 18, ..., 4 (k = 1..9), capped at 16,
    # plus one row per point for the chosen pair: 16+16+16+14+12+10+8+6+4 + 9 = 111.
    counts = list(fa.removal_counts(20, 10))
    assert ub.greedy_rows(20, counts, 16) == 111
    assert ub.greedy_rows(20, counts, None) == 20 + 18 + 16 + 14 + 12 + 10 + 8 + 6 + 4 + 9
    assert ub.greedy_rows(4, [0, 1, 2, 3, 4], None) == 4 + 3 + 2  # one per point: no extra rows
    assert ub.exhaustive_rows(8) == 256 == ub.exhaustive_rows(8, [0, 1, 2, 3, 4, 5, 6, 7, 8])
    assert ub.exhaustive_rows(5, [0, 2, 5]) == 1 + 10 + 10 + 1  # removed sizes 0, 2, 5 and (insertion) 3


def test_greedy_with_few_candidates_counts_its_rows_and_reports_progress(llama):
    seen = []
    cfg = ex.FaithfulnessConfig(granularity="word", steps=5, n_random=2, exhaustive_max_segments=0,
                                greedy_candidates=3, modes=("deletion",))
    rep = ex.faithfulness_curves(llama, ex.CurvesRequest(PROMPT, TARGET, ("grad_norm",), config=cfg,
                                                  progress=lambda stage, d, t: seen.append((stage, d, t))))
    S = len(rep.segments)
    planned = ub.greedy_rows(S, list(rep.n_removed), 3)
    bound_steps = [(d, t) for stage, d, t in seen if stage == ub.STAGE]
    assert bound_steps and bound_steps[-1] == (planned, planned)
    assert all(t == planned for _, t in bound_steps)
    assert [d for d, _ in bound_steps] == sorted(d for d, _ in bound_steps)
    assert 0 < rep.upper_bound_rows <= planned
    curves_rows = ex.faithfulness_curves(llama, ex.CurvesRequest(
        PROMPT, TARGET, ("grad_norm",),
        config=ex.FaithfulnessConfig(granularity="word", steps=5, n_random=2,
                                     upper_bound=False, modes=("deletion",))))
    assert rep.n_scored == curves_rows.n_scored + rep.upper_bound_rows


def test_cancel_during_the_search_stops_it(llama):
    state = {"curves_done": False}

    def progress(stage, done, total):
        if stage == "curves" and done == total:
            state["curves_done"] = True

    with pytest.raises(ss.ComputationCancelled, match=ub.STAGE):
        ex.faithfulness_curves(llama, ex.CurvesRequest(PROMPT, TARGET, ("grad_norm",),
                                                config=ex.FaithfulnessConfig(granularity="word", steps=5, n_random=2,
                                                                             exhaustive_max_segments=0),
                                                progress=progress, cancel=lambda: state["curves_done"]))


def test_without_the_bound_no_curve_and_no_undecidable_verdict(llama):
    rep = ex.faithfulness_curves(llama, ex.CurvesRequest(
        PROMPT, TARGET, METHODS,
        config=ex.FaithfulnessConfig(granularity="sentence", upper_bound=False)))
    assert fa.UPPER not in rep.curves["deletion"]
    assert rep.upper_bound_rows == 0 and rep.decidable("deletion") is None
    rows = rep.table()
    assert all(r["upper_bound_aopc"] is None and r["decidable"] is None for r in rows)
    assert all(r["verdict"] != fa.UNDECIDABLE for r in rows)
    assert rep.ranked() == ["grad_norm", "grad_x_input", "grad_x_input:abs"]


def test_report_verdicts_follow_the_bound(llama):
    rep = ex.faithfulness_curves(llama, ex.CurvesRequest(PROMPT, TARGET, METHODS,
                                                  config=ex.FaithfulnessConfig(granularity="sentence", n_random=4)))
    assert rep.ranked() == ["grad_norm", "grad_x_input", "grad_x_input:abs"]  # the bound is no method
    for r in rep.table():
        noise = fa.NOISE_SIGMAS * r["random_std"]
        b = r["upper_bound_aopc"]
        assert r["decidable"] == (b > r["random_aopc"] + noise and b > r["length_aopc"] + noise)
        plain = fa.verdict(r["aopc"], r["random_aopc"], r["random_std"], r["length_aopc"])
        want = fa.UNDECIDABLE if (plain == fa.NOISE and not r["decidable"]) else plain
        assert r["verdict"] == want


def test_verdicts_by_hand():
    # random mean 1.0, std 0.1 (noise 0.2), length 1.5: a decision needs AOPC > 1.7.
    v = fa.verdict
    assert v(1.8, 1.0, 0.1, 1.5, bound_aopc=2.0) == "beats random and length"
    assert v(1.6, 1.0, 0.1, 1.5, bound_aopc=2.0) == "within noise"  # some order passes; this one does not
    assert v(1.6, 1.0, 0.1, 1.5, bound_aopc=1.65) == "not decidable on this prompt"  # no order passes
    assert v(1.6, 1.0, 0.1, 1.5, bound_aopc=1.7) == "not decidable on this prompt"  # equal is not above
    assert v(1.2, 1.0, 0.1, 1.5, bound_aopc=1.65) == "worse"  # length clearly better: still a finding
    assert v(1.6, 1.0, 0.1, 1.5) == "within noise"  # no bound: as before
    assert fa.decidable(1.71, 1.0, 0.1, 1.5) and not fa.decidable(1.69, 1.0, 0.1, 1.5)
    assert fa.decidable(1.01, 1.0, 0.0, 0.5)  # one random order: no noise


def test_bad_search_settings_name_the_fix(llama):
    with pytest.raises(ss.SalienceError, match="exhaustive_max_segments"):
        ex.faithfulness_curves(llama, ex.CurvesRequest(PROMPT, TARGET, ("grad_norm",),
                                                config=ex.FaithfulnessConfig(exhaustive_max_segments=30)))
    with pytest.raises(ss.SalienceError, match="greedy_candidates"):
        ex.faithfulness_curves(llama, ex.CurvesRequest(PROMPT, TARGET, ("grad_norm",),
                                                config=ex.FaithfulnessConfig(greedy_candidates=0)))


def test_the_rows_found_in_the_memo_are_done_before_any_row_is_scored(llama):
    """Issue 43 §4 (test_readable_messages once read "45 / 54 (83%) · about 3–87 s left" 1 s before the search
    ended; on that row the greedy search plans 54 rows in 6 calls and finds 45 in the curves' memo): a call counted
    the planned rows it found in the memo at its end, after the rows it scored, so its last units were free and the
    page estimated them at the measured rate. They are now reported
    before the first row is scored: at every report after that one, the units left are the rows still to score
    (3 of 5 prompts known here, 2 scored one per batch)."""
    tok = tiny_tokenizer()
    prompts = [tuple(tok(text, add_special_tokens=False)["input_ids"])
               for text in ("one two", "two three", "three four", "four five", "five six")]
    target = tuple(tok(TARGET, add_special_tokens=False)["input_ids"])
    known = {prompts[0]: -1.0, prompts[2]: -2.0, prompts[4]: -3.0}
    seen: list[tuple[int, int]] = []
    scorer = ub.MemoScorer(llama, target, (0, len(target)), known, batch_size=1, slice_s=None,
                           progress=lambda stage, done, total: seen.append((done, total)), cancel=None, planned=5)
    out = scorer(prompts)
    assert scorer.rows == 2 and list(out[[0, 2, 4]]) == [-1.0, -2.0, -3.0]
    assert seen[0] == (3, 5), seen  # the memo's rows, before any forward
    scoring_reports = seen[1:-1]  # one per batch of one row, then the call's end
    assert scoring_reports == [(4, 5), (5, 5)], seen  # was [(1, 5), (2, 5)], then the end's jump to 5
    assert seen[-1] == (5, 5), seen
