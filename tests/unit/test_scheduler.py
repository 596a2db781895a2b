"""The model scheduler (lit_app/model/scheduler.py): interactive requests, then user jobs, then background slices.

Threads queue for the model; the order in which they get it is recorded inside the critical
section (an event log), never timed. Queued states are observed through `waiting()`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

import pytest

from lit_app.edge import clients
from lit_app.model.scheduler import ModelScheduler, Priority
from tests.unit.waiting import wait_until



class _Log:
    """The order in which threads got the model (`events`), and the threads `_queue` started (`queued`)."""

    def __init__(self):
        self.events: list[str] = []
        self.queued: list[threading.Thread] = []
        self._lock = threading.Lock()

    def add(self, event: str) -> None:
        with self._lock:
            self.events.append(event)


INTERACTIVE, USER_JOB, BACKGROUND = Priority.INTERACTIVE, Priority.USER_JOB, Priority.BACKGROUND


def _queue(sched: ModelScheduler, log: _Log, name: str, priority: Priority | bool,
           client: str | None = None, graph: bool = False) -> threading.Thread:
    """Starts a thread that takes the model (at the given priority; True: background, False: interactive),
    acting as `client` when given (lit_app/edge/clients.py), as work that keeps a graph across its slices with
    `graph`, logs `name`, lets go; returns once it waits."""
    if isinstance(priority, bool):
        priority = BACKGROUND if priority else INTERACTIVE
    before = sched.waiting(priority)

    def run():
        with clients.acting_as(client) if client is not None else contextlib.nullcontext():
            sched.acquire(priority, graph=graph)
        try:
            log.add(name)
        finally:
            sched.release()

    thread = threading.Thread(target=run, name=name)
    log.queued.append(thread)
    thread.start()
    wait_until(lambda: sched.waiting(priority) > before, f"{name} to queue")
    return thread


def _run_holder(job: Callable[[], None], log: _Log) -> None:
    """Runs `job` (it takes the model) on a thread of its own to its end, then waits for every thread
    queued for `log`."""
    worker = threading.Thread(target=job)
    worker.start()
    worker.join()
    for t in log.queued:
        t.join()


def _order_of(*queued: tuple[str, Priority]) -> list[str]:
    """The order in which threads get the model once it is let go, each (name, priority) queued in turn
    while this thread held it."""
    sched, log = ModelScheduler(), _Log()
    sched.acquire()
    threads = [_queue(sched, log, name, priority) for name, priority in queued]
    sched.release()
    for t in threads:
        t.join()
    return log.events


def test_waiting_interactive_requests_go_before_background_work_that_queued_earlier():
    sched, log = ModelScheduler(), _Log()
    sched.acquire()
    threads = [_queue(sched, log, "bg1", True), _queue(sched, log, "click1", False),
               _queue(sched, log, "bg2", True), _queue(sched, log, "click2", False)]
    assert sched.waiting() == 4 and sched.waiting(INTERACTIVE) == 2 and sched.waiting(BACKGROUND) == 2
    sched.release()
    for t in threads:
        t.join()
    assert log.events == ["click1", "click2", "bg1", "bg2"]  # interactive first, each kind in arrival order


def test_a_click_during_a_slice_runs_before_the_next_slice():
    sched, log = ModelScheduler(), _Log()

    def job():
        with sched.background():
            for k in range(4):
                log.add(f"slice{k}")
                if k == 1:  # a click arrives while slice 1 runs
                    _queue(sched, log, "click", False)
                sched.yield_to_waiting()

    _run_holder(job, log)
    assert log.events == ["slice0", "slice1", "click", "slice2", "slice3"]


def test_yielding_background_holder_lets_earlier_background_work_and_all_clicks_go_first():
    sched, log = ModelScheduler(), _Log()
    done = threading.Event()

    def job():
        with sched.background():
            log.add("job slice 1")
            _queue(sched, log, "other job", True)
            _queue(sched, log, "click", False)
            assert sched.yield_to_waiting()
            log.add("job slice 2")
        done.set()

    _run_holder(job, log)
    assert done.is_set()
    assert log.events == ["job slice 1", "click", "other job", "job slice 2"]


def test_an_interactive_holder_does_not_yield_to_background_work():
    sched, log = ModelScheduler(), _Log()
    sched.acquire()
    waiter = _queue(sched, log, "bg", True)
    assert not sched.yield_to_waiting()  # only other clicks may go first
    log.add("click continues")
    sched.release()
    waiter.join()
    assert log.events == ["click continues", "bg"]


def test_background_work_waits_while_clicks_keep_arriving():
    """Each click queues the next before it lets go: background work gets the model only after the last."""
    sched, log = ModelScheduler(), _Log()
    sched.acquire()
    background = _queue(sched, log, "bg", True)
    chain: list[threading.Thread] = []

    def click(k: int):
        with sched:
            log.add(f"click{k}")
            if k < 3:
                start_click(k + 1)

    def start_click(k: int):
        before = sched.waiting(INTERACTIVE)
        chain.append(threading.Thread(target=click, args=(k,)))
        chain[-1].start()
        wait_until(lambda: sched.waiting(INTERACTIVE) > before, f"click{k} to queue")

    start_click(0)
    sched.release()
    background.join()
    for t in chain:
        t.join()
    assert log.events == ["click0", "click1", "click2", "click3", "bg"]


def test_reentrant_and_no_yield_below_depth_one():
    sched, log = ModelScheduler(), _Log()
    with sched.background():
        with sched:  # re-entrant at any priority
            waiter = _queue(sched, log, "click", False)
            assert not sched.yield_to_waiting()  # depth 2: the caller still relies on what it holds
            log.add("inner")
        assert sched.holder_is_background()
        log.add("outer")
        assert sched.yield_to_waiting()
        log.add("after yield")
    waiter.join()
    assert log.events == ["inner", "outer", "click", "after yield"]
    assert not sched.locked()


def test_only_the_holder_may_release_or_yield():
    sched = ModelScheduler()
    with pytest.raises(RuntimeError, match="does not hold it"):
        sched.release()
    with pytest.raises(RuntimeError, match="does not hold it"):
        sched.yield_to_waiting()
    sched.acquire()
    errors = []

    def other():
        for call in (sched.release, sched.yield_to_waiting):
            try:
                call()
            except RuntimeError as e:
                errors.append(str(e))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    sched.release()
    assert len(errors) == 2 and not sched.locked()


def test_interactive_waiting_says_whether_a_click_waits_not_background_work():
    sched, log = ModelScheduler(), _Log()
    with sched.background():
        assert not sched.interactive_waiting()
        bg = _queue(sched, log, "bg", True)
        assert not sched.interactive_waiting()  # other background work is not urgent
        click = _queue(sched, log, "click", False)
        assert sched.interactive_waiting()
        assert sched.yield_to_waiting()  # the click, then the background work that queued first, run here
        assert log.events == ["click", "bg"] and not sched.interactive_waiting()
    for t in (bg, click):
        t.join()


# --------------------------------------------------------------- user jobs (issue 35 point 5)
# Each ordering test below fails on the two-level scheduler, where a user-started job (an explanation test)
# queued as background work: there it came after background work that queued before it.


def test_a_user_job_goes_before_background_work_that_queued_earlier_when_the_holder_yields():
    """A matrix job holds the model; another background job and then an explanation test queue: the test goes first."""
    sched, log = ModelScheduler(), _Log()

    def matrix_job():
        with sched.background():
            log.add("matrix slice 1")
            _queue(sched, log, "other matrix job", BACKGROUND)
            _queue(sched, log, "test", USER_JOB)
            assert sched.outranked()  # the slice may end at the next layer boundary
            assert sched.yield_to_waiting()
            log.add("matrix slice 2")

    _run_holder(matrix_job, log)
    assert log.events == ["matrix slice 1", "test", "other matrix job", "matrix slice 2"]


def test_interactive_requests_still_go_before_user_jobs():
    assert _order_of(("bg", BACKGROUND), ("test", USER_JOB), ("click", INTERACTIVE)) == ["click", "test", "bg"]


def test_user_jobs_are_served_in_arrival_order_before_background_work():
    assert _order_of(("test1", USER_JOB), ("bg", BACKGROUND), ("test2", USER_JOB),
                     ("test3", USER_JOB)) == ["test1", "test2", "test3", "bg"]


def test_a_yielding_user_job_lets_clicks_and_earlier_user_jobs_go_first_never_background_work():
    sched, log = ModelScheduler(), _Log()

    def test_job():
        with sched.user_job():
            log.add("test slice 1")
            for name, priority in (("bg", BACKGROUND), ("intervention", USER_JOB), ("click", INTERACTIVE)):
                _queue(sched, log, name, priority)
            assert sched.yield_to_waiting()
            log.add("test slice 2")
            assert sched.waiting(BACKGROUND) == 1 and not sched.outranked()
            assert not sched.yield_to_waiting()  # only background work waits: the test keeps the model
            log.add("test slice 3")

    _run_holder(test_job, log)
    assert log.events == ["test slice 1", "click", "intervention", "test slice 2", "test slice 3", "bg"]


def test_reentrant_acquire_at_other_levels_keeps_the_first_level_and_does_not_deadlock():
    sched, log = ModelScheduler(), _Log()
    with sched.user_job():
        with sched.background():  # less urgent, re-entrant
            with sched:  # more urgent, re-entrant
                assert sched.holder_priority() == USER_JOB
                click = _queue(sched, log, "click", INTERACTIVE)
                bg = _queue(sched, log, "bg", BACKGROUND)
                assert not sched.yield_to_waiting()  # depth 3: the caller still relies on what it holds
                log.add("inner")
        assert sched.holder_priority() == USER_JOB and not sched.holder_is_background()
        assert sched.yield_to_waiting()  # depth 1 again: the click goes first, the background work does not
        log.add("outer")
    for t in (click, bg):
        t.join()
    assert log.events == ["inner", "click", "outer", "bg"]
    assert not sched.locked() and sched.holder_priority() is None


def test_a_user_job_outranks_its_own_clients_background_work_only():
    """Issue 43: one client's explanation test paused every other client's matrices ("paused: your own work goes
    first", which was not theirs). Another client's user job and background work now take turns."""
    sched, log = ModelScheduler(), _Log()
    with clients.acting_as("tab-a"):
        sched.acquire(USER_JOB)  # tab-a's explanation test holds the model
    try:
        mine = _queue(sched, log, "a-background", BACKGROUND, "tab-a")
        with clients.acting_as("tab-a"):
            assert not sched.yield_to_waiting()  # its own matrices wait for it
        assert not sched.outranked()
        theirs = _queue(sched, log, "b-background", BACKGROUND, "tab-b")
        assert not sched.outranked()  # another client's work takes turns with it: no pause inside a pass
        with clients.acting_as("tab-a"):
            assert sched.yield_to_waiting()  # between slices: tab-b's slice, then tab-a's test again
        assert log.events == ["b-background"]
        theirs.join()
        assert sched.waiting(BACKGROUND) == 1  # tab-a's own background work still waits behind its test
    finally:
        sched.release()
    mine.join()
    assert log.events == ["b-background", "a-background"]


def test_without_client_ids_the_levels_stay_strict():
    sched, log = ModelScheduler(), _Log()
    sched.acquire(USER_JOB)
    bg = _queue(sched, log, "bg", True)
    assert not sched.yield_to_waiting()  # a user job never yields to background work of its (anonymous) client
    sched.release()
    bg.join()
    assert log.events == ["bg"]


def test_a_matrix_job_waiting_with_its_graph_lets_clicks_and_work_without_a_graph_go_never_another_graph():
    """Issue 43: each client's matrix job held its forward's graph across the others' turns (four: +89 % RSS).
    While a job yields holding its graph, another matrix job (graph=True) does not start; it goes once the
    holder says it freed its graph, and `graph_waiting` tells the holder that it waits."""
    sched, log = ModelScheduler(), _Log()
    with clients.acting_as("tab-a"):
        sched.acquire(BACKGROUND, graph=True)
    try:
        assert not sched.graph_waiting()
        other = _queue(sched, log, "b-matrix", BACKGROUND, "tab-b", graph=True)
        segment = _queue(sched, log, "c-segment", BACKGROUND, "tab-c")
        click = _queue(sched, log, "d-click", INTERACTIVE, "tab-d")
        assert sched.graph_waiting()
        with clients.acting_as("tab-a"):
            assert sched.yield_to_waiting(holding_graph=True)  # the click and the segment job go, not b's matrices
        segment.join()
        click.join()
        assert log.events == ["d-click", "c-segment"]
        assert sched.graph_waiting() and sched.waiting(BACKGROUND) == 1
        with clients.acting_as("tab-a"):
            assert not sched.yield_to_waiting(holding_graph=True)  # only b's matrices wait: tab-a goes on
            assert sched.yield_to_waiting(holding_graph=False)  # its graph freed: b's turn
        other.join()
        assert log.events == ["d-click", "c-segment", "b-matrix"]
        assert not sched.graph_waiting()
    finally:
        sched.release()


def test_a_waiting_holder_of_a_graph_goes_before_matrix_work_that_queued_earlier():
    """The holder re-queues behind b's matrix job (which waited longer) yet goes first: b would build a second
    graph. b goes once the holder lets the model go at the end of its pass."""
    sched, log = ModelScheduler(), _Log()
    with clients.acting_as("tab-a"):
        sched.acquire(BACKGROUND, graph=True)
    try:
        other = _queue(sched, log, "b-matrix", BACKGROUND, "tab-b", graph=True)
        segment = _queue(sched, log, "c-segment", BACKGROUND, "tab-c")
        with clients.acting_as("tab-a"):
            assert sched.yield_to_waiting(holding_graph=True)
        log.add("a-continues")
        segment.join()
        assert log.events == ["c-segment", "a-continues"]
        assert sched.waiting(BACKGROUND) == 1  # b's matrices still wait
    finally:
        sched.release()
    other.join()
    assert log.events == ["c-segment", "a-continues", "b-matrix"]


class _ModelClock:
    """A scripted model-time clock (`ModelScheduler(clock=...)`): only the holder of the model moves it on, by the
    units of model time its slice takes."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _equal_jobs(sched: ModelScheduler, clock: _ModelClock, jobs: dict[str, tuple[float, int]],
                alone_first: float = 0.0) -> list[tuple[str, float]]:
    """Runs background jobs of one client, {name: (model time each slice holds, slices)}, the first in `jobs`
    taking the model first (after `alone_first` units of model time alone, yielding to nobody), the others queued
    behind it; each yields between its slices. Returns the slices as (job, units) in the order they ran."""
    log: list[tuple[str, float]] = []
    first, *later = jobs
    started = threading.Event()
    go = threading.Event()

    def job(name: str) -> None:
        units, slices = jobs[name]
        with sched.background():
            if name == first:
                clock.now += alone_first
                assert not sched.yield_to_waiting()  # nobody waits yet: nothing to share
                started.set()
                go.wait()
            for _ in range(slices):
                clock.now += units
                log.append((name, units))
                sched.yield_to_waiting()

    threads = [threading.Thread(target=job, args=(first,))]
    threads[0].start()
    started.wait()
    for k, name in enumerate(later):
        threads.append(threading.Thread(target=job, args=(name,)))
        threads[-1].start()
        wait_until(lambda k=k: sched.waiting(BACKGROUND) == k + 1, f"{name} to queue")
    go.set()
    for t in threads:
        t.join()
    return log


def _model_time_until_done(log: list[tuple[str, float]], name: str) -> dict[str, float]:
    """{job: model time it held} in `log` up to and including the last slice of job `name`."""
    last = max(k for k, (n, _) in enumerate(log) if n == name)
    held: dict[str, float] = {}
    for n, units in log[:last + 1]:
        held[n] = held.get(n, 0.0) + units
    return held


def test_equal_jobs_share_model_time_not_turns():
    # Issue 43 (docs/benchmarks.md "Session 35 (h2)"): a job that yields after 1 unit of model time beside one that
    # holds the model for 10 units between its yields got one turn each: 1/11 of the model. Now about half.
    clock = _ModelClock()
    sched = ModelScheduler(clock=clock)
    log = _equal_jobs(sched, clock, {"long batches": (10.0, 6), "short slices": (1.0, 100)})
    held = _model_time_until_done(log, "long batches")
    assert held["long batches"] == 60.0
    # While the long job ran its 60 units, the short one held the model for as long, within one long batch.
    assert 50.0 <= held["short slices"] <= 70.0
    assert [n for n, _ in log[-30:]] == ["short slices"] * 30  # then it runs alone to its end


def test_a_job_that_arrives_late_does_not_starve_the_earlier_one():
    # The late job starts at the earlier one's virtual time, not at 0: it gets no credit for the 100 units the
    # earlier one held alone, and from then on they share the model's time.
    clock = _ModelClock()
    sched = ModelScheduler(clock=clock)
    log = _equal_jobs(sched, clock, {"early": (1.0, 30), "late": (10.0, 3)}, alone_first=100.0)
    assert log[0] == ("early", 1.0)  # the late job did not take the model for its 100 units of "debt"
    held = _model_time_until_done(log, "late")
    assert held["late"] == 30.0
    assert 20.0 <= held["early"] <= 40.0
