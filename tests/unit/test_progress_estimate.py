"""The time-left estimate of a background or span job (lit_app/progressive.py `Job.report` / `Job.eta`),
on recorded sequences of progress reports (issue 35: "50 % · about 1 s left" after 24–42 s that then
counted up; "100 % · about 1 s left" for 9–12 s; a per-token estimate that grew from 10 to 21 min in 10 s).
"""

from __future__ import annotations

from lit_app import progressive


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _job(clock: Clock) -> progressive.Job:
    job = progressive.Job(group="g", kind="span", run=lambda _job: None, clock=clock)
    job.state, job.started = progressive.RUNNING, clock()
    return job


def _replay(events: list[tuple[float, int | None, int]], poll_every: float = 1.0) -> list[tuple[float, int, float | None]]:
    """Replays (time since start, done or None for a poll only, total) and polls every `poll_every` s
    between events; returns (time, done, eta_s) of every poll."""
    clock = Clock()
    start = clock.now
    job = _job(clock)
    polls = []
    t = 0.0
    for at, done, total in events:
        while t < at:
            clock.now = start + t
            polls.append((t, job.done, job.status()["eta_s"]))
            t += poll_every
        clock.now = start + at
        if done is not None:
            job.report(done, total)
    return polls


# IG with 32 steps in two batches of 16 on a busy machine: the first batch ends at 24 s, the second at 48 s,
# then the answer is assembled (10 s) while every step is done. Recorded from the sequence.
IG_TWO_BATCHES = [(24.0, 16, 32), (48.0, 32, 32), (58.0, None, 32)]


def test_half_way_the_estimate_is_the_measured_cost_of_the_other_half():
    polls = _replay(IG_TWO_BATCHES)
    at_report = [eta for t, done, eta in polls if t == 24.0]
    # Hand-derived: 16 steps took 24 s, 16 steps are left -> 24 s (was: "about 1 s left").
    assert at_report == [24.0]


def test_the_estimate_never_counts_up():
    etas = [eta for _t, _done, eta in _replay(IG_TWO_BATCHES) if eta is not None]
    assert etas, "an estimate is shown while the second batch runs"
    assert all(b <= a for a, b in zip(etas, etas[1:])), etas


def test_no_time_left_is_claimed_once_every_unit_is_done():
    done_polls = [eta for t, done, eta in _replay(IG_TWO_BATCHES) if done == 32]
    assert len(done_polls) == 10 and all(eta is None for eta in done_polls)


def test_a_slower_later_report_does_not_raise_the_estimate():
    # Per-token rows: 10 rows in 60 s (-> 90 rows left = 540 s), then the machine gets busy: 20 rows at
    # 300 s would say 80 rows x 15 s = 1200 s. The estimate keeps counting down instead of growing.
    polls = _replay([(60.0, 10, 100), (300.0, 20, 100), (310.0, None, 100)])
    etas = {t: eta for t, _done, eta in polls}
    assert etas[60.0] == 540.0
    assert etas[300.0] == 300.0  # 540 s from t=60 ends at t=600
    assert etas[309.0] == 291.0


def test_between_reports_the_estimate_counts_down_with_the_clock():
    # (was: elapsed x left / done at each poll, which grows between reports: 10 -> 21 min in 10 s)
    polls = _replay([(30.0, 1, 21), (40.0, None, 21)])
    etas = [eta for t, _done, eta in polls if t >= 30.0]
    assert etas == [600.0 - k for k in range(10)]


def test_an_estimate_that_ran_out_before_the_work_says_nothing():
    # 1 of 4 units in 10 s -> 30 s left; at 45 s the second unit has not come: no "about 1 s left".
    polls = _replay([(10.0, 1, 4), (45.0, None, 4)])
    etas = {t: eta for t, _done, eta in polls}
    assert etas[30.0] == 10.0
    assert all(etas[t] is None for t in range(40, 45))


def test_while_paused_behind_a_user_job_the_status_says_waiting_and_the_estimate_resumes_after():
    """A matrix job waits while an explanation test the user started runs (lit_app/scheduler.py's user
    jobs go first): its estimate must not count down meanwhile, nor count the pause as model time."""
    clock = Clock()
    job = _job(clock)
    clock.now += 10.0
    job.report(10, 40)  # 1 s a unit: 30 s left
    assert job.status()["eta_s"] == 30.0 and job.status()["waiting"] is False
    with job.waiting():
        clock.now += 100.0  # the user's test runs for 100 s
        paused = job.status()
        assert paused["waiting"] is True and paused["eta_s"] is None  # was: "about 30 s left" counting down to none
    assert job.status() == {**paused, "waiting": False, "eta_s": 30.0}  # the same 30 s left, not 0 or none
    clock.now += 10.0
    job.report(20, 40)  # 10 more units in 10 s of model time: still 1 s a unit (not 110 s / 20 units)
    assert job.status()["eta_s"] == 20.0


def test_a_second_sequence_of_units_gets_its_own_estimate():
    """A job whose work reports one pass (1 of 1) and then steps (8 of 256, ...), as a span with IG did: the
    first sequence's estimate ran out at its end, and must not hide the steps' (was: no time left was ever
    shown for 256 IG steps, the browser's progress line said only "… 3 %", "… 6 %", …)."""
    polls = _replay([(0.7, 1, 1), (2.1, 8, 256), (2.8, 16, 256), (4.0, None, 256)], poll_every=0.1)
    # Hand-derived: the steps began at the 1/1 report (0.7 s); 8 steps took 1.4 s, 248 are left -> 43.4 s.
    at_first_steps = [eta for t, done, eta in polls if abs(t - 2.2) < 1e-9]
    assert at_first_steps == [43.3]  # 43.4 s at 2.1 s, counted down by the clock 0.1 s later
    # The next report (16 steps in 2.1 s -> 240 x 2.1 / 16 = 31.5 s) lowers it; it never rises.
    etas = [eta for t, _done, eta in polls if t >= 2.1 and eta is not None]
    assert all(b <= a for a, b in zip(etas, etas[1:])), etas
    assert [eta for t, _done, eta in polls if abs(t - 2.9) < 1e-9] == [31.4]


def test_units_after_begin_sequence_are_estimated_from_it():
    """A span with IG no longer reports its one-pass gradients as units (the page showed "100 % · finishing…"
    before the first step, issue 35): the pass's end begins the steps' sequence, so its time is not counted in
    their cost, and until the first step the status has no unit and no estimate."""
    clock = Clock()
    job = _job(clock)
    clock.now += 0.7  # the gradient pass, and the wait for the model before it
    job.begin_sequence()
    assert (job.status()["done"], job.status()["total"], job.status()["eta_s"]) == (0, 0, None)
    clock.now += 1.4
    job.report(8, 256)
    # Hand-derived: 8 steps in 1.4 s since the pass ended, 248 left -> 43.4 s (from the start: 248 x 2.1 / 8 = 65.1).
    assert job.status()["eta_s"] == 43.4
