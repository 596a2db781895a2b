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
    assert [s.steps for s in q.tried] == [2, 4, 8] and q.steps == 8
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
    last = q.tried[-1]
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
