"""Interventions on value vectors vs. edited copies of tiny random Llama and GPT-2 models."""

from __future__ import annotations

import copy

import numpy as np

import pytest
import torch

import sequence_salience as ss
from sequence_salience import inside
from sequence_salience.inside.interventions import ON_MARGIN
from sequence_salience.inside.trace import sequence_ids
from tests.unit.tiny_models import MODEL_BUILDERS, tiny_tokenizer, wrap

PROMPT, TARGET = "The capital of France is", " Paris. The capital"
GEN = ss.GenerationConfig(max_new_tokens=6)


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


def test_on_layer_max_sets_the_coefficient_just_above_the_layer_max(tiny_lm):
    ids, n_prompt = sequence_ids(tiny_lm, PROMPT, TARGET)
    arch = inside.resolve_architecture(tiny_lm.model)
    plain = inside.capture(tiny_lm, ids, n_prompt, arch)
    index = int(torch.argmin(plain.coefs[1]))  # the smallest coefficient becomes the largest
    with inside.apply_interventions(tiny_lm, [(1, index, "on_layer_max")]):
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
        with inside.apply_interventions(tiny_lm, [(0, 1, "off"), (1, 2, "on_layer_max")]):
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
    pytest.param([(0, 1, "off", "here")], "scope 'here'", id="scope"),
    pytest.param([(0, 1, "on")], "needs the traced position", id="on-unresolved"),
    pytest.param([(0, 1, "off", "position")], "needs the traced position", id="position-unresolved"),
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
    assert d["interventions"] == [{"layer": 1, "index": 7, "mode": "off", "scope": "all", "value": None, "position": None},
                                  {"layer": 0, "index": 3, "mode": "off", "scope": "all", "value": None, "position": None}]
    assert inside.count_hooks(tiny_lm.model) == 0


# ------------------------------------------------------------------ the run in steps

OFF = [(1, 7, "off"), (0, 3, "off")]


def test_each_step_equals_the_model_with_the_values_zeroed(tiny_lm):
    """The three steps a server runs one by one vs. an edited copy, and vs. the pieces of `intervene`."""
    reference = _zeroed_copy(tiny_lm, [(l, i) for l, i, _ in OFF])
    config = inside.InterventionConfig(generation=GEN, top_salient=3)
    whole = inside.intervene(tiny_lm, PROMPT, OFF, TARGET, t=1, config=config)
    at = inside.locate(tiny_lm, PROMPT, TARGET, t=1)
    assert (at.position, at.target_id) == (whole.after.trace.position, whole.after.trace.target_id)
    # 1. One traced forward under the interventions.
    tr = inside.intervened_trace(tiny_lm, at, OFF, config.trace)
    ref_tr = inside.trace(reference, PROMPT, TARGET, t=1, config=config.trace)
    assert tr.probs() == pytest.approx(ref_tr.probs(), rel=1e-9) and tr.ranks() == ref_tr.ranks()
    assert tr.probs() == whole.after.trace.probs()
    assert inside.intervened_trace(tiny_lm, at, (), config.trace).probs() == whole.before.trace.probs()
    # 2. The generation.
    gen = inside.intervened_generation(tiny_lm, PROMPT, OFF, GEN)
    assert gen.ids == reference.generate(PROMPT, GEN).ids == whole.after.generation.ids
    # 3. The salience of the new response.
    sal = inside.response_salience(tiny_lm, PROMPT, gen, "grad_x_input", 3, OFF)
    ref_sal = ss.compute_span_salience(reference, PROMPT, gen, "grad_x_input")
    torch.testing.assert_close(torch.as_tensor(sal.salience), torch.as_tensor(ref_sal), rtol=1e-6, atol=1e-9)
    assert sal.top_salient == whole.after.top_salient and sal.tokens == whole.after.tokens
    # Values computed elsewhere (a server's cache) give the same summary without a model pass.
    again = inside.response_salience(tiny_lm, PROMPT, gen, "grad_x_input", 3, values=ref_sal)
    assert [x[:2] for x in again.top_salient] == [x[:2] for x in sal.top_salient]
    assert [x[2] for x in again.top_salient] == pytest.approx([x[2] for x in sal.top_salient], rel=1e-5)
    assert inside.count_hooks(tiny_lm.model) == 0


def test_streamed_tokens_equal_the_final_generation(tiny_lm):
    seen: list[tuple[int, ...]] = []
    gen = inside.intervened_generation(tiny_lm, PROMPT, OFF, GEN, on_token=seen.append)
    assert gen.ids, "the tiny model generated nothing; pick another prompt"
    assert seen == [gen.ids[:k] for k in range(1, len(gen.ids) + 1)]  # one call per token, growing by one
    assert tiny_lm.tokenizer.decode(list(seen[-1])) == gen.text
    # Streaming changes nothing: the plain model with and without a callback.
    plain: list[tuple[int, ...]] = []
    assert tiny_lm.generate(PROMPT, GEN, on_token=plain.append).ids == tiny_lm.generate(PROMPT, GEN).ids == plain[-1]


def test_the_stop_token_is_not_streamed():
    """A model made to end its turn after a few tokens: the streamed ids stop before the end token."""
    lm = wrap(MODEL_BUILDERS["llama"](seed=0), "llama")
    first = lm.generate(PROMPT, GEN)
    stop = first.ids[2]  # pretend the third generated token ends the turn
    lm.model.generation_config.eos_token_id = stop
    seen: list[tuple[int, ...]] = []
    gen = lm.generate(PROMPT, GEN, on_token=seen.append)
    assert gen.stopped_by == "eos" and gen.ids == first.ids[:2] and seen[-1] == gen.ids


class _StopAt:
    """cancel() that turns True once the test sets `stop`."""

    def __init__(self):
        self.stop = False

    def __call__(self) -> bool:
        return self.stop


@pytest.mark.parametrize("stage", ["trace", "salience"])
def test_cancel_between_steps_stops_the_run(tiny_lm, stage):
    cancel, stages = _StopAt(), []

    def progress(name, done, total):
        stages.append(name)
        if name == stage:
            cancel.stop = True

    config = inside.InterventionConfig(generation=GEN)
    with pytest.raises(ss.ComputationCancelled):
        inside.intervene(tiny_lm, PROMPT, OFF, TARGET, config=config, progress=progress, cancel=cancel)
    assert stages[-1] == stage and set(stages) <= set(inside.interventions.STEPS[:1 + inside.interventions.STEPS.index(stage)])
    assert inside.count_hooks(tiny_lm.model) == 0


def test_cancel_during_the_generation_stops_it(tiny_lm):
    cancel, seen = _StopAt(), []

    def on_token(ids):
        seen.append(ids)
        cancel.stop = len(ids) >= 2  # the user cancels while the third token is due

    config = inside.InterventionConfig(generation=GEN)
    with pytest.raises(ss.ComputationCancelled, match="after 2 generated"):
        inside.intervene(tiny_lm, PROMPT, OFF, TARGET, config=config, cancel=cancel, on_token=on_token)
    assert [len(s) for s in seen] == [1, 2]  # no token after the cancel
    assert inside.count_hooks(tiny_lm.model) == 0
    # The model is plain again: the same generation as before the run.
    assert tiny_lm.generate(PROMPT, GEN).ids == _zeroed_copy(tiny_lm, []).generate(PROMPT, GEN).ids


def test_between_tokens_the_model_is_plain_and_the_generation_unchanged(tiny_lm):
    """A server lets waiting requests use the model between generated tokens: they must see the plain model."""
    ids, _ = sequence_ids(tiny_lm, PROMPT, TARGET)
    plain_logits = _logits(tiny_lm, ids)
    seen = []

    def other_request():
        seen.append((inside.count_hooks(tiny_lm.model), torch.equal(_logits(tiny_lm, ids), plain_logits)))

    gen = inside.intervened_generation(tiny_lm, PROMPT, OFF, GEN, between_tokens=other_request)
    assert gen.ids == _zeroed_copy(tiny_lm, [(l, i) for l, i, _ in OFF]).generate(PROMPT, GEN).ids
    assert seen == [(0, True)] * len(gen.ids)
    assert inside.count_hooks(tiny_lm.model) == 0


# ------------------------------------------- modes and scopes vs. an independent hooked computation

def _ref_coefficients(lm, ids, position):
    """<float64>[L, F] the coefficients (output projection's input) at `position`, read with our own hooks."""
    layers = lm.model.transformer.h if hasattr(lm.model, "transformer") else lm.model.model.layers
    outs = [l.mlp.c_proj if hasattr(l.mlp, "c_proj") else l.mlp.down_proj for l in layers]
    got = {}
    handles = [m.register_forward_pre_hook(lambda _m, a, i=i: got.__setitem__(i, a[0][0, position].double()))
               for i, m in enumerate(outs)]
    try:
        _logits(lm, ids)
    finally:
        for h in handles:
            h.remove()
    return torch.stack([got[i] for i in range(len(outs))]), layers, outs


def _ref_norms(layer_mlp):
    """||v_j|| for every value: rows of GPT-2's c_proj.weight [F, D], columns of down_proj.weight [D, F]."""
    if hasattr(layer_mlp, "c_proj"):
        return layer_mlp.c_proj.weight.double().norm(dim=1)
    return layer_mlp.down_proj.weight.double().norm(dim=0)


def _ref_constant(lm, ids, position, layer):
    """LM-Debugger's "on" constant: the layer's largest |m| * ||v|| at `position` of the plain run, + 0.01."""
    coefs, layers, _ = _ref_coefficients(lm, ids, position)
    return float((coefs[layer].abs() * _ref_norms(layers[layer].mlp)).max()) + 0.01


def _install(lm, layer, index, mode, scope, position, constant):
    """Hooks written from LM-Debugger's description (DESIGN.md), independent of the library; full
    (uncached) forwards only, so position k of a call is absolute position k."""
    layers = lm.model.transformer.h if hasattr(lm.model, "transformer") else lm.model.model.layers
    mlp = layers[layer].mlp
    out_proj = mlp.c_proj if hasattr(mlp, "c_proj") else mlp.down_proj

    def rows(n):
        pos = torch.arange(n)
        return pos >= 0 if scope == "all" else pos == position

    def pre(_m, args):
        x = args[0].clone()
        r = rows(x.shape[1])
        if mode == "off":
            x[:, r, index] = 0
        elif mode == "on_layer_max":
            top = args[0].max(-1).values
            x[:, r, index] = (top + 0.01 * top.abs())[:, r]
        else:  # gated "on": the coefficient itself
            x[:, r, index] = constant
        return (x,)

    def post_c_fc(_m, _args, out):
        out = out.clone()
        out[:, rows(out.shape[1]), index] = constant
        return out

    if mode == "on" and hasattr(mlp, "c_fc"):
        return [mlp.c_fc.register_forward_hook(post_c_fc)]
    return [out_proj.register_forward_pre_hook(pre)]


@pytest.mark.parametrize("mode", ["off", "on", "on_layer_max"])
@pytest.mark.parametrize("scope", ["all", "position"])
def test_each_mode_and_scope_equals_an_independent_hooked_forward(tiny_lm, mode, scope):
    at = inside.locate(tiny_lm, PROMPT, TARGET, t=2)
    ids = list(at.ids)
    arch = inside.resolve_architecture(tiny_lm.model)
    plain_coefs = inside.capture(tiny_lm, ids, at.position, arch).coefs[1]
    index = int(torch.argmin(plain_coefs))  # a value that is far from on
    constant = _ref_constant(tiny_lm, ids, at.position, 1)
    handles = _install(tiny_lm, 1, index, mode, scope, at.position, constant)
    try:
        expected = _logits(tiny_lm, ids)
    finally:
        for h in handles:
            h.remove()
    plain = _logits(tiny_lm, ids)
    ivs = inside.resolve(tiny_lm, at, [{"layer": 1, "index": index, "mode": mode, "scope": scope}])
    if mode == "on":
        assert ivs[0].value == pytest.approx(constant, rel=1e-6)
    assert ivs[0].position == (at.position if scope == "position" else None)
    with inside.apply_interventions(tiny_lm, ivs):
        got = _logits(tiny_lm, ids)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    changed = ~torch.isclose(got[0], plain[0], rtol=1e-6, atol=1e-7).all(-1)  # [S] positions whose logits moved
    assert changed[at.position]
    if scope == "position":  # causal: nothing before the traced position moves
        assert not changed[:at.position].any()
    else:
        assert changed[:at.position].any()
    assert inside.count_hooks(tiny_lm.model) == 0


def test_gpt2_on_is_written_before_the_activation():
    """On GPT-2 "on" is GELU(C) at the coefficient (c_fc output set to C), not C itself."""
    lm = wrap(MODEL_BUILDERS["gpt2"](seed=0), "gpt2")
    at = inside.locate(lm, PROMPT, TARGET, t=2)
    arch = inside.resolve_architecture(lm.model)
    (iv,) = inside.resolve(lm, at, [(1, 4, "on")])
    with inside.apply_interventions(lm, [iv]):
        cap = inside.capture(lm, at.ids, at.position, arch)
    gelu = torch.nn.functional.gelu(torch.tensor(iv.value, dtype=torch.float64), approximate="tanh")
    assert float(cap.coefs[1, 4]) == pytest.approx(float(gelu), rel=1e-5)
    assert float(cap.coefs[1, 4]) != pytest.approx(iv.value, rel=1e-3)


def test_position_scope_in_a_cached_generation_equals_an_uncached_reference(tiny_lm):
    """Generation uses a KV cache (one new position per call): "position" must still hit P + t - 1 only."""
    at = inside.locate(tiny_lm, PROMPT, TARGET, t=2)  # position P + 1: the step that generates token 2
    P = at.n_prompt_tokens
    # A strong constant (set by hand) so that the tiny model's greedy tokens change.
    ivs = [inside.Intervention(0, 0, "on", "position", value=20.0, position=at.position)]
    gen = inside.intervened_generation(tiny_lm, PROMPT, ivs, GEN)
    plain = tiny_lm.generate(PROMPT, GEN).ids
    assert gen.ids[:2] == plain[:2] and gen.ids != plain  # tokens 0 and 1 come before the position
    ids = list(at.ids[:P])
    for _ in range(len(gen.ids)):  # greedy, no cache, every forward over the whole sequence so far
        handles = _install(tiny_lm, 0, 0, "on", "position", at.position, 20.0)
        try:
            ids.append(int(_logits(tiny_lm, ids)[0, -1].argmax()))
        finally:
            for h in handles:
                h.remove()
    assert tuple(ids[P:]) == gen.ids
    assert inside.count_hooks(tiny_lm.model) == 0


def test_most_salient_leaves_out_chat_markup_and_whitespace_tokens(tiny_lm):
    # Issue 19: "most salient" listed <|im_start|> and a space token. Give those the largest values:
    # the list must skip them and keep the order of the rest.
    prompt = "<|im_start|>user\nThe capital of France is"
    gen = ss.Generation(text=" Paris", ids=tuple(tiny_lm.tokenize(" Paris").ids), offsets=((0, 6),), stopped_by="eos")
    ids, _ = sequence_ids(tiny_lm, prompt, gen)
    n_prompt = len(ids) - len(gen.ids)
    tokens = [tiny_lm.tokenizer.decode([i]) for i in ids]
    text = "".join(tokens[:n_prompt])
    marker_end = text.index("user") + len("user")
    pos, markup, blank = 0, [], []
    for k, t in enumerate(tokens[:n_prompt]):
        if pos < marker_end:
            markup.append(k)  # a token of "<|im_start|>user"
        elif t.strip() == "":
            blank.append(k)
        pos += len(t)
    assert markup and blank, tokens  # the prompt has both kinds
    values = np.arange(len(ids), dtype=np.float32) / 100.0
    values[markup + blank] = 10.0 + np.arange(len(markup + blank))  # the largest
    sal = inside.response_salience(tiny_lm, prompt, gen, "grad_x_input", top_salient=4, values=values)
    listed = [i for i, _, _ in sal.top_salient]
    others = [k for k in range(n_prompt) if k not in markup + blank]
    assert listed == sorted(others, key=lambda k: -values[k])[:4]
