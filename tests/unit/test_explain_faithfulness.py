"""Faithfulness curves on tiny random models, checked against plain unpadded forward passes."""

from __future__ import annotations

import numpy as np
import pytest

import sequence_salience as ss
from sequence_salience import aggregate
from sequence_salience import explain as ex
from tests.unit import explain_reference as ref
from tests.unit.tiny_models import tiny_tokenizer

PROMPT = "The capital of France is Paris. The capital of Italy is Rome. Alice has three apples."
TARGET = " Paris. The capital"
METHODS = ("grad_norm", "grad_x_input")


def _ids(lm, result):
    return list(result.ids[:result.n_prompt_tokens]), list(result.ids[result.n_prompt_tokens:])


@pytest.mark.parametrize("span", [None, (1, 3)], ids=["whole", "span1-3"])
def test_first_point_is_the_unmodified_logprob_and_last_is_filler_only(tiny_lm, span):
    result = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=METHODS)
    t0, t1 = span or (0, result.num_targets)
    rep = ex.faithfulness_curves(tiny_lm, ex.CurvesRequest(PROMPT, TARGET, METHODS, span=span, result=result,
                                                  config=ex.FaithfulnessConfig(granularity="word", steps=4)))
    expected = float(result.target_logprobs[t0:t1].sum())
    prompt_ids, target_ids = _ids(tiny_lm, result)
    # Filler-only prompt, built by hand: BOS kept, every other prompt token a space.
    space = tiny_tokenizer()(" ", add_special_tokens=False)["input_ids"][0]
    filler_only = [prompt_ids[0]] + [space] * (len(prompt_ids) - 1)
    empty = ref.span_logprob(tiny_lm.model, filler_only, target_ids, t0, t1)
    for m in METHODS:
        dele, ins = rep.curves["deletion"][m], rep.curves["insertion"][m]
        np.testing.assert_allclose(dele.logprobs[0], expected, rtol=1e-6)
        np.testing.assert_allclose(ins.logprobs[-1], expected, rtol=1e-6)
        np.testing.assert_allclose(dele.logprobs[-1], empty, rtol=1e-6)
        np.testing.assert_allclose(ins.logprobs[0], empty, rtol=1e-6)
    assert rep.original_logprob == pytest.approx(expected, rel=1e-6)
    assert rep.empty_logprob == pytest.approx(empty, rel=1e-6)


def test_every_point_matches_an_independent_rescoring_and_aopc_formula(llama):
    tiny_lm = llama
    rep = ex.faithfulness_curves(tiny_lm, ex.CurvesRequest(
        PROMPT, TARGET, ("grad_x_input",),
        config=ex.FaithfulnessConfig(granularity="sentence", steps=10, n_random=2)))
    result = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=("grad_x_input",))
    prompt_ids, target_ids = _ids(tiny_lm, result)
    seg = aggregate.segment(result.text, result.offsets, "sentence")
    assert len(rep.segments) == 3  # three sentences, each removable
    assert list(rep.n_removed) == [0, 1, 2, 3]  # K = min(steps, S)
    # Segment scores = summed token salience (the same aggregation the UI uses), most salient first.
    values = aggregate.aggregate(result.span_salience("grad_x_input"), seg, "sum")[:3]  # the prompt's sentences
    np.testing.assert_allclose(rep.segment_scores["grad_x_input"], values, rtol=1e-5, atol=1e-7)
    curve = rep.curves["deletion"]["grad_x_input"]
    assert list(curve.order) == list(np.argsort(-values, kind="stable"))
    space = tiny_tokenizer()(" ", add_special_tokens=False)["input_ids"][0]
    for k, n in enumerate(rep.n_removed):
        ids = list(prompt_ids)
        for s in curve.order[:n]:
            for i in np.flatnonzero(seg.token_segment[:len(prompt_ids)] == s):
                if i > 0:  # BOS is never removed
                    ids[i] = space
        assert curve.logprobs[k] == pytest.approx(ref.span_logprob(tiny_lm.model, ids, target_ids, 0, len(target_ids)),
                                                  rel=1e-6)
    assert curve.aopc == pytest.approx(np.mean(rep.original_logprob - curve.logprobs))
    ins = rep.curves["insertion"]["grad_x_input"]
    assert ins.aopc == pytest.approx(np.mean(ins.logprobs - rep.empty_logprob))
    rnd = rep.curves["deletion"]["random"]
    assert rnd.all_logprobs.shape == (2, 4)
    np.testing.assert_allclose(rnd.logprobs, rnd.all_logprobs.mean(0))
    assert rep.gap("grad_x_input") == pytest.approx(curve.aopc - rnd.aopc)


def test_text_deletion_removes_the_text(llama):
    tiny_lm = llama
    rep = ex.faithfulness_curves(tiny_lm, ex.CurvesRequest(
        PROMPT, TARGET, ("grad_norm",),
        config=ex.FaithfulnessConfig(granularity="sentence", removal="delete", steps=3)))
    bos = tiny_tokenizer().bos_token_id
    target_ids = list(tiny_lm.tokenize(TARGET).ids)
    everything_deleted = ref.span_logprob(tiny_lm.model, [bos], target_ids, 0, len(target_ids))
    assert rep.curves["deletion"]["grad_norm"].logprobs[-1] == pytest.approx(everything_deleted, rel=1e-6)
    # One sentence deleted: the prompt is the other two sentences, re-tokenized.
    first = rep.curves["deletion"]["grad_norm"].order[0]
    s, e = rep.segments[first]
    edited = PROMPT[:s] + PROMPT[e:]
    want = ref.span_logprob(tiny_lm.model, tiny_lm.encode_prompt(edited).ids, target_ids, 0, len(target_ids))
    assert rep.curves["deletion"]["grad_norm"].logprobs[1] == pytest.approx(want, rel=1e-6)


def test_random_reference_is_repeatable_by_seed(llama):
    tiny_lm = llama
    cfg = ex.FaithfulnessConfig(granularity="word", steps=5, n_random=3, modes=("deletion",))
    a = ex.faithfulness_curves(tiny_lm, ex.CurvesRequest(PROMPT, TARGET, ("grad_norm",), config=cfg))
    b = ex.faithfulness_curves(tiny_lm, ex.CurvesRequest(PROMPT, TARGET, ("grad_norm",), config=cfg))
    c = ex.faithfulness_curves(tiny_lm, ex.CurvesRequest(PROMPT, TARGET, ("grad_norm",),
                                                config=ex.FaithfulnessConfig(granularity="word", steps=5, n_random=3,
                                                                             modes=("deletion",), seed=1)))
    np.testing.assert_array_equal(a.curves["deletion"]["random"].all_logprobs, b.curves["deletion"]["random"].all_logprobs)
    assert a.curves["deletion"]["random"].order == b.curves["deletion"]["random"].order
    assert a.curves["deletion"]["random"].order != c.curves["deletion"]["random"].order


def test_bad_settings_name_the_fix(llama):
    tiny_lm = llama
    with pytest.raises(ss.SalienceError, match="exactly one"):
        ex.faithfulness_curves(tiny_lm, ex.CurvesRequest(PROMPT, TARGET, ("grad_norm",),
                                                config=ex.FaithfulnessConfig(filler="capital of France")))
    with pytest.raises(ss.SalienceError, match="Unknown curve mode"):
        ex.faithfulness_curves(tiny_lm, ex.CurvesRequest(
            PROMPT, TARGET, ("grad_norm",), config=ex.FaithfulnessConfig(modes=("up",))))
    with pytest.raises(ss.SalienceError, match="outside"):
        ex.faithfulness_curves(tiny_lm, ex.CurvesRequest(PROMPT, TARGET, ("grad_norm",), span=(0, 99)))


def test_table_baselines_orderings_and_verdicts_match_the_plain_reference(llama):
    """10 seeded random orders with their spread, the length baseline, both orderings of a signed
    method and the verdicts, against tests/unit/explain_reference.deletion_table."""
    tiny_lm = llama
    methods = ("grad_norm", "grad_x_input")
    rep = ex.faithfulness_curves(tiny_lm, ex.CurvesRequest(
        PROMPT, TARGET, methods,
        config=ex.FaithfulnessConfig(granularity="word", steps=5, modes=("deletion",))))
    assert rep.n_random == 10  # the default
    result = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=methods)
    prompt_ids, target_ids = _ids(tiny_lm, result)
    segs = ex.prompt_segments(result, "word")
    space = tiny_tokenizer()(" ", add_special_tokens=False)["input_ids"][0]
    want = ref.deletion_table(
        tiny_lm.model, prompt_ids, target_ids, [list(t) for t in segs.tokens], [e - s for s, e in segs.spans],
        {m: rep.segment_scores[m] for m in methods}, {"grad_norm": False, "grad_x_input": True},
        space, steps=5, n_random=10, seed=0)
    rows = {r["name"]: r for r in rep.table()}
    assert set(rows) == {"grad_norm", "grad_x_input", "grad_x_input:abs"}
    assert rows["grad_x_input"]["ordering"] == "signed" and rows["grad_x_input:abs"]["ordering"] == "abs"
    assert rows["grad_norm"]["ordering"] == "value"
    for name, row in rows.items():
        assert row["aopc"] == pytest.approx(want[name]["aopc"], abs=2e-5), name  # log-probs ~ -20 at rel 1e-6
        assert row["random_aopc"] == pytest.approx(want["random"]["aopc"], abs=2e-5)
        assert row["random_std"] == pytest.approx(want["random"]["std"], abs=2e-5)
        assert row["length_aopc"] == pytest.approx(want["length"]["aopc"], abs=2e-5)
        assert row["verdict"] == want[name]["verdict"], name
        assert row["n_random"] == 10
    assert want["random"]["std"] > 0
    # The three verdicts by hand on made-up numbers: mean 1.0, std 0.1 (noise 0.2), length 1.5.
    assert ex.faithfulness.verdict(1.8, 1.0, 0.1, 1.5) == "beats random and length"
    assert ex.faithfulness.verdict(1.6, 1.0, 0.1, 1.5) == "within noise"  # beats random, not length by the noise
    assert ex.faithfulness.verdict(1.2, 1.0, 0.1, 1.5) == "worse"  # length does clearly better
    assert ex.faithfulness.verdict(0.9, 1.0, 0.1, 0.5) == "within noise"


def test_length_order_is_longest_first_with_ties_by_characters_then_position():
    assert list(ex.faithfulness.length_order([2, 3, 3, 1], [9, 5, 7, 20])) == [2, 1, 0, 3]
