"""The explain LIT wrapper (lit_app/wrappers/explain.py) over a tiny random Llama: payloads equal the
library's, and `status` reports a running test's progress as units done / total.

Progress is observed deterministically through the shared model scheduler: a watcher thread is always
queued for the model lock behind the running test, so every progress call (which yields the lock
to waiting requests) lets a watcher read `status`.
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import pytest

from sequence_salience import explain as ex
from sequence_salience.methods.base import SalienceConfig
from lit_app import errors
from lit_app.model import shared_model
from lit_app.wrappers import explain as lit_explain
from tests.frontend_source import SRC
from tests.unit.tiny_models import tiny_llama, wrap
from tests.unit.waiting import wait_until

PROMPT, TARGET, FOIL = "The capital of France is", " Paris.", " Rome and"


@pytest.fixture(scope="module")
def tiny():
    lm = wrap(tiny_llama(seed=0), "llama")
    shared = shared_model.SharedLM(lm, max_new_tokens=4, salience_config=SalienceConfig(ig_steps=4, ig_step_chunk_size=1))
    return lm, shared, lit_explain.ExplainModel(shared)


def _data(**extra):
    return {"prompt": PROMPT, "target": TARGET, "chat": False, **extra}


def _one(model, **extra):
    return model.predict([_data(**extra)])[0][lit_explain.EXPLAIN]



def watch(shared, model, request: dict, on_status=None) -> tuple[dict, list[dict]]:
    """Runs `request` on `model` and reads `status` at every progress call of the running test.

    A chain of watcher threads: each one, holding the model lock, queues the next watcher before
    it lets go (the first one waits until the request has queued for the test itself), so whenever the test yields the lock at a progress call (ModelScheduler.yield_to_waiting),
    a watcher is waiting and reads the status then.

    Returns (the request's explain payload, the job statuses the watchers saw, in order).
    on_status(status): called by a watcher with each status (e.g. to cancel the test).
    """
    lock = shared.lock
    seen: list[dict] = []
    answer: dict = {}
    finished = threading.Event()
    threads: list[threading.Thread] = []

    def run():
        try:
            answer.update(model.predict([request])[0][lit_explain.EXPLAIN])
        finally:
            finished.set()

    def status():
        return _one(model, explain_action="status")["job"]

    def spawn(first: bool = False) -> None:
        t = threading.Thread(target=watcher, args=(first,))
        threads.append(t)
        waiting = lock.waiting()
        t.start()
        wait_until(lambda: lock.waiting() > waiting or finished.is_set(), "the next watcher to queue")

    def watcher(first: bool):
        with lock.user_job():  # queued like the test itself (a user job): in arrival order
            if first:  # the request formatted its prompt under the model lock; wait until it queues again
                wait_until(lambda: status() is not None and lock.waiting() == 1, "the request to queue")
            else:
                job = status()
                if job is not None and job["stage"] not in lit_explain.PRE_STAGES:
                    seen.append(job)
                    if on_status is not None:
                        on_status(job)
            if not finished.is_set():
                spawn()

    with lock.background():  # the request queues for the model, then the first watcher behind it
        runner = threading.Thread(target=run)
        runner.start()
        wait_until(lambda: lock.waiting() == 1, "the request to queue")
        # Queued for the test itself (its job exists), or still for formatting its prompt.
        spawn(first=status() is None)
    runner.join()
    while threads:
        threads.pop(0).join()
    return answer, seen


@pytest.mark.parametrize("methods,config", [
    pytest.param("grad_norm,grad_x_input", SalienceConfig(), id="gradients"),
    pytest.param("grad_x_input,integrated_gradients", SalienceConfig(), id="ig-default-16-steps"),
])
def test_contrastive_status_is_determinate_and_the_payload_is_the_librarys(tiny, methods, config):
    lm, shared, model = tiny
    out, seen = watch(shared, model, _data(explain_action="contrastive", foil=FOIL, methods=methods))
    names = tuple(methods.split(","))
    total = ex.contrastive_units(names, config)
    assert seen, "the watcher saw no progress call"
    assert seen[0]["action"] == "contrastive" and seen[0]["stage"] == "contrastive" and seen[0]["done"] == 0
    assert {s["total"] for s in seen} == {total}
    dones = [s["done"] for s in seen]
    assert dones == sorted(dones) and dones[-1] <= total
    want = ex.contrastive_salience(lm, lm.format_prompt(PROMPT, chat=False), TARGET, FOIL, names, config=config)
    for m in names:
        np.testing.assert_allclose(out["methods"][m]["values"], want.values[m], rtol=1e-5, atol=1e-7)
    assert out["target_logprob"] == pytest.approx(want.target_logprob, rel=1e-6)


def test_cancel_during_a_contrastive_test(tiny):
    _, shared, model = tiny

    def cancel_at_first_status(status):
        if status["done"] == 0:
            assert _one(model, explain_action="cancel")["cancelled"] is True

    out, seen = watch(shared, model, _data(explain_action="contrastive", foil=FOIL, methods="grad_norm,grad_x_input"),
                      on_status=cancel_at_first_status)
    assert out["cancelled"] is True and out["action"] == "contrastive"
    assert seen[0]["cancelled"] is False
    assert _one(model, explain_action="status")["job"] is None


def test_ig_auto_status_counts_steps_and_the_payload_is_the_librarys(tiny):
    lm, shared, model = tiny
    out, seen = watch(shared, model, _data(explain_action="ig_auto", ig_steps=8, ig_tolerance=1e-9,
                                           target_span="0:2"))
    schedule = ex.step_schedule(8, 8)  # the cap is below the usual start: one run of 8 steps
    assert out["schedule"] == schedule == [8] and out["max_steps"] == 8
    assert seen and seen[0]["stage"] == "ig_steps" and seen[0]["done"] == 0
    assert {s["total"] for s in seen} == {8}
    # The server's config: IG one step per chunk, so the status moves after every step: each count 0..7 is seen,
    # in order. (A watcher may also read the same count twice, when the next one queues before the request
    # takes the model back between steps: seen at load, 3 runs in 5 with 2 torch threads.)
    dones = [s["done"] for s in seen if s["done"] < 8]
    assert dones == sorted(dones) and sorted(set(dones)) == list(range(8)), dones
    want = ex.ig_auto_steps(lm, lm.format_prompt(PROMPT, chat=False), TARGET, span=(0, 2), tolerance=1e-9,
                            start_steps=8, max_steps=8, config=shared.salience_config)
    assert out["steps"] == want.steps == 8 and out["stopped_by"] == "cap" and out["converged"] is False
    assert out["relative_error"] == pytest.approx(want.relative_error, rel=1e-6)
    assert out["error"] == pytest.approx(want.tried[-1].error, rel=1e-6, abs=1e-12)
    assert [t["steps"] for t in out["tried"]] == [8] and out["span"] == [0, 2]


def test_ig_auto_stops_at_the_first_count_within_the_tolerance(tiny):
    _, _, model = tiny
    out = _one(model, explain_action="ig_auto", ig_steps=64, ig_tolerance=1)
    assert out["schedule"] == [8, 16, 32, 64] and out["stopped_by"] == "tolerance" and out["converged"] is True
    errors = [t["relative_error"] for t in out["tried"]]
    assert errors[-1] <= 1 < min(errors[:-1], default=2) and out["steps"] == out["tried"][-1]["steps"]


@pytest.mark.parametrize("extra,match", [
    pytest.param({"ig_steps": 0}, '"ig_steps" is 0', id="cap-zero"),
    pytest.param({"ig_steps": 1.5}, '"ig_steps" is 1.5', id="cap-fraction"),
    pytest.param({"ig_steps": 10_000}, "from 1 to 256", id="cap-too-big"),
    pytest.param({"ig_tolerance": 0}, '"ig_tolerance" is 0', id="tolerance-zero"),
    pytest.param({"ig_tolerance": "lots"}, "above 0 and at most 1", id="tolerance-text"),
])
def test_ig_auto_bad_settings_are_one_line_errors(tiny, extra, match):
    _, _, model = tiny
    with pytest.raises(errors.RequestError, match=match):
        _one(model, explain_action="ig_auto", **extra)


@pytest.mark.parametrize("removal", ["filler", "delete", ""])
def test_reduce_removal_field_reaches_the_library(tiny, removal):
    lm, shared, model = tiny
    prompt = "The capital of France is Paris. The capital of Italy is Rome."
    out = model.predict([{"prompt": prompt, "target": TARGET, "chat": False, "explain_action": "reduce",
                          "granularity": "word", "removal": removal}])[0][lit_explain.EXPLAIN]
    chat = lm.format_prompt(prompt, chat=False)
    user = next((s, e) for s, e, r in chat.role_spans if r == "user")
    red = ex.reduce_prompt(lm, chat, TARGET, config=ex.ReductionConfig(
        method="grad_norm", granularity="word", criterion="logprob", removal=removal or "delete",
        max_seconds=lit_explain.REDUCE_MAX_SECONDS, regions=(user,)))
    assert out["removal"] == (removal or "delete") and out["filler"] == (" " if removal == "filler" else "")
    assert out["n_removed"] == len(red.removed) > 0
    assert out["fields"]["prompt"]["reduced"] == red.reduce_range(*user)
    removed_text = "".join(t for t, gone in out["fields"]["prompt"]["pieces"] if gone)
    assert removed_text and all(t in prompt for t, _ in out["fields"]["prompt"]["pieces"])


def test_reduce_with_an_unknown_removal_is_a_one_line_error(tiny):
    _, _, model = tiny
    with pytest.raises(errors.RequestError, match="Unknown removal 'blank'"):
        _one(model, explain_action="reduce", granularity="word", removal="blank")


def test_contrastive_follows_the_selected_target_span(tiny):
    """target_span 1:2 contrasts that token with the foil at the same position (after the answer's first token)."""
    lm, _, model = tiny
    out = _one(model, explain_action="contrastive", foil=FOIL, methods="grad_norm", target_span="1:2")
    want = ex.contrastive_salience(lm, lm.format_prompt(PROMPT, chat=False), TARGET, FOIL, ("grad_norm",),
                                   span=(1, 2))
    assert out["span"] == [1, 2] and out["n_prompt_tokens"] == want.n_prompt_tokens
    assert len(out["tokens"]) == want.n_prompt_tokens + 1  # the prompt and the answer's first token
    assert out["target"] == want.target_text and out["foil_logprob"] == pytest.approx(want.foil_logprob, rel=1e-6)
    np.testing.assert_allclose(out["methods"]["grad_norm"]["values"], want.values["grad_norm"], rtol=1e-5, atol=1e-7)


def test_flips_report_what_load_gives(tiny):
    """A flip's delta and greedy check are those of the datapoint Load makes (the field set to `value`,
    formatted and re-tokenized by the server), scored by an independent unpadded pass."""
    from tests.unit import explain_reference as ref

    lm, shared, model = tiny
    chat = False  # the tiny tokenizer has no chat template
    out = _one(model, explain_action="flips", chat=chat)
    assert out["flips"]
    target_ids = list(lm.tokenize(TARGET).ids)
    original = shared.format_prompt(_data(chat=chat))
    for f in out["flips"]:
        loaded = shared.format_prompt({**_data(chat=chat), f["field"]: f["value"]})
        ids = list(lm.encode_prompt(loaded).ids)
        want = ref.span_logprob(lm.model, ids, target_ids, 0, len(target_ids))
        assert f["logprob"] == pytest.approx(want, rel=1e-6)
        assert f["keeps_greedy"] in (True, False) and 0 <= f["word_end"] <= 1
        assert loaded.text != original.text


def test_the_first_status_says_what_runs_before_the_tests_own_progress(tiny):
    """Before a test's first batch the status names the step (generating, waiting for the model, the
    maps it tests), not a bare "starting"; the browser has a text for each of these stage names."""
    # A model of its own without the disk cache: the generation below is never cached beforehand.
    shared = shared_model.SharedLM(tiny[0], max_new_tokens=4, disk_cache=False)
    model = lit_explain.ExplainModel(shared)
    lock, statuses = shared.lock, []

    def run(**extra):
        t = threading.Thread(target=lambda: model.predict([_data(explain_action="curves", steps=2, **extra)]))
        t.start()
        return t

    def queued_stage() -> str:
        """The job's stage once the request waits for the model (its job started)."""
        seen = []

        def queued() -> bool:
            job = _one(model, explain_action="status")["job"]
            if lock.waiting() == 1 and job is not None and job["stage"] != "starting":
                seen.append((job["stage"], job["done"], job["total"]))
            return bool(seen)

        wait_until(queued, "the request to queue for the model")
        return seen[0]

    with lock.background():  # the model is busy: the test reports what it waits for
        t = run(target="")  # no target: the response is generated first
        statuses.append(queued_stage())
    t.join()
    with lock.background():
        t = run()  # a given target: straight to waiting for the model
        statuses.append(queued_stage())
    t.join()
    # Generating counts tokens out of the most the server generates (none yet: it waits for the model).
    assert statuses == [(lit_explain.STAGE_GENERATING, 0, shared.generation_config.max_new_tokens),
                        (lit_explain.STAGE_WAITING, 0, 0)]
    # Once it holds the model the curves test computes its maps (then reports scoring units).
    assert lit_explain.FIRST_STAGES["curves"] == lit_explain.STAGE_SALIENCE
    logic = (SRC / "explain" / "logic.ts").read_text(encoding="utf-8")
    stages = logic[logic.index("const STAGES"):logic.index("};", logic.index("const STAGES"))]
    for stage in {*lit_explain.PRE_STAGES, *lit_explain.FIRST_STAGES.values(), ex.upper_bound.STAGE}:
        assert f"{stage}:" in stages, f"frontend/src/explain/logic.ts STAGES has no text for {stage!r}"


def test_curves_payload_has_the_upper_bound_and_its_verdicts(tiny):
    """The curves payload carries the library's upper bound: its curve, the search, whether each mode
    can decide, and the verdict text of the undecidable state (which the browser shows as it is)."""
    lm, shared, model = tiny
    out = _one(model, explain_action="curves", granularity="word", steps=3)
    rep = ex.faithfulness_curves(lm, ex.CurvesRequest(lm.format_prompt(PROMPT, chat=False), TARGET,
                                                  config=ex.FaithfulnessConfig(granularity="word", steps=3)))
    up = out["upper_bound"]
    name = ex.faithfulness.UPPER
    assert up["name"] == name and up["undecidable"] == "not decidable on this prompt"
    assert up["rows"] == rep.upper_bound_rows
    for mode in ("deletion", "insertion"):
        assert up["decidable"][mode] == rep.decidable(mode)
        assert up["search"][mode] == rep.curves[mode][name].ordering
        assert out["curves"][name][mode]["aopc"] == pytest.approx(rep.aopc(name, mode), abs=1e-9)
        np.testing.assert_allclose(out["curves"][name][mode]["logprobs"], rep.curves[mode][name].logprobs,
                                   rtol=1e-5, atol=1e-6)
    assert name not in out["ranked"]
    assert [r["verdict"] for r in out["table"]] == [r["verdict"] for r in rep.table()]


def test_curves_status_carries_the_coarse_report_then_the_answer_is_the_full_one(tiny):
    """faithfulness_stages on the server: once the coarse pass is done the status's `partial` is its
    payload (marked preliminary, equal to a direct coarse call), the refinement's stages follow, and the
    answer is the full report's."""
    lm, shared, model = tiny
    out, seen = watch(shared, model, _data(explain_action="curves", granularity="word", steps=10))
    chat = lm.format_prompt(PROMPT, chat=False)
    config = ex.FaithfulnessConfig(granularity="word", steps=10)
    coarse = ex.faithfulness_curves(lm, ex.CurvesRequest(chat, TARGET, config=ex.coarse_config(config)))
    full = ex.faithfulness_curves(lm, ex.CurvesRequest(chat, TARGET, config=config))
    stages = [s["stage"] for s in seen]
    first = next(i for i, s in enumerate(seen) if "partial" in s)
    assert ex.faithfulness.COARSE_STAGE in stages[:first] and "curves" not in stages[:first]
    assert set(stages[first:]) <= {"curves", ex.upper_bound.STAGE} and ex.upper_bound.STAGE in stages[first:]
    assert all("partial" in s for s in seen[first:])
    p = seen[first]["partial"]
    assert p["preliminary"] is True and out["preliminary"] is False
    assert p["refining"] == {"steps": 10, "n_random": 10, "upper_bound": True}
    assert p["steps"] == 4 and p["n_random"] == 3 and p["upper_bound"] is None and out["steps"] == len(full.n_removed) - 1
    for got, rep in ((p, coarse), (out, full)):
        assert got["n_removed"] == rep.n_removed.tolist()
        for mode, by_name in rep.curves.items():
            for name, c in by_name.items():
                np.testing.assert_allclose(got["curves"][name][mode]["logprobs"], c.logprobs, rtol=1e-5, atol=1e-6)
    logic = (SRC / "explain" / "logic.ts").read_text(encoding="utf-8")
    assert f"{ex.faithfulness.COARSE_STAGE}:" in logic[logic.index("const STAGES"):]


def test_ig_auto_status_carries_the_counts_tried_so_far_and_the_answer_the_best_count(tiny):
    lm, shared, model = tiny
    out, seen = watch(shared, model, _data(explain_action="ig_auto", ig_steps=16, ig_tolerance=1e-9,
                                           target_span="0:2"))
    want = ex.ig_auto_steps(lm, lm.format_prompt(PROMPT, chat=False), TARGET, span=(0, 2), tolerance=1e-9,
                            start_steps=8, max_steps=16, config=shared.salience_config)
    assert [t["steps"] for t in out["tried"]] == [t.steps for t in want.tried]
    assert out["stopped_by"] == want.stopped_by and out["needed_steps"] == want.needed_steps
    assert out["steps"] == want.steps and out["relative_error"] == pytest.approx(want.relative_error, rel=1e-5)
    # While the 16-step count runs, the status has the 8-step count's result (the best so far).
    during = [s for s in seen if s["done"] > 8]
    assert during and all(s["partial"]["best_steps"] == 8 and [t["steps"] for t in s["partial"]["tried"]] == [8]
                          for s in during)
    assert during[0]["partial"]["best_relative_error"] == pytest.approx(want.tried[0].relative_error, rel=1e-5)
    assert all("partial" not in s for s in seen if s["done"] < 8)


def test_the_outcome_line_is_logged_while_status_still_finds_the_job(tiny, caplog):
    """'explain <action>: done|cancelled (...)' is written before the job leaves the job table, so a status of None
    means the line is in the log (CI failed on a test that waited for None, then read the log once in between)."""
    _, shared, model = tiny
    lines: list[tuple[str, dict | None]] = []

    class AtTheLine(logging.Handler):  # what a poll would have read at the moment the line was written
        def emit(self, record: logging.LogRecord) -> None:
            lines.append((record.getMessage(), model.jobs.status()))

    def cancel_at_first_status(status):
        if status["done"] == 0:
            _one(model, explain_action="cancel")

    probe = AtTheLine()
    caplog.set_level(logging.INFO, logger=lit_explain.logger.name)
    lit_explain.logger.addHandler(probe)
    try:
        _one(model, explain_action="contrastive", foil=FOIL, methods="grad_norm")
        out, _ = watch(shared, model, _data(explain_action="contrastive", foil=FOIL, methods="grad_norm,grad_x_input"),
                       on_status=cancel_at_first_status)
    finally:
        lit_explain.logger.removeHandler(probe)
    assert out["cancelled"] is True
    assert [(line.split(" at ")[0], status and status["cancelled"]) for line, status in lines] == [
        ("explain contrastive: done", False), ("explain contrastive: cancelled (a cancel request)", True)]
    assert _one(model, explain_action="status")["job"] is None
