"""The server's segment methods (leave one out, the ContextCite surrogate) as background jobs of the
salience model (`detail="segments"`): request parsing, the payload against the core library called
directly, cancellation when a newer segment request supersedes a job, refusals naming the fields.

Parsing needs no model; the wrapper runs on a tiny random Llama.
"""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np
import pytest

from sequence_salience import field_rules
from sequence_salience import explain as ex
from sequence_salience.ablation import AblationConfig, costed, engine, segment_salience
from sequence_salience.aggregate import matchers_idle
from sequence_salience.errors import PatternBusy
from sequence_salience.methods import ablation_surrogate, attention_verified, leave_one_out
from sequence_salience import methods as core_methods
from sequence_salience.aggregate import GRANULARITIES
from sequence_salience.methods.base import SEGMENT_REMOVALS
from lit_app.edge import clients, limits
from lit_app import errors
from lit_app.schema import fields, inputs, method_registry
from lit_app.model import progressive, salience_runs, shared_model
from lit_app.wrappers import explain as lit_explain
from tests.unit.estimators import saved_random_estimator
from tests.unit.tiny_lit import tiny_salience_lit
from tests.unit.tiny_models import tiny_llama, wrap
from tests.unit.waiting import wait_until

PROMPT = "Alice has three apples. Bob has two apples. Carol has none.\nHow many apples are there?"
TARGET = " Five apples in all."
DETAIL = method_registry.SEGMENT_DETAIL
MASKS = ablation_surrogate.METHOD.count_field


def test_segment_request_defaults_and_what_changes_the_job():
    r = inputs.segment_request({fields.SEGMENT_METHOD: leave_one_out.NAME})
    assert (r.method, r.granularity, r.pattern, r.removal, r.span, r.count) == (
        leave_one_out.NAME, "sentence", None, "filler", None, 0)
    s = inputs.segment_request({fields.SEGMENT_METHOD: ablation_surrogate.NAME, fields.GRANULARITY: "regex",
                                fields.PATTERN: r"\w+", fields.REMOVAL: "delete", fields.TARGET_SPAN: "1:3"})
    assert (s.pattern, s.removal, s.span, s.count) == (r"\w+", "delete", (1, 3), ablation_surrogate.METHOD.default_count)
    # A pattern sent with another granularity does not change the values, nor the job.
    assert inputs.segment_request({fields.SEGMENT_METHOD: leave_one_out.NAME, fields.PATTERN: "x"}) == r
    kinds = {inputs.segment_request({fields.SEGMENT_METHOD: ablation_surrogate.NAME, **d}).job_kind
             for d in ({}, {MASKS: 8}, {fields.GRANULARITY: "line"}, {fields.REMOVAL: "delete"},
                       {fields.TARGET_SPAN: "0:1"})}
    assert len(kinds) == 5 and all(k.startswith(method_registry.SEGMENT_JOB_TAG) for k in kinds)


@pytest.mark.parametrize("data,field", [
    pytest.param({}, fields.SEGMENT_METHOD, id="no-method"),
    pytest.param({fields.SEGMENT_METHOD: "grad_norm"}, fields.SEGMENT_METHOD, id="token-method"),
    pytest.param({fields.SEGMENT_METHOD: "loo"}, fields.SEGMENT_METHOD, id="unknown-method"),
    pytest.param({fields.SEGMENT_METHOD: "leave_one_out", fields.GRANULARITY: "chapter"}, fields.GRANULARITY,
                 id="granularity"),
    pytest.param({fields.SEGMENT_METHOD: "leave_one_out", fields.REMOVAL: "mask"}, fields.REMOVAL, id="removal"),
    pytest.param({fields.SEGMENT_METHOD: "leave_one_out", fields.GRANULARITY: "regex"}, fields.PATTERN,
                 id="regex-without-pattern"),
    pytest.param({fields.SEGMENT_METHOD: "leave_one_out", fields.GRANULARITY: "regex", fields.PATTERN: "(a"},
                 fields.PATTERN, id="bad-pattern"),
    pytest.param({fields.SEGMENT_METHOD: "ablation_surrogate", MASKS: 0}, MASKS, id="no-masks"),
    pytest.param({fields.SEGMENT_METHOD: "ablation_surrogate", MASKS: field_rules.SURROGATE_MASKS.hi + 1},
                 MASKS, id="too-many-masks"),
    pytest.param({fields.SEGMENT_METHOD: "leave_one_out", fields.TARGET_SPAN: "3:1"}, fields.TARGET_SPAN,
                 id="span"),
])
def test_bad_segment_requests_are_one_line_errors_naming_the_field(data, field):
    with pytest.raises(errors.RequestError) as e:
        inputs.segment_request(data)
    assert f'"{field}"' in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("field, value", [
    pytest.param(fields.SEGMENT_METHOD, 3, id="method"),
    pytest.param(fields.GRANULARITY, 3, id="granularity"),
    pytest.param(fields.REMOVAL, ["delete"], id="removal"),
])
def test_a_choice_field_of_another_type_names_the_allowed_values(field, value):
    """{"granularity": 3} is refused as {"granularity": "chapter"} is, naming the values to send, not the
    generic "must be a string"."""
    allowed = {fields.SEGMENT_METHOD: core_methods.list_segment_methods(), fields.GRANULARITY: GRANULARITIES,
               fields.REMOVAL: SEGMENT_REMOVALS}[field]
    with pytest.raises(errors.RequestError) as e:
        inputs.segment_request({fields.SEGMENT_METHOD: leave_one_out.NAME, field: value})
    assert f'"{field}" is {value!r}; use one of' in str(e.value)
    assert all(v in str(e.value) for v in allowed), e.value


def test_a_segment_request_is_a_poll_at_the_http_edge():
    # It starts or finds a background job and never waits for the model: not counted against max_pending.
    body = {"inputs": [{"id": "a", "data": {"prompt": "p", fields.DETAIL: DETAIL}}]}
    assert limits.is_poll("/get_preds", body)
    limits.validate_example({"prompt": "p", fields.DETAIL: DETAIL}, limits.Limits(), "inputs[0]")
    # Nor does the question how many of its segments are known exactly already (it reads the cache).
    known = {"inputs": [{"id": "a", "data": {"prompt": "p", fields.DETAIL: method_registry.SEGMENT_KNOWN_DETAIL}}]}
    assert limits.is_poll("/get_preds", known)


# ---------------------------------------------------------------------------
# The salience wrapper on a tiny model.


tiny = pytest.fixture(scope="module", name="tiny")(tiny_salience_lit)


def _data(**extra):
    return {"prompt": PROMPT, "target": TARGET, "chat": False, fields.DETAIL: DETAIL, **extra}


def _known(model, **extra) -> dict | None:
    """The answer of the page's question how many segments of `extra`'s request are known exactly already."""
    out = model.predict([_data(**extra, **{fields.DETAIL: method_registry.SEGMENT_KNOWN_DETAIL})])[0]
    assert out[fields.SALIENCE]["detail"]["state"] == "done", out
    return out[fields.SALIENCE][fields.KNOWN_EXACT]


def _until_done(model, **extra) -> dict:
    """Repeats the segment request (the page's poll) until it answers the values."""
    answer = {}

    def done() -> bool:
        answer["out"] = model.predict([_data(**extra)])[0][fields.SALIENCE]
        state = answer["out"]["detail"]["state"]
        assert state in ("queued", "running", "done"), answer["out"]
        return state == "done"

    wait_until(done, "the segment job")
    return answer["out"]


@pytest.mark.parametrize("method,extra,config", [
    pytest.param(leave_one_out.NAME, {}, AblationConfig(), id="leave-one-out-sentence"),
    pytest.param(leave_one_out.NAME, {fields.GRANULARITY: "line", fields.REMOVAL: "delete",
                                      fields.TARGET_SPAN: "1:3"}, AblationConfig(removal="delete"), id="loo-line-span"),
    pytest.param(ablation_surrogate.NAME, {fields.GRANULARITY: "word", MASKS: 12}, AblationConfig(surrogate_masks=12),
                 id="surrogate-word"),
])
def test_segment_job_payload_equals_the_core_library_called_directly(tiny, method, extra, config):
    lm, shared, model = tiny
    out = _until_done(model, **{fields.SEGMENT_METHOD: method, **extra})
    seg = out[fields.SEGMENTS]
    span = inputs.parse_target_span(extra.get(fields.TARGET_SPAN), 1 << 30)
    granularity = extra.get(fields.GRANULARITY, "sentence")
    want = segment_salience(lm, lm.format_prompt(PROMPT, chat=False), TARGET, method, granularity=granularity,
                            span=span, config=config)
    assert (seg["method"], seg["granularity"], seg["removal"]) == (method, granularity, config.removal)
    assert seg["spans"] == [list(s) for s in want.segments] and len(seg["spans"]) > 1
    assert seg["segment_index"] == want.segment_index.tolist()
    np.testing.assert_allclose(seg["values"], want.values, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(seg["token_values"], want.token_values(), rtol=1e-5, atol=1e-9)
    assert seg["span"] == list(want.span) and seg["warning"] == want.warning
    assert seg["stats"]["rows"] == want.stats.rows and seg["stats"]["tokens"] == want.stats.tokens
    assert set(seg["quality"]) == set(want.quality)
    for k, v in want.quality.items():
        assert seg["quality"][k] == pytest.approx(v, rel=1e-6) if np.isfinite(v) else seg["quality"][k] is None
    assert out["detail"]["done"] == out["detail"]["total"] == want.stats.rows - 1  # ablated rows, not the unedited
    # Asked again: the cached values, no new job.
    again = model.predict([_data(**{fields.SEGMENT_METHOD: method, **extra})])[0][fields.SALIENCE]
    assert again[fields.SEGMENTS] == seg


# Each case's first job has settings of its own (the module's model keeps finished jobs).
@pytest.mark.parametrize("first_client, second_client, superseded, granularity", [
    pytest.param("page", "page", True, "word", id="same client: the newer selection wins"),
    pytest.param("tab-1", "tab-2", False, "token", id="another client: both finish"),
    pytest.param("", "", False, "line", id="no client id: supersedes nothing"),
])
def test_a_newer_segment_request_cancels_the_older_job_of_its_client_only(tiny, first_client, second_client,
                                                                          superseded, granularity):
    lm, shared, model = tiny
    shared.forget_salience()
    group = inputs.datapoint_group(_data())
    old = {fields.SEGMENT_METHOD: leave_one_out.NAME, fields.GRANULARITY: granularity, fields.REMOVAL: "delete"}
    new = {fields.SEGMENT_METHOD: leave_one_out.NAME, fields.GRANULARITY: "sentence", fields.REMOVAL: "delete"}
    with shared.lock:  # the model is busy: the first job waits for it
        with clients.acting_as(first_client):
            first = model.predict([_data(**old)])[0][fields.SALIENCE]["detail"]
        assert first["state"] in ("queued", "running")
        old_job = shared.jobs.get(group, inputs.segment_request(old).job_kind)
        with clients.acting_as(second_client):
            model.predict([_data(**new)])
    if superseded:
        wait_until(lambda: old_job.state == progressive.CANCELLED, "the superseded job to stop")
        assert shared.cached_segments(lm.format_prompt(PROMPT, chat=False), TARGET, inputs.segment_request(old)) is None
    else:
        wait_until(lambda: old_job.state in (progressive.DONE, progressive.CANCELLED), "the first job to end")
        assert old_job.state == progressive.DONE, old_job.cancel_reason
    with clients.acting_as(second_client):
        assert _until_done(model, **new)[fields.SEGMENTS]["granularity"] == "sentence"


def test_a_segment_job_does_not_wait_for_a_matrix_job_to_end(tiny):
    """Its own lane: it finishes while a job of the default lane (the per-token matrices) still runs."""
    lm, shared, model = tiny
    shared.forget_salience()
    release = threading.Event()
    matrices = shared.jobs.submit(inputs.datapoint_group(_data()), "grad", lambda job: release.wait(120))
    try:
        wait_until(lambda: matrices.state == progressive.RUNNING, "the matrix job to start")
        out = _until_done(model, **{fields.SEGMENT_METHOD: leave_one_out.NAME, fields.GRANULARITY: "line"})
        assert out[fields.SEGMENTS]["granularity"] == "line" and matrices.state == progressive.RUNNING
    finally:
        release.set()
    wait_until(lambda: matrices.state == progressive.DONE, "the matrix job to end")


def test_no_removable_segments_is_a_request_error_naming_the_fields(tiny):
    _, _, model = tiny
    data = {fields.SEGMENT_METHOD: leave_one_out.NAME, fields.GRANULARITY: "regex", fields.PATTERN: "zqzqzq"}
    with pytest.raises(errors.RequestError) as e:
        _until_done(model, **data)
    message = str(e.value)
    assert f'"{fields.GRANULARITY}": "regex"' in message and f'"{fields.PATTERN}"' in message
    assert "no removable" in message and "Fix:" in message


@pytest.mark.parametrize("pattern,target,says", [
    pytest.param("zqzqzq", TARGET, "no removable", id="matches-nothing"),
    pytest.param(r"(a|a)+$", TARGET, "simplify the pattern", id="runaway"),
    pytest.param(r"(a|a)+$", "", "simplify the pattern", id="runaway-before-the-response"),
])
def test_a_bad_pattern_is_the_first_requests_400_while_another_client_holds_the_model(tiny, pattern, target, says):
    """Issue 43: a script's first segment request (nothing computed for the prompt: no first highlight, no greedy
    response) with a pattern that matches nothing or backtracks past its budget: its job waited for the model, ran
    the unedited forward, and only then refused it (19 s at load 13). Now the request itself is refused, from the
    pair's tokens (the prompt's text alone while the response is not generated), while another client holds the
    model; no job is started."""
    _, shared, model = tiny
    shared.forget_salience()
    assert matchers_idle(10)  # a runaway case before ends at the `regex` package's limit, after its 400
    prompt = "a" * 40 + "!"  # (a|a)+$ backtracks about 2^40 steps on it
    data = {"prompt": prompt, "target": target, "chat": False, fields.DETAIL: DETAIL,
            fields.SEGMENT_METHOD: leave_one_out.NAME, fields.GRANULARITY: "regex", fields.PATTERN: pattern}
    held, release = threading.Event(), threading.Event()

    def other_client() -> None:
        with clients.acting_as("tab-b"), shared.lock:
            held.set()
            release.wait(120)

    holder = threading.Thread(target=other_client)
    holder.start()
    try:
        assert held.wait(60)
        with pytest.raises(errors.RequestError) as e:
            model.predict([data])  # was: a "queued" status; the 400 came from a later poll, after the model was free
        assert shared.lock.locked()  # still held by the other client throughout
    finally:
        release.set()
        holder.join(60)
    message = str(e.value)
    assert says in message and f'"{fields.PATTERN}"' in message and "\n" not in message
    assert shared.jobs.get(inputs.datapoint_group(data), inputs.segment_request(data).job_kind) is None
    assert shared.cached_generation(shared.format_prompt(data)) is None or target  # nothing generated for it


def test_a_pattern_not_tried_while_other_matches_run_is_a_503_naming_the_field_and_saying_to_retry(tiny, monkeypatch):
    """Issue 43: while runaway matches hold every matcher slot (aggregate.match_spans), a segment request's pattern is
    not tried: the answer is 503 (the server is busy, the input is not wrong) naming the pattern field and saying to
    send it again, with Retry-After (lit_app/edge/security.py sends it), and no job starts."""
    _, shared, model = tiny
    shared.forget_salience()

    def busy(pattern, _text, *_args, **_kwargs):
        raise PatternBusy(f"regex pattern {pattern!r} was not tried: busy. Fix: send the request again in a second.")

    monkeypatch.setattr(salience_runs, "match_spans", busy)
    data = {"prompt": PROMPT, "target": "", "chat": False, fields.DETAIL: DETAIL,
            fields.SEGMENT_METHOD: leave_one_out.NAME, fields.GRANULARITY: "regex", fields.PATTERN: r"\w+"}
    with pytest.raises(errors.RequestError) as e:
        model.predict([data])
    assert e.value.status == 503 and f'"{fields.PATTERN}"' in str(e.value) and "again" in str(e.value), e.value
    assert e.value.retry_after_s == 1  # the page's request guard sends it again after that
    assert shared.jobs.get(inputs.datapoint_group(data), inputs.segment_request(data).job_kind) is None


# ---------------------------------------------------------------------------
# The explain wrapper: the curves take segment methods, the token-only tests name the field.


def test_explain_curves_take_a_segment_method_and_equal_the_library(tiny):
    lm, shared, _ = tiny
    model = lit_explain.ExplainModel(shared)
    data = {"prompt": PROMPT, "target": TARGET, "chat": False, lit_explain.ACTION: "curves",
            lit_explain.METHODS: f"grad_norm,{leave_one_out.NAME}", lit_explain.STEPS: 4}
    out = model.predict([data])[0][lit_explain.EXPLAIN]
    assert out["methods"] == ["grad_norm", leave_one_out.NAME]
    want = ex.faithfulness_curves(lm, ex.CurvesRequest(
        lm.format_prompt(PROMPT, chat=False), TARGET, ("grad_norm", leave_one_out.NAME),
        config=ex.FaithfulnessConfig(granularity="sentence", steps=4, removal="filler")))
    for mode, by_name in want.curves.items():
        np.testing.assert_allclose(out["curves"][leave_one_out.NAME][mode]["logprobs"],
                                   by_name[leave_one_out.NAME].logprobs, rtol=1e-5, atol=1e-9)
    with pytest.raises(errors.RequestError, match=f'"{lit_explain.METHODS}" names the segment method'):
        model.predict([{**data, lit_explain.ACTION: "reduce", lit_explain.METHODS: leave_one_out.NAME}])


@contextlib.contextmanager
def estimator_server(tmp_path):
    """(tiny Llama, the AblationConfig of a saved random estimator of it, a SharedLM with that config, PROMPT
    formatted); its jobs cancelled at the end."""
    lm = wrap(tiny_llama(seed=0), "llama")
    _, config = saved_random_estimator(lm, tmp_path / "e.npz", seed=5)
    shared = shared_model.SharedLM(lm, max_new_tokens=4, disk_cache=False, ablation_config=config)
    try:
        yield lm, config, shared, lm.format_prompt(PROMPT, chat=False)
    finally:
        shared.jobs.cancel_all()


def test_attention_verified_reads_the_first_highlights_gradient_not_a_backward_of_its_own(tmp_path, monkeypatch):
    """The server hands a segment job the cached result of the pair that holds the span's gradient norm (the first
    highlight): attention_verified orders its candidates by it, with the same values as the library computing it."""
    with estimator_server(tmp_path) as (lm, config, shared, chat):
        want = segment_salience(lm, chat, TARGET, attention_verified.NAME, granularity="sentence", config=config)
        shared.quick(chat, TARGET, 0, None)  # the first highlight of the whole response

        def no_backward(*args, **kwargs):
            raise AssertionError("attention_verified ran a backward although the first highlight had the span")

        monkeypatch.setattr(engine, "compute_span_salience", no_backward)
        request = inputs.SegmentRequest(attention_verified.NAME, "sentence", None, "filler", None, 0)
        got = shared.segment_salience(chat, TARGET, request)
        np.testing.assert_allclose(got.values, want.values, rtol=1e-6, atol=1e-9)
        np.testing.assert_array_equal(got.measured_mask(), want.measured_mask())


def test_the_confirming_leave_one_out_scores_only_what_the_first_map_did_not_verify(tmp_path):
    """After attention_verified (the first map), the server's leave-one-out job takes the verified segments' exact
    values from its cached result and scores only the others (its rows, the job's progress unit, count them); its
    values equal the library's full leave one out."""
    with estimator_server(tmp_path) as (lm, config, shared, chat):
        want = segment_salience(lm, chat, TARGET, leave_one_out.NAME, granularity="word", config=config)
        first = shared.segment_salience(chat, TARGET, inputs.SegmentRequest(
            attention_verified.NAME, "word", None, "filler", None, 0))
        verified = int(first.measured_mask().sum())
        S = len(want.segments)
        assert 0 < verified < S
        got = shared.segment_salience(chat, TARGET, inputs.SegmentRequest(
            leave_one_out.NAME, "word", None, "filler", None, 0))
        np.testing.assert_allclose(got.values, want.values, rtol=0, atol=1e-5)
        assert got.stats.rows - 1 == S - verified  # the ablated prompts scored: the unverified segments only
        # the cost the record and the status line count: only what ran (was: one forward per segment)
        assert leave_one_out.rows(S, config, verified) == S - verified and got.quality["reused"] == verified
        # Another removal has no first map of its settings: every segment scored.
        deleted = shared.segment_salience(chat, TARGET, inputs.SegmentRequest(
            leave_one_out.NAME, "word", None, "delete", None, 0))
        assert deleted.stats.rows - 1 == S


def test_a_leave_one_out_job_hears_its_rows_known_cost(tmp_path):
    """Issue 43 (session 34): the server's segment job gets each progress report's known cost (the positions the rows
    recompute; time_left.py estimates from it besides the rows), the library's own from the scorer."""
    with estimator_server(tmp_path) as (lm, config, shared, chat):
        want = []
        segment_salience(lm, chat, TARGET, leave_one_out.NAME, granularity="word", config=config,
                         progress=costed(lambda *a, cost: want.append(cost)))
        job = progressive.Job(group="g", kind="loo", run=lambda _job: None)
        job.start()
        heard, report = [], job.report

        def spy(*a, **kw):
            heard.append(kw.get("cost"))
            report(*a, **kw)

        job.report = spy
        shared.segment_salience(chat, TARGET, inputs.SegmentRequest(leave_one_out.NAME, "word", None, "filler", None, 0),
                                job=job)
        assert heard and all(c is not None for c in heard), heard  # was: rows only
        assert heard[-1] == (want[-1].total, want[-1].total) and want[-1].done == want[-1].total


def test_the_first_maps_job_holds_the_model_as_a_user_job_ahead_of_the_matrices(monkeypatch):
    """The first map's segment job (the method the registry names at its granularity) acquires the model at
    USER_JOB, so the page's per-token matrices (BACKGROUND, started by the same first highlight) do not take every
    other slice from it; any other segment job stays background work."""
    from lit_app.model import salience_runs
    from lit_app.model.scheduler import Priority

    monkeypatch.setattr(salience_runs, "FIRST_MAP_METHOD", {"sentence": leave_one_out.NAME, "word": None})
    lm = wrap(tiny_llama(seed=0), "llama")
    shared = shared_model.SharedLM(lm, max_new_tokens=4, disk_cache=False)
    seen: list[Priority] = []
    acquire = shared.lock.acquire

    def spy(priority=Priority.INTERACTIVE, *args, **kwargs):
        seen.append(priority)
        return acquire(priority, *args, **kwargs)

    monkeypatch.setattr(shared.lock, "acquire", spy)
    chat = lm.format_prompt(PROMPT)
    for granularity in ("sentence", "word"):
        seen.clear()
        shared.segment_salience(chat, TARGET, inputs.SegmentRequest(leave_one_out.NAME, granularity, None, "filler",
                                                                    None, 0))
        assert seen[-1] == (Priority.USER_JOB if granularity == "sentence" else Priority.BACKGROUND), (granularity, seen)


def test_the_first_maps_first_answer_brings_its_estimate_then_the_verified_map(tmp_path, monkeypatch):
    """Issue 42 (session 37): the first map's segment request (attention_verified at sentence, the registry's first
    map) answers, while its job verifies, the values so far (`partial_segments`): first the estimate (learned
    attention attribution's values as the library computes them, nothing measured), in the very answer that starts
    the job; once done, the verified map as the library computes it, and no partial beside it."""
    from lit_app.serving import model_group

    assert method_registry.FIRST_MAP_METHOD["sentence"] == attention_verified.NAME
    assert method_registry.FIRST_LOOK_METHOD["sentence"] == attention_verified.METHOD.first_look
    gate = threading.Event()
    verify = attention_verified.verify

    def held(*args, **kwargs):  # verification waits until the test has read the first answer
        assert gate.wait(30), "the test never let the verification go"
        return verify(*args, **kwargs)

    with estimator_server(tmp_path) as (lm, config, shared, chat):
        estimate = segment_salience(lm, chat, TARGET, "attention_attribution", granularity="sentence", config=config)
        want = segment_salience(lm, chat, TARGET, attention_verified.NAME, granularity="sentence", config=config)
        monkeypatch.setattr(attention_verified, "verify", held)
        shared.quick(chat, TARGET, 0, None)  # the first highlight of the whole response
        model = model_group.lit_models(shared, "tiny")["_tiny_salience"]
        ask = {fields.SEGMENT_METHOD: attention_verified.NAME}
        first = model.predict([_data(**ask)])[0][fields.SALIENCE]
        assert first["detail"]["state"] in ("queued", "running") and fields.SEGMENTS not in first, first["detail"]
        partial = first[fields.PARTIAL_SEGMENTS]
        assert partial["method"] == attention_verified.NAME and partial["spans"] == [list(s) for s in want.segments]
        np.testing.assert_allclose(partial["values"], estimate.values, rtol=1e-5, atol=1e-9)  # 6 digits (compact)
        assert partial["measured"] == [False] * len(want.segments) and partial["quality"]["verified"] == 0
        gate.set()
        done = _until_done(model, **ask)
        np.testing.assert_allclose(done[fields.SEGMENTS]["values"], want.values, rtol=1e-5, atol=1e-9)
        S = len(want.segments)
        assert done[fields.SEGMENTS].get("measured", [True] * S) == want.measured_mask().tolist()
        assert fields.PARTIAL_SEGMENTS not in done


def test_no_first_look_where_the_rule_names_none(tmp_path, monkeypatch):
    """Where method_registry.FIRST_LOOK_METHOD names no first look at the granularity (its held-out figures worse than
    the gradient's there), the first map's job answers no values so far and its request does not wait for them."""
    from lit_app.model import salience_runs
    from lit_app.serving import model_group
    from lit_app.wrappers import salience as lit_salience

    monkeypatch.setattr(salience_runs, "FIRST_LOOK_METHOD", {"sentence": None})
    monkeypatch.setattr(lit_salience, "FIRST_LOOK_WAIT_S", 30.0)  # a wait would show as a slow first answer
    gate = threading.Event()
    verify = attention_verified.verify
    monkeypatch.setattr(attention_verified, "verify", lambda *a, **k: (gate.wait(30), verify(*a, **k))[1])
    with estimator_server(tmp_path) as (lm, config, shared, chat):
        shared.quick(chat, TARGET, 0, None)
        model = model_group.lit_models(shared, "tiny")["_tiny_salience"]
        ask = {fields.SEGMENT_METHOD: attention_verified.NAME}
        start = time.monotonic()
        first = model.predict([_data(**ask)])[0][fields.SALIENCE]
        assert time.monotonic() - start < 10 and fields.PARTIAL_SEGMENTS not in first, first["detail"]
        gate.set()
        done = _until_done(model, **ask)
        assert fields.PARTIAL_SEGMENTS not in done and fields.SEGMENTS in done


def test_the_word_buttons_job_answers_its_estimate_then_each_batch_with_its_stage(tmp_path, monkeypatch):
    """Issue 42 (session 39): the word button's method (word_verified, method_registry.REQUEST_SEGMENT_METHOD at word)
    answers, while its job runs, its values so far (`partial_segments`): first the estimate of every word (nothing
    measured) in the answer that starts the job, then, after its first batch, that batch's words measured, with the
    job's stage "batch 1 of 2" counting toward the whole budget; once done, the library's map, no partial beside it."""
    from lit_app.serving import model_group
    from sequence_salience.methods import word_verified

    assert method_registry.REQUEST_SEGMENT_METHOD["word"] == word_verified.NAME
    long_prompt = PROMPT.replace("\nHow", " Dan has four pears. Eve has one pear and two plums. Fay has six figs.\nHow")
    gates = [threading.Event(), threading.Event()]
    select = word_verified.select

    def held(first, n, measure, *args, **kwargs):  # each batch waits until the test has read the answer before it
        def gated(words):
            assert gates[0].wait(30) if not gates[0].is_set() else gates[1].wait(30), "the test never let it go"
            return measure(words)

        return select(first, n, gated, *args, **kwargs)

    with estimator_server(tmp_path) as (lm, config, shared, _):
        chat = lm.format_prompt(long_prompt, chat=False)
        estimate = segment_salience(lm, chat, TARGET, "attention_attribution", granularity="word", config=config)
        want = segment_salience(lm, chat, TARGET, word_verified.NAME, granularity="word", config=config)
        S = len(want.segments)
        n = word_verified.budget(S)
        n1 = word_verified.first_batch(n)
        assert 0 < n1 < n < S, (n1, n, S)  # two batches on this prompt
        monkeypatch.setattr(word_verified, "select", held)
        shared.quick(chat, TARGET, 0, None)  # the first highlight of the whole response
        model = model_group.lit_models(shared, "tiny")["_tiny_salience"]
        ask = {"prompt": long_prompt, fields.SEGMENT_METHOD: word_verified.NAME, fields.GRANULARITY: "word"}
        every = {**ask, fields.SEGMENT_METHOD: leave_one_out.NAME}  # the page's "Measure each word" button
        assert _known(model, **every) is None  # nothing measured yet
        first = model.predict([_data(**ask)])[0][fields.SALIENCE]
        assert fields.SEGMENTS not in first, first["detail"]
        partial = first[fields.PARTIAL_SEGMENTS]
        assert partial["method"] == word_verified.NAME and partial["measured"] == [False] * S
        np.testing.assert_allclose(partial["values"], estimate.values, rtol=1e-5, atol=1e-9)  # the estimate itself
        assert partial["coarse_granularity"] == ["estimate"] * S
        gates[0].set()  # the first batch runs; the second waits

        def batch_one() -> bool:
            out = model.predict([_data(**ask)])[0][fields.SALIENCE]
            seen["out"] = out
            return sum(out.get(fields.PARTIAL_SEGMENTS, {}).get("measured", [])) == n1

        seen: dict = {}
        wait_until(batch_one, "the first batch's values so far")
        detail = seen["out"]["detail"]
        assert (detail["stage"], detail["done"], detail["total"]) == ("batch 1 of 2", n1, n)
        gates[1].set()
        done = _until_done(model, **ask)
        np.testing.assert_allclose(done[fields.SEGMENTS]["values"], want.values, rtol=1e-5, atol=1e-9)
        assert done[fields.SEGMENTS]["measured"] == want.measured_mask().tolist()
        assert sum(done[fields.SEGMENTS]["measured"]) == n
        assert fields.PARTIAL_SEGMENTS not in done
        # Another page asks how many words leave one word out would take from it: the button's n, by its method's
        # name; at another granularity none. The question starts no job.
        assert _known(model, **every) == {"method": word_verified.NAME, "measured": n}
        assert _known(model, **{**every, fields.GRANULARITY: "sentence"}) is None
        asked = _data(**every)
        assert shared.jobs.get(inputs.datapoint_group(asked), inputs.segment_request(asked).job_kind) is None
        # Leave one word out itself, measured (by this page or another): a fresh page is told every word is known,
        # by leave one out's own name, so its button states no forward (was: the button's n, and S - n + 1 stated
        # while nothing ran).
        measured = _until_done(model, **every)[fields.SEGMENTS]
        assert len(measured["values"]) == S
        assert _known(model, **every) == {"method": leave_one_out.NAME, "measured": S}
