"""Time slices: long salience computations cut into pieces of bounded model time.

A caller that shares the model with people clicking (the LIT server) asks
`compute_salience(..., slice_s=0.4)`: the per-target backward passes (and, for
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
The core only offers the slicing and the callback; who waits where (a scheduler,
threads) is the caller's business.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

DEFAULT_SLICE_S = 0.4


class SliceSizer:
    """How many units of work (one target's backward over one row) the next slice does.

    The estimate is the cost per unit measured on the previous slice (`record`), so the
    next slice takes about `target_s`: units = floor(target_s / seconds per unit), at
    least 1 (a slice never does less than one target over one row) and at most `cap`.
    Before any measurement a slice is 1 unit. Not thread-safe: one per computation.

    Args:
      target_s: the model time one slice should take (seconds; > 0).
      clock: the time source (seconds); tests pass a fake one.
    """

    def __init__(self, target_s: float = DEFAULT_SLICE_S, clock: Callable[[], float] = time.perf_counter):
        if not target_s > 0:
            raise ValueError(f"slice_s={target_s!r}; it must be a positive number of seconds (e.g. 0.4).")
        self.target_s = float(target_s)
        self.clock = clock
        self.unit_s: float | None = None  # measured seconds per unit, from the last slice
        self.sizes: list[int] = []  # units of each slice recorded so far (for tests and logs)

    def units(self, cap: int) -> int:
        """Units for the next slice: 1 ..= cap."""
        cap = max(1, int(cap))
        if self.unit_s is None or self.unit_s <= 0:
            return 1 if self.unit_s is None else cap
        return max(1, min(cap, int(self.target_s / self.unit_s)))

    def record(self, units: int, seconds: float) -> None:
        """The last slice did `units` units in `seconds`."""
        self.sizes.append(int(units))
        self.unit_s = max(0.0, float(seconds)) / max(1, int(units))

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


def make_sizer(slice_s: "float | SliceSizer | None") -> SliceSizer | None:
    """None (chunk counts, no time slices), a SliceSizer for `slice_s` seconds, or the given sizer."""
    if slice_s is None or isinstance(slice_s, SliceSizer):
        return slice_s
    return SliceSizer(float(slice_s))
