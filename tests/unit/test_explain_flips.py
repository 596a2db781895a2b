"""Gradient-guided token flips on a tiny random model, each re-scored independently."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sequence_salience as ss
from sequence_salience import explain as ex
from tests.unit import explain_reference as ref
from tests.unit.tiny_models import MODEL_BUILDERS, tiny_tokenizer, wrap

PROMPT = "The capital of France is Paris. The capital of Italy is Rome. Alice has three apples."
TARGET = " Paris. The capital"


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
        assert f.edited_text == PROMPT[:f.char_span[0]] + f.new_text + PROMPT[f.char_span[1]:]
        # Exactly what Load gives: the edited TEXT, re-tokenized (not the one-id edit).
        ids = list(tiny_lm.tokenizer(f.edited_text, add_special_tokens=True)["input_ids"])
        one_id = list(prompt_ids)
        assert one_id[f.position] == f.old_id
        one_id[f.position] = f.new_id
        assert f.retokenized == (ids != one_id)
        new = ref.span_logprob(tiny_lm.model, ids, target_ids, 0, T)
        assert f.logprob == pytest.approx(new, rel=1e-6)
        assert f.delta == pytest.approx(new - original, abs=1e-5)
        assert f.keeps_greedy == ref.greedy_keeps(tiny_lm.model, ids, target_ids)


def test_candidates_are_word_tokens_with_the_same_spacing(tiny_lm):
    tok = tiny_tokenizer()
    rep = ex.token_flips(tiny_lm, PROMPT, TARGET, top_k=10, n_verify=12, per_position=2)
    assert rep.n_verified == 12
    prompt_ids = tiny_lm.encode_prompt(PROMPT).ids
    for f in rep.flips:
        old, new = tok.decode([f.old_id]), tok.decode([f.new_id])
        assert f.position > 0 and f.new_id not in tok.all_special_ids
        assert (new.strip().isalpha() or new.strip().isdigit()) and "\ufffd" not in new, new
        assert old.startswith(" ") == new.startswith(" ")
        o, n = old.strip(), new.strip()  # the same case pattern
        assert (o.islower(), o.isdigit(), o[:1].isupper()) == (n.islower(), n.isdigit(), n[:1].isupper()), (o, n)
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


def _reference_word_end(lm, token_id):
    """p(next token starts with a non-alphanumeric character or is special | BOS, "Word:", token), by hand."""
    tok = lm.tokenizer
    text = tok.decode([token_id])
    ctx = tok("Word:" if text.startswith(" ") else "Word:\n", add_special_tokens=False)["input_ids"]
    ids = ([tok.bos_token_id] if tok.bos_token_id is not None else []) + ctx + [token_id]
    with torch.no_grad():
        p = torch.softmax(lm.model(input_ids=torch.tensor([ids])).logits[0, -1].double(), -1)
    V = p.shape[0]
    special = set(tok.all_special_ids)
    ends = [i for i in range(V) if i in special or (tok.decode([i]) and not tok.decode([i])[0].isalnum())]
    return float(p[ends].sum())


def test_replacements_are_complete_words_by_the_documented_rule(tiny_lm):
    """Every replacement's p(word ends) is the hand-computed one and at least the threshold; a higher
    threshold removes the candidates below it (the random tiny models put p near 0.70)."""
    V = tiny_lm.model.get_input_embeddings().weight.shape[0]
    shape, _, _ = ex.word_vocabulary(tiny_lm.tokenizer, V)
    words = [int(i) for i in np.flatnonzero(shape > 0)]
    p = ex.word_end_probability(tiny_lm, words)
    for i in words[:5]:
        assert p[words.index(i)] == pytest.approx(_reference_word_end(tiny_lm, i), rel=1e-9)
    threshold = float(np.median(p))
    loose = ex.token_flips(tiny_lm, PROMPT, TARGET, top_k=10, n_verify=20, word_end_min=0.0)
    strict = ex.token_flips(tiny_lm, PROMPT, TARGET, top_k=10, n_verify=20, word_end_min=threshold)
    assert any(f.word_end < threshold for f in loose.flips)  # the rule has something to remove
    for f in strict.flips:
        assert f.word_end >= threshold
        assert f.word_end == pytest.approx(_reference_word_end(tiny_lm, f.new_id), rel=1e-9)


def test_a_chat_prompt_is_edited_as_load_formats_it(tiny_lm):
    """With a ChatPrompt the role spans after the edit shift, and the scored ids are the re-tokenized text's."""
    chat = ss.ChatPrompt(text=PROMPT, role_spans=((0, len(PROMPT), "user"),), templated=False)
    rep = ex.token_flips(tiny_lm, chat, TARGET, top_k=3, n_verify=10)
    target_ids = list(tiny_lm.tokenize(TARGET).ids)
    for f in rep.flips:
        ids = list(tiny_lm.encode_prompt(f.edited_text).ids)
        assert f.logprob == pytest.approx(ref.span_logprob(tiny_lm.model, ids, target_ids, 0, len(target_ids)), rel=1e-6)
