"""Logit lens and feed-forward sub-updates on tiny random Llama and GPT-2 models, against independent references."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import sequence_salience as ss
from sequence_salience import inside
from sequence_salience.inside.trace import sequence_ids
from tests.unit.tiny_models import MODEL_BUILDERS, tiny_tokenizer

PROMPT, TARGET = "The capital of France is", " Paris. The capital"


def _ids(lm):
    return sequence_ids(lm, PROMPT, TARGET)


def test_family_table_maps_both_tiny_models(tiny_lm):
    arch = inside.resolve_architecture(tiny_lm.model)
    assert arch.family == tiny_lm.name  # "llama" / "gpt2", both from FAMILIES, not probed
    assert arch.num_layers == 2
    assert arch.ffn_size == (64 if tiny_lm.name == "llama" else 4 * 32)
    assert tuple(arch.value_matrix(0).shape) == (arch.ffn_size, 32)


def test_last_layer_logit_lens_is_the_model_output(tiny_lm):
    ids, n_prompt = _ids(tiny_lm)
    arch = inside.resolve_architecture(tiny_lm.model)
    for position in (0, n_prompt - 1, len(ids) - 1):
        cap = inside.capture(tiny_lm, ids, position, arch)
        with torch.no_grad():
            reference = tiny_lm.model(input_ids=torch.tensor([ids])).logits[0, position]  # full sequence, no hooks
        lens = arch.logits(cap.after[-1])
        torch.testing.assert_close(lens, reference, rtol=0, atol=1e-10)
        torch.testing.assert_close(torch.softmax(lens, -1), torch.softmax(cap.logits, -1), rtol=0, atol=1e-12)
    tr = inside.trace(tiny_lm, PROMPT, TARGET, t=2)
    last, out = tr.layers[-1].after, tr.output
    assert last.ids == out.ids and last.target_rank == out.target_rank
    np.testing.assert_allclose(last.probs, out.probs, rtol=1e-6)
    assert last.target_prob == pytest.approx(out.target_prob, rel=1e-6)


def test_sub_updates_sum_to_the_ffn_output_and_residuals_add_up(tiny_lm):
    ids, n_prompt = _ids(tiny_lm)
    arch = inside.resolve_architecture(tiny_lm.model)
    position = n_prompt + 1
    cap = inside.capture(tiny_lm, ids, position, arch)
    for layer in range(arch.num_layers):
        values = arch.value_matrix(layer)  # [F, D]
        bias = arch.value_bias(layer)
        summed = (cap.coefs[layer][:, None] * values).sum(0) + (0 if bias is None else bias)
        torch.testing.assert_close(summed, cap.ffn_out[layer], rtol=0, atol=1e-10)
        # Independent reference: the layer's own norm + FFN applied to the captured residual before it.
        with torch.no_grad():
            ffn = arch.ffns[layer](arch.ffn_norms[layer](cap.before[layer][None, None]))[0, 0]
        torch.testing.assert_close(ffn, cap.ffn_out[layer], rtol=0, atol=1e-10)
        torch.testing.assert_close(cap.before[layer] + cap.ffn_out[layer], cap.after[layer], rtol=0, atol=1e-10)


def test_sub_updates_are_ranked_by_coef_times_norm_with_their_top_tokens(tiny_lm):
    config = inside.TraceConfig(top_k=5, top_sub_updates=4, value_top_tokens=3)
    tr = inside.trace(tiny_lm, PROMPT, TARGET, t=1, config=config)
    ids, n_prompt = _ids(tiny_lm)
    arch = inside.resolve_architecture(tiny_lm.model)
    cap = inside.capture(tiny_lm, ids, n_prompt, arch)  # t=1 is predicted at position P
    emb = arch.unembedding_matrix()
    for layer, lt in enumerate(tr.layers):
        scores = cap.coefs[layer].abs() * arch.value_matrix(layer).norm(dim=1)
        expected = torch.argsort(scores, descending=True)[:4].tolist()
        assert [s.index for s in lt.sub_updates] == expected
        assert [s.score for s in lt.sub_updates] == sorted((s.score for s in lt.sub_updates), reverse=True)
        first = lt.sub_updates[0]
        assert first.coef == pytest.approx(float(cap.coefs[layer, first.index]))
        proj = emb @ arch.value_matrix(layer)[first.index]  # [V]
        assert list(first.top_ids) == torch.argsort(proj, descending=True)[:3].tolist()
        assert first.top_tokens[0] == tiny_tokenizer().decode([first.top_ids[0]])
        assert lt.max_coef == pytest.approx(float(cap.coefs[layer].max()))
        assert len(lt.before.ids) == 5


def test_target_rank_and_prob_follow_the_given_token(tiny_lm):
    tr = inside.trace(tiny_lm, PROMPT, TARGET, t=0)
    ids, n_prompt = _ids(tiny_lm)
    assert tr.position == n_prompt - 1 and tr.target_id == ids[n_prompt]
    with torch.no_grad():
        probs = torch.softmax(tiny_lm.model(input_ids=torch.tensor([ids])).logits[0, n_prompt - 1].float(), -1)
    expected_rank = int((probs > probs[ids[n_prompt]]).sum())
    assert tr.output.target_rank == expected_rank
    assert tr.output.target_prob == pytest.approx(float(probs[ids[n_prompt]]), rel=1e-5)
    assert tr.ranks("after")[-1] == expected_rank
    # No target: follow the model's own top prediction after the prompt.
    free = inside.trace(tiny_lm, PROMPT)
    assert free.output.target_rank == 0 and free.target_id == free.output.ids[0]


def test_trace_hooks_leave_the_forward_pass_bit_identical(tiny_lm):
    ids, _ = _ids(tiny_lm)
    x = torch.tensor([ids])
    with torch.no_grad():
        before = tiny_lm.model(input_ids=x).logits
    inside.trace(tiny_lm, PROMPT, TARGET, t=3)
    assert inside.count_hooks(tiny_lm.model) == 0
    with torch.no_grad():
        after = tiny_lm.model(input_ids=x).logits
    assert torch.equal(before, after)


def test_bad_positions_and_targets_are_clear_errors(tiny_lm):
    with pytest.raises(ss.SalienceError, match="outside the .* target tokens"):
        inside.trace(tiny_lm, PROMPT, TARGET, t=99)
    with pytest.raises(ss.SalienceError, match="prompt is empty"):
        inside.trace(tiny_lm, "  ", TARGET)
    with pytest.raises(ss.SalienceError, match="Position 50 is outside"):
        inside.capture(tiny_lm, [1, 2, 3], 50)
    with pytest.raises(ss.SalienceError, match="at least 1"):
        inside.TraceConfig(top_k=0)


class _PlainMLP(torch.nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc = torch.nn.Linear(d, d)

    def forward(self, x):
        return self.fc(x)


def test_unsupported_layout_names_the_missing_module():
    model = MODEL_BUILDERS["llama"](seed=0)
    broken = copy.deepcopy(model)
    broken.model.layers[1].mlp = _PlainMLP(32)
    with pytest.raises(ss.SalienceError, match=r"'model\.layers\.1\.mlp\.gate_proj'"):
        inside.resolve_architecture(broken)
    with pytest.raises(ss.SalienceError, match="no module 'transformer.h'"):
        gpt2 = MODEL_BUILDERS["gpt2"](seed=0)
        gpt2.transformer.h = torch.nn.ModuleList()  # no decoder layers
        inside.resolve_architecture(gpt2)


def test_unknown_family_is_probed_or_rejected_with_the_modules_tried():
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    cfg = GPTNeoXConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=4, max_position_embeddings=64)
    with pytest.raises(ss.SalienceError) as err:
        inside.resolve_architecture(GPTNeoXForCausalLM(cfg))
    msg = str(err.value)
    assert "'gpt_neox'" in msg and "'model.layers'" in msg and "'transformer.h'" in msg
    # A Llama-shaped model under another model_type is found by its module names.
    model = MODEL_BUILDERS["llama"](seed=0)
    model.config.model_type = "my_llama"
    arch = inside.resolve_architecture(model)
    assert arch.family == "my_llama (detected)" and arch.layout.kind == "gated"
