"""The first highlight's gradient pass leaves the unedited prompt's keys and values and the span's attention for a
segment method of the same span (compute_span_result(record=span_recorder), result.UneditedForward): the method then runs no
unedited forward of its own, and its values and attention features are those of its own forward."""

from __future__ import annotations

import numpy as np
import pytest

import sequence_salience as ss
from sequence_salience.ablation import segment_salience, span_recorder
from sequence_salience.attention import capture_features, span_rows
from sequence_salience.methods import leave_one_out
from tests.unit.tiny_models import MODEL_BUILDERS, wrap

PROMPT = "Alice has three apples. Bob has two apples. Carol has none.\nHow many apples are there?"
TARGET = " Five apples in all."


@pytest.mark.parametrize("family", sorted(MODEL_BUILDERS))
def test_leave_one_out_after_a_recorded_pass_equals_its_own_forward_without_running_it(family):
    lm = wrap(MODEL_BUILDERS[family](), family)
    plain = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="sentence")
    highlight = ss.compute_span_result(lm, PROMPT, TARGET, methods=("grad_norm",), record=span_recorder)
    assert highlight.unedited is not None and highlight.unedited.span == (0, highlight.num_targets)
    got = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="sentence", result=highlight)
    np.testing.assert_allclose(got.values, plain.values, rtol=0, atol=1e-5)
    assert got.original_logprob == pytest.approx(plain.original_logprob, abs=1e-5)
    assert plain.stats.computed - got.stats.computed == len(highlight.ids)  # no unedited forward of its own
    # taken once: the next computation runs its own unedited forward
    again = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="sentence", result=highlight)
    assert again.stats.computed == plain.stats.computed
    # another span does not take it
    other = ss.compute_span_result(lm, PROMPT, TARGET, methods=("grad_norm",), record=span_recorder)
    segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="sentence", span=(0, 2), result=other)
    assert other.unedited.layers is not None


@pytest.mark.parametrize("family", sorted(MODEL_BUILDERS))
def test_the_recorded_attention_equals_an_independent_capture(family):
    lm = wrap(MODEL_BUILDERS[family](), family)
    highlight = ss.compute_span_result(lm, PROMPT, TARGET, methods=("grad_norm", "grad_x_input"), record=span_recorder)
    recorder = highlight.unedited.recorder
    segments = [list(range(0, 5)), list(range(5, highlight.n_prompt_tokens))]
    want = capture_features(lm.model, highlight.ids, span_rows(highlight.n_prompt_tokens, highlight.unedited.span),
                            segments)
    np.testing.assert_allclose(recorder.features(0, segments), want, rtol=1e-5, atol=1e-6)
    # the gradients are those of a pass without recording
    plain = ss.compute_span_result(lm, PROMPT, TARGET, methods=("grad_norm", "grad_x_input"))
    for method in ("grad_norm", "grad_x_input"):
        np.testing.assert_allclose(highlight.span_salience(method), plain.span_salience(method), rtol=1e-5, atol=1e-7)
    assert plain.unedited is None


@pytest.mark.parametrize("family", sorted(MODEL_BUILDERS))
def test_the_recording_is_the_passs_own_forward_not_another_threads(family):
    """The recorder's hooks are on the shared model: another thread's forward over as many positions, run after this
    pass's forward while the block is open (here in its backward; a server's other client, when a pass yields), is
    not recorded, and the layers run again in the backward are not recorded twice."""
    import threading

    import torch

    from sequence_salience.methods.gradients import decoder_layers

    lm = wrap(MODEL_BUILDERS[family](), family)
    plain = ss.compute_span_result(lm, PROMPT, TARGET, methods=("grad_norm",))
    other_ids = torch.as_tensor([[(i * 7 + 3) % 50 + 1 for i in range(len(plain.ids))]])  # another row, same length
    me, ran = threading.get_ident(), []

    calls = []

    def other_forward(_module, _args, _out) -> None:  # after the first layer's attention runs again in the backward
        calls.append(threading.get_ident())
        if calls.count(me) == 2 and not ran:
            ran.append(1)
            t = threading.Thread(target=lambda: lm.model(input_ids=other_ids, use_cache=False))
            t.start()
            t.join()

    first = decoder_layers(lm.model)[0]
    handle = (first.self_attn if hasattr(first, "self_attn") else first.attn).register_forward_hook(other_forward)
    try:
        highlight = ss.compute_span_result(lm, PROMPT, TARGET, methods=("grad_norm",), record=span_recorder)
    finally:
        handle.remove()
    assert ran
    segments = [list(range(0, 5)), list(range(5, highlight.n_prompt_tokens))]
    want = capture_features(lm.model, highlight.ids, span_rows(highlight.n_prompt_tokens, highlight.unedited.span),
                            segments)
    np.testing.assert_allclose(highlight.unedited.recorder.features(0, segments), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(highlight.span_salience("grad_norm"), plain.span_salience("grad_norm"))

def test_the_servers_first_highlight_leaves_it_for_the_segment_job_of_its_span():
    from lit_app.model import shared_model
    from lit_app.schema import inputs

    lm = wrap(MODEL_BUILDERS["llama"](), "llama")
    shared = shared_model.SharedLM(lm, max_new_tokens=4, disk_cache=False)
    chat = lm.format_prompt(PROMPT)
    request = inputs.SegmentRequest(leave_one_out.NAME, "sentence", None, "filler", None, 0)
    alone = shared.segment_salience(chat, TARGET, request)  # no first highlight: its own unedited forward
    shared.forget_salience()
    highlight = shared.quick(chat, TARGET, 0, None)  # the first highlight of the whole response
    got = shared.segment_salience(chat, TARGET, request)
    np.testing.assert_allclose(got.values, alone.values, rtol=0, atol=1e-5)
    assert alone.stats.computed - got.stats.computed == len(highlight.ids)


def test_a_pair_over_the_servers_limit_records_nothing_and_keeps_its_layers_recomputed(monkeypatch):
    """Over UNEDITED_MAX_TOKENS the server's first highlight records and keeps nothing (keys and values, ~45 kB per
    token on the default model); at the limit it records. The gradients of both are those of a pass without
    recording."""
    from lit_app.model import salience_runs

    lm = wrap(MODEL_BUILDERS["llama"](), "llama")
    plain = ss.compute_span_result(lm, PROMPT, TARGET, methods=("grad_norm",))
    n = len(plain.ids)
    monkeypatch.setattr(salience_runs, "UNEDITED_MAX_TOKENS", n - 1)
    over = ss.compute_span_result(lm, PROMPT, TARGET, methods=("grad_norm",), record=salience_runs.record_short)
    assert over.unedited is None
    monkeypatch.setattr(salience_runs, "UNEDITED_MAX_TOKENS", n)
    at = ss.compute_span_result(lm, PROMPT, TARGET, methods=("grad_norm",), record=salience_runs.record_short)
    assert at.unedited is not None and at.unedited.layers is not None
    for got in (over, at):
        np.testing.assert_allclose(got.span_salience("grad_norm"), plain.span_salience("grad_norm"), rtol=1e-5,
                                   atol=1e-7)


def test_a_saved_result_holds_no_keys_and_values(tmp_path):
    """`unedited` lives in the process only: to_json writes no such field and the loaded result has none."""
    lm = wrap(MODEL_BUILDERS["llama"](), "llama")
    highlight = ss.compute_span_result(lm, PROMPT, TARGET, methods=("grad_norm",), record=span_recorder)
    assert highlight.unedited is not None
    path = tmp_path / "r.json"
    highlight.to_json(path)
    assert '"unedited"' not in path.read_text(encoding="utf-8")
    loaded = ss.SalienceResult.load(path)
    assert loaded.unedited is None
    np.testing.assert_array_equal(loaded.span_salience("grad_norm"), highlight.span_salience("grad_norm"))


def test_leave_one_out_after_a_first_map_that_verified_every_segment_runs_no_model_pass(tmp_path):
    """Session 35's leftover (docs/benchmarks.md "Session 35 (h4)", item 4): the confirming leave one out, handed a
    first map (attention_verified) that verified every segment, scored no ablated prompt but still ran one unedited
    forward, only for log p(span) of its check; the highlight's result holds that (its pass's `target_logprobs`). Now
    it runs no model pass, and its values are those of a leave one out that ran its own unedited forward. Where a
    segment is left to score, the unedited forward runs as before."""
    from sequence_salience.methods import attention_verified
    from tests.pass_counter import PassCounter
    from tests.unit.estimators import saved_random_estimator

    lm = wrap(MODEL_BUILDERS["llama"](seed=0), "llama")
    _, config = saved_random_estimator(lm, tmp_path / "e.npz", seed=5)
    brute = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="sentence", config=config)
    for granularity, every in (("sentence", True), ("word", False)):
        highlight = ss.compute_span_result(lm, PROMPT, TARGET, methods=("grad_norm",), record=span_recorder)
        first = segment_salience(lm, PROMPT, TARGET, attention_verified.NAME, granularity=granularity, config=config,
                                 result=highlight)
        assert bool(first.measured_mask().all()) == every, first.measured_mask()
        own = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity=granularity, config=config,
                               known=first)  # without the result: its own unedited forward (the path before)
        counter = PassCounter().watch(lm)
        got = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity=granularity, config=config,
                               known=first, result=highlight)
        np.testing.assert_allclose(got.values, own.values, rtol=0, atol=1e-12 if every else 1e-5)
        assert got.original_logprob == pytest.approx(own.original_logprob, abs=1e-5)
        assert got.stats.rows == own.stats.rows
        if every:
            np.testing.assert_allclose(got.values, brute.values, rtol=0, atol=1e-5)
            assert counter.forwards == 0 and got.stats.computed == 0  # was: 1 forward of len(ids) positions
        else:  # words left to score: the unedited forward for their shared prefix, then theirs
            assert counter.forwards > 1 and got.stats.computed == own.stats.computed


def test_a_pattern_without_segments_is_refused_before_any_model_pass_and_leaves_the_recording():
    """Issue 43's bad input, session 36: with the highlight's result at hand, a regex that matches nothing (or runs past
    its budget: the same place) was refused only after the unedited forward (15 s for a catastrophic pattern on a
    5,000-character prompt at load 11, the server's job "running 0 of 0" meanwhile), or after taking the recorded
    keys and values, which the next job then lacked. Now the segments come first."""
    from tests.pass_counter import PassCounter

    lm = wrap(MODEL_BUILDERS["llama"](seed=0), "llama")
    plain = ss.compute_span_result(lm, PROMPT, TARGET, methods=("grad_norm",))
    recorded = ss.compute_span_result(lm, PROMPT, TARGET, methods=("grad_norm",), record=span_recorder)
    counter = PassCounter().watch(lm)
    for result in (plain, recorded):
        with pytest.raises(ss.SalienceError, match="no removable regex segments"):
            segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="regex", pattern="zzz", result=result)
    assert counter.forwards == 0  # was: 1 (the plain result's unedited forward)
    assert recorded.unedited.layers is not None  # was: taken by the refused call


def test_the_servers_segment_job_refuses_a_pattern_without_matches_without_waiting_for_the_model():
    """The server matches a user's pattern before it waits for the model (the pair's tokens are known from its first
    highlight): one that matches nothing (or runs past its budget) is refused while another client's work holds the
    model (was: only once the model was free, then matched while holding it)."""
    import threading

    from lit_app.edge import clients
    from lit_app.model import shared_model
    from lit_app.schema import inputs

    lm = wrap(MODEL_BUILDERS["llama"](seed=0), "llama")
    shared = shared_model.SharedLM(lm, max_new_tokens=4, disk_cache=False)
    chat = lm.format_prompt(PROMPT)
    shared.quick(chat, TARGET, 0, None)  # the first highlight
    held, release, done, out = threading.Event(), threading.Event(), threading.Event(), {}

    def other_client() -> None:
        with clients.acting_as("tab-b"), shared.lock:
            held.set()
            release.wait(120)

    def request() -> None:
        try:
            shared.segment_salience(chat, TARGET, inputs.SegmentRequest(leave_one_out.NAME, "regex", "zzz", "filler",
                                                                        None, 0))
        except ss.SalienceError as e:
            out["error"] = str(e)
        finally:
            done.set()

    holder = threading.Thread(target=other_client)
    holder.start()
    assert held.wait(60)
    try:
        threading.Thread(target=request).start()
        answered = done.wait(60)  # the other client holds the model throughout
    finally:
        release.set()
        holder.join(60)
        done.wait(60)
    assert answered, "refused only once the model was free"
    assert "no removable regex segments" in out["error"]


def test_without_a_result_a_pattern_is_matched_on_the_pairs_tokens_before_any_model_pass():
    """Issue 43: a script's first request (no first highlight, so no result of the pair) with a pattern that matches
    nothing or runs past its budget was refused only after the unedited forward (19.3 s at load 13 for a catastrophic
    pattern on a 5,000-character prompt). The pair's tokens need no model pass: refused before any."""
    from sequence_salience.salience import tokenized_result
    from tests.pass_counter import PassCounter

    lm = wrap(MODEL_BUILDERS["llama"](seed=0), "llama")
    counter = PassCounter().watch(lm)
    with pytest.raises(ss.SalienceError, match="no removable regex segments"):
        segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="regex", pattern="zzz")
    assert counter.forwards == 0  # was: 1 (the unedited forward)
    # A pattern that matches: the values and result as the pair tokenized with the scored log-probs.
    got = segment_salience(lm, PROMPT, TARGET, leave_one_out.NAME, granularity="regex", pattern="apples")
    reference = tokenized_result(lm, PROMPT, TARGET)  # its own forward
    assert len(got.segments) == 3 and got.result.tokens == reference.tokens
    np.testing.assert_allclose(got.result.target_logprobs, reference.target_logprobs, rtol=0, atol=1e-5)
