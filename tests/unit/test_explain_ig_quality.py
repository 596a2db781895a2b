"""IG auto-steps: stops at the tolerance or the cap and says which; the error is the completeness error."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sequence_salience as ss
from sequence_salience import explain as ex
from tests.unit import explain_reference as ref


PROMPT, TARGET = "The capital of France is", " Paris. The"


def test_cap_reached_when_the_tolerance_is_unreachable(llama):
    q = ex.ig_auto_steps(llama, PROMPT, TARGET, tolerance=1e-12, start_steps=2, max_steps=8)
    assert q.stopped_by == "cap" and not q.converged
    assert [s.steps for s in q.tried] == [2, 4, 8]
    best = min(q.tried, key=lambda s: s.relative_error)  # the result is the best count, not the last
    assert q.steps == best.steps and q.relative_error == best.relative_error
    # delta is F(x) - F(x') for the zero baseline, recomputed here without the library.
    prompt_ids = llama.encode_prompt(PROMPT).ids
    target_ids = llama.tokenize(TARGET).ids
    ids = list(prompt_ids) + list(target_ids)
    fx = ref.span_logprob(llama.model, prompt_ids, target_ids, 0, len(target_ids))
    zeros = torch.zeros(1, len(ids), llama.model.config.hidden_size, dtype=torch.float64)
    with torch.no_grad():
        lp = torch.log_softmax(llama.model(inputs_embeds=zeros).logits[0], -1)
    fbase = sum(lp[p - 1, ids[p]].item() for p in range(len(prompt_ids), len(ids)))
    assert q.delta == pytest.approx(fx - fbase, rel=1e-5)
    last = best
    assert last.error == pytest.approx(float(np.sum(q.attributions)) - (fx - fbase), abs=1e-5)
    assert last.relative_error == pytest.approx(abs(last.error) / abs(fx - fbase), rel=1e-5)


def test_stops_at_the_tolerance(llama):
    q = ex.ig_auto_steps(llama, PROMPT, TARGET, tolerance=10.0, start_steps=2, max_steps=64)
    assert q.stopped_by == "tolerance" and q.converged and q.steps == 2 and len(q.tried) == 1


def test_more_steps_reduce_the_error_on_a_smooth_tiny_model(llama):
    q = ex.ig_auto_steps(llama, PROMPT, TARGET, tolerance=1e-3, start_steps=1, max_steps=16)
    errors = [s.relative_error for s in q.tried]
    assert errors[-1] < errors[0], errors


@pytest.mark.parametrize("start,cap,growth,want", [
    pytest.param(8, 256, 2, [8, 16, 32, 64, 128, 256], id="defaults"),
    pytest.param(8, 100, 2, [8, 16, 32, 64], id="cap-between-counts"),
    pytest.param(3, 30, 3, [3, 9, 27], id="growth-3"),
    pytest.param(5, 5, 2, [5], id="start-is-cap"),
])
def test_step_schedule(start, cap, growth, want):
    assert ex.step_schedule(start, cap, growth) == want


def test_progress_counts_ig_steps_out_of_the_whole_schedule(llama):
    seen = []
    config = ss.SalienceConfig(ig_step_chunk_size=2)
    q = ex.ig_auto_steps(llama, PROMPT, TARGET, tolerance=1e-12, start_steps=2, max_steps=8, config=config,
                         progress=lambda stage, done, total: seen.append((stage, done, total)))
    assert {s for s, _, _ in seen} == {"ig_steps"} and {t for _, _, t in seen} == {2 + 4 + 8}
    dones = [d for _, d, _ in seen]
    assert dones[0] == 0 and dones == sorted(dones) and dones[-1] == 14 == sum(s.steps for s in q.tried)
    assert 2 in dones and 6 in dones  # a run's steps are final when the next run starts
    assert len(set(dones)) > 4  # and each run reports every chunk of 2 steps
    seen.clear()
    q = ex.ig_auto_steps(llama, PROMPT, TARGET, tolerance=10.0, start_steps=2, max_steps=8,
                         progress=lambda stage, done, total: seen.append((stage, done, total)))
    assert q.stopped_by == "tolerance" and seen[-1] == ("ig_steps", 2, 14)  # stops early, below the total


def test_cancel_stops_between_batches_of_steps(llama):
    calls, dones = [], []
    with pytest.raises(ss.ComputationCancelled):
        ex.ig_auto_steps(llama, PROMPT, TARGET, tolerance=1e-12, start_steps=2, max_steps=8,
                         config=ss.SalienceConfig(ig_step_chunk_size=1),
                         progress=lambda stage, done, total: dones.append(done),
                         cancel=lambda: calls.append(1) or len(calls) > 3)
    assert max(dones) <= 2  # stopped within the first run (2 of 14 steps), not after the whole schedule


def test_needed_steps_by_hand():
    from sequence_salience.explain.ig_quality import needed_steps
    # error ~ steps^-2 (a quarter per doubling): 2.56, 0.64, 0.16 at 8, 16, 32 -> 0.04 at 64, 0.01 at 128.
    assert needed_steps([8, 16, 32], [2.56, 0.64, 0.16], 0.01) == 128
    assert needed_steps([8, 16, 32], [0.64, 0.16, 0.04], 0.03) == 37  # 32 * (0.04 / 0.03)^(1/2) = 36.95
    assert needed_steps([8, 16, 32], [0.64, 0.16, 0.09], 0.05) is None  # 56 % left at the last doubling
    # SmolLM2's zero baseline (docs/benchmarks.md): one good doubling after a spike promises nothing.
    assert needed_steps([8, 16, 32], [0.67, 44.26, 0.63], 0.05) is None
    assert needed_steps([8, 16], [0.64, 0.16], 0.05) is None  # one doubling


def test_the_search_reports_the_best_count_so_far_after_each_one_and_an_honest_estimate(llama):
    """On the tiny model the error rises before it falls (8 -> 16 -> 32 -> 64 steps): the result is the
    best count, `on_tried` sees every count as it is done, and needed_steps is the last doubling's
    estimate only where the last two doublings each halved the error."""
    from sequence_salience.explain.ig_quality import needed_steps
    seen = []
    q = ex.ig_auto_steps(llama, PROMPT, TARGET, tolerance=1e-9, start_steps=8, max_steps=64, on_tried=seen.append)
    errors = [t.relative_error for t in q.tried]
    assert q.stopped_by == "cap" and [t.steps for t in q.tried] == [8, 16, 32, 64]
    assert [tuple(s) for s in seen] == [q.tried[:k] for k in range(1, 5)]
    k = int(np.argmin(errors))
    assert q.steps == q.tried[k].steps and q.relative_error == errors[k]
    assert float(np.sum(q.attributions)) - q.delta == pytest.approx(q.tried[k].error, abs=1e-5)
    if errors[-1] <= 0.5 * errors[-2] and errors[-2] <= 0.5 * errors[-3]:  # a steady fall: error ~ steps^-p
        p = np.log2(errors[-2] / errors[-1])
        assert q.needed_steps == int(np.ceil(64 * (errors[-1] / 1e-9) ** (1 / p)))
    else:
        assert q.needed_steps is None
    assert needed_steps([t.steps for t in q.tried], errors, 1e-9) == q.needed_steps
