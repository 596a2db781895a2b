"""Matplotlib heatmap of salience: rows are target tokens, columns are prompt segments.

Uses `matplotlib.figure.Figure` directly (no pyplot state, no GUI backend): a
notebook shows the returned figure once, a script saves it with
`fig.savefig(path)`. Colours are the browser's (palette.py), 64 levels per sign.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sequence_salience import aggregate
from sequence_salience.display import palette
from sequence_salience.display.view import View, resolve_method, resolve_target
from sequence_salience.errors import SalienceError
from sequence_salience.methods import get_method

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from sequence_salience.result import SalienceResult

MAX_LABEL = 24


def _label(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def segment_matrix(
    result: "SalienceResult",
    method: str | None = None,
    granularity: str = "word",
    target=None,
    *,
    pattern: str | None = None,
    include_response: bool = False,
) -> tuple[np.ndarray, list[str], list[str], list[int]]:
    """The [T', S'] matrix a heatmap shows, with its labels.

    Rows are the target tokens t0..t1-1 (each row is that token's own salience,
    `result.matrices[method][t]`), columns the segments that start in the prompt
    (and, with include_response, the response segments too), template markup left out.

    Returns:
      (values float64 [T', S'], row labels, column labels, column segment indices).
    """
    t0, t1 = resolve_target(result, target)
    method = resolve_method(result, method if method is not None or not result.matrices else next(iter(result.matrices)))
    if method not in result.matrices:
        raise SalienceError(f"{method!r} has no per-token matrix in this result (only spans). "
                            "Fix: compute_salience(...) with this method for a heatmap.")
    seg = aggregate.segment(result.text, result.offsets, granularity, pattern=pattern, role_spans=result.role_spans)
    values = aggregate.aggregate(result.matrices[method][t0:t1], seg, "sum")  # [T', S]
    cols, col_labels = matrix_columns(result, seg, include_response)
    rows = [_label(result.tokens[result.n_prompt_tokens + t]) or repr(result.tokens[result.n_prompt_tokens + t])
            for t in range(t0, t1)]
    return values[:, cols], rows, col_labels, cols


def matrix_columns(result: "SalienceResult", seg: aggregate.Segmentation,
                   include_response: bool = False) -> tuple[list[int], list[str]]:
    """The heatmap's columns: (segment indices, labels) of the segments that start in the prompt (with
    include_response, the response's too), template markup and white-space-only segments left out."""
    cols = [
        s for s in range(len(seg))
        if not seg.excluded[s] and (include_response or int(seg.starts[s]) < result.prompt_end)
        and result.text[int(seg.starts[s]): int(seg.ends[s])].strip()
    ]
    return cols, [_label(result.text[int(seg.starts[s]): int(seg.ends[s])]) for s in cols]


def span_row(view: View) -> tuple[np.ndarray, str, list[str], list[int]]:
    """A segment method's map as the matrix's one row (those methods measure one target span at a time; the
    browser's heatmap/logic.ts segmentMethodHeatmap): the view's values on the prompt's columns.

    Returns:
      (values float64 [1, S'], the row's label: the span's text, column labels, column segment indices).
    """
    cols, labels = matrix_columns(view.result, view.seg)
    return view.values[cols][None, :], _label(view.target_text()) or repr(view.target_text()), labels, cols


def colormap(signed: bool):
    """A matplotlib colormap with the browser's colours (2 * LEVELS + 1 or LEVELS + 1 entries)."""
    from matplotlib.colors import ListedColormap  # pylint: disable=import-outside-toplevel

    xs = np.linspace(-1.0, 1.0, 2 * palette.LEVELS + 1) if signed else np.linspace(0.0, 1.0, palette.LEVELS + 1)
    colors = [tuple(c / 255 for c in palette.color_at(float(x), signed)) for x in xs]
    return ListedColormap(colors, name="sequence_salience_" + ("diverging" if signed else "sequential"))


def heatmap(
    result: "SalienceResult",
    method: str | None = None,
    granularity: str = "word",
    target=None,
    *,
    pattern: str | None = None,
    include_response: bool = False,
    normalize: str = "all",
    title: str | None = None,
) -> "Figure":
    """Heatmap of salience: target tokens (rows) x segments (columns), labelled.

    Args:
      result: from compute_salience.
      method: a computed method (default: the first).
      granularity: segmentation of the columns (aggregate.GRANULARITIES).
      target: (t0, t1) target tokens for the rows, or None for the whole response.
      pattern: regex for granularity "regex".
      include_response: also show response segments as columns (salience of earlier answer
        tokens for later ones).
      normalize: "all" (one colour scale for the whole matrix) or "row" (each target token's row
        divided by its largest |value|, so rows whose salience is small stay readable).
      title: figure title (default: method, granularity and target).

    Returns:
      A matplotlib Figure; ax = fig.axes[0] has the column labels as x tick labels and
      the target tokens as y tick labels.
    """
    from matplotlib.figure import Figure  # pylint: disable=import-outside-toplevel

    values, rows, cols, _ = segment_matrix(
        result, method, granularity, target, pattern=pattern, include_response=include_response
    )
    method = method if method is not None else next(iter(result.matrices))
    if not cols:
        raise SalienceError("No segments to plot at this granularity. Fix: pick a finer granularity.")
    signed = get_method(method).signed
    if normalize == "row":
        scale = np.nanmax(np.abs(np.where(np.isfinite(values), values, np.nan)), axis=1, keepdims=True)  # [T', 1]
        values = values / np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
    elif normalize != "all":
        raise SalienceError(f"normalize={normalize!r}. Fix: use 'all' or 'row'.")
    vmax = palette.max_abs(values[np.isfinite(values)].ravel().tolist())
    width = min(40.0, max(5.0, 0.32 * len(cols) + 2.0))
    height = min(40.0, max(2.5, 0.26 * len(rows) + 1.8))
    fig = Figure(figsize=(width, height), layout="constrained")
    ax = fig.add_subplot()
    img = ax.imshow(np.ma.masked_invalid(values), aspect="auto", interpolation="nearest", cmap=colormap(signed),
                    vmin=-vmax if signed else 0.0, vmax=vmax)
    ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_xlabel(f"prompt {granularity}s" if granularity != "regex" else "regex segments")
    ax.set_ylabel("target tokens")
    ax.set_title(title or f"{method} · {granularity}", fontsize=10)
    label = "salience" if signed else "salience (magnitude)"
    fig.colorbar(img, ax=ax, shrink=0.8, label=label + (" / row max" if normalize == "row" else ""))
    return fig
