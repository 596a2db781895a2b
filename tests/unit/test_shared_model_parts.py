"""The parts SharedLM composes (lit_app/model/responses.py, salience_store.py, salience_runs.py), each on its own,
on a tiny random Llama: what the wrappers rely on when they read the caches without the model."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import sequence_salience as ss
from lit_app.schema import fields
from lit_app.model import responses, shared_model
from tests.unit.tiny_models import tiny_llama, wrap

PROMPT = {"prompt": "The cat sat on the mat", "chat": False}
TARGET = " and it slept"


@pytest.fixture()
def shared():
    return shared_model.SharedLM(wrap(tiny_llama(seed=0), "llama"), max_new_tokens=3, disk_cache=False)


def test_a_change_between_look_and_wait_is_not_missed():
    table = responses.StreamTable()
    key = ("prompt", True, ss.GenerationConfig())
    stream, version = table.look(key)
    assert stream is None
    table.set(key, responses.GenerationStream("running", "a", 1))  # before the reader waits
    done = threading.Event()
    reader = threading.Thread(target=lambda: (table.wait_for_change(version, 600), done.set()))
    reader.start()
    reader.join(60)  # a hang guard, not a timing assertion: the wait must see the earlier change
    assert done.is_set()
    assert table.look(key)[0] == responses.GenerationStream("running", "a", 1)
    table.drop(key)
    assert table.look(key) == (None, version + 2)


def test_the_store_knows_a_greedy_pair_only_once_its_response_is_cached(shared):
    chat = shared.format_prompt(PROMPT)
    assert shared.store.pair(chat, "") is None  # never generates to answer a lookup
    assert shared.cached_span(chat, "", "grad_norm") is None and shared.cached_salience(chat, "") is None
    gen = shared.generate(chat)
    assert shared.store.pair(chat, "") == (chat.text, chat.templated, ("generated", gen.ids))
    assert shared.store.pair(chat, TARGET) == (chat.text, chat.templated, ("typed", TARGET))


def test_cached_spans_come_from_complete_or_partial_results(shared):
    chat = shared.format_prompt(PROMPT)
    partial = shared.quick(chat, TARGET, 0, 1)  # one span: a partial result
    assert shared.cached_salience(chat, TARGET) is None
    assert list(shared.store.results_of(chat, TARGET)) == [partial]
    np.testing.assert_array_equal(shared.cached_span(chat, TARGET, "grad_x_input", 0, 1),
                                  partial.span_salience("grad_x_input", 0, 1))
    assert shared.cached_span(chat, TARGET, "grad_x_input", 1, 2) is None  # a span nobody computed

    complete = shared.salience(chat, TARGET)
    assert shared.cached_salience(chat, TARGET) is complete
    assert list(shared.store.results_of(chat, TARGET)) == [complete, partial]  # complete first
    np.testing.assert_array_equal(shared.cached_span(chat, TARGET, "grad_x_input", 1, 2),
                                  complete.span_salience("grad_x_input", 1, 2))
    shared.forget_salience()
    assert list(shared.store.results_of(chat, TARGET)) == []


def test_background_work_is_computed_once_per_key(shared):
    chat = shared.format_prompt(PROMPT)
    first = shared.salience(chat, TARGET)
    assert shared.salience(chat, TARGET) is first  # from the store: no second computation
    counted = shared.salience(chat, TARGET, {fields.IG_STEPS: 2})
    assert counted is not first and "integrated_gradients" in counted.matrices
    assert len(shared.store.complete) == 2  # the counts are part of the key


def test_a_counted_span_reuses_the_first_highlights_gradient_pass(shared):
    """IG's (or SmoothGrad's) first span request of a pair after the first highlight, before the matrices: the
    gradient methods' spans come from the first highlight's partial result, only IG runs (was: its request ran the
    gradient pass again, one forward + backward over the whole prompt: ~50 s on a 4,000-token prompt)."""
    chat = shared.format_prompt(PROMPT)
    first = shared.quick(chat, TARGET, 0, None)  # the first highlight: the default methods' whole-response span
    assert shared.cached_salience(chat, TARGET) is None  # no matrices yet
    ran = []
    counted = shared.quick(chat, TARGET, 0, None, {fields.IG_STEPS: 2},
                           progress=lambda method, done, total: ran.append(method))
    assert ran and set(ran) == {"integrated_gradients"}, ran  # no gradient pass of the default methods
    for method in ss.methods.DEFAULT_METHODS:  # and their values in the answer, the first highlight's
        np.testing.assert_array_equal(counted.span_salience(method), first.span_salience(method))
    assert counted.config.ig_steps == 2 and counted.has_span("integrated_gradients", 0, counted.num_targets)
