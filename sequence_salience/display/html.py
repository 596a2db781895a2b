"""HTML for a salience view: prompt and response coloured by segment, a legend and the top segments.

The markup is self-contained: inline CSS scoped under `.ss-salience`, no
scripts, no fonts or images, no links; `document()` wraps it into one HTML file
that can be mailed or opened offline. Text is escaped and kept verbatim
(`white-space: pre-wrap`), so every character of the prompt appears exactly
once, in order, inside `.ss-prompt`, and the response inside `.ss-response`.
"""

from __future__ import annotations

import numpy as np

from sequence_salience.display import palette
from sequence_salience.display.markup import esc as _esc
from sequence_salience.display.view import View, facts_lines, visible_text, warnings

_CSS = """
.ss-salience { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; font-size: 13px;
  color: #202124; display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; line-height: 1.6; }
.ss-salience .ss-texts { flex: 3 1 420px; min-width: 0; }
.ss-salience .ss-side { flex: 1 1 220px; max-width: 340px; }
.ss-salience .ss-head { color: #5f6368; margin-bottom: 6px; }
.ss-salience .ss-label { font-weight: 500; color: #3c4043; margin: 8px 0 2px; }
.ss-salience .ss-text { white-space: pre-wrap; word-break: break-word; border: 1px solid #dadce0;
  border-radius: 4px; padding: 6px 8px; background: #fff; }
.ss-salience .ss-seg { border-radius: 2px; }
.ss-salience .ss-markup { color: #9aa0a6; }
.ss-salience .ss-tgt { outline: 2px solid #1a73e8; outline-offset: -1px; border-radius: 2px; }
.ss-salience .ss-legend-bar { height: 10px; border: 1px solid #dadce0; border-radius: 2px; }
.ss-salience .ss-legend-labels { display: flex; justify-content: space-between; font-size: 11px; color: #5f6368; }
.ss-salience .ss-facts { font-size: 12px; color: #3c4043; margin: 6px 0; }
.ss-salience .ss-warn { font-size: 12px; background: #fef7e0; color: #7a4f01; border-left: 3px solid #f9ab00;
  padding: 4px 6px; margin: 4px 0; }
.ss-salience ol.ss-top { padding-left: 22px; margin: 2px 0; }
.ss-salience ol.ss-top li { margin: 1px 0; }
.ss-salience .ss-swatch { display: inline-block; width: 10px; height: 10px; border: 1px solid #dadce0;
  vertical-align: middle; margin-right: 4px; }
.ss-salience .ss-val { color: #5f6368; font-variant-numeric: tabular-nums; margin-left: 4px; }
.ss-salience .ss-where { font-size: 10px; color: #5f6368; border: 1px solid #dadce0; border-radius: 3px;
  padding: 0 2px; margin-left: 3px; }
"""

GRANULARITY_LABELS = {
    "token": "tokens", "word": "words", "sentence": "sentences", "paragraph": "paragraphs",
    "line": "lines", "regex": "regex matches", "role": "roles",
}


def _piece(view: View, text: str, s: int, response: bool, rank: dict[int, int], exact: bool = False) -> str:
    if s < 0:
        return f'<span class="ss-gap">{_esc(text)}</span>'
    classes = ["ss-seg"]
    if view.seg.excluded[s]:
        classes.append("ss-markup")
    style = ""
    # As the browser module: the target is outlined only when it is part of the response (the whole
    # response is not boxed word by word), and never as an empty box around whitespace.
    # The target's own segments are not coloured (they are what is explained, outside the scale).
    whole = tuple(view.target) == (0, view.result.num_targets)
    in_target = response and s in view.target_segments
    selected = in_target and not whole and text.strip() != ""
    if selected:
        classes.append("ss-tgt")
    elif not in_target:
        c = view.color(s)
        if c is not None:
            style = f' style="background:{c[0]};color:{c[1]}"'
    v = float(view.values[s])
    title = "chat template markup (no score)" if view.seg.excluded[s] else (
        "explained target" if in_target else f"salience {palette.format_value(v)}"
        + (f" · rank {rank[s] + 1}" if s in rank else ""))
    # exact: each value with 9 digits (a float32 exactly), for a reader of a shared file (share.py)
    value = f' data-value="{v:.9g}"' if exact and np.isfinite(v) else ""
    return f'<span class="{" ".join(classes)}" data-s="{s}"{value} title="{_esc(title)}"{style}>{_esc(text)}</span>'


def _legend(view: View) -> str:
    cs = view.scale
    labels = "".join(f"<span>{_esc(palette.format_value(v))}</span>" for v, _ in palette.legend_stops(cs, 3))
    kind = "Signed (diverging)" if cs.signed else "Magnitude (sequential)"
    return (
        f'<div class="ss-legend" aria-label="colour legend"><div class="ss-legend-title">{kind}</div>'
        f'<div class="ss-legend-bar" style="background:{palette.legend_gradient(cs)}"></div>'
        f'<div class="ss-legend-labels">{labels}</div></div>'
    )


def _top(view: View) -> str:
    items = []
    for r in view.ranked:
        bg, _ = palette.color_for(r.value, view.scale)
        text = visible_text(r.text)
        short = text if len(text) <= 40 else text[:39] + "…"
        where = '<span class="ss-where" title="in the response">resp.</span>' if r.in_response else ""
        items.append(
            f'<li data-rank-s="{r.seg}" title="{_esc(text)}"><span class="ss-swatch" style="background:{bg}"></span>'
            f'<span class="ss-top-text">{_esc(short)}</span>{where}'
            f'<span class="ss-val">{_esc(palette.format_value(r.value))}</span></li>'
        )
    return f'<ol class="ss-top">{"".join(items)}</ol>'


def render_fragment(view: View, title: str | None = None, exact: bool = False) -> str:
    """A <div> with its own <style>, for notebooks (`_repr_html_`) and for embedding.

    exact: each segment's value also in a `data-value` attribute (9 digits), as a shared page has it.
    """
    rank = {r.seg: i for i, r in enumerate(view.ranked)}
    prompt = "".join(_piece(view, p.text, p.seg, False, rank, exact) for p in view.pieces if not p.response)
    response = "".join(_piece(view, p.text, p.seg, True, rank, exact) for p in view.pieces if p.response)
    facts = facts_lines(view)
    warn_html = "".join(f'<div class="ss-warn" role="note">⚠ {_esc(w)}</div>' for w in warnings(view))
    head = (
        f"{_esc(view.method)} · {GRANULARITY_LABELS[view.granularity]}"
        + (f" /{_esc(view.pattern)}/" if view.granularity == "regex" and view.pattern else "")
        + f" · target: {_esc(view.describe_target())}"
    )
    title_html = f'<div class="ss-title"><b>{_esc(title)}</b></div>' if title else ""
    return (
        f'<div class="ss-salience"><style>{_CSS}</style>'
        f'<div class="ss-texts">{title_html}<div class="ss-head">{head}</div>'
        f'<div class="ss-label">Prompt</div><div class="ss-text ss-prompt">{prompt}</div>'
        f'<div class="ss-label">Response</div><div class="ss-text ss-response">{response}</div></div>'
        f'<div class="ss-side">{_legend(view)}'
        f'<div class="ss-facts">{"<br>".join(_esc(f) for f in facts)}</div>{warn_html}'
        f'<div class="ss-label">Top {GRANULARITY_LABELS[view.granularity]}</div>{_top(view)}</div></div>'
    )


def render_document(view: View, title: str | None = None) -> str:
    """One self-contained HTML file (no network: no scripts, fonts, images or links)."""
    page_title = title or "Sequence Salience"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{_esc(page_title)}</title></head>\n"
        f"<body style=\"margin:16px\">{render_fragment(view, title)}</body></html>\n"
    )
