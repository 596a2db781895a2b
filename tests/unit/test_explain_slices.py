"""Explanation tests in time slices (`slice_s`): forward batches of uneven, scripted sizes give the same
curves, reduction and flips as fixed batches, and a progress call (where the server yields) follows
every batch."""

from __future__ import annotations

import numpy as np

import sequence_salience as ss
from sequence_salience import explain as ex
from sequence_salience import scoring
from tests.unit.sizers import ScriptedSizer


PROMPT = "The capital of France is Paris. The capital of Italy is Rome. Alice has three apples."
TARGET = " Paris. The capital"
GEN = ss.GenerationConfig(max_new_tokens=6)


def test_sliced_batches_cover_every_row_once_and_record_each_batch():
    sizer = ScriptedSizer((3, 1, 2))
    seen = []
    for sl, measured in scoring.sliced_batches(9, 8, sizer):
        seen.append((sl.start, sl.stop))
        measured()
    assert seen == [(0, 3), (3, 4), (4, 6), (6, 9)]
    assert sizer.sizes == [3, 1, 2, 3]
    assert [(s.start, s.stop) for s, _ in scoring.sliced_batches(5, 2, None)] == [(0, 2), (2, 4), (4, 5)]


def test_curves_in_slices_equal_fixed_batches(llama):
    result = ss.compute_salience(llama, PROMPT, TARGET)
    base = dict(granularity="word", steps=4)
    fixed = ex.faithfulness_curves(llama, ex.CurvesRequest(
        PROMPT, TARGET, result=result, config=ex.FaithfulnessConfig(**base)))
    calls = []
    sliced = ex.faithfulness_curves(llama, ex.CurvesRequest(
        PROMPT, TARGET, result=result,
        config=ex.FaithfulnessConfig(**base, slice_s=ScriptedSizer((1, 3, 2))),
        progress=lambda *a: calls.append(a)))
    for mode, by_name in fixed.curves.items():
        for name, curve in by_name.items():
            np.testing.assert_allclose(sliced.curves[mode][name].logprobs, curve.logprobs, rtol=1e-5, atol=1e-6)
    assert len(calls) > (fixed.n_scored + 7) // 8  # more, smaller batches, each followed by a progress call


def test_reduction_in_slices_equals_fixed_batches(llama):
    generation = llama.generate(PROMPT, GEN)
    base = dict(granularity="word", max_seconds=None)
    fixed = ex.reduce_prompt(llama, PROMPT, generation, config=ex.ReductionConfig(**base))
    sliced = ex.reduce_prompt(llama, PROMPT, generation,
                              config=ex.ReductionConfig(**base, slice_s=ScriptedSizer((1, 2, 5))))
    assert sliced.removed == fixed.removed and sliced.rejected == fixed.rejected
    assert sliced.reduced_text == fixed.reduced_text


def test_flips_in_slices_equal_fixed_batches(llama):
    fixed = ex.token_flips(llama, PROMPT, TARGET, top_k=4, n_verify=10)
    sliced = ex.token_flips(llama, PROMPT, TARGET, top_k=4, n_verify=10, slice_s=ScriptedSizer((2, 1, 3)))
    assert [(f.position, f.new_id) for f in sliced.flips] == [(f.position, f.new_id) for f in fixed.flips]
    np.testing.assert_allclose([f.delta for f in sliced.flips], [f.delta for f in fixed.flips], rtol=1e-5, atol=1e-6)
