"""What a span job's progress counts (`detail="span_progress"`): the IG steps or SmoothGrad samples of the span,
never the one gradient pass that comes before them (issue 35: that pass was reported as 1 of 1, and the page
showed "100 % · finishing…" for about a second at the start of every new IG count, then "3 %"). Tiny random
Llama (tests/unit/tiny_models.py); the span_progress poll is made from inside the computation, at each progress
report of the core library, so what it must see is known exactly (no timing involved)."""

from __future__ import annotations

import functools
import threading
import time

import pytest

from lit_app.edge import clients
from lit_app.schema import fields
from lit_app.serving import model_group
from lit_app.model.shared_model import SharedLM
from sequence_salience.methods.sampling import span_point_cost
from tests.unit.tiny_models import MODEL_BUILDERS, wrap

EX = {"prompt": "one two three four", "target": " five six seven", "chat": False}
STEPS = 8
# An IG count whose steps take many passes, and the least time each progress report of the pass takes (slept).
MANY_STEPS, WORK_S = 64, 0.05
# The least time another job holds the model while a span waits for it (slept).
HOLD_S = 1.5


class PollingSharedLM(SharedLM):
    """Calls `poll` (when set) at every progress report of a span request, and records (method, done, total, status);
    with `work_s`, each report's units take at least that many more seconds (slept before the report)."""

    poll = None
    work_s = 0.0

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.seen: list[tuple[str, int, int, dict]] = []

    def quick(self, *a, progress=None, **kw):
        def wrapped(method: str, done: int, total: int) -> None:
            time.sleep(self.work_s)
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
    inside = [(done, total, status) for _m, done, total, status in shared.seen if 0 < done < total]  # (0: announced)
    assert [done for done, _t, _s in inside] == [layers + 2 * k for k in range(layers)]
    assert all(total == 3 * layers and (status["done"], status["total"]) == (done, total)
               for done, total, status in inside)


def test_the_gradient_pass_of_an_ig_span_counts_the_steps_after_it_in_its_time_left(tiny):
    """Issue 43: the IG line said "42 % · about 1 s left" during the gradient pass (the pass's own time left) with
    every IG step still to run. Each report of the pass here takes at least WORK_S, so when the last report inside
    the pass is polled the pass has taken at least (reports so far) x WORK_S, and the steps after it at least
    steps / ig_step_chunk_size passes (methods/sampling.py span_point_cost): the time left is at least that (was: the
    pass's last 2 units, ~WORK_S)."""
    shared, sal = tiny
    data = {**EX, "prompt": "two three four five six"}  # a pair of its own: nothing cached
    shared.poll = lambda: sal.predict([{**data, "detail": "span_progress"}])[0][fields.SALIENCE]["detail"]
    shared.work_s = WORK_S
    try:
        sal.predict([{**data, "detail": "span", fields.IG_STEPS: MANY_STEPS}])
    finally:
        shared.poll, shared.work_s = None, 0.0
    inside = [(done, status) for method, done, total, status in shared.seen
              if method == shared.seen[0][0] and 0 < done < total]  # (0 of its units: the pass's announcement)
    assert len(inside) == shared.lm.model.config.num_hidden_layers, shared.seen  # the forward, then each layer but the last
    low_share, _ = span_point_cost(shared.salience_config)
    at_least = MANY_STEPS * low_share * len(inside) * WORK_S
    assert inside[-1][1]["eta_low_s"] >= round(at_least, 1) - 0.05, (at_least, inside)
    assert all(status["eta_high_s"] >= status["eta_low_s"] for _done, status in inside), inside


def test_a_span_that_waits_for_the_model_counts_no_wait_in_its_time_left(tiny):
    """Issue 43: a span that waited for the model (another client's or a background job held it) counted the wait
    as its gradient pass's cost, and the IG steps after the pass (each 1/ig_step_chunk_size .. 1 of the pass) scaled
    it: "about 7–56 min left" for a minute's work. Another job holds the model here for at least HOLD_S while the span
    waits; meanwhile its status says "waiting", without an estimate. Once it runs, its model time at the pass's first
    poll is at most M = (seconds from the request to its acquire call) + (seconds from its acquire's return to the
    poll), measured here; the first report's rate is at most M / d (d units done of T), so the pass's low end is at
    most (T - d) x M / d, and with C = steps x low share after it, low <= (1 + C) x (T - d) x M / d + C x M. Counting
    the wait made it at least C x HOLD_S (the bound's M excludes the wait)."""
    shared, sal = tiny
    data = {**EX, "prompt": "three four five six seven"}  # a pair of its own: nothing cached
    progress = lambda: sal.predict([{**data, "detail": "span_progress"}])[0][fields.SALIENCE]["detail"]
    polled_at: list[float] = []
    acquires: dict[int, list[tuple[float, float]]] = {}  # thread -> (called, returned) of its acquires
    acquire = shared.lock.acquire

    def timed_acquire(*a, **kw):
        called = time.monotonic()
        try:
            return acquire(*a, **kw)
        finally:
            acquires.setdefault(threading.get_ident(), []).append((called, time.monotonic()))

    def poll() -> dict:
        polled_at.append(time.monotonic())
        return progress()

    held, release = threading.Event(), threading.Event()

    def other_job() -> None:
        with shared.lock:
            held.set()
            release.wait(120)

    span: dict = {}

    def request() -> None:
        span["sent"] = time.monotonic()
        span["thread"] = threading.get_ident()
        try:
            sal.predict([{**data, "detail": "span", fields.IG_STEPS: MANY_STEPS}])
        except BaseException as e:  # re-raised by the test thread
            span["error"] = e

    shared.lock.acquire = timed_acquire
    holder = threading.Thread(target=other_job)
    holder.start()
    try:
        assert held.wait(60)
        shared.poll = poll
        runner = threading.Thread(target=request)
        runner.start()
        deadline = time.monotonic() + 120  # generous: a loaded machine
        while not progress().get("waiting") and time.monotonic() < deadline and runner.is_alive():
            time.sleep(0.01)
        waiting = progress()
        time.sleep(HOLD_S)  # the span waits at least this long
    finally:
        release.set()
        holder.join(120)
    runner.join(300)
    shared.poll, shared.lock.acquire = None, acquire
    assert not runner.is_alive() and "error" not in span, span
    called, returned = acquires[span["thread"]][0]
    assert returned - called >= HOLD_S, (called, returned)  # it did wait
    pass_method = shared.seen[0][0]
    first = next(i for i, (m, done, total, s) in enumerate(shared.seen)
                 if m == pass_method and done < total and s["eta_s"] is not None)
    _m, done, total, status = shared.seen[first]
    model_s = (called - span["sent"]) + (polled_at[first] - returned)
    low_share, _ = span_point_cost(shared.salience_config)
    after = MANY_STEPS * low_share
    pass_low = (total - done) * model_s / done
    at_most = pass_low + after * (model_s + pass_low)
    assert status["eta_low_s"] <= at_most + 0.05, (status, model_s, at_most, returned - called)
    assert not status["waiting"] and status["eta_high_s"] >= status["eta_low_s"], status
    assert waiting["state"] == "running" and waiting["waiting"] and waiting["eta_s"] is None, waiting
    assert waiting[fields.WAITING_FOR] == fields.WAITING_OWN, waiting  # the holder is a request without an id, as it


def test_a_span_that_lets_another_click_go_first_counts_no_pause_in_its_rate(tiny):
    """Issue 43 (session 33's leftover): between chunks of IG steps a span lets the clicks that wait (another
    client's) use the model, and that pause counted as its next chunk's work: its rate dropped and its range grew
    by the other click's time. Here another request takes the model for at least HOLD_S after the span's second
    chunk of steps. While it holds it, the span's status says "waiting", without an estimate. After it, the range
    at each poll is at most (2 x rest + u) x S (time_left.py: high <= rest x MAX_WIDEN x slow + u x slow, with the
    poll right after the report), where S is the slowest per-step time of the chunks so far measured between the
    polls less the hold (x 1.2 + 0.1 s for the polls' own jitter). Counting the pause made it at least
    rest x HOLD_S / (steps per chunk)."""
    shared, sal = tiny
    data = {**EX, "prompt": "four five six seven eight"}  # a pair of its own: nothing cached
    progress = lambda: sal.predict([{**data, "detail": "span_progress"}])[0][fields.SALIENCE]["detail"]
    seen: list[tuple[float, str, int, int, dict]] = []  # (poll time, method, done, total, status)
    hold: dict = {}

    def other_click() -> None:  # another client's (issue 43, session 34: its status says whose work goes first)
        with clients.acting_as("tab-b"), shared.lock:
            hold["from"] = time.monotonic()
            with clients.acting_as("tab-a"):
                hold["status"] = progress()  # the span's status while the other click has the model
            time.sleep(HOLD_S)
            hold["to"] = time.monotonic()

    def poll() -> dict:
        status = progress()
        method, done, total = shared.current
        seen.append((time.monotonic(), method, done, total, status))
        steps = [s for s in seen if s[1] != seen[0][1]]
        if len(steps) == 2 and "thread" not in hold:  # after the second chunk: another click waits for the model
            hold["thread"] = threading.Thread(target=other_click)
            hold["thread"].start()
            deadline = time.monotonic() + 60
            while not shared.lock.interactive_waiting() and time.monotonic() < deadline:
                time.sleep(0.005)
        return status

    quick = shared.quick

    def current_quick(*a, progress=None, **kw):  # remembers the report being polled
        def remember(method, done, total):
            shared.current = (method, done, total)
            if progress is not None:
                progress(method, done, total)
        return quick(*a, progress=remember, **kw)

    shared.poll, shared.work_s = poll, WORK_S / 5
    shared.quick = current_quick
    try:
        with clients.acting_as("tab-a"):
            sal.predict([{**data, "detail": "span", fields.IG_STEPS: MANY_STEPS}])
    finally:
        shared.poll, shared.work_s, shared.quick = None, 0.0, quick
        if "thread" in hold:
            hold["thread"].join(60)
    assert "to" in hold, hold
    during = hold["status"]
    assert during["state"] == "running" and during["waiting"] and during["eta_s"] is None, during
    assert during[fields.WAITING_FOR] == fields.WAITING_OTHER, during  # was: no such key ("your own work" on the page)
    steps = [s for s in seen if s[1] != seen[0][1]]
    pass_end = max(t for t, m, done, total, _s in seen if m == seen[0][1])  # the steps' sequence begins here
    slowest, before, checked = 0.0, (pass_end, 0), 0
    for t, _m, done, total, status in steps:
        overlap = max(0.0, min(t, hold["to"]) - max(before[0], hold["from"]))
        slowest = max(slowest, (t - before[0] - overlap) / max(1, done - before[1]))
        u, rest = done - before[1], total - done
        before = (t, done)
        if t > hold["to"] and rest > 0:
            checked += 1
            at_most = (2 * rest + u) * slowest * 1.2 + 0.1
            assert status["eta_high_s"] <= at_most, (status, at_most, slowest, hold["to"] - hold["from"])
    assert checked >= 2, steps


class FakeClock:
    """A clock that moves only when the test says (`advance`): the span job's estimate is then a function of the
    reports alone, whatever the machine's load (was a sleep, flaky: 31b9a5e)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_a_first_highlight_counts_no_generation_in_its_time_left(monkeypatch):
    """Issue 43 (session 33's leftover; 32c64a8): a first highlight without a target generates the greedy response
    first, and the generation's seconds counted as the gradient pass's: its first rate, and through the IG steps
    after it (time_left.Then) the IG line's estimate. The span job runs on a fake clock here: the generation takes
    GEN_S of it, each progress report of the core library UNIT_S (the clock moves nowhere else), and the poll is made
    at each report, so every estimate is exact, with no timing involved. The pass's first report has L units (its
    forward) of 3L, 1 s of model time: rate 1/L, the chunk in flight u = L, rest L, so the pass alone has low = high
    = L x 1/L + L x 1/L = 2 s (lit_app/model/time_left.py), and the C = steps x share after it each (1 s done + 2 s
    left): low = 2 + 3 x C_low, high = 2 + 3 x C_high. Counting the generation made the rate (GEN_S + 1) / L, every
    figure about GEN_S + 1 times that. Every poll of the span is the same as in a run whose generation takes no
    time."""
    from lit_app.wrappers import salience as salience_wrapper

    gen_s, unit_s = 100.0, 1.0
    data = {**EX, "prompt": "five six seven eight nine", "target": ""}  # generated: max_new_tokens 4

    def run(generation_s: float) -> tuple[list[tuple[str, int, int, dict]], PollingSharedLM]:
        clock = FakeClock()
        monkeypatch.setattr(salience_wrapper, "Job", functools.partial(salience_wrapper.Job, clock=clock))
        shared = PollingSharedLM(wrap(MODEL_BUILDERS["llama"](seed=0), "llama"), max_new_tokens=4,
                                 disk_cache=False)
        sal = model_group.lit_models(shared, "tiny")["_tiny_salience"]
        generate, generated = shared.responses.generate, []

        def timed_generate(*a, **kw):
            clock.advance(generation_s)
            generated.append(clock())
            return generate(*a, **kw)

        quick = shared.quick

        def timed_quick(*a, progress=None, **kw):  # each report's units take UNIT_S of the fake clock
            def timed(method: str, done: int, total: int) -> None:
                if done:  # (a method's announcement, 0 of its units, is no work)
                    clock.advance(unit_s)
                if progress is not None:
                    progress(method, done, total)
            return quick(*a, progress=timed, **kw)

        shared.responses.generate, shared.quick = timed_generate, timed_quick
        shared.poll = lambda: sal.predict([{**data, "detail": "span_progress"}])[0][fields.SALIENCE]["detail"]
        sal.predict([{**data, "detail": "span", fields.IG_STEPS: MANY_STEPS}])
        assert generated, "the response was not generated"
        return shared.seen, shared

    seen, shared = run(gen_s)
    layers = shared.lm.model.config.num_hidden_layers
    pass_method = seen[0][0]
    _m, done, total, first = next(s for s in seen if s[1] > 0)  # (after the pass's announcement, 0 of its units)
    assert (done, total) == (layers, 3 * layers), seen[:2]  # the pass's forward
    low_share, high_share = span_point_cost(shared.salience_config)
    steps = MANY_STEPS * low_share, MANY_STEPS * high_share
    assert first["eta_low_s"] == pytest.approx(round(2 + 3 * steps[0], 1), abs=0.051), (first, steps)
    assert first["eta_high_s"] == pytest.approx(round(2 + 3 * steps[1], 1), abs=0.051), (first, steps)
    assert any(m != pass_method for m, *_ in seen), seen  # the IG steps came after the pass

    def estimates(polls):
        return [(m, d, t, s["state"], s["done"], s["total"], s["eta_low_s"], s["eta_high_s"]) for m, d, t, s in polls]

    instant, _shared = run(0.0)
    assert estimates(seen) == estimates(instant)
