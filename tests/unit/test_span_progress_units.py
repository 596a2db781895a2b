"""What a span job's progress counts (`detail="span_progress"`): the IG steps or SmoothGrad samples of the span,
never the one gradient pass that comes before them (issue 35: that pass was reported as 1 of 1, and the page
showed "100 % · finishing…" for about a second at the start of every new IG count, then "3 %"). Tiny random
Llama (tests/unit/tiny_models.py); the span_progress poll is made from inside the computation, at each progress
report of the core library, so what it must see is known exactly (no timing involved)."""

from __future__ import annotations

import pytest

from lit_app.schema import fields
from lit_app.serving import model_group
from lit_app.model.shared_model import SharedLM
from tests.unit.tiny_models import MODEL_BUILDERS, wrap

EX = {"prompt": "one two three four", "target": " five six seven", "chat": False}
STEPS = 8


class PollingSharedLM(SharedLM):
    """Calls `poll` (when set) at every progress report of a span request, and records (method, done, total, status)."""

    poll = None

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.seen: list[tuple[str, int, int, dict]] = []

    def quick(self, *a, progress=None, **kw):
        def wrapped(method: str, done: int, total: int) -> None:
            if progress is not None:
                progress(method, done, total)
            if self.poll is not None:
                self.seen.append((method, done, total, self.poll()))
        return super().quick(*a, progress=wrapped, **kw)


@pytest.fixture()
def tiny():
    shared = PollingSharedLM(wrap(MODEL_BUILDERS["llama"](seed=0), "llama"), max_new_tokens=4, disk_cache=False)
    return shared, model_group.lit_models(shared, "tiny")["_tiny_salience"]


@pytest.mark.parametrize("count_field", [fields.IG_STEPS, fields.SMOOTH_GRAD_SAMPLES])
def test_a_span_job_reports_its_steps_or_samples_and_not_the_gradient_pass_before_them(tiny, count_field):
    shared, sal = tiny
    shared.poll = lambda: sal.predict([{**EX, "detail": "span_progress"}])[0][fields.SALIENCE]["detail"]
    out = sal.predict([{**EX, "detail": "span", "target_span": "0:2", count_field: STEPS}])[0]
    shared.poll = None
    assert out[fields.SPAN_SALIENCE], out
    methods = [method for method, *_ in shared.seen]
    assert methods[0] == "grad_norm+grad_x_input" and methods[-1] != methods[0], methods  # the pass came first
    for method, done, total, status in shared.seen:
        assert status["state"] == "running", status
        if method == methods[0] and done < total:  # inside the gradient pass: its layers (issue 43)
            assert (status["done"], status["total"]) == (done, total), (method, status)
        elif method == methods[0]:  # its end: no unit of the steps yet (not "100 % · finishing…": issue 35)
            assert (status["done"], status["total"]) == (0, 0), (method, status)
        else:  # the steps or samples the core reported so far
            assert (status["done"], status["total"]) == (done, total) and total == STEPS, (method, done, status)


def test_a_first_highlight_reports_the_layers_of_its_gradient_pass(tiny):
    """Issue 43: a 5,000-word prompt's first highlight showed a clock and no progress for 4 minutes. The one
    forward + backward now reports its forward (as many units as layers) and each layer of its backward (two)."""
    shared, sal = tiny
    data = {**EX, "prompt": "one two three four five"}  # a pair of its own: nothing cached
    shared.poll = lambda: sal.predict([{**data, "detail": "span_progress"}])[0][fields.SALIENCE]["detail"]
    sal.predict([{**data, "detail": "span"}])
    shared.poll = None
    layers = shared.lm.model.config.num_hidden_layers
    inside = [(done, total, status) for _m, done, total, status in shared.seen if done < total]
    assert [done for done, _t, _s in inside] == [layers + 2 * k for k in range(layers)]
    assert all(total == 3 * layers and (status["done"], status["total"]) == (done, total)
               for done, total, status in inside)
