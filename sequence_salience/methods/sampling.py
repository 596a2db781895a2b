"""One chunked sampling loop for methods that average gradients over S points per input.

Integrated gradients (the S points are quadrature steps on the path from a baseline) and
SmoothGrad (S noisy copies of the input) both need, for every target token t,

    G_t = sum_s  w_s * d log p(target_t) / d x  at the point x_s          <float32>[T, B, L, D]

(or, for a span, the gradient of one weighted sum of targets). Here the points run in
forward batches of n <= ig_step_chunk_size points per example, and every backward takes as
many target tokens as fit, under ONE budget rule for both methods:

    points per forward  n = min(ig_step_chunk_size, graph_token_budget // (B * L))
                        (a span's: span_graph_token_budget too, the smaller)
    targets per backward c = min(2 * target_chunk_size // (B * n), chunk_token_budget // (B * n * L))

so that (rows x sequence length) of a forward whose graph the backward needs stays within
graph_token_budget, (targets x rows x sequence length) per backward within chunk_token_budget
(while one point of one row fits), and the memory of one forward + backward stays bounded.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from sequence_salience.methods.base import ModelInputs, SalienceConfig
from sequence_salience.methods.gradients import per_target_gradients, resolve_backward, weighted_gradient
from sequence_salience.slices import SliceSizer, batches

# points(sl) -> <float>[B * n, L, D]: the points of samples sl (n = sl.stop - sl.start), sample-major
# within each example (row b * n + s), as paths.interpolate and smooth_grad.noised_embeddings lay them out.
Points = Callable[[slice], torch.Tensor]


def points_per_forward(config: SalienceConfig, rows: int, seq_len: int, span: bool = False) -> int:
    """Samples (steps) per forward batch for `rows` examples of length `seq_len`; span: a span's
    (`sampled_span_gradient`), within the tighter span_graph_token_budget too."""
    budget = min(config.graph_token_budget, config.span_graph_token_budget) if span else config.graph_token_budget
    return max(1, min(config.ig_step_chunk_size, budget // max(1, rows * seq_len)))


def span_point_cost(config: SalienceConfig) -> tuple[float, float]:
    """(low, high): what one point of a span (sampled_span_gradient: an IG step, a SmoothGrad sample) costs, as a
    share of one gradient pass of the same span (compute_span_result's one forward + backward of its one row): the
    same forward + backward per point, batched by up to ig_step_chunk_size points per forward, so at least
    1 / ig_step_chunk_size of a pass (a batch costs at least one row's pass) and at most one pass. The server
    estimates a span's steps before the first is measured from its gradient pass (lit_app/wrappers/salience.py)."""
    return 1.0 / max(1, config.ig_step_chunk_size), 1.0


# (low, high) of `point_row_cost`. Measured through a server's matrix job (docs/benchmarks.md "Session 41 (h2)"): in
# CPU time 0.98-1.04 (the tiny Llama at 202 and 805 tokens, IG and SmoothGrad; the default model at 123 and 767
# tokens), in wall time 0.31-1.76 (the machine's load rising, or falling 3 times, between the two stages): four times
# either way of the work's 1, as a rate borrowed across stages (lit_app/model/time_left.py BORROW_WIDEN). Was 1/2 to 2:
# the 767-token row's IG units ran at 0.31 of its rows' wall rate as the load fell from ~20 to ~3.
POINT_ROW_COST = (0.25, 4.0)


def point_row_cost() -> tuple[float, float]:
    """(low, high): what one point row of a sampled method's matrix (sampled_target_gradients: one target's backward
    over one IG step or SmoothGrad sample, with its share of that point's forward) costs, as a share of one gradient
    row (one target's backward over the prompt, with its share of the one forward: grad_norm's matrix). The work is
    the same per row: a forward over every point of at most graph_token_budget tokens, shared by all targets, and
    per target a backward over its points, batched as the rows' targets are (targets_per_backward); only the
    batching, the two log-prob forwards of IG and the memory of n points' graphs differ. The server counts a sampled
    matrix's units in the time left of its job's gradient rows, which run first (lit_app/model/salience_runs.py
    `sampled_after`). Unlike a span's point (`span_point_cost`, down to 1 / ig_step_chunk_size of its one-row pass),
    a point row is measured against a row of the same batched work, not against a pass of its own."""
    return POINT_ROW_COST


def targets_per_backward(config: SalienceConfig, rows: int, n: int, seq_len: int) -> int:
    """Target tokens per batched backward over `rows` examples x `n` points of length `seq_len`."""
    return max(1, min((config.target_chunk_size * 2) // (rows * n),
                      config.chunk_token_budget // max(1, rows * n * seq_len)))


def sample_slices(config: SalienceConfig, count: int, rows: int, seq_len: int,
                  sizer: SliceSizer | None = None, span: bool = False):
    """Slices of the `count` samples, one per forward batch (time-sized with a sizer)."""
    return batches(count, points_per_forward(config, rows, seq_len, span), sizer)


def sampled_target_gradients(
    inputs: ModelInputs,
    config: SalienceConfig,
    count: int,
    points: Points,
    weights: torch.Tensor | None = None,
    on_units: Callable[[int], None] | None = None,
    sizer: SliceSizer | None = None,
) -> torch.Tensor:
    """sum_s weights[s] * (gradient of each target's log-prob at point s), for all targets.

    Args:
      inputs: the batch (B examples, T targets, length L).
      count: S, the number of points per example.
      points: see `Points`.
      weights: optional <float32>[S] weight of each point (IG's quadrature weights); None: 1.
      on_units: called after each backward with the (target x point) units it finished
        (and with 0 after each forward when time-sliced).
      sizer: time slices (sequence_salience/slices.py), or None for chunks by the budget rule.
    Returns:
      <float32>[T, B, L, D].
    """
    batch, seq_len, dim = inputs.embeds.shape
    num_t = inputs.target_ids.shape[1]
    total = torch.zeros(num_t, batch, seq_len, dim, device=inputs.embeds.device)  # [T, B, L, D]
    backward = resolve_backward(config.backward, inputs.model)
    for sl in sample_slices(config, count, batch, seq_len, sizer):
        n = sl.stop - sl.start
        _, g = per_target_gradients(
            inputs.repeat(n), points(sl), targets_per_backward(config, batch, n, seq_len),
            row_weights=None if weights is None else weights[sl].repeat(batch),  # [B * n]
            reduce=lambda g, n=n: g.view(g.shape[0], batch, n, seq_len, dim).sum(2),
            backward=backward,
            on_chunk=(lambda c, n=n: on_units(c * n)) if on_units is not None else None,
            sizer=sizer,
        )  # [T, B, L, D]
        total += g
    return total


def sampled_span_gradient(
    inputs: ModelInputs,
    target_weights: torch.Tensor,
    config: SalienceConfig,
    count: int,
    points: Points,
    weights: torch.Tensor | None = None,
    progress: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """sum_s weights[s] * gradient of sum_t target_weights[b, t] log p(target_t) at point s.

    target_weights: <float>[B, T]; progress(n) after each forward + backward of n points.
    Returns: <float32>[B, L, D].
    """
    batch, seq_len, dim = inputs.embeds.shape
    total = torch.zeros(batch, seq_len, dim, device=inputs.embeds.device)  # [B, L, D]
    for sl in sample_slices(config, count, batch, seq_len, span=True):
        n = sl.stop - sl.start
        _, g = weighted_gradient(
            inputs.repeat(n), points(sl), target_weights.repeat_interleave(n, 0),
            row_weights=None if weights is None else weights[sl].repeat(batch),
        )  # [B * n, L, D]
        total += g.view(batch, n, seq_len, dim).sum(1)
        if progress is not None:
            progress(n)
    return total
