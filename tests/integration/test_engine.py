"""The engine on the embedded default model (SmolLM2-135M-Instruct)."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

import sequence_salience as ss
from sequence_salience import aggregate, model as model_lib
from sequence_salience.salience import tokenized_result

FACT = "The code for the blue locker is 4817."
DISTRACTORS = [
    "The library opens at nine in the morning.",
    "Our cat likes to sleep on the warm windowsill.",
    "The red bicycle in the hall needs new tyres.",
    "Lunch today is tomato soup with fresh bread.",
]


def test_default_model_loads_from_cache_without_converting_again(default_lm):
    messages = []
    lm = ss.load_model("default", log=messages.append)
    assert not any("Converting" in m for m in messages), messages
    key = model_lib.gguf_cache_key(model_lib.default_gguf_path())
    assert (model_lib.cache_dir() / "converted" / key / "model.safetensors").is_file()
    assert lm.model.config.model_type == "llama"


def test_tokens_map_back_to_their_exact_characters(default_lm):
    text = "Héllo wörld — naïve café 東京 😀!\n\n  Second line."
    tok = default_lm.tokenize(text)
    assert "".join(text[s:e] for s, e in tok.offsets) == text  # disjoint, in order, covering the text
    assert any(s == e for s, e in tok.offsets)  # byte pieces before a character's last piece are empty
    for (s, e), token_id in zip(tok.offsets, tok.ids):
        if e > s and "\ufffd" not in default_lm.tokenizer.decode([token_id]):
            assert default_lm.tokenizer.decode([token_id]) == text[s:e]


def test_chat_prompt_marks_template_markup_and_content(default_lm):
    prompt = default_lm.format_prompt("What is 2 + 2?", system="Answer with a number.")
    roles = {role: prompt.text[s:e] for s, e, role in prompt.role_spans if role != "markup"}
    assert roles == {"system": "Answer with a number.", "user": "What is 2 + 2?"}
    markup = "".join(prompt.text[s:e] for s, e, role in prompt.role_spans if role == "markup")
    assert "<|im_start|>" in markup and "<|im_end|>" in markup
    assert [s for s, _, _ in prompt.role_spans][1:] == [e for _, e, _ in prompt.role_spans][:-1]  # contiguous
    encoded = default_lm.encode_prompt(prompt)
    specials = [prompt.text[s:e] for (s, e), sp in zip(encoded.offsets, encoded.special) if sp]
    assert specials and set(specials) <= {"<|im_start|>", "<|im_end|>"}


def test_default_system_prompt_of_the_template_is_labelled_system(default_lm):
    prompt = default_lm.format_prompt("Hi there")
    roles = [(prompt.text[s:e], role) for s, e, role in prompt.role_spans]
    assert ("You are a helpful AI assistant named SmolLM, trained by Hugging Face", "system") in roles
    assert ("Hi there", "user") in roles
    assert "".join(t for t, _ in roles) == prompt.text


def test_greedy_generation_answers_and_stops_at_end_of_turn(default_lm):
    gen = default_lm.generate(default_lm.format_prompt("What is the capital of France?"))
    assert "Paris" in gen.text
    assert gen.stopped_by == "eos" and "<|im_end|>" not in gen.text
    assert "".join(gen.text[s:e] for s, e in gen.offsets) == gen.text


def test_seeded_sampling_is_reproducible(default_lm):
    prompt = default_lm.format_prompt("Write a word.")
    cfg = ss.GenerationConfig(max_new_tokens=8, do_sample=True, temperature=1.5, seed=7)
    assert default_lm.generate(prompt, cfg).ids == default_lm.generate(prompt, cfg).ids


@pytest.mark.parametrize("method", ss.list_methods())
def test_the_sentence_that_holds_the_answer_gets_the_most_salience(default_lm, method):
    """A fact stated once among distractors: for the answer's tokens (the digits), the fact's
    sentence outranks every distractor sentence in mean |salience| per token.

    The digits' span is computed directly (`compute_span_salience`: one backward, IG one batch of steps),
    as the first highlight computes it, not from every target token's matrix row: the same exact salience
    for log p(digits), for 1 of the target's backward passes (the IG case took 37 s of the suite)."""
    context = " ".join(DISTRACTORS[:2] + [FACT] + DISTRACTORS[2:])
    prompt = default_lm.format_prompt(f"{context}\n\nWhich number opens the blue locker?")
    target = "The number is 4817."
    result = tokenized_result(default_lm, prompt, target)  # tokens and offsets; no salience
    target_tokens = result.tokens[result.n_prompt_tokens:]
    digits = [t for t, tok in enumerate(target_tokens) if tok.strip().isdigit()]
    assert "".join(target_tokens[t] for t in digits).strip() == "4817"
    scores = np.abs(ss.compute_span_salience(default_lm, prompt, target, method, digits[0], digits[-1] + 1,
                                             config=ss.SalienceConfig(ig_steps=16)))  # [N]
    seg, values = aggregate.aggregate_salience(result.text, result.offsets, scores, "sentence", reduction="mean")
    by_text = {result.text[s:e].strip(): v for s, e, v in zip(seg.starts, seg.ends, values)}
    for d in DISTRACTORS:
        assert by_text[FACT] > by_text[d], (method, d, by_text)


def test_over_long_input_is_a_clear_error(default_lm):
    long_prompt = "word " * 9000
    with pytest.raises(ss.SalienceError, match=r"context is 8,192"):
        ss.compute_salience(default_lm, long_prompt, "x")
    with pytest.raises(ss.SalienceError, match=r"context is 8,192"):
        default_lm.generate(long_prompt)


def test_unknown_model_id_offline_says_what_works(monkeypatch):
    from huggingface_hub import constants as hub_constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub reads the variable once, at import: when an earlier test of the process imported it, only
    # the module's flag makes this offline (else each Hub lookup retries a dead network for ~23 s).
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ss.SalienceError, match=r"local model folder.*\.gguf"):
        ss.load_model("no-such-org/no-such-model-xyz")


def test_gguf_conversion_is_atomic(monkeypatch, tmp_path):
    """A crash while writing the converted folder leaves no cache (and no temp folder) behind.

    convert_gguf runs as it does on the default model's GGUF (its cache key, the temporary folder the model and the
    tokenizer are saved into, the rename), except that reading the GGUF gives a tiny random Llama and the tiny
    tokenizer (tests/unit/tiny_models.py): the folder's write does not depend on the weights, and dequantizing the
    135M model only to crash at the rename cost 28 s of CPU (docs/benchmarks.md, "Session 31"). A real conversion
    is what every first `load_model("default")` does (test_default_model_loads_from_cache_without_converting_again)."""
    import transformers  # pylint: disable=import-outside-toplevel

    from tests.unit import tiny_models  # pylint: disable=import-outside-toplevel

    gguf = model_lib.default_gguf_path()
    read = []

    def read_gguf(make):
        def from_pretrained(folder, gguf_file=None, **kwargs):
            read.append((pathlib.Path(folder), gguf_file))
            return make()
        return from_pretrained

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", read_gguf(tiny_models.tiny_llama))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", read_gguf(tiny_models.tiny_tokenizer))
    monkeypatch.setenv("SEQUENCE_SALIENCE_CACHE", str(tmp_path))

    def crash(*args, **kwargs):
        raise OSError("simulated crash while renaming")

    monkeypatch.setattr(model_lib.os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        model_lib.convert_gguf(gguf)
    assert read == [(gguf.parent, gguf.name)] * 2  # the tokenizer and the model, read from the GGUF
    converted = tmp_path / "converted"
    assert list(converted.iterdir()) == []
