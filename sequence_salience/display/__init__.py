"""Rich display of a SalienceResult: notebook HTML, self-contained HTML files, JSON, heatmaps, terminal.

Core library: imports numpy (and matplotlib / rich / IPython lazily), never LIT.
Segmentation and aggregation are `sequence_salience.aggregate` (the browser's
rules); colours are `palette` (the browser's colormap.ts, tested equal).

    from sequence_salience import display
    display.show(result, method="grad_x_input", granularity="sentence", target=(3, 5))
    display.show(ablation.segment_salience(lm, prompt, target, "leave_one_out", granularity="sentence"))
    display.to_html(result, "salience.html", granularity="word")
    display.to_json(result, "salience.json"); same = display.load("salience.json")
    fig = display.heatmap(result, granularity="sentence")

The same calls exist as SalienceResult methods: result.show(...), result.to_html(path, ...),
result.to_json(path), SalienceResult.load(path), and the result renders itself in Jupyter
(as does a SegmentSalience, on its own segmentation: display/segments.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from sequence_salience.display import palette
from sequence_salience.display.html import render_document, render_fragment
from sequence_salience.display.plot import colormap, heatmap, segment_matrix
from sequence_salience.display.segments import SegmentFacts
from sequence_salience.display.view import DEFAULT_TOP, View, make_view
from sequence_salience.files import atomic_write_text
from sequence_salience.methods import grad_x_input
from sequence_salience.result import load_json, register_renderer, save_json

__all__ = [
    "DEFAULT_TOP", "SalienceView", "SegmentFacts", "View", "colormap", "heatmap", "load", "make_view",
    "palette", "render_html", "repr_html", "segment_matrix", "show", "to_html", "to_json",
]


class SalienceView:
    """A result with display options; Jupyter renders it as HTML, rich renders it in a terminal."""

    def __init__(self, result, method=None, granularity=None, target=None, *, pattern=None,
                 top=DEFAULT_TOP, intensity=1.0, title=None, segments=None):
        self.view = make_view(result, method, granularity, target, pattern=pattern, top=top, intensity=intensity,
                              segments=segments)
        self.title = title

    def _repr_html_(self) -> str:
        return render_fragment(self.view, self.title)

    def __rich__(self):
        from sequence_salience.display import terminal  # pylint: disable=import-outside-toplevel

        return terminal.renderable(self.view)

    def html(self) -> str:
        """The whole self-contained HTML document."""
        return render_document(self.view, self.title)


def render_html(result, method=None, granularity=None, target=None, *, pattern=None, top=DEFAULT_TOP,
                intensity=1.0, title=None, document=True, segments=None) -> str:
    """HTML of the coloured prompt and response, legend and top segments.

    Args:
      result: a SalienceResult, or an ablation.SegmentSalience (a segment method's values).
      method: a method in result.matrices or spans (default: the first computed; with `segments`,
        the first segment method).
      granularity: token | word | sentence | paragraph | line | regex | role (default: word, or a
        segment method's own granularity: the only one it is shown at).
      target: (t0, t1) target tokens, an int for one token, or None for the whole response.
      pattern: the regex for granularity="regex".
      top: number of top segments listed.
      intensity: colour multiplier (> 0; > 1 brightens faint salience).
      title: optional heading (and page title).
      document: a full HTML file (True) or a <div> fragment (False).
      segments: ablation.SegmentSalience value(s) shown with `result` (see view.make_view).
    """
    view = make_view(result, method, granularity, target, pattern=pattern, top=top, intensity=intensity,
                     segments=segments)
    return render_document(view, title) if document else render_fragment(view, title)


def repr_html(result) -> str:
    """Jupyter's rich display of a result: gradient x input if present (else the first method), words, whole response."""
    method = grad_x_input.NAME if grad_x_input.NAME in result.matrices else None
    return render_html(result, method, "word", document=False)


def to_html(result, path: str | os.PathLike, method=None, granularity=None, target=None, **options) -> str:
    """Writes one self-contained HTML file (no network needed to view it); returns the path."""
    atomic_write_text(path, render_html(result, method, granularity, target, document=True, **options))
    return os.fspath(path)


def to_json(result, path: str | os.PathLike, meta: Mapping[str, Any] | None = None) -> str:
    """Saves the result exactly (see sequence_salience/result.py for the format); returns the path."""
    save_json(result, path, meta)
    return os.fspath(path)


def load(path: str | os.PathLike, with_meta: bool = False):
    """Loads a result written by to_json (with_meta=True: (result, meta))."""
    return load_json(path, with_meta=with_meta)


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython  # pylint: disable=import-outside-toplevel
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


def show(result, method=None, granularity=None, target=None, **options) -> None:
    """Displays the result: HTML in a notebook, coloured text and a table in a terminal.

    Arguments as render_html.
    """
    view = SalienceView(result, method, granularity, target, **options)
    if _in_notebook():
        from IPython.display import display as ipy_display  # pylint: disable=import-outside-toplevel

        ipy_display(view)
    else:
        from rich.console import Console  # pylint: disable=import-outside-toplevel

        Console().print(view)


register_renderer(sys.modules[__name__])  # SalienceResult.show / to_html / _repr_html_ call this module
