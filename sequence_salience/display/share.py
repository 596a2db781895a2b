"""Share this view: one standalone HTML file of a result, with a notebook cell that reproduces it.

    from sequence_salience.display import share
    share.write_share(result, "view.html", model="default", method="grad_x_input", granularity="word")

The page holds what the salience view shows (display/html.py's fragment: the model's prompt and answer
coloured by segment, the legend, the facts and warnings such as IG's completeness, the top segments),
and beside it: the model, method and granularity; the answer x prompt matrix (target tokens x segments
of the prompt and of the answer's earlier tokens, a number in every cell, coloured by the same palette
as the map: palette.py); the faithfulness curves' table when a FaithfulnessReport is given; and a
notebook cell (Python text) that recomputes the result with the library and shows the same view.
No scripts, fonts, images or links: it opens offline. Every number shown also sits in a `data-value`
attribute with 9 significant digits (a float32 exactly), so a reader (and the tests) can check it against the result.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from sequence_salience.display import palette
from sequence_salience.display.html import GRANULARITY_LABELS, render_fragment
from sequence_salience.display.markup import esc
from sequence_salience.display.plot import segment_matrix
from sequence_salience.display.view import DEFAULT_TOP, View, make_view
from sequence_salience.errors import SalienceError
from sequence_salience.files import atomic_write_text
from sequence_salience.methods import get_any_method, is_segment_method, list_methods

_CSS = """
body { margin: 16px; font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; font-size: 13px;
  color: #202124; }
.ss-share h2 { font-size: 14px; font-weight: 500; margin: 18px 0 6px; }
.ss-share dl.ss-about { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0 0 12px; }
.ss-share dl.ss-about dt { color: #5f6368; }
.ss-share dl.ss-about dd { margin: 0; white-space: pre-wrap; word-break: break-word; }
.ss-share .ss-scroll { overflow-x: auto; max-width: 100%; }
.ss-share table { border-collapse: collapse; font-size: 11px; font-variant-numeric: tabular-nums; }
.ss-share th, .ss-share td { border: 1px solid #e8eaed; padding: 2px 4px; text-align: right; white-space: nowrap; }
.ss-share th { font-weight: 500; color: #3c4043; background: #f8f9fa; }
.ss-share th.ss-resp { font-style: italic; }
.ss-share .ss-note { color: #5f6368; font-size: 12px; margin: 4px 0; }
.ss-share pre.ss-cell { background: #f8f9fa; border: 1px solid #dadce0; border-radius: 4px; padding: 8px;
  white-space: pre-wrap; word-break: break-all; font-size: 12px; }
"""


def notebook_cell(result, method: str, granularity: str, target: tuple[int, int], *, model: str,
                  pattern: str | None = None) -> str:
    """Python text that recomputes `result` with the library (same tokens, same settings) and shows the view.

    The prompt is the result's own text and roles (the chat template already applied) and the answer its own
    token ids, so the cell reproduces the values without generating again. It defines `result`.

    Args:
      model: what ss.load_model is given to load the same model ("default", a folder, a .gguf file, a Hub id).
    """
    if is_segment_method(method):
        raise SalienceError(f"{method!r} is a segment method; the notebook cell reproduces a token method's "
                            f"result. Fix: share a view of one of {', '.join(list_methods())}.")
    p, pe = result.n_prompt_tokens, result.prompt_end
    # A raw prompt got the tokenizer's special tokens (BOS): empty spans in the prompt; a templated one has none.
    templated = not any(bool(result.special[i]) and result.offsets[i][1] <= result.offsets[i][0] for i in range(p))
    ids = tuple(int(i) for i in result.ids[p:])
    offsets = tuple((int(s) - pe, int(e) - pe) for s, e in result.offsets[p:])
    settings = {f.name: getattr(result.config, f.name) for f in dataclasses.fields(result.config)}
    t0, t1 = target
    if result.matrices:
        compute = f"ss.compute_salience(lm, prompt, target, methods=({method!r},), config=config)"
    else:
        compute = (f"ss.compute_span_result(lm, prompt, target, methods=({method!r},), t0={t0}, t1={t1}, "
                   "config=config)")
    return "\n".join([
        "import sequence_salience as ss",
        "from sequence_salience.model import Generation",
        "",
        f"lm = ss.load_model({model!r})",
        f"prompt = ss.ChatPrompt(text={result.text[:pe]!r}, role_spans={tuple(result.role_spans)!r}, "
        f"templated={templated!r})",
        f"target = Generation(text={result.text[pe:]!r}, ids={ids!r}, offsets={offsets!r}, stopped_by='eos')",
        f"config = ss.SalienceConfig(**{settings!r})",
        f"result = {compute}",
        f"ss.display.show(result, {method!r}, {granularity!r}, ({t0}, {t1}), pattern={pattern!r})",
    ]) + "\n"


def _value_cell(v: float, cs: palette.ColorScale, cls: str = "") -> str:
    if not np.isfinite(v):
        return f'<td class="{cls}" data-value="nan">–</td>'
    bg, fg = palette.color_for(float(v), cs)
    return (f'<td class="{cls}" data-value="{float(v):.9g}" style="background:{bg};color:{fg}">'
            f"{esc(palette.format_value(float(v)))}</td>")


def _matrix_html(view: View) -> str:
    """The answer x prompt matrix of the view's method, target and segmentation, a number in every cell."""
    result = view.result
    if view.method not in result.matrices:
        return ('<p class="ss-note ss-no-matrix">No answer × prompt matrix: this result holds the explained span '
                "only. Compute the per-token matrices (compute_salience, or the CLI's --per-token) to share it.</p>")
    values, rows, cols, col_segs = segment_matrix(result, view.method, view.granularity, view.target,
                                                  pattern=view.pattern, include_response=True)
    cs = palette.ColorScale(signed=view.signed, scale=palette.max_abs(values[np.isfinite(values)].ravel().tolist()))
    head = "".join(
        f'<th class="{"ss-resp" if s in view.response_segments else ""}" data-s="{s}" '
        f'title="{"in the response" if s in view.response_segments else "in the prompt"}">{esc(label)}</th>'
        for label, s in zip(cols, col_segs))
    body = "".join(
        f'<tr data-row="{i}"><th>{esc(label)}</th>{"".join(_value_cell(v, cs) for v in values[i])}</tr>'
        for i, label in enumerate(rows))
    return (f'<div class="ss-scroll"><table class="ss-matrix" aria-label="answer by prompt salience">'
            f"<thead><tr><th>answer token \\ segment</th>{head}</tr></thead><tbody>{body}</tbody></table></div>"
            f'<p class="ss-note">Rows: answer tokens {view.target[0]}–{view.target[1] - 1}; columns: '
            f"{GRANULARITY_LABELS[view.granularity]} of the prompt and of the answer (italic; zero where "
            "the row's token comes first). Each cell: that token's salience summed over the segment.</p>")


def _faithfulness_html(report) -> str:
    rows = []
    for r in report.table():
        verdict = esc(r["verdict"])
        rows.append(
            f'<tr data-mode="{esc(r["mode"])}" data-name="{esc(r["name"])}"><td>{esc(r["mode"])}</td>'
            f'<td>{esc(r["name"])}</td><td data-value="{float(r["aopc"]):.9g}">{r["aopc"]:.3f}</td>'
            f'<td data-value="{float(r["random_aopc"]):.9g}">{r["random_aopc"]:.3f} ± {r["random_std"]:.3f}</td>'
            f'<td data-value="{float(r["length_aopc"]):.9g}">{r["length_aopc"]:.3f}</td><td>{verdict}</td></tr>')
    return ('<table class="ss-faithfulness"><thead><tr><th>mode</th><th>ordering</th><th>AOPC (nats)</th>'
            f"<th>random</th><th>length</th><th>verdict</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
            f'<p class="ss-note">{report.granularity} segments removed ({report.removal}); higher AOPC = more '
            "faithful.</p>")


def share_html(result, method: str | None = None, granularity: str | None = None, target=None, *, model: str,
               pattern: str | None = None, faithfulness=None, segments=None, top: int = DEFAULT_TOP,
               title: str | None = None) -> str:
    """The standalone HTML page of one view (module docstring).

    Args:
      result, method, granularity, target, pattern, segments, top: as display.render_html.
      model: the name given to ss.load_model (shown, and used by the notebook cell).
      faithfulness: an explain.FaithfulnessReport of the same prompt and target, or None.
      title: page heading (default: "Sequence Salience").
    """
    view = make_view(result, method, granularity, target, pattern=pattern, top=top, segments=segments)
    info = get_any_method(view.method)
    about = [("Model", model), ("Method", f"{info.label} ({view.method})"),
             ("Granularity", GRANULARITY_LABELS[view.granularity] + (f" /{view.pattern}/" if view.pattern else "")),
             ("Explained", view.describe_target()), ("Prompt", view.prompt), ("Answer", view.response)]
    about_html = "".join(f'<dt>{esc(k)}</dt><dd class="ss-about-{esc(k.lower())}">{esc(v)}</dd>' for k, v in about)
    faith = ("" if faithfulness is None else f"<h2>Faithfulness</h2>{_faithfulness_html(faithfulness)}")
    try:
        cell = notebook_cell(view.result, view.method, view.granularity, view.target, model=model, pattern=view.pattern)
        cell_html = f'<pre class="ss-cell">{esc(cell)}</pre>'
    except SalienceError as e:
        cell_html = f'<p class="ss-note">{esc(e)}</p>'
    page_title = title or "Sequence Salience"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(page_title)}</title><style>{_CSS}</style></head>\n<body><div class=\"ss-share\">"
        f"<h1 style=\"font-size:16px\">{esc(page_title)}</h1><dl class=\"ss-about\">{about_html}</dl>"
        f"<h2>Salience map</h2>{render_fragment(view, exact=True)}"
        f"<h2>Answer × prompt</h2>{_matrix_html(view)}{faith}"
        f"<h2>Reproduce in a notebook</h2>{cell_html}</div></body></html>\n"
    )


def write_share(result, path: str | os.PathLike, method: str | None = None, granularity: str | None = None,
                target=None, **options) -> str:
    """Writes share_html(...) to `path` (atomically); returns the path. Options as share_html (model= needed)."""
    atomic_write_text(path, share_html(result, method, granularity, target, **options))
    return os.fspath(path)
