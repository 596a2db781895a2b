"""The Inside-the-model LIT wrappers (lit_app/wrappers/inside.py) over a tiny random Llama: inputs, payloads, errors."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time

import numpy as np
import pytest

from sequence_salience import inside
from lit_app import errors
from lit_app.schema import fields
from lit_app.model import shared_model
from lit_app.wrappers import inside as lit_inside
from tests.unit.tiny_models import tiny_llama, tiny_tokenizer, wrap

PROMPT, TARGET = "The capital of France is", " Paris. The capital"


@pytest.fixture(scope="module")
def wrappers():
    lm = wrap(tiny_llama(seed=0), "llama")
    shared = shared_model.SharedLM(lm, max_new_tokens=4)
    return lm, lit_inside.make_inside_models(shared, "tiny")


def _one(wrapper, **data):
    return wrapper.predict([data])[0]


@pytest.mark.parametrize("value,expected", [
    pytest.param("", [], id="empty"),
    pytest.param(None, [], id="none"),
    pytest.param('[{"layer": 1, "index": 3, "mode": "on"}]', [inside.Intervention(1, 3, "on")], id="json"),
    pytest.param([[0, 2]], [inside.Intervention(0, 2, "off")], id="pair"),
])
def test_parse_interventions(value, expected):
    assert lit_inside.parse_interventions(value) == expected


@pytest.mark.parametrize("value,match", [
    pytest.param("[{", "not JSON", id="json"),
    pytest.param('{"layer": 1}', "must be a JSON list", id="object"),
    pytest.param(json.dumps([[0, i] for i in range(65)]), "at most 64", id="too-many"),
])
def test_parse_interventions_errors(value, match):
    with pytest.raises(errors.RequestError, match=match):
        lit_inside.parse_interventions(value)


def test_trace_wrapper_matches_the_library(wrappers):
    lm, lit = wrappers
    trace_model = lit["_tiny_inside_trace"]
    out = _one(trace_model, prompt=PROMPT, target=TARGET, inside_t=2)[lit_inside.TRACE]
    ref = inside.trace(lm, PROMPT, TARGET, t=2, config=lit_inside.TRACE_CONFIG)
    assert out["t"] == 2 and out["n_targets"] == len(tiny_tokenizer()(TARGET, add_special_tokens=False)["input_ids"])
    assert out["target_id"] == ref.target_id and out["position"] == ref.position
    assert [l["after"]["target_rank"] for l in out["layers"]] == ref.ranks()
    json.dumps(out)  # JSON-able as LIT sends it
    # Under an intervention, the trace wrapper follows apply_interventions.
    off = _one(trace_model, prompt=PROMPT, target=TARGET, inside_t=2,
               interventions='[{"layer": 1, "index": 5, "mode": "off"}]')[lit_inside.TRACE]
    with inside.apply_interventions(lm, [(1, 5, "off")]):
        ref_off = inside.trace(lm, PROMPT, TARGET, t=2, config=lit_inside.TRACE_CONFIG)
    assert off["output"]["probs"] == pytest.approx(list(ref_off.output.probs), rel=1e-9)
    assert inside.count_hooks(lm.model) == 0


def test_intervene_wrapper_payload(wrappers):
    lm, lit = wrappers
    out = _one(lit["_tiny_inside_intervene"], prompt=PROMPT, target=TARGET, inside_t=1,
               interventions='[{"layer": 0, "index": 1, "mode": "on", "scope": "position"}]')[lit_inside.INTERVENTION]
    # Resolved as the library does it: LM-Debugger's constant of layer 0 at the traced position.
    (want,) = inside.resolve(lm, inside.locate(lm, PROMPT, TARGET, t=1), [(0, 1, "on", "position")])
    assert out["interventions"] == [{"layer": 0, "index": 1, "mode": "on", "scope": "position",
                                     "value": pytest.approx(want.value, rel=1e-6), "position": want.position}]
    after = inside.intervened_trace(lm, inside.locate(lm, PROMPT, TARGET, t=1), [want],
                                    lit_inside.TRACE_CONFIG)
    assert out["after"]["trace"]["output"]["probs"] == pytest.approx(list(after.output.probs), rel=1e-6)
    for side in ("before", "after"):
        assert set(out[side]) >= {"trace", "generation", "top_salient", "salience_method", "salience_total"}
        assert "salience" not in out[side] and "tokens" not in out[side]  # big arrays stay on the server
        assert out[side]["trace"]["t"] == 1
    json.dumps(out)
    assert inside.count_hooks(lm.model) == 0


def test_wrapper_errors_are_one_line_request_errors(wrappers):
    _, lit = wrappers
    with pytest.raises(errors.RequestError, match="inside_t.* is 99 but the response has"):
        _one(lit["_tiny_inside_trace"], prompt=PROMPT, target=TARGET, inside_t=99)
    with pytest.raises(errors.RequestError, match="whole number"):
        _one(lit["_tiny_inside_trace"], prompt=PROMPT, target=TARGET, inside_t=1.5)
    with pytest.raises(errors.RequestError, match="No interventions"):
        _one(lit["_tiny_inside_intervene"], prompt=PROMPT, target=TARGET, inside_t=0)
    with pytest.raises(errors.RequestError, match="listed twice"):
        _one(lit["_tiny_inside_intervene"], prompt=PROMPT, target=TARGET,
             interventions=[[0, 1, "off"], [0, 1, "on"]])
    with pytest.raises(errors.RequestError, match="search text is empty"):
        _one(lit["_tiny_inside_search"], query="  ")


def test_search_wrapper_starts_the_index_and_reports_progress(wrappers, monkeypatch, tmp_path):
    monkeypatch.setenv("SEQUENCE_SALIENCE_CACHE", str(tmp_path))
    _, lit = wrappers
    search = lit["_tiny_inside_search"]
    first = _one(search, query="is", limit=5)[lit_inside.SEARCH]
    assert first["index"]["kind"] == "value_index" and first["index"]["state"] in ("queued", "running", "done")
    assert [t for _, t in first["tokens"]] == ["is", " is"]
    assert search.state.index.wait(timeout_s=120)
    done = _one(search, query="is", limit=5)[lit_inside.SEARCH]
    assert done["index"] == search.state.index.status().to_json()  # the build's job status, its wire form
    assert done["index"]["state"] == "done" and done["index"]["stage"] == "building"
    assert done["index"]["done"] == done["index"]["total"] == done["layers_searched"] == done["num_layers"] == 2
    assert len(list(tmp_path.glob("value_index/*"))) == 1  # written to the cache directory
    # Independent count from the built index: every (layer, value, rank) whose top-k holds a query token.
    # "is" and " is" are single tokens of the tiny vocabulary, so the answer cannot be empty.
    lm = search.shared.lm
    snapshot = search.state.index.snapshot()
    ids = [i for i, _ in first["tokens"]]
    assert done["total"] == int(np.isin(snapshot.top_ids, ids).sum()) > 0
    assert len(done["hits"]) == min(5, done["total"])
    assert all(int(snapshot.top_ids[h["layer"], h["index"], h["rank"]]) in ids for h in done["hits"])
    # Ranked by the projection score over every value: the library's answer, no index needed.
    proj = _one(search, query="is", limit=5, ranking="projection")[lit_inside.SEARCH]
    want = inside.search_by_projection(lm, "is", limit=5)
    assert len(want.hits) == 5  # every value is ranked: a full page
    assert proj["ranking"] == "projection" and [(h["layer"], h["index"]) for h in proj["hits"]] == \
        [(h.layer, h.index) for h in want.hits]
    with pytest.raises(errors.RequestError, match="ranking"):
        _one(search, query="is", ranking="best")


# ------------------------------------------------------------ the intervention run in steps

IVS = [{"layer": 1, "index": 5, "mode": "off"}, {"layer": 0, "index": 2, "mode": "on"}]


def test_run_equals_the_library_and_reuses_the_plain_trace(wrappers):
    lm, lit = wrappers
    shared = lit["_tiny_inside_intervene"].shared
    chat = shared.format_prompt({"prompt": PROMPT})
    ex = dict(prompt=PROMPT, target=TARGET, inside_t=1, interventions=json.dumps(IVS))
    plain = _one(lit["_tiny_inside_trace"], **{**ex, "interventions": ""})[lit_inside.TRACE]
    out = _one(lit["_tiny_inside_intervene"], **ex)[lit_inside.INTERVENTION]
    config = inside.InterventionConfig(trace=lit_inside.TRACE_CONFIG, generation=shared.generation_config,
                                       top_salient=lit_inside.TOP_SALIENT)
    ref = inside.intervene(lm, chat, IVS, TARGET, t=1, config=config)
    assert out["before"]["trace"] == plain  # the trace wrapper's trace, not a second pass
    assert [s["name"] for s in out["steps"]] == ["trace", "generate", "salience"]
    assert [s["state"] for s in out["steps"]] == ["done"] * 3
    assert out["steps"][0]["before"] == "cached"
    assert out["steps"][2]["before"] == "computed"  # no salience request came first
    for side in ("before", "after"):
        got, want = out[side], getattr(ref, side)
        assert got["trace"]["output"]["probs"] == pytest.approx(list(want.trace.output.probs), rel=1e-9)
        assert got["generation"] == {"text": want.generation.text, "stopped_by": want.generation.stopped_by}
        assert [x[:2] for x in got["top_salient"]] == [list(x[:2]) for x in want.top_salient]
        assert [x[2] for x in got["top_salient"]] == pytest.approx([x[2] for x in want.top_salient], rel=1e-4)
    assert _one(lit["_tiny_inside_intervene"], inside_action="status")[lit_inside.INTERVENTION]["job"] is None
    assert inside.count_hooks(lm.model) == 0


class _Pause:
    """A forward hook on the model's last norm (the test's own, not a mock) that holds the run at a chosen
    point (`when(status)` true) until the test lets it go; meanwhile the test polls and cancels."""

    def __init__(self, lm, wrapper, when):
        self.wrapper, self.when = wrapper, when
        self.reached, self.gate = threading.Event(), threading.Event()
        self.handle = lm.model.model.norm.register_forward_hook(self)

    def __call__(self, *_):
        status = self.wrapper.jobs.status()
        if status is not None and not self.reached.is_set() and self.when(status):
            self.reached.set()
            assert self.gate.wait(60)


def test_status_shows_the_probabilities_then_the_streamed_text_and_cancel_stops_the_run(wrappers):
    lm, lit = wrappers
    run = lit["_tiny_inside_intervene"]
    ex = dict(prompt=PROMPT, target=TARGET, inside_t=1, interventions=json.dumps(IVS))
    chat = run.shared.format_prompt({"prompt": PROMPT})
    reference = inside.intervened_generation(lm, chat, IVS, run.shared.generation_config,
                                              at=inside.locate(lm, chat, TARGET, t=1))
    assert len(reference.ids) >= 3, "the tiny model's response is too short for this test"
    pause = _Pause(lm, run, lambda s: s["stage"] == "generate" and s["done"] >= 2)
    answer: list = []
    worker = threading.Thread(target=lambda: answer.append(_one(run, **ex)[lit_inside.INTERVENTION]))
    worker.start()
    try:
        assert pause.reached.wait(60), "the run never reached its second generated token"
        status = _one(run, inside_action="status")[lit_inside.INTERVENTION]["job"]
        assert status["stage"] == "generate" and status["done"] == 2
        steps = status["partial"]["steps"]
        assert [s["state"] for s in steps] == ["done", "running", "pending"]
        after = status["partial"]["after"]
        assert after["trace"]["output"]["probs"]  # the probabilities came before the text
        assert after["generation"]["text"] == lm.tokenizer.decode(list(reference.ids[:2]))
        assert "top_salient" not in after
        assert _one(run, inside_action="cancel")[lit_inside.INTERVENTION]["cancelled"] is True
    finally:
        pause.gate.set()
        worker.join(60)
        pause.handle.remove()
    assert answer[0]["cancelled"] is True and answer[0]["partial"]["steps"][2]["state"] == "pending"
    assert inside.count_hooks(lm.model) == 0  # the interventions' hooks are gone
    assert _one(run, inside_action="status")[lit_inside.INTERVENTION]["job"] is None
    assert _one(run, inside_action="cancel")[lit_inside.INTERVENTION]["cancelled"] is False
    with pytest.raises(errors.RequestError, match="inside_action.*use one of run, status, cancel"):
        _one(run, inside_action="stop")
    # The model serves again, plain: a new run completes.
    assert "cancelled" not in _one(run, **ex)[lit_inside.INTERVENTION]


def _blocked(thread: threading.Thread) -> bool:
    """Whether `thread` waits on a condition (the model lock) right now."""
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == "wait" and frame.f_code.co_filename.endswith("threading.py"):
            return True
        frame = frame.f_back
    return False


def test_a_trace_requested_during_the_generation_runs_between_tokens_on_the_plain_model(wrappers):
    lm, lit = wrappers
    run, trace_model = lit["_tiny_inside_intervene"], lit["_tiny_inside_trace"]
    ex = dict(prompt=PROMPT, target=TARGET, inside_t=1, interventions=json.dumps(IVS))
    plain = _one(trace_model, prompt=PROMPT, target=TARGET, inside_t=2)[lit_inside.TRACE]
    chat = run.shared.format_prompt({"prompt": PROMPT})
    n = len(inside.intervened_generation(lm, chat, IVS, run.shared.generation_config,
                                              at=inside.locate(lm, chat, TARGET, t=1)).ids)
    assert n == run.shared.generation_config.max_new_tokens == 4, "the test needs the run to generate 4 tokens"
    pause = _Pause(lm, run, lambda s: s["stage"] == "generate" and s["done"] >= 1)
    answer, traced = [], []
    worker = threading.Thread(target=lambda: answer.append(_one(run, **ex)[lit_inside.INTERVENTION]))
    clicker = threading.Thread(target=lambda: traced.append(
        (_one(trace_model, prompt=PROMPT, target=TARGET, inside_t=2)[lit_inside.TRACE], run.jobs.status())))
    worker.start()
    try:
        assert pause.reached.wait(60), "the run never reached its second generated token"
        clicker.start()  # a click while the run holds the model, computing token 2
        deadline = time.monotonic() + 60
        while not _blocked(clicker) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _blocked(clicker), "the trace request never waited for the model"
    finally:
        pause.gate.set()
        clicker.join(60)
        worker.join(60)
        pause.handle.remove()
    trace_out, status_then = traced[0]
    # Served between two tokens, not after the generation (the trace request takes the lock twice:
    # to locate the token, then to trace it; the run yields after every token).
    assert status_then["stage"] == "generate" and 2 <= status_then["done"] < n, status_then
    # The plain model: the interventions' hooks were off meanwhile.
    assert {k: v for k, v in trace_out.items() if k != "seconds"} == {k: v for k, v in plain.items() if k != "seconds"}
    assert answer[0]["after"]["generation"]["text"] == lm.tokenizer.decode(
        list(inside.intervened_generation(lm, chat, IVS, run.shared.generation_config,
                                              at=inside.locate(lm, chat, TARGET, t=1)).ids))
    assert inside.count_hooks(lm.model) == 0


def test_the_before_salience_comes_from_the_salience_modules_first_highlight(wrappers):
    """A whole-response span cached with other IG/SmoothGrad counts (as the salience module asks) is reused."""
    lm, _ = wrappers
    shared = shared_model.SharedLM(lm, max_new_tokens=4, disk_cache=False)
    run = lit_inside.make_inside_models(shared, "tiny")["_tiny_inside_intervene"]
    chat = shared.format_prompt({"prompt": PROMPT})
    gen = shared.generate(chat)
    assert shared.cached_span(chat, "", "grad_x_input") is None
    # The first highlight, IG and SmoothGrad on.
    first = shared.quick(chat, "", 0, None, {fields.IG_STEPS: 2, fields.SMOOTH_GRAD_SAMPLES: 2})
    cached = shared.cached_span(chat, "", "grad_x_input")
    assert cached is not None and np.array_equal(cached, first.span_salience("grad_x_input"))
    assert shared.cached_span(chat, "", "grad_x_input", 0, 1) is None  # another span is not answered
    out = _one(run, prompt=PROMPT, inside_t=0, interventions=json.dumps(IVS))[lit_inside.INTERVENTION]
    assert out["steps"][2]["before"] == "cached"
    ref = inside.response_salience(lm, chat, gen, "grad_x_input", lit_inside.TOP_SALIENT)  # recomputed
    assert [x[:2] for x in out["before"]["top_salient"]] == [list(x[:2]) for x in ref.top_salient]
    assert [x[2] for x in out["before"]["top_salient"]] == pytest.approx([x[2] for x in ref.top_salient], rel=1e-4)


def test_the_run_is_logged_while_status_still_finds_it(wrappers, caplog):
    """'inside intervene: ... done' is written before the run leaves the job table: a status of None means the line
    is in the log (tests/integration/test_disconnect.py waits for None; CI once read the log in between)."""
    _, lit = wrappers
    run = lit["_tiny_inside_intervene"]
    lines: list[tuple[str, dict | None]] = []

    class AtTheLine(logging.Handler):  # what a poll would have read at the moment the line was written
        def emit(self, record: logging.LogRecord) -> None:
            lines.append((record.getMessage(), run.jobs.status()))

    probe = AtTheLine()
    caplog.set_level(logging.INFO, logger=lit_inside.logger.name)
    lit_inside.logger.addHandler(probe)
    try:
        _one(run, prompt=PROMPT, target=TARGET, inside_t=1, interventions=json.dumps(IVS))
    finally:
        lit_inside.logger.removeHandler(probe)
    outcome = [(line, status and status["action"]) for line, status in lines if line.startswith("inside intervene:")]
    assert len(outcome) == 1 and " done at " in outcome[0][0] and outcome[0][1] == "run", lines
