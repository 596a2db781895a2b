"""Gradient-guided token flips on a tiny random model, each re-scored independently."""

from __future__ import annotations

import pytest

import sequence_salience as ss
from sequence_salience import explain as ex
from tests.unit import explain_reference as ref
from tests.unit.tiny_models import MODEL_BUILDERS, tiny_tokenizer, wrap

PROMPT = "The capital of France is Paris. The capital of Italy is Rome. Alice has three apples."
TARGET = " Paris. The capital"


@pytest.fixture(scope="module", params=sorted(MODEL_BUILDERS))
def tiny_lm(request) -> ss.LanguageModel:
    return wrap(MODEL_BUILDERS[request.param](seed=0), request.param)


@pytest.mark.parametrize("direction", ["decrease", "increase"])
def test_reported_flips_change_logp_by_the_reported_amount(tiny_lm, direction):
    rep = ex.token_flips(tiny_lm, PROMPT, TARGET, direction=direction, top_k=5, n_verify=20)
    prompt_ids = list(tiny_lm.encode_prompt(PROMPT).ids)
    target_ids = list(tiny_lm.tokenize(TARGET).ids)
    T = len(target_ids)
    original = ref.span_logprob(tiny_lm.model, prompt_ids, target_ids, 0, T)
    assert rep.original_logprob == pytest.approx(original, rel=1e-6)
    assert len(rep.flips) == 5
    deltas = [f.delta for f in rep.flips]
    assert deltas == sorted(deltas, reverse=direction == "increase")
    for f in rep.flips:
        ids = list(prompt_ids)
        assert ids[f.position] == f.old_id
        ids[f.position] = f.new_id
        new = ref.span_logprob(tiny_lm.model, ids, target_ids, 0, T)
        assert f.logprob == pytest.approx(new, rel=1e-6)
        assert f.delta == pytest.approx(new - original, abs=1e-5)
        assert f.keeps_greedy == ref.greedy_keeps(tiny_lm.model, ids, target_ids)
        assert f.edited_text == PROMPT[:f.char_span[0]] + f.new_text + PROMPT[f.char_span[1]:]


def test_candidates_are_word_tokens_with_the_same_spacing(tiny_lm):
    tok = tiny_tokenizer()
    rep = ex.token_flips(tiny_lm, PROMPT, TARGET, top_k=10, n_verify=12, per_position=2)
    assert rep.n_verified == 12
    prompt_ids = tiny_lm.encode_prompt(PROMPT).ids
    for f in rep.flips:
        old, new = tok.decode([f.old_id]), tok.decode([f.new_id])
        assert f.position > 0 and f.new_id not in tok.all_special_ids
        assert new.strip().isalnum() and "\ufffd" not in new, new
        assert old.startswith(" ") == new.startswith(" ")
        assert f.old_id == prompt_ids[f.position]
        s, e = f.char_span  # a whole word of the prompt, not a piece of one ("ital" of " capital")
        assert not (s > 0 and PROMPT[s].isalnum() and PROMPT[s - 1].isalnum())
        assert e == len(PROMPT) or not PROMPT[e].isalnum()
    positions = [f.position for f in rep.flips]
    assert max(positions.count(p) for p in positions) <= 2  # per_position


def test_first_order_estimate_is_the_gradient_dot_the_embedding_change():
    """estimated_delta = g_i . (E[new] - E[old]), with g from an independent unpadded backward."""
    lm = wrap(MODEL_BUILDERS["llama"](seed=1), "llama")
    rep = ex.token_flips(lm, PROMPT, TARGET, top_k=3, n_verify=30)
    prompt_ids = list(lm.encode_prompt(PROMPT).ids)
    target_ids = list(lm.tokenize(TARGET).ids)
    g = ref.span_gradient(lm.model, prompt_ids, target_ids)  # [P, D]
    emb = lm.model.get_input_embeddings().weight.detach()
    for f in rep.flips:
        want = float(g[f.position] @ (emb[f.new_id] - emb[f.old_id]))
        assert f.estimated_delta == pytest.approx(want, rel=1e-5, abs=1e-8)


def test_bad_arguments(tiny_lm):
    with pytest.raises(ss.SalienceError, match="direction"):
        ex.token_flips(tiny_lm, PROMPT, TARGET, direction="sideways")
    with pytest.raises(ss.SalienceError, match="top_k"):
        ex.token_flips(tiny_lm, PROMPT, TARGET, top_k=10, n_verify=5)
