"""sequence_salience.compare: the alignment against hand-derived cases, the cross log-probs against an
independent teacher-forced computation, and compare() on tiny random models (values, scale, passes)."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest
import torch

import sequence_salience as ss
from sequence_salience import aggregate
from sequence_salience.compare import align_texts, response_logprobs


def _rows(alignment):
    """(kind, text A, text B) per aligned segment, whitespace trimmed, for hand-written expectations."""
    return [(s.kind, alignment.text(k, "a").strip(), alignment.text(k, "b").strip())
            for k, s in enumerate(alignment.segments)]


# align_texts on hand-derived texts: tests/unit/test_alignment_cases.py (tests/data/alignment_cases.json,
# which the browser's tests read too).


def test_align_texts_needs_a_granularity_without_tokens():
    with pytest.raises(ss.SalienceError, match="granularity"):
        align_texts("a", "b", "token")


def _teacher_forced(lm, prompt_ids, target_ids) -> np.ndarray:
    """log p(target_t | prompt, target_<t) from one plain forward over the ids (no library code)."""
    ids = torch.tensor([list(prompt_ids) + list(target_ids)])
    with torch.no_grad():
        logits = lm.model(input_ids=ids).logits[0]  # [L, V]
    logp = torch.log_softmax(logits.double(), -1)
    p = len(prompt_ids)
    return np.array([logp[p + t - 1, tid].item() for t, tid in enumerate(target_ids)])


def test_response_logprobs_equal_an_independent_teacher_forced_forward(tiny_lm):
    prompt, response = "The capital of France is", " Paris. The capital of Italy is Rome."
    got = response_logprobs(tiny_lm, prompt, response)
    prompt_ids = tiny_lm.encode_prompt(prompt).ids
    target_ids = tiny_lm.tokenize(response).ids
    np.testing.assert_allclose(got.logprobs, _teacher_forced(tiny_lm, prompt_ids, target_ids), rtol=0, atol=2e-6)  # float32 log_softmax
    assert got.total == pytest.approx(float(np.sum(got.logprobs)))
    assert "".join(got.tokens) == response and list(got.ids) == list(target_ids)
    # And the same values a salience result records for its targets.
    res = ss.compute_span_result(tiny_lm, prompt, response, methods=("grad_x_input",))
    np.testing.assert_allclose(got.logprobs, res.target_logprobs, rtol=1e-6, atol=1e-6)


def _forward_counter(lm):
    count = {"n": 0}

    def hook(*_):
        count["n"] += 1

    return count, lm.model.register_forward_hook(hook)


def test_compare_two_prompts(llama):
    prompt_a, prompt_b = "Alice has three apples and Bob has two", "Alice has five apples and Bob has two"
    response_a, response_b = " apples; together they have five.", " apples; together they have seven."
    count, handle = _forward_counter(llama)
    try:
        cmp = ss.compare(llama, prompt_a, prompt_b, response_a=response_a, response_b=response_b, chat=False,
                         labels=("original", "edited"))
    finally:
        handle.remove()
    # One forward + backward per side for grad_x_input, plus one forward for A's response under B.
    assert count["n"] == 3
    assert cmp.method == "grad_x_input" and cmp.labels == ("original", "edited")
    assert [r for r in _rows(cmp.prompts) if r[0] != "equal"] == [("replace", "three", "five")]
    assert [r for r in _rows(cmp.responses) if r[0] != "equal"] == [("replace", "five", "seven")]
    # Values: each result's whole-response salience summed over its word segments, independently recomputed.
    for result, values in ((cmp.result_a, cmp.values_a), (cmp.result_b, cmp.values_b)):
        seg = aggregate.segment(result.text, result.offsets, "word")
        per_seg = aggregate.aggregate(result.span_salience("grad_x_input"), seg)
        prompt_segs = [s for s in range(len(seg)) if seg.starts[s] < result.prompt_end]
        np.testing.assert_allclose(np.sort(values), np.sort(per_seg[prompt_segs]))
    np.testing.assert_allclose(cmp.difference, cmp.values_b - cmp.values_a)
    both = np.abs(np.concatenate([cmp.values_a, cmp.values_b]))
    assert cmp.scale.signed and cmp.scale.scale == pytest.approx(np.nanmax(both))
    assert cmp.difference_scale.scale == pytest.approx(np.nanmax(np.abs(cmp.difference)))
    # Cross log-probs: A's response under A (from result A) and under B, against plain forwards.
    ids_a = llama.encode_prompt(prompt_a).ids
    ids_b = llama.encode_prompt(prompt_b).ids
    target = llama.tokenize(response_a).ids
    np.testing.assert_allclose(cmp.cross.under_a.logprobs, _teacher_forced(llama, ids_a, target), atol=2e-6)
    np.testing.assert_allclose(cmp.cross.under_b.logprobs, _teacher_forced(llama, ids_b, target), atol=2e-6)
    assert cmp.cross.delta == pytest.approx(cmp.cross.under_b.total - cmp.cross.under_a.total)
    np.testing.assert_allclose(cmp.cross.per_token_delta, cmp.cross.under_b.logprobs - cmp.cross.under_a.logprobs)
    top = cmp.top_changes(3)
    assert len(top) == 3 and abs(top[0][1]) == pytest.approx(np.nanmax(np.abs(cmp.difference)))


def test_same_response_reuses_its_forward_and_generation_defaults(llama):
    count, handle = _forward_counter(llama)
    try:
        cmp = ss.compare(llama, "The capital of France is", "The capital of Italy is", response_a=" Paris.",
                         same_response=True, chat=False)
    finally:
        handle.remove()
    assert count["n"] == 2  # no extra forward: B explained A's response, its forward has the log-probs
    assert cmp.response_b == cmp.response_a == " Paris." and not cmp.responses.changed
    np.testing.assert_allclose(cmp.cross.under_b.logprobs, cmp.result_b.target_logprobs)
    gen = ss.compare(llama, "The capital of France is", "The capital of Italy is", chat=False,
                     generation=ss.GenerationConfig(max_new_tokens=3))
    assert gen.result_a.num_targets <= 3 and gen.result_b.num_targets <= 3
    with pytest.raises(ss.SalienceError, match="empty"):
        ss.compare(llama, "  ", "x", chat=False, response_a="a", response_b="b")
    with pytest.raises(ss.SalienceError, match="same_response"):
        ss.compare(llama, "a", "b", chat=False, response_a="x", response_b="y", same_response=True)


def test_comparison_renders_html_and_json(llama, tmp_path):
    cmp = ss.compare(llama, "Alice has 3 apples", "Alice has 4 apples", response_a=" and two pears.",
                     response_b=" and three pears.", chat=False)
    page = cmp.to_html(tmp_path / "c.html")
    text = (tmp_path / "c.html").read_text(encoding="utf-8")
    assert page.endswith("c.html") and text.startswith("<!DOCTYPE html>") and "<script" not in text
    fragment = cmp._repr_html_()
    # Both responses with the diff marked: "two" struck in A, "three" underlined in B.
    assert re.search(r"<del class=\"ss-diff\"[^>]*>two </del>", fragment)
    assert re.search(r"<ins class=\"ss-diff\"[^>]*>three </ins>", fragment)
    # The prompt once per view: the replaced number shows as a deleted "3" and an inserted "4".
    both = re.search(r'ss-view-both">(.*?)</div>', fragment, re.S).group(1)
    plain = html.unescape(re.sub(r"<[^>]+>", "", both))
    assert plain.startswith(cmp.result_a.text[: cmp.result_a.text.index("3")]) and "3 4" in plain
    assert "Δ log p" in fragment and f"{cmp.cross.delta:+.3f}" in fragment
    cmp.to_json(tmp_path / "c.json", meta={"model": "llama"})
    import json

    obj = json.loads((tmp_path / "c.json").read_text(encoding="utf-8"))
    assert obj["format"] == "sequence_salience.SalienceComparison" and obj["meta"] == {"model": "llama"}
    assert obj["cross"]["delta"] == pytest.approx(cmp.cross.delta)
    rep = [s for s in obj["prompts"]["segments"] if s["kind"] == "replace"]
    assert [(s["text_a"].strip(), s["text_b"].strip()) for s in rep] == [("3", "4")]
    assert rep[0]["difference"] == pytest.approx(rep[0]["value_b"] - rep[0]["value_a"])
    assert ss.SalienceResult.load  # results round-trip through their own format
    from sequence_salience.result import result_from_dict

    again = result_from_dict(obj["result_a"])
    np.testing.assert_array_equal(again.ids, cmp.result_a.ids)
