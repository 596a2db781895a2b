"""The time left of a job, from the measured rate of its recent units, as a range: the one estimator of every
job's progress (background matrix and segment jobs, span jobs: lit_app/model/progressive.py `Job`; explanation tests
and intervention runs: lit_app/model/user_jobs.py `UserJob`). The page words it ("about 40–70 s left":
frontend/src/salience/payload.ts `timeLeft`).

Was (issue 43): one rate for the whole sequence, counted down between reports and never rising. It said "about 1 s
left" with 31 of 92 forwards to go and then nothing for 7 minutes, once the forwards slowed down; IG said 22 s and
took 70 s more.

Now, at each poll, with r units left, u the units of the last report (the size of the chunk in flight) and `since`
the model time since that report:

* the recent per-unit times are those of the last `WINDOW` reports (model time: time spent waiting behind more
  urgent work is not counted; units found in a memo, reported within `FREE_S` of the last report or at under
  `FREE_FRACTION` of the fastest rate, are done but no sample; a stage whose units cost what the last one's did starts
  from its rates: `restart(keep_rate=True)`); `fast` and `slow` are the fastest and slowest of them;
* low = (r - u) x fast + max(0, u x fast - since): the remaining units at the fastest recent rate, the chunk in
  flight counted with what it has taken so far. Unless units of the sequence were free (memo hits: below) it is
  never below (r - u) x fast: with units outstanding it never falls to "about 1 s";
* high = (r - u) x slow' + max(u x slow - since, since / 2), where slow' = slow x min(2, last / fast) when the
  last report's rate is slower than the fastest (the rate is dropping now: the range widens, at most twice the
  slowest rate) and slow' = slow otherwise; once the chunk in flight is slower than the slowest recent rate, slow'
  is at least 2 x since / u: a chunk that takes longer than the estimate makes the estimate grow with its elapsed
  time.

Was (a CI failure, issue 43): slow' = slow x (slow / fast) whenever the last rate was not the fastest. One unit 5 x
slower than the rest (the machine busy for a second) made the range's upper end 25 x the fast rate, and kept it so
for the window's 8 reports although every unit after it was fast: "about 1–5 min left" 8 s before the stage ended.

Units that took no work (memo hits, above) may come again: the upper-bound search of the refining curves plans its
calls' rows as units and finds many of a later call's rows in the memo only when that call is made (session 33's
"Refining: 45 / 54", 45 of them memo hits). So the low end counts the remaining units at the share of this
sequence's units that took work so far (`worked`; 1 until one of its units was work): low = (r - u) x worked x fast + the chunk in flight. Was (issue 43,
session 34): every unit left was work at the low end too, so with a later call's memo rows ahead the whole range
lay above the time the search took (replayed: "about 14 s" at 6 s from the end). The high end still counts every
unit left as work (a later call may find none in the memo).

Work known to follow the sequence (`Then`: a span's IG steps or SmoothGrad samples after its one gradient pass; a
matrix job's IG or SmoothGrad units after its gradient rows, lit_app/model/salience_runs.py `sampled_after`)
is in the range too: `count` units, each costing `low` to `high` times the whole sequence, whose cost is the model
time it has taken so far plus its own range (low = L + count x low x (elapsed + L), high likewise with H). Was (issue
44): a matrix job's rows counted only themselves: "1-6 s left" with ~38 s of IG units to follow. A sequence whose
units were all free (grad_x_input's, from grad_norm's gradients) passes on what it borrowed, not its `Then` share of
its own (nil) cost: that said "0 s" for the IG units after it.

Was (issue 43, test_true_progress with 5-step IG chunks): the range counted only the sequence in flight. A span's
gradient pass reports its layers (90 units on the default model) before the IG steps, so the IG line said
"42 % · about 1 s left" (true of the pass: it ends within a second) with every one of 112 steps still to run
(about a minute).

Units of known cost (`report(..., cost=(cost done, cost total))`: leave one word out's rows, each the positions it
recomputes, known before it runs) are estimated twice, by the same rules: in units and in cost (seconds per
position); the range is the lower low end and the higher high end of the two. Was (issue 43, session 34): units
only, and the rows grow dearer along the job (29 up to 132 positions on the constitutional row), so the truth lay
above the high end in 15-28 % of polls (docs/benchmarks.md "Session 34 (h4)"). Cost alone would not do either: a
row's time is a fixed part plus a part per position (0.21 s at 29 positions, 0.46 s at 132), so at the rate per
position of the cheap rows the dear ones are overestimated, and the low end would lie above the truth. When a
unit's time is a + b x cost (a, b >= 0) the truth lies between the two estimates: the units' rate cannot see the
rows grow dearer (too low when they do), the rate per position counts the fixed part again on every position
(too high when they do), and the other way round when the rows grow cheaper.

A later sequence without a rate of its own borrows one (`borrowed`), so that after a job's first unit every poll with
units outstanding has a range (issue 43: two clients' IG matrix jobs said nothing before their first unit and for ~3.5 s mid-job, where the
gradient rows ended and the IG steps began): where the sequence before it said what follows (`Then`: a span's IG
steps after its pass), each unit costs `low` to `high` times that sequence's model time; else, units of another
kind (the matrices' IG units after the gradient rows), the last sequence's rates from 1 / BORROW_WIDEN to
BORROW_WIDEN times. The chunk in flight then widens the range with its elapsed time as it does for measured rates,
and the sequence's first measured unit replaces the borrowed rate. A job's first sequence has nothing to borrow:
another job's first units were tried (session 38) and said "37-597 s" for rows that took 6 s (the other job's first
chunk held its forward and waited for the model), so none.

A chunk's own layers (`within(share, units)`: its backward's layer boundaries, sequence_salience/slices.py
`inside`) give a sequence without a rate of its own one before the chunk ends: the chunk's model time since its
backward began over `share` x `units` is a rate, counted from 1 / INSIDE_WIDEN to INSIDE_WIDEN times, with the chunk
in flight as above (its `units`, its elapsed time since the backward began). It goes before a borrowed rate (it is this
sequence's own work) and ends at the next report. Was (issue 44): a job's first sequence had no estimate before its
first chunk ended: a 4,000-token prompt's matrix job said no time left for its forward and then its first chunk, one
target's backward over 4,099 tokens, about a minute on 2 loaded cores (the forward alone still has none: it is no
unit: now the pass ahead, below). A segment job's forward batches report their layers the same way
(sequence_salience/methods/gradients.py `layer_shares`; its rows announced before the first batch): was, no time left
before leave one out's first batch ended. The spread stays twice either way to the chunk's end (a spread that
narrowed to the measured rate as the share grew left the truth above the range from 70 % of the first chunk on in
session 40's probe: a chunk's cost is mostly its layers' recomputation, the same for one target as for four, so the
last, smaller chunk cost almost what a full one did).

The forward ahead of a sequence's units (`within(share, units, ahead=True)`: a matrix job's first forward, whose
graph its targets' backwards use; `units` its rows in units) is no unit, but its layers measure it: F = its model
time so far over its share; each unit left then costs FORWARD_ROW_COST (low to high) times F / units, and the forward
what is left of F: low = r x low x F / units + max(0, F - since), high the same with high and max(F, since) (since:
the model time since the forward began; a stalled layer grows the high end). Only while the sequence has no other
estimate (a chunk's layers, a rate, a borrowed one). The bound is measured (benchmarks/bench_forward_row_cost.py,
docs/benchmarks.md "Session 42 (h2)"): the work per row is 1.25-2.24 forwards (CPU), the wall ratio follows the load
between the forward and the rows. Was (issue 44): none during a 4,000-token prompt's forward (~29 s at load ~7; the
rows' cost against it unknown before a backward).

Once the sequence has rates, the chunk in flight's rate so far joins them (fastest and slowest), and the chunk in
flight is counted by its units and its time since its backward began. Was (session 40's probe, an 831-token prompt):
after the first chunk one measured rate made the range a point, "about 90.9–90.9 s" with 66 s left, then "about
8–15 s" with 18 s left in the last chunk (one target costing nearly what four did): 7 of 67 polls held the truth.

Before the first report (no total known) there is no estimate (None), nor before the first unit (or, of a chunk or of
the forward ahead, a share of its layers) of a job's first sequence, and none once every unit is done (the page says
"finishing…").
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable

# Reports whose per-unit times make the recent rate.
WINDOW = 8
# Units reported less than FREE_S seconds of model time after the last report, or at under FREE_FRACTION of the fastest
# rate measured, took no measurable work (found in a memo: the upper bound's rows the curves had scored): they count as
# done but are no sample of the rate. Counted as samples they made the fastest rate near zero and so the range's upper
# end absurd ("about 1–6936 min left" for a search that ended 2 s later, issue 45).
FREE_S = 0.005
FREE_FRACTION = 0.1
# A rate measured on a share of the chunk in flight (`within`) counts from 1 / INSIDE_WIDEN to INSIDE_WIDEN times: on
# an 831-token prompt the rest of a matrix job ran at 1.9 times its first chunk's rate per target (a smaller last
# chunk, whose layers' recomputation costs what a larger one's does, and a rising load; docs/benchmarks.md
# "Session 40 (h2)").
INSIDE_WIDEN = 2.0
# A gradient row cost 1.25-2.24 x its job's first forward in CPU, 0.43-7.17 in wall as the load changed: 4x either way.
FORWARD_ROW_COST = (0.3, 9.0)
# While the rate drops, the remaining units' upper rate is the slowest recent one times at most this.
MAX_WIDEN = 2.0
# A rate borrowed from units of another kind (module docstring) counts from 1 / BORROW_WIDEN to BORROW_WIDEN times: a
# matrix job's IG unit (a target's backward over one interpolation point, batched) cost 0.95-1.02 times its gradient
# row's in session 38's two-client probe (docs/benchmarks.md).
BORROW_WIDEN = 4.0


@dataclasses.dataclass(frozen=True)
class Then:
    """Work after the current sequence: `count` units, each costing between `low` and `high` times the whole
    current sequence (0 <= low <= high)."""

    count: int
    low: float
    high: float


@dataclasses.dataclass(frozen=True)
class Range:
    """Seconds left: at least `low`, at most `high` (low <= high)."""

    low: float
    high: float

    @property
    def mid(self) -> float:
        return (self.low + self.high) / 2


class TimeLeft:
    """The time-left estimate of one sequence of units (see the module docstring).

    Call `report(done, total)` as units finish (a report with another total or fewer units done starts a new
    sequence), `restart()` when a new sequence begins without a report, `pause()`/`resume()` around time spent
    waiting behind more urgent work; `range()` at any time.

    Args:
      clock: the time source (seconds); tests pass a fake one.
    """

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self.done = 0
        self.total = 0
        self._begun = clock()  # when the current sequence began
        self._last: float | None = None  # model time of the last report (None: none yet in this sequence)
        self._last_at: float | None = None  # clock time of the last report (of any sequence)
        self._last_units = 0  # units of the last report
        self._rates: collections.deque[float] = collections.deque(maxlen=WINDOW)  # seconds per unit, recent
        self._prior: tuple[float, ...] = ()  # the last sequence's rates, while this one has none (restart keep_rate)
        self._paused_at: float | None = None
        self._paused_s = 0.0  # seconds paused since the sequence began (not model time)
        self._then: Then | None = None  # work known to follow this sequence (its last report's)
        self._worked = 0  # units of this sequence measured as work (a sample of the rate)
        self._free = 0  # units of this sequence that took no measurable work (memo hits)
        self._cost: TimeLeft | None = None  # the same sequence in cost units, while its reports carry a cost
        # The chunk in flight as its layers measure it (`within`): (model time it began, model time of its last
        # reading, share done, units); None: no reading since the last report.
        self._within: tuple[float, float, float, float] | None = None
        self._ahead: tuple[float, float, float, float] | None = None  # the forward ahead of the units, as `_within`
        # (fastest, slowest) seconds per unit borrowed while the sequence has no rate of its own (module docstring)
        self.borrowed: tuple[float, float] | None = None

    @property
    def last_report_at(self) -> float | None:
        """Clock time of the last report (of any sequence); None before the first."""
        return self._last_at

    def _model_time(self, now: float | None = None) -> float:
        """Model time since the sequence began (wall time less the pauses, the current one included)."""
        now = self.clock() if now is None else now
        paused = self._paused_s + (now - self._paused_at if self._paused_at is not None else 0.0)
        return max(0.0, now - self._begun - paused)

    def restart(self, done: int = 0, total: int = 0, at: float | None = None, keep_rate: bool = False) -> None:
        """A new sequence of units begins now (or at clock time `at`): the units before are not counted in its
        rate. `keep_rate`: its units cost what the last sequence's did (the explanation tests' forward rows, stage
        after stage), so until one of its own is measured the estimate uses the last sequence's rates."""
        at = self.clock() if at is None else at
        if not keep_rate:
            self.borrowed = self._carried(at)
        self._prior = (tuple(self._rates) or self._prior) if keep_rate else ()
        self._begun, self._last, self._last_units = at, None, 0
        self._rates.clear()
        self._then = None
        self._cost = None
        self._within = self._ahead = None
        self._worked = self._free = 0
        self._paused_s = 0.0
        if self._paused_at is not None:
            self._paused_at = self._begun
        self.done, self.total = done, total

    def _carried(self, at: float) -> tuple[float, float] | None:
        """What the next sequence borrows from this one (module docstring): per unit, `then`'s share of this
        sequence's model time up to `at` where it says what follows; else this sequence's rates widened
        BORROW_WIDEN times either way; else (nothing measured) what this one borrowed."""
        then = self._then
        if then is not None and then.count > 0 and self._worked:  # (a sequence of free units has no cost to share)
            whole = self._model_time(at)
            return then.low * whole, then.high * whole
        rates = tuple(self._rates) or self._prior
        if rates:
            return min(rates) / BORROW_WIDEN, max(rates) * BORROW_WIDEN
        return self.borrowed

    def report(self, done: int, total: int, then: Then | None = None,
               cost: tuple[float, float] | None = None) -> None:
        """`done` of `total` units are done now; `then`: the work known to follow them (None: none); `cost`: (the
        cost of the units done, of all `total` units), known ahead (module docstring), from the sequence's first
        report on (a report without one ends the estimate in cost)."""
        if (total != self.total or done < self.done) and (self._last is not None or self.done):
            # A new sequence (a span's gradient pass 1/1, then its IG steps): its units began at the last report.
            self.restart(0, total, at=self._last_at)
        if cost is None:
            self._cost = None
        elif self._cost is None and self._last is None and self.done == 0:  # the sequence's first report
            self._cost = self._twin()
        if self._cost is not None:
            self._cost.report(cost[0], cost[1])
        self._last_at = self.clock()
        now = self._model_time()
        units = done - self.done
        if units > 0:
            since = now - (self._last if self._last is not None else 0.0)
            # (a borrowed rate too: grad_x_input's rows, announced as a new sequence and then all done at once from
            # grad_norm's gradients, are no sample of a rate; counted as one, 120 IG units after them said "about
            # 0-105 s left" in session 38's probe)
            measured = tuple(self._rates) or self._prior or (self.borrowed[:1] if self.borrowed else ())
            if since >= FREE_S and not (measured and since / units < FREE_FRACTION * min(measured)):
                self._rates.append(since / units)
                self._last_units = units
                self._worked += units
            else:
                self._free += units
            self._last = now
        elif self._last is None and done > 0:
            self._last, self._last_units = now, done
        self.done, self.total = done, total
        self._then = then
        self._within = None  # the chunk in flight ended

    def within(self, share: float, units: float, ahead: bool = False) -> None:
        """Of the chunk in flight (`units` units, begun at its reading with `share` 0), `share` (0 to 1) is done now:
        its backward's layers (sequence_salience/slices.py `inside`). Until the sequence has a rate of its own, the
        chunk's rate so far is its estimate (module docstring). `ahead`: of the forward ahead of the units (`units`
        its rows in units), the estimate while the sequence has no other (module docstring)."""
        now, held = self._model_time(), self._ahead if ahead else self._within
        if share <= 0 or held is None:  # a reading after the pass began but without its start: none
            held = (now, now, 0.0, float(units)) if share <= 0 else None
        else:
            held = (held[0], now, min(1.0, float(share)), float(units))
        if ahead:
            self._ahead = held
        else:
            self._within = held

    def _within_rate(self) -> tuple[float, float, float] | None:
        """(seconds per unit, model time the chunk began, its units) of the chunk in flight from its share done
        (module docstring); None without a reading of some share done."""
        held = self._within
        if held is None or held[2] <= 0 or held[3] <= 0 or held[1] <= held[0]:
            return None
        began, at, share, units = held
        return (at - began) / (share * units), began, units

    def _ahead_ends(self, left: int) -> tuple[float, float] | None:
        """(low, high) seconds left of `left` units after the forward ahead of them (module docstring); None
        without a reading of some share of it done."""
        held = self._ahead
        if held is None or held[2] <= 0 or held[3] <= 0 or held[1] <= held[0]:
            return None
        began, at, share, units = held
        forward, since = (at - began) / share, max(0.0, self._model_time() - began)
        low, high = FORWARD_ROW_COST
        rest = max(0.0, forward - since)
        return left * low * forward / units + rest, left * high * max(forward, since) / units + rest

    def _twin(self) -> "TimeLeft":
        """An estimator of this sequence in cost units, begun and paused as it is (no report yet)."""
        twin = TimeLeft(self.clock)
        twin._begun, twin._paused_at, twin._paused_s = self._begun, self._paused_at, self._paused_s
        twin._last_at = self._last_at
        return twin

    def pause(self) -> None:
        """From now on the job waits behind more urgent work (not model time)."""
        if self._paused_at is None:
            self._paused_at = self.clock()
        if self._cost is not None:
            self._cost.pause()

    def resume(self) -> None:
        if self._paused_at is not None:
            self._paused_s += self.clock() - self._paused_at
            self._paused_at = None
        if self._cost is not None:
            self._cost.resume()

    def range(self) -> Range | None:
        """Seconds left as a range; None before the first unit of the sequence or once every unit is done."""
        ends = self._ends()
        if ends is None:
            return None
        low, high = ends
        in_cost = self._cost._ends() if self._cost is not None else None
        if in_cost is not None:  # known costs: the lower low end and the higher high end (module docstring)
            low, high = min(low, in_cost[0]), max(high, in_cost[1])
        if self._then is not None:  # the work after this sequence, from the whole sequence's cost
            elapsed = self._model_time()
            low += self._then.count * self._then.low * (elapsed + low)
            high += self._then.count * self._then.high * (elapsed + high)
        return Range(low, max(low, high))

    def _ends(self) -> tuple[float, float] | None:
        """(low, high) seconds left of this sequence's units alone (module docstring); None without an estimate."""
        left = self.total - self.done
        rates = self._rates or self._prior
        inside = self._within_rate()
        if left > 0 and not (rates or inside or self.borrowed):
            return self._ahead_ends(left)
        if left <= 0:
            return None
        if rates:  # the chunk in flight's own rate so far, where it has one, joins the recent ones
            fast, slow = min(rates), max(rates)
            if inside is not None:
                fast, slow = min(fast, inside[0]), max(slow, inside[0])
        elif inside is not None:  # its own layers alone (before a borrowed rate: it is this chunk's)
            fast, slow = inside[0] / INSIDE_WIDEN, inside[0] * INSIDE_WIDEN
        else:
            fast, slow = self.borrowed
        newest = rates[-1] if rates else fast
        if inside is not None:  # the chunk in flight: its units, its time since its backward began
            since, u = max(0.0, self._model_time() - inside[1]), min(inside[2], left)
        else:
            since = max(0.0, self._model_time() - (self._last or 0.0))
            u = max(1, min(self._last_units, left))
        rest = left - u
        worked = self._worked / (self._worked + self._free) if self._worked else 1.0
        low = rest * worked * fast + max(0.0, u * fast - since)
        slow_rest = slow * min(MAX_WIDEN, newest / fast) if fast > 0 and newest > fast else slow
        if since > u * slow:  # the chunk in flight is slower than any recent one
            slow_rest = max(slow_rest, 2 * since / u)
        return low, max(low, rest * slow_rest + max(u * slow - since, since / 2))


def status_fields(eta: Range | None) -> dict[str, float | None]:
    """A job status's time left: "eta_low_s" / "eta_high_s" (the range) and "eta_s" (its middle), in seconds;
    None without an estimate."""
    if eta is None:
        return {"eta_s": None, "eta_low_s": None, "eta_high_s": None}
    return {"eta_s": round(eta.mid, 1), "eta_low_s": round(eta.low, 1), "eta_high_s": round(eta.high, 1)}
