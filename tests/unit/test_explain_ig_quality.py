"""IG auto-steps: stops at the tolerance or the cap and says which; the error is the completeness error."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sequence_salience as ss
from sequence_salience import explain as ex
from tests.unit import explain_reference as ref
from tests.unit.tiny_models import MODEL_BUILDERS, wrap

PROMPT, TARGET = "The capital of France is", " Paris. The"


@pytest.fixture(scope="module")
def llama() -> ss.LanguageModel:
    return wrap(MODEL_BUILDERS["llama"](seed=0), "llama")


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
