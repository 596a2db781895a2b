"""Reductions of token scores to segment scores, and the normalisation of values for colours."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sequence_salience.aggregate.segments import Segmentation, segment
from sequence_salience.errors import SalienceError

REDUCTIONS = ("sum", "mean", "max", "abs_sum")


def aggregate(
    scores,
    segmentation: Segmentation,
    reduction: str = "sum",
    *,
    keep_excluded: bool = False,
) -> np.ndarray:
    """Reduces token scores to segment scores.

    Args:
      scores: float [N] or [T, N] token salience (N = number of tokens).
      segmentation: from `segment` over the same tokens.
      reduction: "sum" (default), "mean", "max" or "abs_sum".
      keep_excluded: if False, excluded (markup) segments score NaN.

    Returns:
      float64 [S] or [T, S]. Segments without tokens: 0 for sum/abs_sum, NaN
      for mean/max.

    Raises:
      SalienceError: unknown reduction, or scores whose last axis is not N.
    """
    if reduction not in REDUCTIONS:
        raise SalienceError(f"unknown reduction {reduction!r}. Fix: use one of {REDUCTIONS}.")
    values = np.asarray(scores, dtype=np.float64)
    seg = segmentation.token_segment  # [N]
    if values.ndim not in (1, 2) or values.shape[-1] != len(seg):
        raise SalienceError(
            f"scores have shape {values.shape}; expected [{len(seg)}] or [T, {len(seg)}] "
            f"(one column per token). Fix: pass scores for the same tokens as the offsets."
        )
    n_seg, n_tok = len(segmentation), len(seg)
    if n_seg == n_tok and np.array_equal(seg, np.arange(n_tok)):  # token granularity
        out = np.abs(values) if reduction == "abs_sum" else values.copy()  # [..., S]
        if not keep_excluded:
            out[..., segmentation.excluded] = np.nan
        return out
    # Work on the token axis first: reduceat along axis 0 of a [N, R] view is
    # much faster than along the last axis of [R, N].
    cols = values.reshape(values.shape[0] if values.ndim == 2 else 1, n_tok).T  # [N, R], R = T or 1
    if reduction == "abs_sum":
        cols = np.abs(cols)
    out = np.zeros((n_seg, cols.shape[1]), dtype=np.float64)  # [S, R]
    valid = seg >= 0
    if valid.all() and (n_tok < 2 or bool((seg[1:] >= seg[:-1]).all())):
        sorted_seg = seg  # tokens already in segment order: no copy
    else:
        order = np.flatnonzero(valid)[np.argsort(seg[valid], kind="stable")]  # [N']
        sorted_seg, cols = seg[order], cols[order]
    counts = np.bincount(sorted_seg, minlength=n_seg)  # [S]
    if len(sorted_seg):
        group = np.flatnonzero(np.r_[True, sorted_seg[1:] != sorted_seg[:-1]])  # [G]
        ufunc = np.maximum if reduction == "max" else np.add
        out[sorted_seg[group]] = ufunc.reduceat(cols, group, axis=0)
    if reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            out /= counts[:, None]
    if reduction in ("mean", "max"):
        out[counts == 0] = np.nan
    if not keep_excluded:
        out[segmentation.excluded] = np.nan
    return np.ascontiguousarray(out.T).reshape(values.shape[:-1] + (n_seg,))


def matches_only(values, segmentation: Segmentation) -> np.ndarray:
    """Segment values with the text between regex matches (kind "gap") set to NaN.

    With granularity "regex" the matches are the segments a user asked about: the text between
    them is context, shown uncoloured, not ranked and without a say in the colour scale. Other
    granularities have no "gap" segments: the values come back unchanged (as a float64 copy).

    Args:
      values: float [S] or [T, S] from `aggregate` over `segmentation`.
    """
    out = np.array(values, dtype=np.float64)  # copy
    gaps = np.array([k == "gap" for k in segmentation.kinds], dtype=bool)
    if gaps.any():
        out[..., gaps] = np.nan
    return out


def aggregate_salience(
    text: str,
    offsets,
    scores,
    granularity: str = "word",
    reduction: str = "sum",
    *,
    pattern: str | None = None,
    role_spans: Sequence[tuple[int, int, str]] | None = None,
    keep_excluded: bool = False,
) -> tuple[Segmentation, np.ndarray]:
    """`segment` then `aggregate`; returns (segmentation, float64 [S] or [T, S])."""
    seg = segment(text, offsets, granularity, pattern=pattern, role_spans=role_spans)
    return seg, aggregate(scores, seg, reduction, keep_excluded=keep_excluded)


def _display_mask(values: np.ndarray, excluded) -> np.ndarray:
    mask = np.isfinite(values)
    if excluded is not None:
        mask &= ~np.broadcast_to(np.asarray(excluded, dtype=bool), values.shape)
    return mask


def normalize_max_abs(values, excluded=None) -> np.ndarray:
    """Scales values by their largest magnitude into [-1, 1].

    Args:
      values: float [S] or [T, S]; one scale over all entries.
      excluded: optional bool [S]; those entries become NaN and do not set the scale.

    Returns:
      float64, same shape; NaN where excluded or not finite; 0 if all are 0.
    """
    v = np.asarray(values, dtype=np.float64)
    mask = _display_mask(v, excluded)
    scale = np.abs(v[mask]).max() if mask.any() else 0.0
    out = np.full(v.shape, np.nan)
    out[mask] = v[mask] / scale if scale > 0 else 0.0
    return out


def percentile(values, q: float) -> float:
    """Linear-interpolation percentile (numpy's default), written out for TS parity."""
    a = np.sort(np.asarray(values, dtype=np.float64).ravel())
    if len(a) == 0:
        return float("nan")
    rank = q / 100.0 * (len(a) - 1)
    lo = int(np.floor(rank))
    hi = min(lo + 1, len(a) - 1)
    return float(a[lo] + (a[hi] - a[lo]) * (rank - lo))


def normalize_percentile(values, q: float = 95.0, excluded=None) -> np.ndarray:
    """Clips magnitudes at their q-th percentile and scales into [-1, 1].

    One outlier (often the first token, an attention sink) then does not wash
    out every other colour.

    Args:
      values: float [S] or [T, S]; one scale over all entries.
      q: percentile of |values| (0..100) used as the scale.
      excluded: optional bool [S]; those entries become NaN and do not set the scale.

    Returns:
      float64, same shape, in [-1, 1]; NaN where excluded or not finite.

    Raises:
      SalienceError: q outside [0, 100].
    """
    if not 0.0 <= q <= 100.0:
        raise SalienceError(f"percentile q={q} is outside [0, 100]. Fix: pass e.g. q=95.")
    v = np.asarray(values, dtype=np.float64)
    mask = _display_mask(v, excluded)
    scale = percentile(np.abs(v[mask]), q) if mask.any() else 0.0
    out = np.full(v.shape, np.nan)
    out[mask] = np.clip(v[mask] / scale, -1.0, 1.0) if scale > 0 else 0.0
    return out
