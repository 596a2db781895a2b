"""The model scheduler (lit_app/scheduler.py): interactive requests before background slices.

Threads queue for the model; the order in which they get it is recorded inside the critical
section (an event log), never timed. Queued states are observed through `waiting()`.
"""

from __future__ import annotations

import threading

import pytest

from lit_app.scheduler import ModelScheduler
from tests.unit.waiting import wait_until



class _Log:
    def __init__(self):
        self.events: list[str] = []
        self._lock = threading.Lock()

    def add(self, event: str) -> None:
        with self._lock:
            self.events.append(event)


def _queue(sched: ModelScheduler, log: _Log, name: str, background: bool) -> threading.Thread:
    """Starts a thread that takes the model (at the given priority), logs `name`, lets go; returns once it waits."""
    before = sched.waiting(background)

    def run():
        sched.acquire(background=background)
        try:
            log.add(name)
        finally:
            sched.release()

    thread = threading.Thread(target=run, name=name)
    thread.start()
    wait_until(lambda: sched.waiting(background) > before, f"{name} to queue")
    return thread


def test_waiting_interactive_requests_go_before_background_work_that_queued_earlier():
    sched, log = ModelScheduler(), _Log()
    sched.acquire()
    threads = [_queue(sched, log, "bg1", True), _queue(sched, log, "click1", False),
               _queue(sched, log, "bg2", True), _queue(sched, log, "click2", False)]
    assert sched.waiting() == 4 and sched.waiting(False) == 2 and sched.waiting(True) == 2
    sched.release()
    for t in threads:
        t.join()
    assert log.events == ["click1", "click2", "bg1", "bg2"]  # interactive first, each kind in arrival order


def test_a_click_during_a_slice_runs_before_the_next_slice():
    sched, log = ModelScheduler(), _Log()
    clicks: list[threading.Thread] = []

    def job():
        with sched.background():
            for k in range(4):
                log.add(f"slice{k}")
                if k == 1:  # a click arrives while slice 1 runs
                    clicks.append(_queue(sched, log, "click", False))
                sched.yield_to_waiting()

    worker = threading.Thread(target=job)
    worker.start()
    worker.join()
    clicks[0].join()
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

    worker = threading.Thread(target=job)
    worker.start()
    worker.join()
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
        before = sched.waiting(False)
        chain.append(threading.Thread(target=click, args=(k,)))
        chain[-1].start()
        wait_until(lambda: sched.waiting(False) > before, f"click{k} to queue")

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
