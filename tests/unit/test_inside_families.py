"""Every family of architectures.FAMILIES, as a tiny random model from its config: logit lens, sub-updates, `off`."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers

import sequence_salience as ss
from sequence_salience import inside
from tests.unit.tiny_models import tiny_tokenizer

V = len(tiny_tokenizer())
COMMON = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
FAMILIES = {
    "mistral": ("MistralConfig", "MistralForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 8}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"head_dim": 8}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"head_dim": 8, "final_logit_softcapping": 5.0}),
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM", {"head_dim": 8, "final_logit_softcapping": 5.0}),
}


def build(family: str) -> ss.LanguageModel:
    cfg_name, model_name, extra = FAMILIES[family]
    torch.manual_seed(0)
    cfg = getattr(transformers, cfg_name)(**COMMON, **extra)
    model = getattr(transformers, model_name)(cfg).double()
    with torch.no_grad():  # random norms (Gemma's start at 0 = identity), so the norms are exercised
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0.0, 0.3)
    return ss.from_modules(model, tiny_tokenizer(), name=family)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def lm(request) -> ss.LanguageModel:
    return build(request.param)


IDS = [1, 40, 77, 12, 9, 150, 33]


def test_family_is_resolved_from_the_table(lm):
    arch = inside.resolve_architecture(lm.model)
    assert arch.family == lm.name and arch.num_layers == 2 and arch.ffn_size == 48
    assert arch.logit_softcap == (5.0 if lm.name in ("gemma2", "gemma3_text") else None)


def test_last_layer_logit_lens_is_the_model_output(lm):
    arch = inside.resolve_architecture(lm.model)
    cap = inside.capture(lm, IDS, len(IDS) - 1, arch)
    with torch.no_grad():
        reference = lm.model(input_ids=torch.tensor([IDS])).logits[0, -1]
    torch.testing.assert_close(arch.logits(cap.after[-1]), reference, rtol=0, atol=1e-9)


def test_sub_updates_sum_to_the_ffn_output(lm):
    arch = inside.resolve_architecture(lm.model)
    cap = inside.capture(lm, IDS, 4, arch)
    for layer in range(arch.num_layers):
        summed = (cap.coefs[layer][:, None] * arch.value_matrix(layer)).sum(0)
        torch.testing.assert_close(summed, cap.ffn_out[layer], rtol=0, atol=1e-10)
        with torch.no_grad():  # the layer's own pre-FFN norm and FFN on the captured residual
            ffn = arch.ffns[layer](arch.ffn_norms[layer](cap.before[layer][None, None]))[0, 0]
        torch.testing.assert_close(ffn, cap.ffn_out[layer], rtol=0, atol=1e-10)


def test_off_equals_zeroing_the_value(lm):
    copy_model = copy.deepcopy(lm.model)
    with torch.no_grad():
        inside.resolve_architecture(copy_model).value_matrix(1)[7] = 0.0
    x = torch.tensor([IDS])
    with torch.no_grad():
        expected = copy_model(input_ids=x).logits
        with inside.apply_interventions(lm, [(1, 7, "off")]):
            got = lm.model(input_ids=x).logits
        plain = lm.model(input_ids=x).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    assert not torch.allclose(plain, expected)
    assert inside.count_hooks(lm.model) == 0
