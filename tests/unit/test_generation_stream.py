"""Streaming generation (`LanguageModel.generate(on_token=...)`) on tiny random models.

The streamed reports must end with exactly the returned generation (same ids, hence the same
text with `decode_text`), grow one token at a time, and leave the generation unchanged.
"""

from __future__ import annotations

import pytest

import sequence_salience as ss
from sequence_salience.model import decode_text
from tests.unit import tiny_models

PROMPTS = ["The capital of France is", "Q: What is 2 + 3? A:", "café naïve 東京 😀"]


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def lm(request):
    build = tiny_models.tiny_llama if request.param == "llama" else tiny_models.tiny_gpt2
    return tiny_models.wrap(build(seed=3), request.param)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_streamed_ids_end_with_the_final_generation(lm, prompt):
    reports: list[tuple[int, ...]] = []
    config = ss.GenerationConfig(max_new_tokens=16)
    gen = lm.generate(prompt, config, on_token=reports.append)
    assert gen == lm.generate(prompt, config)  # streaming does not change the generation
    assert reports == [gen.ids[: k + 1] for k in range(len(gen.ids))]  # one report per token, stop token excluded
    assert decode_text(lm.tokenizer, reports[-1]) == gen.text
    for ids in reports:  # what a page shows: the text so far, without an incomplete last character
        assert gen.text.startswith(decode_text(lm.tokenizer, ids).rstrip("\ufffd"))


def test_an_exception_in_on_token_stops_the_generation(lm):
    calls = []

    def stop_after_two(ids):
        calls.append(ids)
        if len(calls) == 2:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        lm.generate("The capital of France is", ss.GenerationConfig(max_new_tokens=24), on_token=stop_after_two)
    assert len(calls) == 2
