"""Interventions on value vectors vs. edited copies of tiny random Llama and GPT-2 models."""

from __future__ import annotations

import copy

import pytest
import torch

import sequence_salience as ss
from sequence_salience import inside
from sequence_salience.inside.interventions import ON_MARGIN
from sequence_salience.inside.trace import sequence_ids
from tests.unit.tiny_models import MODEL_BUILDERS, tiny_tokenizer, wrap

PROMPT, TARGET = "The capital of France is", " Paris. The capital"
GEN = ss.GenerationConfig(max_new_tokens=6)


@pytest.fixture(scope="module", params=sorted(MODEL_BUILDERS))
def tiny_lm(request) -> ss.LanguageModel:
    return wrap(MODEL_BUILDERS[request.param](seed=0), request.param)


def _zeroed_copy(lm: ss.LanguageModel, edits: list[tuple[int, int]]) -> ss.LanguageModel:
    """An independent reference: a deep copy whose value vectors are zeroed in the weights."""
    model = copy.deepcopy(lm.model)
    arch = inside.resolve_architecture(model)
    with torch.no_grad():
        for layer, index in edits:
            arch.value_matrix(layer)[index] = 0.0  # a view of down_proj.weight.T / c_proj.weight
    return ss.from_modules(model, tiny_tokenizer(), name=lm.name + "-zeroed")


def _logits(lm, ids):
    with torch.no_grad():
        return lm.model(input_ids=torch.tensor([ids])).logits


@pytest.mark.parametrize("edits", [pytest.param([(0, 5)], id="one"), pytest.param([(0, 5), (1, 17), (1, 3)], id="three")])
def test_off_equals_zeroing_the_value_in_a_copy(tiny_lm, edits):
    ids, _ = sequence_ids(tiny_lm, PROMPT, TARGET)
    reference = _zeroed_copy(tiny_lm, edits)
    expected = _logits(reference, ids)
    assert not torch.allclose(expected, _logits(tiny_lm, ids))  # the edit matters
    with inside.apply_interventions(tiny_lm, [inside.Intervention(l, i, "off") for l, i in edits]):
        got = _logits(tiny_lm, ids)
        gen = tiny_lm.generate(PROMPT, GEN)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    assert gen.ids == reference.generate(PROMPT, GEN).ids


def test_on_sets_the_coefficient_just_above_the_layer_max(tiny_lm):
    ids, n_prompt = sequence_ids(tiny_lm, PROMPT, TARGET)
    arch = inside.resolve_architecture(tiny_lm.model)
    plain = inside.capture(tiny_lm, ids, n_prompt, arch)
    index = int(torch.argmin(plain.coefs[1]))  # the smallest coefficient becomes the largest
    with inside.apply_interventions(tiny_lm, [(1, index, "on")]):
        cap = inside.capture(tiny_lm, ids, n_prompt, arch)
    top = float(plain.coefs[1].max())
    assert float(cap.coefs[1, index]) == pytest.approx(top + ON_MARGIN * abs(top), rel=1e-12)
    others = torch.ones_like(cap.coefs[1], dtype=torch.bool)
    others[index] = False
    torch.testing.assert_close(cap.coefs[1][others], plain.coefs[1][others], rtol=0, atol=0)
    torch.testing.assert_close(cap.coefs[0], plain.coefs[0], rtol=0, atol=0)  # layer 0 untouched


def test_no_interventions_leave_the_model_bit_identical(tiny_lm):
    ids, _ = sequence_ids(tiny_lm, PROMPT, TARGET)
    plain = _logits(tiny_lm, ids)
    plain_gen = tiny_lm.generate(PROMPT, GEN)
    with inside.apply_interventions(tiny_lm, []):
        assert inside.count_hooks(tiny_lm.model) == 0
        assert torch.equal(_logits(tiny_lm, ids), plain)
    with inside.apply_interventions(tiny_lm, [(0, 1, "off")]):
        pass
    assert torch.equal(_logits(tiny_lm, ids), plain)  # and after an intervention was removed
    assert tiny_lm.generate(PROMPT, GEN).ids == plain_gen.ids


def test_hooks_are_removed_after_a_failing_run(tiny_lm):
    assert inside.count_hooks(tiny_lm.model) == 0
    with pytest.raises(RuntimeError, match="boom"):
        with inside.apply_interventions(tiny_lm, [(0, 1, "off"), (1, 2, "on")]):
            assert inside.count_hooks(tiny_lm.model) == 2
            raise RuntimeError("boom")
    assert inside.count_hooks(tiny_lm.model) == 0
    # A forward pass that fails inside the model while the capture hooks are registered.
    with pytest.raises(IndexError):
        with inside.apply_interventions(tiny_lm, [(0, 1, "off")]):
            inside.capture(tiny_lm, [1, 2, 10_000], 2)  # token id outside the embedding
    assert inside.count_hooks(tiny_lm.model) == 0
    # An intervention list that fails validation registers nothing.
    with pytest.raises(ss.SalienceError, match="listed twice"):
        inside.intervene(tiny_lm, PROMPT, [(0, 1, "off"), (0, 1, "on")], TARGET)
    assert inside.count_hooks(tiny_lm.model) == 0


@pytest.mark.parametrize("bad,match", [
    pytest.param([(5, 0, "off")], "layer 5 is outside", id="layer"),
    pytest.param([(0, 10_000, "off")], "index 10000 is outside", id="index"),
    pytest.param([(0, 1, "mute")], "mode 'mute'", id="mode"),
    pytest.param([{"layer": 0}], "Cannot read intervention", id="missing-key"),
    pytest.param([(0.5, 1, "off")], "whole numbers", id="fraction"),
])
def test_bad_interventions_are_clear_errors(tiny_lm, bad, match):
    with pytest.raises(ss.SalienceError, match=match):
        with inside.apply_interventions(tiny_lm, bad):
            pass


def test_intervene_compares_with_the_edited_model(tiny_lm):
    edits = [(1, 7), (0, 3)]
    config = inside.InterventionConfig(generation=GEN, salience_method="grad_x_input", top_salient=3)
    result = inside.intervene(tiny_lm, PROMPT, [{"layer": l, "index": i, "mode": "off"} for l, i in edits],
                              TARGET, t=1, config=config)
    reference = _zeroed_copy(tiny_lm, edits)
    # Before: the plain model.
    plain = inside.trace(tiny_lm, PROMPT, TARGET, t=1, config=config.trace)
    assert result.before.trace.ranks() == plain.ranks()
    assert result.before.generation.ids == tiny_lm.generate(PROMPT, GEN).ids
    # After: the same as the model with the values zeroed in its weights.
    ref_trace = inside.trace(reference, PROMPT, TARGET, t=1, config=config.trace)
    assert result.after.trace.target_id == ref_trace.target_id
    assert result.after.trace.probs() == pytest.approx(ref_trace.probs(), rel=1e-9)
    ref_gen = reference.generate(PROMPT, GEN)
    assert result.after.generation.ids == ref_gen.ids
    assert ref_gen.ids, "the tiny model generated nothing; pick another prompt"
    ref_sal = ss.compute_span_salience(reference, PROMPT, ref_gen, "grad_x_input")
    torch.testing.assert_close(torch.as_tensor(result.after.salience), torch.as_tensor(ref_sal), rtol=1e-6, atol=1e-9)
    assert len(result.after.top_salient) == 3
    d = result.as_dict()
    assert d["interventions"] == [{"layer": 1, "index": 7, "mode": "off"}, {"layer": 0, "index": 3, "mode": "off"}]
    assert inside.count_hooks(tiny_lm.model) == 0
