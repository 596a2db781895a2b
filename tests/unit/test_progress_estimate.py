"""The time-left estimate of every job (lit_app/model/time_left.py, through lit_app/model/progressive.py `Job.report` /
`Job.status`), on recorded sequences of progress reports.

Issue 35: "50 % · about 1 s left" after 24–42 s that then counted up; a per-token estimate that grew from 10 to
21 min in 10 s. Issue 43: leave one word out said "about 1 s left" with 31 of 92 forwards to go and then nothing
for 7 minutes (the forwards had slowed down); the estimate is now a range from the recent units' rate.
"""

from __future__ import annotations

import pytest

from lit_app.model import progressive, time_left
from sequence_salience.methods.base import SalienceConfig
from sequence_salience.methods.sampling import point_row_cost, span_point_cost


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _job(clock: Clock) -> progressive.Job:
    job = progressive.Job(group="g", kind="span", run=lambda _job: None, clock=clock)
    job.start()
    return job


def _replay(events: list[tuple[float, int | None, int]], poll_every: float = 1.0) -> list[tuple[float, int, dict]]:
    """Replays (time since start, done or None for a poll only, total) and polls every `poll_every` s
    between events; returns (time, done, status) of every poll."""
    clock = Clock()
    start = clock.now
    job = _job(clock)
    polls = []
    t = 0.0
    for at, done, total in events:
        while t < at - 1e-9:
            clock.now = start + t
            polls.append((round(t, 6), job.done, job.status()))
            t += poll_every
        clock.now = start + at
        if done is not None:
            job.report(done, total)
    return polls


def _units(seconds_per_unit: list[float], total: int | None = None) -> list[tuple[float, int, int]]:
    """Reports of one unit each, taking the given seconds (a recorded run)."""
    total = total if total is not None else len(seconds_per_unit)
    t, events = 0.0, []
    for k, s in enumerate(seconds_per_unit, start=1):
        t += s
        events.append((t, k, total))
    return events


def _true_left(run: list[float], t: float) -> float:
    return max(0.0, sum(run) - t)


# IG with 32 steps in two batches of 16 on a busy machine: the first batch ends at 24 s, the second at 48 s,
# then the answer is assembled (10 s) while every step is done. Recorded from issue 35's sequence.
IG_TWO_BATCHES = [(24.0, 16, 32), (48.0, 32, 32), (58.0, None, 32)]


def test_half_way_the_estimate_is_the_measured_cost_of_the_other_half():
    polls = _replay(IG_TWO_BATCHES)
    at_report = [(s["eta_low_s"], s["eta_high_s"], s["eta_s"]) for t, done, s in polls if t == 24.0]
    # Hand-derived: 16 steps took 24 s, 16 steps are left -> 24 s (was: "about 1 s left").
    assert at_report == [(24.0, 24.0, 24.0)]


def test_no_time_left_is_claimed_once_every_unit_is_done():
    done_polls = [s for t, done, s in _replay(IG_TWO_BATCHES) if done == 32]
    assert len(done_polls) == 10 and all(s["eta_s"] is None and s["eta_high_s"] is None for s in done_polls)


def test_between_reports_the_estimate_counts_down_with_the_clock():
    # (was: elapsed x left / done at each poll, which grows between reports: 10 -> 21 min in 10 s)
    polls = _replay([(30.0, 1, 21), (40.0, None, 21)])
    etas = [s["eta_s"] for t, _done, s in polls if t >= 30.0]
    # Hand-derived: 30 s a unit, 20 left -> 600 s, less the time since the report.
    assert etas == [600.0 - k for k in range(10)]


# The rate drops midway: 20 units of 1 s, then 20 units of 2 s (a loaded machine; issue 43's leave one word out).
RATE_HALVES = [1.0] * 20 + [2.0] * 20
# The rate doubles midway: 20 units of 2 s, then 20 of 1 s.
RATE_DOUBLES = [2.0] * 20 + [1.0] * 20


@pytest.mark.parametrize("run", [pytest.param(RATE_HALVES, id="rate halves"),
                                 pytest.param(RATE_DOUBLES, id="rate doubles")])
def test_a_recorded_run_whose_rate_changes_midway_gets_true_ranges(run):
    """Once a few units have run at the new rate, at every poll to the end the range contains the true remaining
    time (before, the run's future change cannot be known: the range holds the time left at the rate so far)."""
    polls = _replay(_units(run) + [(sum(run), None, len(run))], poll_every=0.25)
    checked = 0
    for t, done, s in polls:
        if done < 3 or done >= len(run):
            continue
        rate_so_far = run[:20] if done < 20 else run
        left = _true_left(run, t) if done >= 23 else _true_left(rate_so_far[:20] * 2, t) if done < 20 else None
        if left is None:  # the first units at the new rate: the change is being measured
            continue
        assert s["eta_low_s"] - 0.05 <= left <= s["eta_high_s"] + 0.05, (t, done, left, s)
        checked += 1
    assert checked > 100


def test_the_range_widens_when_the_rate_drops_and_narrows_once_it_is_steady():
    polls = {t: s for t, _done, s in _replay(_units(RATE_HALVES) + [(60.0, None, 40)], poll_every=0.5)}
    before = polls[19.5]  # 19 units of 1 s done
    after = polls[22.5]  # the first unit of 2 s is done
    steady = polls[50.0]  # the last 8 units all took 2 s
    width = lambda s: s["eta_high_s"] - s["eta_low_s"]  # noqa: E731
    assert width(before) <= 1.0  # steady at 1 s a unit: about 21 s
    # Hand-derived: 19 left, the one in flight 0.5 s along: low 18 x 1 s + 0.5 s, high 18 x 4 s (2 s a unit, x 2
    # for the drop) + 1.5 s.
    assert (after["eta_low_s"], after["eta_high_s"]) == (18.5, 73.5)
    assert width(after) > 10 * width(before)
    assert width(steady) <= 2.0 and steady["eta_low_s"] <= 10.0 <= steady["eta_high_s"]  # 5 units of 2 s left


def test_one_slow_unit_among_fast_ones_widens_the_range_at_most_twice_and_not_once_the_next_is_fast():
    """The coarse curves on a busy machine (a CI failure): units of 0.5 s, the 10th takes 2.5 s (the machine busy for
    a moment), then 0.5 s again. Was: "about 1–5 min left" 8 s before the stage ended (slow x slow / fast = 25 x the
    fast rate for every remaining unit, for the window's 8 reports). Hand-derived at each report (since = 0):
    after the 10th, 30 left: low 29 x 0.5 + 0.5 = 15, high 29 x (2.5 x 2) + 2.5 = 147.5 (the drop doubles the slowest
    rate, not x 5); after the 11th, 29 left: low 28 x 0.5 + 0.5 = 14.5, high 28 x 2.5 + 2.5 = 72.5 (the last rate is
    the fastest again: the slowest recent rate, not widened)."""
    run = [0.5] * 9 + [2.5] + [0.5] * 30
    polls = {t: (done, s) for t, done, s in _replay(_units(run) + [(sum(run), None, 40)], poll_every=0.5)}
    done, s = polls[7.0]
    assert done == 10 and (s["eta_low_s"], s["eta_high_s"]) == (15.0, 147.5)
    done, s = polls[7.5]
    assert done == 11 and (s["eta_low_s"], s["eta_high_s"]) == (14.5, 72.5)


def test_units_found_in_a_memo_count_as_done_but_do_not_skew_the_rate():
    """The upper bound's search: 10 rows scored at 1 s each, then 20 planned rows found in the curves' memo at once (the
    same instant), then 10 more at 1 s (issue 45: "about 1–6936 min left" for a search that ended 2 s later). The free
    rows are done; the range stays that of 1 s a row: hand-derived, 10 rows left just after the jump -> at most 10 s;
    its low end counts the 9 rows after the one in flight at the share of rows that took work (10 of 30: more rows
    may be found in the memo, below) -> 1 + 9 / 3 = 4 s."""
    events = [*_units([1.0] * 10, total=40), (10.0, 30, 40), *((10.0 + k, 30 + k, 40) for k in range(1, 11)),
              (21.0, None, 40)]
    polls = {t: (done, s) for t, done, s in _replay(events, poll_every=0.5)}
    done, after_jump = polls[10.0]
    assert done == 30 and (after_jump["eta_low_s"], after_jump["eta_high_s"]) == (4.0, 10.0)
    for t in (12.0, 15.5, 19.0):
        left = 40 - polls[t][0]
        assert polls[t][1]["eta_high_s"] <= left + 1.0, (t, polls[t])  # 1 s a row, the row in flight counted


# The refining curves' upper-bound search on the simple question (d6ed874's log): 6 calls planning 14, 12, 10, 8, 6
# and 4 rows (54 units), of which 0, 0, 3, 4, 2 and 0 are scored (1 s each here); each call reports its rows found in
# the memo at once, before its first scored row.
SEARCH_CALLS = [(14, 0), (12, 0), (10, 3), (8, 4), (6, 2), (4, 0)]


def test_a_later_calls_memo_rows_are_not_counted_as_work_at_the_low_end():
    """Issue 43 (session 33's leftover): a later call's rows found in the memo counted as work until that call was
    made, so the whole range lay above the time the search took (at 3 s, 6 s from its end: "about 14 s"). Replayed
    and polled every 0.5 s: the high end never below the true time left; the low end never above it by more than
    one row's cost (1 s; it counts the rows left at the share that took work so far, and a later call may find
    all of its rows in the memo)."""
    events, t, done = [], 0.0, 0
    for planned, scored in SEARCH_CALLS:
        done += planned - scored
        events.append((t, done, 54))
        for _ in range(scored):
            t, done = t + 1.0, done + 1
            events.append((t, done, 54))
    end = t
    events.append((end + 0.5, None, 54))
    polls = [(at, s) for at, _done, s in _replay(events, poll_every=0.5) if s["eta_s"] is not None]
    assert len(polls) >= 10, polls
    for at, status in polls:
        left = end - at
        assert status["eta_high_s"] >= left - 0.05, (at, status)
        assert status["eta_low_s"] <= left + 1.0, (at, status)


def test_a_stalled_unit_never_shows_about_one_second_left_and_the_estimate_grows():
    """10 units of 1 s done of 40, then the 11th takes 120 s (was: "about 1 s left", then nothing)."""
    polls = _replay([*_units([1.0] * 10, total=40), (130.0, 11, 40), (131.0, None, 40)])
    during = [(t, s) for t, done, s in polls if done == 10 and t >= 10.0]
    assert all(s["eta_low_s"] >= 29.0 for _t, s in during)  # 29 units after this one, at 1 s at the fastest
    highs = [s["eta_high_s"] for t, s in during if t >= 12.0]
    assert all(b > a for a, b in zip(highs, highs[1:]))  # the unit in flight is slower than the estimate: it grows
    assert highs[-1] >= 2 * 120


def test_the_last_unit_in_flight_still_has_an_upper_bound_that_grows():
    polls = _replay([*_units([1.0] * 9, total=10), (60.0, None, 10)])
    late = [s for t, done, s in polls if t >= 20.0]
    assert all(s["eta_high_s"] is not None and s["eta_high_s"] >= 0.5 * (t - 9) for (t, _d, _s), s in
               zip([p for p in polls if p[0] >= 20.0], late))


def test_while_paused_behind_a_user_job_the_status_says_waiting_and_the_estimate_resumes_after():
    """A matrix job waits while an explanation test the user started runs (lit_app/model/scheduler.py's user
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
    assert job.status() == {**paused, "waiting": False, "eta_s": 30.0, "eta_low_s": 30.0, "eta_high_s": 30.0}
    clock.now += 10.0
    job.report(20, 40)  # 10 more units in 10 s of model time: still 1 s a unit (not 110 s / 20 units)
    assert job.status()["eta_s"] == 20.0


def test_a_second_sequence_of_units_gets_its_own_estimate():
    """A job whose work reports one pass (1 of 1) and then steps (8 of 256, ...), as a span with IG did: the
    first sequence's rate must not be the steps' (was: no time left was ever shown for 256 IG steps)."""
    polls = _replay([(0.7, 1, 1), (2.1, 8, 256), (2.8, 16, 256), (4.0, None, 256)], poll_every=0.1)
    # Hand-derived: the steps began at the 1/1 report (0.7 s); 8 steps took 1.4 s, 248 are left -> 43.4 s.
    at_first_steps = [s["eta_s"] for t, done, s in polls if abs(t - 2.2) < 1e-9]
    assert at_first_steps == [43.3]  # 43.4 s at 2.1 s, counted down by the clock 0.1 s later
    # The next 8 steps took 0.7 s: 240 left between 240 x 0.0875 = 21 s and 240 x 0.175 = 42 s, 0.1 s later.
    assert [(s["eta_low_s"], s["eta_high_s"]) for t, _done, s in polls if abs(t - 2.9) < 1e-9] == [(20.9, 41.9)]


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


def test_the_range_is_never_inverted():
    clock = Clock()
    est = time_left.TimeLeft(clock)
    for k, s in enumerate([0.5, 3.0, 0.1, 7.0, 0.2, 0.2, 9.0], start=1):
        clock.now += s
        est.report(k, 20)
        for _ in range(5):
            clock.now += 0.7
            r = est.range()
            assert r is not None and 0.0 <= r.low <= r.high
        clock.now -= 3.5


def test_a_user_job_reports_its_time_left_from_the_same_estimator():
    """Explanation tests and intervention runs (lit_app/model/user_jobs.py) give the same range; a new stage is a new
    sequence of units."""
    from lit_app.model import user_jobs  # pylint: disable=import-outside-toplevel

    clock = Clock()
    job = user_jobs.UserJob("curves", "k")
    job.time_left = time_left.TimeLeft(clock)
    job.report("deletion", 0, 10)
    assert job.status()["eta_s"] is None  # no unit measured yet
    clock.now += 4.0
    job.report("deletion", 2, 10)
    assert (job.status()["eta_low_s"], job.status()["eta_high_s"]) == (16.0, 16.0)  # 2 s a unit, 8 left
    clock.now += 1.0
    job.report("insertion", 1, 4)  # the next stage: measured from its own units
    assert job.status()["eta_s"] == 3.0


def test_a_stage_of_the_same_units_starts_from_the_last_stages_rate():
    """The curves' rows at 1 s each, then the upper bound's stage (same units: forward rows, `same_units`) whose first
    report is 20 of 40 rows found in the memo at once: its estimate is the curves' rate at once, 20 rows -> 20 s
    (was: none until its first scored batch). Another kind of stage (no `same_units`) starts from the last stage's
    rates, widened (time_left.BORROW_WIDEN)."""
    clock = Clock()
    job = _job(clock)
    for k in range(1, 11):
        clock.now += 1.0
        job.report("curves", k, 10)
    clock.now += 0.001
    job.report("upper_bound", 20, 40, same_units=True)
    status = job.status()
    assert (status["eta_low_s"], status["eta_high_s"]) == (20.0, 20.0)  # 20 rows at 1 s, the next one begins now
    other = _job(clock)
    for k in range(1, 11):
        clock.now += 1.0
        other.report("trace", k, 10)
    clock.now += 0.001
    other.report("generate", 20, 40)  # units of another kind: the trace's rate borrowed, 4 x wider each way
    status = other.status()
    # Hand-derived: the first report's 20 units are the chunk in flight (u = 20, none left after it), at 1/4 to 4
    # times the trace's 1 s a unit: low 20 x 0.25 = 5 s, high 20 x 4 = 80 s (was: no estimate).
    assert (status["eta_low_s"], status["eta_high_s"]) == (5.0, 80.0)


# A span with 112 IG steps on the default model at graph_token_budget 256 (the simple question, 48 tokens: 5 steps
# per forward), recorded on the shared machine (load ~3): (seconds since the span job started, done, total) of the
# gradient pass's reports (its forward as 30 units, then 2 per layer of the backward), the pass's end (begin_sequence
# at PASS_END), then the steps' reports in chunks of 5; the span ended at SPAN_END.
PASS_REPORTS = [(0.464, 30, 90), (0.514, 32, 90), (0.535, 34, 90), (0.550, 36, 90), (0.565, 38, 90), (0.570, 40, 90),
                (0.584, 42, 90), (0.593, 44, 90), (0.602, 46, 90), (0.617, 48, 90), (0.626, 50, 90), (0.634, 52, 90),
                (0.647, 54, 90), (0.656, 56, 90), (0.665, 58, 90), (0.674, 60, 90), (0.682, 62, 90), (0.687, 64, 90),
                (0.692, 66, 90), (0.696, 68, 90), (0.701, 70, 90), (0.705, 72, 90), (0.710, 74, 90), (0.716, 76, 90),
                (0.723, 78, 90), (0.729, 80, 90), (0.735, 82, 90), (0.741, 84, 90), (0.748, 86, 90), (0.754, 88, 90)]
PASS_END = 0.760
STEP_TIMES = [3.137, 4.844, 7.636, 10.907, 14.300, 18.120, 22.319, 25.336, 27.923, 31.647, 34.227, 36.292, 38.203,
              39.984, 41.812, 43.530, 45.354, 46.956, 50.175, 53.679, 57.377, 61.357, 63.218]
SPAN_END = 63.825
IG_STEPS, IG_CHUNK = 112, 5


def _words(status: dict) -> str:
    """The page's words for a status's range (frontend/src/shared/time_left.ts secondsRange, seconds only)."""
    low = max(1, round(status["eta_low_s"]))
    high = max(low, round(status["eta_high_s"]))
    return f"about {low} s left" if low == high else f"about {low}–{high} s left"


def test_a_gradient_pass_of_small_units_before_chunks_of_large_steps_never_says_about_one_second():
    """Issue 43 (test_true_progress failed twice at graph_token_budget 256 with "42 % · about 1 s left"): the IG line
    showed the gradient pass's own 90 units (38 of 90 is 42 %; no count of 5-step chunks of 112 is) with the time
    left of the pass alone, true of the pass and a minute short of the span. The pass now reports the steps that
    follow it (`then`: 112 steps, each 1/8 to 1 of the pass, methods/sampling.py span_point_cost): at every poll of
    the pass the range holds the span's true remaining time, and while a chunk's worth of steps is outstanding the
    page never words it "about 1 s left"."""
    clock = Clock()
    start = clock.now
    job = _job(clock)
    then = time_left.Then(IG_STEPS, *span_point_cost(SalienceConfig()))
    events = [(t, lambda d=d, n=n: job.report(d, n, then=then)) for t, d, n in PASS_REPORTS]
    events.append((PASS_END, job.begin_sequence))
    events += [(t, lambda d=min(IG_STEPS, IG_CHUNK * k): job.report(d, IG_STEPS))
               for k, t in enumerate(STEP_TIMES, start=1)]
    polls, t, step = [], 0.0, 0.05
    for at, happen in events:
        while t < at - 1e-9:
            clock.now = start + t
            polls.append((t, job.status()))
            t += step
        clock.now = start + at
        happen()
    in_pass = [(t, s) for t, s in polls if t < PASS_END and s["total"] == 90 and s["eta_s"] is not None]
    assert len(in_pass) >= 5, polls[:20]
    for t, s in in_pass:
        assert s["eta_low_s"] - 0.05 <= SPAN_END - t <= s["eta_high_s"] + 0.05, (t, s)
    steps_left = [(t, s) for t, s in polls if s["eta_s"] is not None and (s["total"] == 90 or
                                                                         IG_STEPS - s["done"] > 2 * IG_CHUNK)]
    assert len(steps_left) > 500
    for t, s in steps_left:
        assert _words(s) != "about 1 s left", (t, s)


def _costed_rows(fixed_s: float, per_position_s: float, rows: int = 92, first: int = 29, last: int = 132
                 ) -> list[tuple[float, int]]:
    """(seconds, positions) of leave one word out's rows as the scorer runs them: cheapest first, each recomputing
    from its removed word on (29 up to 132 positions on the constitutional row, docs/benchmarks.md "Session 34
    (h4)"), each taking a fixed part plus a part per position."""
    costs = [round(first + (last - first) * k / (rows - 1)) for k in range(rows)]
    return [(fixed_s + per_position_s * c, c) for c in costs]


def _replay_costed(rows: list[tuple[float, int]], with_cost: bool, poll_every: float = 0.5
                   ) -> list[tuple[float, float, dict]]:
    """Replays one report per row (with its known cost, or without) and polls every `poll_every` s; returns
    (time, true seconds left, status) of every poll while units are outstanding."""
    clock = Clock()
    start, job = clock.now, _job(clock)
    total_cost, end = sum(c for _s, c in rows), sum(s for s, _c in rows)
    polls, t, at, cost_done = [], 0.0, 0.0, 0
    for k, (seconds, cost) in enumerate(rows, start=1):
        at += seconds
        while t < at - 1e-9:
            clock.now = start + t
            polls.append((t, end - t, job.status()))
            t += poll_every
        clock.now = start + at
        cost_done += cost
        job.report(k, len(rows), cost=(cost_done, total_cost) if with_cost else None)
    return [(t, left, s) for t, left, s in polls if s["eta_s"] is not None]


@pytest.mark.parametrize("fixed_s, per_position_s", [
    pytest.param(0.14, 0.00243, id="fixed-part-plus-per-position"),  # h4's rows: 0.21 s at 29 positions, 0.46 at 132
    pytest.param(0.0, 0.004, id="constant-time-per-position"),
])
def test_rows_that_grow_dearer_along_the_job_get_true_ranges_from_their_known_cost(fixed_s, per_position_s):
    """Issue 43 (session 34): leave one word out's rows grow dearer along the job, and an estimate from the recent
    rows' rate lies below the truth (h4 replayed his runs: the truth above the high end in 15-28 % of polls). With
    each row's known cost (the positions it recomputes) the range holds the truth at every poll."""
    rows = _costed_rows(fixed_s, per_position_s)
    old = _replay_costed(rows, with_cost=False)
    above = [(t, left, s) for t, left, s in old if left > s["eta_high_s"] + 0.05]
    assert len(above) > len(old) // 4, (len(above), len(old))  # before: units only, the truth above the high end
    new = _replay_costed(rows, with_cost=True)
    assert len(new) == len(old)
    wrong = [(t, left, s["eta_low_s"], s["eta_high_s"]) for t, left, s in new
             if not s["eta_low_s"] - 0.05 <= left <= s["eta_high_s"] + 0.05]
    assert not wrong, wrong[:5]
    widths = [s["eta_high_s"] / max(left, 1e-9) for t, left, s in new if left > 5]
    assert max(widths) <= 3.0, max(widths)  # and no wider than needed: the high end at most 3x the truth


def test_a_report_without_its_cost_ends_the_estimate_in_cost():
    """A sequence whose reports stop carrying a cost is estimated from its units alone again (a costed estimate
    that no longer hears of the units would stand still)."""
    clock = Clock()
    job = _job(clock)
    clock.now += 1
    job.report(1, 4, cost=(10, 100))  # 0.1 s a position, 90 left: 9 s; 1 s a unit, 3 left: 3 s
    assert (job.status()["eta_low_s"], job.status()["eta_high_s"]) == (3.0, 9.0)
    clock.now += 1
    job.report(2, 4)
    assert job.status()["eta_low_s"] == job.status()["eta_high_s"] == 2.0  # 1 s a unit, 2 units left


# A per-token IG matrix job (8 steps) as two clients' equal jobs ran it, replayed on a fake clock: the gradient rows
# (12 targets) announced at the start (0 of 12, the core's method progress), then chunks of 3 rows at 0.6 s a row
# (the model shared); grad_x_input reuses them (announced, then 12 of 12 at once: no sample of a rate, session 38's
# probe had it as one and so "about 0-105 s left" for 120 IG units); then the IG units (12 targets x 8 steps)
# announced, in chunks of 24 at 0.55-0.65 s a unit (session 38's two-client probe on the default model: 0.58 s a
# row, 0.59 s an IG unit). Issue 43: the status had no estimate between the rows' end and the IG units' first chunk
# (~3.5 s in session 37's probe; here 13 s).
MATRIX_REPORTS = ([(0.0, 0, 12), (1.8, 3, 12), (3.6, 6, 12), (5.4, 9, 12), (7.2, 12, 12), (7.2, 0, 12), (7.21, 12, 12),
                   (7.2, 0, 96), (20.4, 24, 96), (34.8, 48, 96), (49.7, 72, 96), (65.3, 96, 96)])


def test_every_poll_of_a_matrix_job_with_units_outstanding_has_a_true_range_across_its_methods():
    """Between the gradient rows and the IG units the job borrows the rows' rate for the units it has announced,
    from 1/4 to 4 times (time_left.BORROW_WIDEN), until the first IG chunk is measured: every poll with units
    outstanding has a range (was: none for the 13 s of the first IG chunk), and the borrowed one holds the true time
    left."""
    clock = Clock()
    start = clock.now
    job = _job(clock)
    polls, t = [], 0.0
    for at, done, total in MATRIX_REPORTS:
        while t < at - 1e-9:
            clock.now = start + t
            polls.append((t, job.status()))
            t += 0.1
        clock.now = start + at
        job.report(done, total)
    end = MATRIX_REPORTS[-1][0]
    # (before the first rows end nothing is measured: a job's first sequence has nothing to borrow)
    outstanding = [(t, s) for t, s in polls if s["total"] > s["done"] and t >= 1.8]
    assert len(outstanding) > 600
    missing = [round(t, 1) for t, s in outstanding if s["eta_s"] is None]
    assert not missing, f"no estimate at {missing[0]}-{missing[-1]} s ({len(missing)} polls)"
    for t, s in outstanding:  # the borrowed range (while the rows run, the IG units are not counted: no `then` for
        if 7.2 <= t < 20.4:  # a matrix job yet; after the first IG chunk the measured rates: the tests above)
            assert s["eta_low_s"] - 0.05 <= end - t <= s["eta_high_s"] + 0.05, (round(t, 1), s)
    in_gap = [s for t, s in polls if 7.2 < t < 20.4]
    # Hand-derived 0.1 s into the gap: 96 units, the first in flight, at 0.6 / 4 = 0.15 to 0.6 x 4 = 2.4 s a unit:
    # low 95 x 0.15 + (0.15 - 0.1) = 14.3 s, high 95 x 2.4 + (2.4 - 0.1) = 230.3 s.
    assert (in_gap[0]["eta_low_s"], in_gap[0]["eta_high_s"]) == pytest.approx((14.3, 230.3), abs=0.05)


def test_a_span_announcing_its_steps_is_estimated_from_its_pass_before_the_first_step():
    """After a span's gradient pass (`then`: the steps each cost 1/8 to 1 of it), the core announces the IG steps
    (0 of 112) before the first chunk: the status has a range from the pass's time (was: none until the first
    chunk of steps)."""
    clock = Clock()
    job = _job(clock)
    then = time_left.Then(IG_STEPS, *span_point_cost(SalienceConfig()))
    job.report(0, 90, then=then)
    clock.now += 0.8
    job.report(88, 90, then=then)
    job.begin_sequence()
    job.report(0, IG_STEPS)
    status = job.status()
    # Hand-derived: 112 steps, the first in flight, each 0.8 / 8 = 0.1 s to 0.8 s: low 111 x 0.1 + 0.1 = 11.2 s,
    # high 111 x 0.8 + 0.8 = 89.6 s.
    assert (status["eta_low_s"], status["eta_high_s"]) == (11.2, 89.6)



def test_a_matrix_jobs_first_chunk_is_estimated_from_its_layers_before_it_ends():
    """Issue 44: a 4,000-token prompt's matrix job said no time left for its forward and its first chunk (one
    target's backward, about a minute). The chunk's layers now report the share done (`Job.report_within`, from the
    core's SliceSizer.inside): the time left is estimated from the chunk's rate so far, from half to twice it
    (time_left.INSIDE_WIDEN), before the chunk ends."""
    clock = Clock()
    job = _job(clock)
    job.report(0, 64)  # the method's announcement
    clock.now += 29.0
    job.report(0, 64)  # its forward: no unit done
    job.report_within(0.0, 4)  # the first chunk's backward begins: 4 targets
    assert job.status()["eta_s"] is None  # nothing measured yet (the forward is no unit)
    clock.now += 8.0
    job.report_within(0.5, 4)
    # Hand-derived: half the chunk's layers in 8 s: 8 / (0.5 x 4) = 4 s a unit, from 4 / 2 = 2 to 4 x 2 = 8 s:
    # low 60 x 2 + max(0, 4 x 2 - 8) = 120 s, high 60 x 8 + (4 x 8 - 8) = 504 s. (Truth at 4 s a unit: 248 s.)
    status = job.status()
    assert (status["eta_low_s"], status["eta_high_s"]) == (120.0, 504.0)
    # A layer that stalls: the chunk in flight's elapsed time grows the upper end, never "about 1 s" at the lower.
    clock.now += 40.0  # 48 s in the chunk: more than its 4 x 8 s at the slowest rate
    status = job.status()
    # low 60 x 2 + 0 = 120 s; high 60 x (2 x 48 / 4) + max(4 x 8 - 48, 48 / 2) = 1,440 + 24 = 1,464 s.
    assert (status["eta_low_s"], status["eta_high_s"]) == (120.0, 1464.0)
    job.report(4, 64)  # the chunk ends (89 s since the sequence began, the forward included): the measured rate
    assert job.time_left._within is None and job.status()["eta_s"] is not None


def _tiny_shared():
    """SharedLM over the tiny Llama (2 layers) with one target per backward, and the chat prompt it explains."""
    from lit_app.model import shared_model  # pylint: disable=import-outside-toplevel
    from tests.unit.tiny_models import MODEL_BUILDERS, wrap  # pylint: disable=import-outside-toplevel

    shared = shared_model.SharedLM(wrap(MODEL_BUILDERS["llama"](seed=0), "llama"), max_new_tokens=4,
                                   disk_cache=False, salience_config=SalienceConfig(target_chunk_size=1))
    return shared, shared.format_prompt({"prompt": "Alice has three apples and Bob has two apples;"})


def _job_ticking_per_layer(kind: str, then=None, forward=None, forward_s: float = 0.0) -> progressive.Job:
    """A matrix job whose fake clock moves 1 s at each layer boundary of a chunk its computation reports
    (`report_within`), after which `then(job, share, units)` runs (when given); and `forward_s` at each layer of the
    forward ahead of the units (`report_within(..., ahead=True)`), after which `forward(job, share, units, clock)`
    runs."""
    clock = Clock()
    job = progressive.Job(group="g", kind=kind, heartbeat_s=None, clock=clock)
    within = job.report_within

    def reading(share: float, units: float, ahead: bool = False) -> None:
        clock.now += forward_s if ahead else 1.0
        if ahead:
            within(share, units, ahead=True)
        else:
            within(share, units)
        if ahead and forward is not None:
            forward(job, share, units, clock)
        elif not ahead and then is not None:
            then(job, share, units)

    job.report_within = reading
    return job


def test_a_matrix_job_through_the_model_has_a_time_left_inside_its_first_backward():
    """The same through SharedLM on the tiny Llama (2 layers, one target per backward): the job's status read at each
    layer boundary of its first backward (a fake clock, 1 s a boundary) has no estimate at the first (nothing done
    yet) and the hand-derived one at the second (half the layers in 1 s)."""
    shared, chat = _tiny_shared()
    seen: list[tuple[float, float, dict]] = []
    job = _job_ticking_per_layer("grad", lambda job, share, units: seen.append((share, units, job.status()))
                                 if job.done == 0 else None)  # the first backward
    with job.running():
        job.result = shared.salience(chat, " together they have five apples.", job=job)
    targets = job.result.num_targets
    assert [(share, units) for share, units, _ in seen] == [(0.0, 1.0), (0.5, 1.0)]
    assert seen[0][2]["eta_s"] is None
    # Hand-derived: 1 / (0.5 x 1) = 2 s a target, from 2 / 2 = 1 to 2 x 2 = 4 s; T - 1 targets after the one in
    # flight, which began at the first boundary, 1 s before the poll: low (T - 1) x 1 + max(0, 1 - 1), high
    # (T - 1) x 4 + (4 - 1).
    low, high = (targets - 1) * 1.0, (targets - 1) * 4 + (4 - 1)
    assert (seen[1][2]["eta_low_s"], seen[1][2]["eta_high_s"]) == (round(low, 1), round(high, 1))
    shared.jobs.cancel_all()


def test_a_later_chunks_layers_join_its_rate_to_the_measured_ones():
    """After the first chunk one rate is measured (fastest = slowest: the range was a point). The chunk in flight's
    rate so far, from its layers, joins the measured ones while it runs: a chunk slower than the last widens the
    range at once (session 40's probe: "about 90.9–90.9 s" with 66 s left on an 831-token prompt)."""
    clock = Clock()
    job = _job(clock)
    job.report(0, 12)
    clock.now += 4.0
    job.report(4, 12)  # 1 s a unit
    job.report_within(0.0, 4)  # the second chunk's backward begins
    clock.now += 3.0
    job.report_within(0.5, 4)  # half its layers in 3 s: 1.5 s a unit
    status = job.status()
    # Hand-derived: fastest 1, slowest 1.5 s a unit; 8 left, the 4 in flight begun 3 s ago: low 4 x 1 + (4 x 1 - 3)
    # = 5 s, high 4 x 1.5 + (4 x 1.5 - 3) = 9 s (the truth at 1.5 s a unit: 3 + 6 = 9 s). Was 5-5.5 s.
    assert (status["eta_low_s"], status["eta_high_s"]) == (5.0, 9.0)
    job.report(8, 12)  # the chunk ends: its reading with it
    assert job.time_left._within is None


def test_an_ig_matrix_jobs_rows_count_the_ig_units_after_them():
    """Issue 44: an IG matrix job runs its gradient rows first, and their time left was theirs alone ("1-6 s left"
    with ~38 s left). Through SharedLM on the tiny Llama (one target per backward, 2 layers, a fake clock 1 s a layer
    boundary): after the first row the range also counts the IG units after the rows (time_left.Then), each a point
    row costing sampling.point_row_cost (1/4 to 4) of a gradient row; the IG stage's first estimate, borrowed from
    the rows, is the same."""
    shared, chat = _tiny_shared()
    job = _job_ticking_per_layer("ig2")
    seen: list[tuple[int, int, dict]] = []
    report = job.report

    def reported(*progress, **kw) -> None:
        report(*progress, **kw)
        seen.append((job.done, job.total, job.status()))

    job.report = reported
    with job.running():
        job.result = shared.salience(chat, " together they have five apples.", counts={"ig_steps": 2}, job=job)
    targets = job.result.num_targets
    low, high = point_row_cost()
    # Hand-derived after the first row (2 s: its two layer boundaries): T - 1 rows left at 2 s, then 2T IG units,
    # each low / T to high / T of the rows' whole sequence (2 s so far + 2 (T - 1) s left = 2T s): 2 (T - 1) +
    # 2T x low x 2 = 2 (T - 1) + 4T low s, and the same with high. Was: 2 (T - 1) both ends (the rows alone).
    first = next(s for done, total, s in seen if (done, total) == (1, targets))
    assert (first["eta_low_s"], first["eta_high_s"]) == (round(2 * (targets - 1) + 4 * targets * low, 1),
                                                         round(2 * (targets - 1) + 4 * targets * high, 1))
    # The IG units announced (0 of 2T) after the rows (2T s): each borrows low / T to high / T of 2T s, the first in
    # flight: 2T x 2 low to 2T x 2 high s, what the rows said of them.
    announced = next(s for done, total, s in seen if (done, total) == (0, 2 * targets))
    assert (announced["eta_low_s"], announced["eta_high_s"]) == (round(4 * targets * low, 1),
                                                                 round(4 * targets * high, 1))
    shared.jobs.cancel_all()


def test_a_segment_jobs_first_batch_of_forwards_is_estimated_from_its_layers_before_it_ends():
    """Issue 44: leave one out's job said no time left before its first batch of forwards ended (minutes over a long
    prompt: its forwards had no layer readings). Through SharedLM on the tiny Llama (2 layers, a fake clock 1 s a
    layer): the rows are announced before the first batch, whose layers report their share as a backward's do
    (SliceSizer.reached, gradients.layer_shares), so the status has a range at the batch's second layer."""
    from lit_app.schema.inputs import SegmentRequest  # pylint: disable=import-outside-toplevel

    shared, chat = _tiny_shared()
    seen: list[tuple[float, float, dict]] = []
    job = _job_ticking_per_layer("loo", lambda job, share, units: seen.append((share, units, job.status()))
                                 if job.done == 0 else None)  # the first batch
    with job.running():
        job.result = shared.segment_salience(chat, " together they have five apples.",
                                             SegmentRequest("leave_one_out", "word", None, "filler", None, 0), job=job)
    rows = len(job.result.segments)  # one edited prompt per word
    assert [share for share, _, _ in seen] == [0.0, 0.5], seen
    batch = seen[1][1]
    assert seen[0][2]["eta_s"] is None and seen[1][2]["total"] == rows > batch
    # Hand-derived: half the batch's layers in 1 s: 1 / (0.5 x b) = 2 / b s a row, from 1 / b to 4 / b; R - b rows
    # after the batch in flight, which began 1 s before: low (R - b) / b + max(0, 1 - 1), high 4 (R - b) / b + (4 - 1).
    assert (seen[1][2]["eta_low_s"], seen[1][2]["eta_high_s"]) == (round((rows - batch) / batch, 1),
                                                                   round(4 * (rows - batch) / batch + 3, 1))
    shared.jobs.cancel_all()


def test_a_matrix_jobs_first_forward_is_estimated_from_its_layers_and_the_rows_cost_against_it():
    """Issue 44: a per-token matrix job said no time left during its own first forward (~29 s over a 4,000-token
    prompt): no unit is done and a target's backward cost is unknown before the first backward. Through SharedLM on
    the tiny Llama (2 layers, one target per backward, a fake clock 1 s a layer of the forward): the forward's layers
    report their share as the pass ahead of the rows (SliceSizer.reached, gradients.layer_shares), and the status has
    a range for the whole job at its second layer: the forward's rate times time_left.FORWARD_ROW_COST per row."""
    shared, chat = _tiny_shared()
    seen: list[tuple[float, float, dict]] = []

    def forward(job, share, units, clock) -> None:
        seen.append((share, units, job.status()))
        if share > 0:  # the layer stalls 5 s: the high end grows with the time since the forward began
            clock.now += 5.0
            seen.append((share, units, job.status()))

    job = _job_ticking_per_layer("grad", forward=forward, forward_s=1.0)
    with job.running():
        job.result = shared.salience(chat, " together they have five apples.", job=job)
    targets = job.result.num_targets
    assert [(share, units) for share, units, _ in seen] == [(0.0, 1.0), (0.5, 1.0), (0.5, 1.0)], seen
    assert seen[0][2]["eta_s"] is None and seen[1][2]["total"] == targets  # nothing measured at the first layer
    low, high = time_left.FORWARD_ROW_COST
    # Hand-derived: half the forward's layers in 1 s: F = 2 s, 1 s of it left; T rows each low F to high F: low
    # 2T low + 1, high 2T high + 1. After 5 s more (6 s since it began, F 2 s): low 2T low + 0, high T high 6 + 0.
    assert (seen[1][2]["eta_low_s"], seen[1][2]["eta_high_s"]) == (round(2 * targets * low + 1, 1),
                                                                   round(2 * targets * high + 1, 1))
    assert (seen[2][2]["eta_low_s"], seen[2][2]["eta_high_s"]) == (round(2 * targets * low, 1),
                                                                   round(6 * targets * high, 1))
    shared.jobs.cancel_all()
