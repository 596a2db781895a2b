"""lit_app/serving/served_models.py: several models, each loaded once with its own SharedLM (lock, caches).

Tiny random models (tests/unit/tiny_models.py); the loader is a plain function, as the server's is.
"""

from __future__ import annotations

import threading

import pytest

import sequence_salience as ss
from lit_app.schema import fields
from lit_app.serving import model_group, served_models
from lit_app.errors import RequestError
from lit_app.model.shared_model import SharedLM
from tests.unit.tiny_models import MODEL_BUILDERS, wrap
from tests.unit.waiting import wait_until


@pytest.fixture(scope="module")
def served():
    loads = []

    def load(spec: str):
        loads.append(spec)
        return wrap(MODEL_BUILDERS[spec](seed=0), spec)

    out = served_models.load_served_models([("a", "llama"), ("b", "gpt2")], load,
                                           lambda lm: SharedLM(lm, max_new_tokens=4, disk_cache=False))
    assert loads == ["llama", "gpt2"]  # each loaded once, in order
    return out


def test_each_model_has_its_own_shared_model_and_weight_count(served):
    a, b = served
    assert (a.name, a.spec, b.name, b.spec) == ("a", "llama", "b", "gpt2")
    assert a.shared is not b.shared and a.shared.lock is not b.shared.lock
    for m in served:
        params = {p.data_ptr(): p.numel() * p.element_size() for p in m.shared.lm.model.parameters()}
        bufs = {t.data_ptr(): t.numel() * t.element_size() for t in m.shared.lm.model.buffers()}
        assert m.weight_bytes == sum({**params, **bufs}.values()) > 0
    assert "a (llama:" in served_models.describe(served) and "b (gpt2:" in served_models.describe(served)


def test_model_map_names_every_wrapper_per_model_generation_models_first(served):
    models = served_models.lit_model_map(served)
    names = list(models)
    assert names[:2] == ["a", "b"]
    for m in ("a", "b"):
        gen, sal, tok = fields.model_group_names(m)
        assert {gen, sal, tok, fields.compare_model_name(m), f"_{m}_inside_trace"} <= set(names)
    # Each group's wrappers run on its own model.
    assert models["_a_salience"].shared is served[0].shared and models["_b_salience"].shared is served[1].shared


def test_a_request_on_one_model_does_not_wait_for_the_others_lock(served):
    models = served_models.lit_model_map(served)
    done = threading.Event()
    answers = {}

    def ask_a():
        answers["a"] = list(models["a"].predict([{fields.PROMPT: "The capital of France is"}]))[0]
        done.set()

    with served[1].shared.lock:  # model b busy for as long as this block runs
        worker = threading.Thread(target=ask_a)
        worker.start()
        wait_until(done.is_set, "model a's generation while model b's lock is held")
    worker.join()
    want = served[0].shared.lm.generate(served[0].shared.lm.format_prompt("The capital of France is"),
                                        served[0].shared.generation_config).text
    assert answers["a"][fields.RESPONSE] == want


def test_warm_start_generates_each_example_into_each_models_cache(served):
    rows = [{fields.CASE: "", fields.PROMPT: p, fields.SYSTEM: "", fields.TARGET: ""}
            for p in ("Paragraphs are", "Alice has three apples", "Q: What is 2 + 3? A:", "New paragraph")]

    class Rows:  # what warm_start reads of a LIT dataset (fresh prompts: the other tests cached theirs)
        examples = rows

    assert served_models.warm_start(served, {"d": Rows()}, 0.5) == 2 * 2  # int(4 * 0.5) per model
    cached = [[m.shared.cached_generation(m.shared.format_prompt(ex)) is not None for ex in rows] for m in served]
    assert [sum(c) for c in cached] == [2, 2]
    assert served_models.warm_start(served, {"d": Rows()}, 1.0) == 2 * 4
    for m in served:
        for ex in rows:
            gen = m.shared.cached_generation(m.shared.format_prompt(ex))
            assert gen is not None and gen.text == m.shared.lm.generate(m.shared.format_prompt(ex),
                                                                        m.shared.generation_config).text
    with pytest.raises(ValueError, match="--warm_start"):
        served_models.warm_start(served, {"d": Rows()}, 2.0)


def test_a_requests_own_max_new_tokens_is_honoured_within_the_servers_limit():
    """The generation model answers at most the request's `max_new_tokens` (it was validated, then ignored)."""
    lm = wrap(MODEL_BUILDERS["llama"](seed=0), "llama")
    shared = SharedLM(lm, max_new_tokens=6, disk_cache=False)
    gen = model_group.lit_models(shared, "tiny")["tiny"]
    ex = {"prompt": "one two three", "chat": False}
    full = gen.predict([ex])[0]
    # Independent reference: the library's own greedy generation with each limit.
    chat = lm.format_prompt("one two three", chat=False)
    for n in (1, 3, 6):
        want = lm.generate(chat, ss.GenerationConfig(max_new_tokens=n))
        got = gen.predict([{**ex, "max_new_tokens": n}])[0]
        assert got[fields.RESPONSE] == want.text and len(got[fields.RESPONSE_TOKENS]) == len(want.ids) <= n
    assert len(full[fields.RESPONSE_TOKENS]) == 6  # the tiny model never stops early: each limit shows
    assert gen.predict([{**ex, "max_new_tokens": "2"}])[0][fields.RESPONSE_TOKENS] == full[fields.RESPONSE_TOKENS][:2]
    # Above the server's limit: capped to it (a row's budget, tests/unit/test_row_budget.py).
    assert gen.predict([{**ex, "max_new_tokens": 7}])[0][fields.RESPONSE_TOKENS] == full[fields.RESPONSE_TOKENS]
    for bad in (0, -1, 2.5, "x", True, 1025):  # not a whole number from 1 to the rule's 1,024
        with pytest.raises(RequestError, match="max_new_tokens"):
            gen.predict([{**ex, "max_new_tokens": bad}])
