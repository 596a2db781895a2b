"""Time slices: long salience computations cut into pieces of bounded model time.

A caller that shares the model with people clicking (the LIT server) asks
`compute_salience(..., slice_s=0.25)`: the per-target backward passes (and, for
integrated gradients and SmoothGrad, the steps or samples per forward) then run
in slices of about `slice_s` seconds each, and the `progress` callback runs
between slices, where the caller may let other work use the model. Without
`slice_s` the chunk counts of `SalienceConfig` apply as before.

Why slices are sized in *targets per backward over one shared forward*, and not
as whole forward+backward passes: on the default model (SmolLM2-135M, 2 CPU
cores) a forward over ~170 tokens costs about as much as one target's backward
(~0.45 s each), so a slice that repeated the forward would double the work and
could never be shorter than ~0.9 s. The forward's graph is instead kept across
slices (it was already kept across chunks): the first slice is the forward
itself, each later one a batched backward over k targets, with k chosen from the
measured cost of the previous slice. `chunk_token_budget` still caps k (memory).
The core only offers the slicing and the callbacks; who waits where (a scheduler,
threads) is the caller's business.

When even one unit is longer than a slice (one target's backward over a 4,000-token
prompt, or any pass on a machine whose cores are shared with other work), the
optional `between` callback also runs *inside* the backward, at layer boundaries,
once `slice_s` of model time has passed (tensor hooks on the hidden states of the
shared forward; they never change a gradient). The caller may let other work use
the model there (the LIT server lets waiting clicks run); the paused backward keeps
its graph and continues afterwards. The time spent in the callback is not counted
as model time when the next slice is sized. The shared forward itself pauses at its layer boundaries too, but only
when `urgent()` says so (`urgent_checkpoint`; a forward stays one unit of its slice otherwise): a user job or click
that arrives during it (the first map's job, which the page asks for just after the first highlight, while the
matrices' first forward runs) waited for the whole forward, up to 2 s on a 164-token row at load ~8.5
(docs/benchmarks.md "Session 36 (h4)").

The graph across pauses. The forward's graph (every layer's activations) lives from the forward to the last
chunk. Several computations sharing the model by turns (the LIT server's clients) would each hold one across
the others' turns: four clients' per-token matrices on 127-token prompts peaked at +89 % of the server's RSS,
against +28 % one after the other (docs/benchmarks.md, "What holds the memory at the peak"). So a caller may
give `release_graph`, asked at each pause between chunks after a chunk was done: when it says that the pause
hands the model to other work that builds a graph of its own, the computation frees its graph before the
pause and runs the forward again after it (same gradients; one forward more per such turn; never when it
computes alone). `holding_graph` says, during a pause, whether the graph is held across it (inside a
backward it always is), so that the caller hands the model only to work without a graph of its own then.

Slices and chunks differ once `between` runs inside passes. A slice is the model time
between two chances for a click (`slice_s`, 0.25 s by default); a chunk is how many
targets share one batched backward. Without `between` the two coincide. With it, a chunk
may be longer than a slice (`chunk_s`, 0.5 s by default) because the pauses inside its
backward bound how long a click waits: on the default model, one target per slice made the
chain-of-thought matrices (64 targets) 12.7 s against 11.1 s unsliced, two targets per
chunk (0.5 s) 10.8 s. Chunks must not be much longer: the backward through the output
layer and the softmax over the vocabulary (one op, no layer boundary inside) grows with
the targets per chunk, and a click waits for it: with 2 s chunks (10-12 targets) a click
during the job took 1.55x (span) / 1.89x (trace) its idle time, with 0.5 s chunks 1.10x /
1.08x (benchmarks/bench_interactive.py, docs/benchmarks.md).

With pauses inside passes a chunk is never fewer than `min_chunk_targets` (4) targets, whatever the clock
says. A chunk sized only from the clock fell to one target as soon as one target's backward took longer than
`chunk_s`, which is every backward on a loaded machine (the wall clock counts the time other processes hold
the cores). One target per backward re-reads every weight matrix for a single gradient row: on the
chain-of-thought row (64 targets) at load ~10 on 2 cores that was 489 s against 185 s unsliced (2.6x), the
"7-8.5 minutes" of issue 35. A click does not wait for the longer chunk (it is served at the next layer
boundary); four targets stay below the 10-12 whose output-layer op made a click wait 1.55x.

Progress inside a backward. A caller may also give `inside`: it is told how far the batched backward in flight has
come, at each of its layer boundaries (`inside(share, units)`: the share of the backward's layers done, of a
backward over `units` progress units). The first boundary comes before any layer's backward (the last hidden state's
gradient arrives with the backward's start), each later one after one more layer; the last layer ends with the
backward, so at boundary k of n the share is (k - 1) / n. One target's backward over a 4,000-token prompt took about a
minute on 2 loaded cores, and a server's time left had nothing before the first chunk ended (issue 44); its layers
took 1.1-1.2 s each in one backward over an 807-token row (docs/benchmarks.md "Session 40 (h2)"): the share measures
the chunk. A segment method's forward batches report their layers the same way (`reached` as each layer begins, of
the batch's rows: methods/gradients.py `layer_shares`), so that its job has a time left inside its first batch. So
does a matrix computation's first forward, which is no unit (its graph serves the targets' backwards), as the pass
ahead of the units (`inside(share, units, ahead=True)`, `units` its rows over a unit's): a job's time left during it
comes from its rate and a bound on what the rows cost against it (lit_app/model/time_left.py `FORWARD_ROW_COST`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

DEFAULT_SLICE_S = 0.25
DEFAULT_CHUNK_S = 0.5
# Fewest targets per batched backward when passes pause inside (module docstring).
DEFAULT_MIN_CHUNK_TARGETS = 4


class SliceSizer:
    """How many units of work (one target's backward over one row) the next slice does.

    The estimate is the cost per unit measured on the previous slice (`record`), so the
    next slice takes about `target_s`: units = floor(target_s / seconds per unit), at
    least 1 (a slice never does less than one target over one row) and at most `cap`.
    Before any measurement a slice is 1 unit. Not thread-safe: one per computation.

    Args:
      target_s: the model time one slice should take (seconds; > 0).
      clock: the time source (seconds); tests pass a fake one.
      between: optional callback run inside passes once `target_s` has passed (see `checkpoint`).
      chunk_s: the model time of one batched backward over several targets when `between`
        is set (`chunk_units`); at least `target_s`.
      urgent: optional check, called at every layer boundary inside a pass; when it returns
        True (e.g. a click waits for the model) `between` runs there at once instead of at the
        end of the slice. It must be cheap (it runs once per layer).
      min_chunk_targets: the fewest targets per batched backward when `between` is set (`chunk_units`),
        whatever the clock measured (module docstring: a loaded machine).
      inside: optional, called `inside(share, units)` at each layer boundary of a batched backward (module
        docstring, "Progress inside a backward"), and `inside(share, units, ahead=True)` of the forward ahead of the
        units; on whichever thread runs the pass. It must be cheap.
      release_graph: optional check at each pause between two chunks of targets, once a chunk was done since
        the forward: True when the pause will hand the model to other work that builds a graph of its own;
        the computation then frees its forward's graph before the pause and runs the forward again after it
        (module docstring, "The graph across pauses"). Called on the computing thread; it must be cheap.

    Attributes:
      holding_graph: True while the computation holds a forward's graph (set by it: from its forward to its
        last chunk, or until it frees the graph for a pause); the caller reads it in its callbacks.
      forwards_again: how many times a forward ran again after its graph was freed for a pause.
    """

    def __init__(self, target_s: float = DEFAULT_SLICE_S, clock: Callable[[], float] = time.perf_counter,
                 between: Callable[[], None] | None = None, chunk_s: float = DEFAULT_CHUNK_S,
                 urgent: Callable[[], bool] | None = None, min_chunk_targets: int = DEFAULT_MIN_CHUNK_TARGETS,
                 release_graph: Callable[[], bool] | None = None,
                 inside: Callable[..., None] | None = None):
        if not target_s > 0:
            raise ValueError(f"slice_s={target_s!r}; it must be a positive number of seconds (e.g. 0.25).")
        if not chunk_s > 0:
            raise ValueError(f"chunk_s={chunk_s!r}; it must be a positive number of seconds (e.g. 2.0).")
        self.target_s = float(target_s)
        self.chunk_s = float(chunk_s)
        self.urgent = urgent
        self.min_chunk_targets = max(1, int(min_chunk_targets))
        self.clock = clock
        self.between = between
        self.release_graph = release_graph
        self.inside = inside
        self._rows_per_unit = 1  # of the method computing (`counting`)
        # (boundaries passed, of, rows, ahead) of the pass in flight (`backward_begins`)
        self._backward: tuple[int, int, int, bool] | None = None
        self.holding_graph = False
        self.forwards_again = 0
        self.unit_s: float | None = None  # measured seconds per unit, from the last slice
        self.sizes: list[int] = []  # units of each slice recorded so far (for tests and logs)
        self.paused_s = 0.0  # time spent inside `between` (not model time)
        self.pauses = 0  # how often `between` ran inside a pass
        self._thread: int | None = None
        self._mark = clock()

    def units(self, cap: int) -> int:
        """Units for the next slice: 1 ..= cap (steps or samples per forward; targets without `between`)."""
        return self._fit(self.target_s, cap)

    def chunk_units(self, cap: int, rows: int = 1) -> int:
        """Units (target rows) for the next batched backward: 1 ..= cap.

        Sized to `max(chunk_s, target_s)` when `between` pauses inside the backward (a
        click then waits at most `target_s` plus one layer), and then never fewer than
        `min_chunk_targets` targets of `rows` rows each (capped by `cap`); else to `target_s`, as `units`.
        """
        if self.between is None:
            return self._fit(self.target_s, cap)
        fit = self._fit(max(self.chunk_s, self.target_s), cap)
        return max(fit, min(max(1, int(cap)), self.min_chunk_targets * max(1, int(rows))))

    def _fit(self, seconds: float, cap: int) -> int:
        cap = max(1, int(cap))
        if self.unit_s is None or self.unit_s <= 0:
            return 1 if self.unit_s is None else cap
        return max(1, min(cap, int(seconds / self.unit_s)))

    def record(self, units: int, seconds: float) -> None:
        """The last slice did `units` units in `seconds`."""
        self.sizes.append(int(units))
        self.unit_s = max(0.0, float(seconds)) / max(1, int(units))

    def start(self) -> None:
        """The computation starts on this thread: `checkpoint` pauses only here."""
        self._thread = threading.get_ident()
        self._mark = self.clock()

    def mark(self) -> None:
        """A slice ended (the caller's progress callback ran): model time counts from now."""
        self._mark = self.clock()

    def checkpoint(self) -> None:
        """Inside a pass, at a layer boundary: runs `between` once `target_s` of model time has
        passed, or at once when `urgent()` says so.

        This bounds a slice even when one unit (one target's backward) takes longer than
        `target_s` (a long prompt, a slow or busy machine). Only on the thread that started
        the computation (a CPU backward runs there; an accelerator's backward runs on the
        autograd engine's own thread, where this does nothing and slices end between chunks).
        """
        if self.between is None or threading.get_ident() != self._thread:
            return
        if self.clock() - self._mark < self.target_s and not (self.urgent is not None and self.urgent()):
            return
        self._pause()

    def urgent_checkpoint(self) -> None:
        """Inside a forward, at a layer boundary: runs `between` at once when `urgent()` says so, never on the clock
        alone (the forward stays one unit of its slice: module docstring); only on the computation's thread."""
        if (self.between is None or self.urgent is None or threading.get_ident() != self._thread
                or not self.urgent()):
            return
        self._pause()

    def _pause(self) -> None:
        start = self.clock()
        self.between()
        self.pauses += 1
        self.paused_s += self.clock() - start
        self._mark = self.clock()

    @contextlib.contextmanager
    def counting(self, rows_per_unit: int) -> Iterator[None]:
        """Within it, `inside`'s units are of `rows_per_unit` target rows (one target's backward over one point) each:
        the progress unit of the method computing (a SmoothGrad target is its samples' rows, an IG unit one row)."""
        before, self._rows_per_unit = self._rows_per_unit, max(1, int(rows_per_unit))
        try:
            yield
        finally:
            self._rows_per_unit = before

    def backward_begins(self, rows: int, boundaries: int, ahead: bool = False) -> None:
        """A batched backward over `rows` target rows begins, with `boundaries` layer boundaries (`hook`s) inside; or
        a forward batch over `rows` rows (a segment method's edited prompts: ablation/prefix.py), each of its
        `boundaries` layers `reached` as it begins; `ahead`: the forward is no unit but the one ahead of the units
        whose backwards use its graph (a matrix computation's first: module docstring)."""
        self._backward = (0, int(boundaries), int(rows), ahead) if boundaries > 0 else None

    def reached(self) -> None:
        """A layer boundary of the pass in flight: at boundary k of its n, share (k - 1) / n of its rows to `inside`
        (with `ahead=True` for the forward ahead of the units)."""
        if self._backward is not None:
            passed, boundaries, rows, ahead = self._backward
            passed = min(boundaries, passed + 1)
            self._backward = (passed, boundaries, rows, ahead)
            if self.inside is not None and ahead:
                self.inside((passed - 1) / boundaries, rows / self._rows_per_unit, ahead=True)
            elif self.inside is not None:
                self.inside((passed - 1) / boundaries, rows / self._rows_per_unit)

    def hook(self, grad):  # a tensor hook: never changes the gradient
        self.reached()
        self.checkpoint()

    def estimate(self, units: int, seconds: float) -> None:
        """A first estimate (e.g. from the forward) used only until a slice is recorded."""
        if self.unit_s is None:
            self.unit_s = max(0.0, float(seconds)) / max(1, int(units))


def batches(total: int, cap: int, sizer: SliceSizer | None = None) -> Iterator[slice]:
    """Slices of steps (IG) or samples (SmoothGrad) per forward batch, at most `cap` each.

    With a sizer, each batch has as many steps as one target's backward over them fits the
    sizer's target time (measured on the slices before), so that the smallest slice, one
    target over the batch, stays near it: at least 1 step, at most `cap`.
    """
    s0 = 0
    while s0 < total:
        size = cap if sizer is None else sizer.units(cap)
        yield slice(s0, min(s0 + size, total))
        s0 += size


def make_sizer(slice_s: "float | SliceSizer | None", between: Callable[[], None] | None = None) -> SliceSizer | None:
    """None (chunk counts, no time slices), a SliceSizer for `slice_s` seconds, or the given sizer;
    `between` (if given) becomes its callback inside passes."""
    if slice_s is None:
        return None
    sizer = slice_s if isinstance(slice_s, SliceSizer) else SliceSizer(float(slice_s))
    if between is not None:
        sizer.between = between
    return sizer
