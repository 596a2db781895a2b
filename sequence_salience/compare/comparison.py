"""SalienceComparison: two salience results side by side, its JSON form, and its HTML: the two responses
with their word diff, A's response's log p under both prompts, and the aligned prompt twice: both values
per segment (top half A, bottom half B, one shared scale) and the difference B − A (signed scale).

compare.py computes comparisons (compare, compare_results); this module holds what one is and how it
shows, so that the class and its renderer need no import of each other.

The HTML is self-contained like display/html.py (inline CSS scoped under `.ss-compare`, no scripts,
fonts or links) and coloured with the same palette (sequence_salience/display/palette.py, the
browser's). Unchanged text is shown once; deleted text (only in A) is struck through (<del>),
inserted text (only in B) underlined (<ins>).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from sequence_salience.compare.alignment import Alignment
from sequence_salience.compare.cross import CrossLogprobs
from sequence_salience.display import palette
from sequence_salience.display.html import GRANULARITY_LABELS
from sequence_salience.display.markup import esc as _esc
from sequence_salience.files import atomic_write_json, atomic_write_text
from sequence_salience.result import SalienceResult, result_to_dict

FORMAT = "sequence_salience.SalienceComparison"


@dataclasses.dataclass(frozen=True)
class SalienceComparison:
    """Two salience results side by side.

    Attributes:
      result_a, result_b: the two results (salience of each side's whole response).
      method, granularity, pattern: what the values are (method's salience summed over segments).
      labels: short names of the two sides (e.g. "original", "edited", or two model names).
      prompts: alignment of the prompt parts of result_a.text and result_b.text (chat markup included,
        excluded from values).
      responses: word alignment of the two responses.
      values_a, values_b: <float64>[K] per aligned prompt segment, each side's salience (NaN: no text
        on that side, or markup).
      difference: <float64>[K] values_b − values_a (text only on one side counts 0 on the other).
      scale: the shared colour scale of values_a and values_b (largest |value| of either side).
      difference_scale: the signed scale of `difference`.
      cross: A's response under A and under B (None when not computed).
    """

    result_a: SalienceResult
    result_b: SalienceResult
    method: str
    granularity: str
    pattern: str | None
    labels: tuple[str, str]
    prompts: Alignment
    responses: Alignment
    values_a: np.ndarray
    values_b: np.ndarray
    difference: np.ndarray
    scale: palette.ColorScale
    difference_scale: palette.ColorScale
    cross: CrossLogprobs | None

    @property
    def response_a(self) -> str:
        return self.result_a.text[self.result_a.prompt_end:]

    @property
    def response_b(self) -> str:
        return self.result_b.text[self.result_b.prompt_end:]

    @property
    def signed(self) -> bool:
        return self.scale.signed

    def top_changes(self, k: int = 10) -> list[tuple[int, float]]:
        """The k aligned prompt segments whose value changed most: (index, difference), largest |Δ| first."""
        items = [(i, float(d)) for i, d in enumerate(self.difference) if np.isfinite(d) and d != 0]
        items.sort(key=lambda r: (-abs(r[1]), r[0]))
        return items[: max(0, k)]

    def to_dict(self, with_results: bool = True) -> dict:
        """A JSON-ready form (NaN as null); with_results adds both results in SalienceResult's JSON layout."""
        def floats(v: np.ndarray) -> list:
            return [float(x) if np.isfinite(x) else None for x in v]

        prompts = self.prompts.to_dict()
        for k, seg in enumerate(prompts["segments"]):
            seg.update(value_a=floats(self.values_a[k:k + 1])[0], value_b=floats(self.values_b[k:k + 1])[0],
                       difference=floats(self.difference[k:k + 1])[0])
        out: dict[str, Any] = {
            "format": FORMAT, "version": 1, "method": self.method, "granularity": self.granularity,
            "pattern": self.pattern, "labels": list(self.labels),
            "scale": {"signed": self.scale.signed, "max_abs": self.scale.scale},
            "difference_scale": {"signed": True, "max_abs": self.difference_scale.scale},
            "prompts": prompts, "responses": self.responses.to_dict(),
            "response_a": self.response_a, "response_b": self.response_b,
            "cross": None if self.cross is None else self.cross.to_dict(),
        }
        if with_results:
            out["result_a"], out["result_b"] = result_to_dict(self.result_a), result_to_dict(self.result_b)
        return out

    def to_json(self, path, meta: Mapping[str, Any] | None = None) -> str:
        """Writes to_dict() (plus optional meta) as one JSON file, atomically; returns the path."""
        return atomic_write_json(path, {**self.to_dict(), "meta": dict(meta or {})})

    # Display: the renderers below.

    def html(self, document: bool = True, title: str | None = None) -> str:
        """Both views (the two values per segment, and the difference) as HTML: a file or a <div>."""
        return render_document(self, title) if document else render_fragment(self, title)

    def _repr_html_(self) -> str:
        return self.html(document=False)

    def to_html(self, path, title: str | None = None) -> str:
        """Writes one self-contained HTML file (no scripts, no network); returns the path."""
        atomic_write_text(path, self.html(document=True, title=title))
        return os.fspath(path)


_CSS = """
.ss-compare { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; font-size: 13px;
  color: #202124; line-height: 1.7; max-width: 1100px; }
.ss-compare .ss-head { color: #5f6368; margin-bottom: 6px; }
.ss-compare .ss-label { font-weight: 500; color: #3c4043; margin: 10px 0 2px; }
.ss-compare .ss-text { white-space: pre-wrap; word-break: break-word; border: 1px solid #dadce0;
  border-radius: 4px; padding: 6px 8px; background: #fff; }
.ss-compare .ss-side { color: #5f6368; font-size: 11px; margin-right: 6px; }
.ss-compare .ss-markup { color: #9aa0a6; }
.ss-compare del { text-decoration: line-through; text-decoration-color: #b3261e; text-decoration-thickness: 2px; }
.ss-compare ins { text-decoration: underline; text-decoration-color: #188038; text-decoration-thickness: 2px; }
.ss-compare del.ss-diff { background: #fce8e6; }
.ss-compare ins.ss-diff { background: #e6f4ea; }
.ss-compare .ss-legend { display: inline-block; width: 260px; margin-right: 24px; vertical-align: top; }
.ss-compare .ss-legend-bar { height: 10px; border: 1px solid #dadce0; border-radius: 2px; }
.ss-compare .ss-legend-labels { display: flex; justify-content: space-between; font-size: 11px; color: #5f6368; }
.ss-compare .ss-facts { font-size: 12px; color: #3c4043; margin: 4px 0; }
.ss-compare table.ss-logp { border-collapse: collapse; font-size: 12px; margin-top: 4px; }
.ss-compare table.ss-logp td, .ss-compare table.ss-logp th { border-bottom: 1px solid #eee; padding: 1px 8px;
  text-align: right; font-variant-numeric: tabular-nums; }
.ss-compare table.ss-logp td.ss-tok { text-align: left; white-space: pre; font-family: monospace; }
.ss-compare ol.ss-top { padding-left: 22px; margin: 2px 0; }
"""


def _fmt(v: float) -> str:
    return palette.format_value(v) if np.isfinite(v) else "–"


def response_diff_html(cmp: SalienceComparison, side: str) -> str:
    """One response with the words the other lacks marked: side "a" marks deletions, "b" insertions."""
    out = []
    for k, seg in enumerate(cmp.responses.segments):
        text = cmp.responses.text(k, side)
        if not text:
            continue
        if seg.kind == "equal":
            out.append(_esc(text))
        elif side == "a":
            out.append(f'<del class="ss-diff" title="not in {_esc(cmp.labels[1])}">{_esc(text)}</del>')
        else:
            out.append(f'<ins class="ss-diff" title="not in {_esc(cmp.labels[0])}">{_esc(text)}</ins>')
    return "".join(out)


def _title(cmp: SalienceComparison, k: int) -> str:
    la, lb = cmp.labels
    return f"{la} {_fmt(cmp.values_a[k])} · {lb} {_fmt(cmp.values_b[k])} · Δ {_fmt(cmp.difference[k])}"


def _style(values: list[float], scale: palette.ColorScale) -> str:
    """Inline style: one colour, or two halves (top: A, bottom: B) when two values are given."""
    colours = [palette.color_for(v, scale) if np.isfinite(v) else ("#ffffff", "#202124") for v in values]
    if len(colours) == 1:
        return f' style="background:{colours[0][0]};color:{colours[0][1]}"'
    (ca, ta), (cb, _) = colours
    return f' style="background:linear-gradient(to bottom, {ca} 0 50%, {cb} 50% 100%);color:{ta}"'


def prompt_html(cmp: SalienceComparison, view: str = "both") -> str:
    """The aligned prompt: unchanged segments once, deleted text struck through, inserted text underlined.

    view: "both" (each segment coloured by A's value on top and B's below, on the shared scale) or
      "difference" (coloured by B − A on the difference scale).
    """
    out = []
    for k, seg in enumerate(cmp.prompts.segments):
        ta, tb = cmp.prompts.text(k, "a"), cmp.prompts.text(k, "b")
        markup = not np.isfinite(cmp.values_a[k]) and not np.isfinite(cmp.values_b[k])
        cls = "ss-seg ss-markup" if markup else "ss-seg"
        title = "chat template markup (no score)" if markup else _title(cmp, k)
        attrs = f'class="{cls}" data-k="{k}" title="{_esc(title)}"'
        d = cmp.difference[k]

        def style(v_side: float) -> str:
            if markup:
                return ""
            if view == "difference":
                return _style([d], cmp.difference_scale)
            return _style([v_side], cmp.scale)

        if seg.kind == "equal":
            body = _esc(tb)
            if markup:
                out.append(f"<span {attrs}>{body}</span>")
            elif view == "difference":
                out.append(f"<span {attrs}{style(d)}>{body}</span>")
            else:
                out.append(f"<span {attrs}{_style([cmp.values_a[k], cmp.values_b[k]], cmp.scale)}>{body}</span>")
            continue
        if ta:
            out.append(f"<del {attrs}{style(cmp.values_a[k])}>{_esc(ta)}</del>")
        if tb:
            out.append(f"<ins {attrs}{style(cmp.values_b[k])}>{_esc(tb)}</ins>")
    return "".join(out)


def _legend(title: str, cs: palette.ColorScale) -> str:
    labels = "".join(f"<span>{_esc(palette.format_value(v))}</span>" for v, _ in palette.legend_stops(cs, 3))
    return (f'<div class="ss-legend"><div>{_esc(title)}</div>'
            f'<div class="ss-legend-bar" style="background:{palette.legend_gradient(cs)}"></div>'
            f'<div class="ss-legend-labels">{labels}</div></div>')


def cross_html(cmp: SalienceComparison, max_rows: int = 64) -> str:
    """log p of A's response under A and under B, in total and (when they tokenize alike) per token."""
    if cmp.cross is None:
        return ""
    c, (la, lb) = cmp.cross, cmp.labels
    direction = "more" if c.delta > 0 else ("less" if c.delta < 0 else "as")
    facts = (f"log p({la}'s response | {la}) = {c.under_a.total:.3f} · | {lb} = {c.under_b.total:.3f} · "
             f"Δ log p = {c.delta:+.3f} ({lb} makes it {direction} likely)")
    rows = ""
    per = c.per_token_delta
    if per is not None:
        body = "".join(
            f'<tr><td class="ss-tok">{_esc(t)}</td><td>{a:.3f}</td><td>{b:.3f}</td><td>{d:+.3f}</td></tr>'
            for t, a, b, d in list(zip(c.under_a.tokens, c.under_a.logprobs, c.under_b.logprobs, per))[:max_rows])
        more = f"<div class='ss-facts'>(first {max_rows} of {len(per)} tokens)</div>" if len(per) > max_rows else ""
        rows = (f"<details><summary>per token ({len(per)})</summary>"
                f'<table class="ss-logp"><tr><th>token</th><th>{_esc(la)}</th><th>{_esc(lb)}</th><th>Δ</th></tr>'
                f"{body}</table>{more}</details>")
    return f'<div class="ss-label">Old answer</div><div class="ss-facts ss-cross">{_esc(facts)}</div>{rows}'


def render_fragment(cmp: SalienceComparison, title: str | None = None) -> str:
    """A <div> with its own <style>, for notebooks (`_repr_html_`) and embedding."""
    la, lb = cmp.labels
    head = f"{_esc(cmp.method)} · {GRANULARITY_LABELS[cmp.granularity]} · {_esc(la)} vs {_esc(lb)}"
    changed = "the same" if not cmp.responses.changed else "different"
    top = "".join(
        f"<li>{_esc(' '.join((cmp.prompts.text(k, 'b') or cmp.prompts.text(k, 'a')).split()) or '∅')}"
        f" <span class='ss-facts'>Δ {_esc(_fmt(d))}</span></li>" for k, d in cmp.top_changes(5))
    title_html = f"<div><b>{_esc(title)}</b></div>" if title else ""
    return (
        f'<div class="ss-compare"><style>{_CSS}</style>{title_html}<div class="ss-head">{head}</div>'
        f'<div class="ss-label">Responses ({changed})</div>'
        f'<div class="ss-text ss-response ss-response-a"><span class="ss-side">{_esc(la)}</span>'
        f"{response_diff_html(cmp, 'a')}</div>"
        f'<div class="ss-text ss-response ss-response-b"><span class="ss-side">{_esc(lb)}</span>'
        f"{response_diff_html(cmp, 'b')}</div>"
        f"{cross_html(cmp)}"
        f'<div class="ss-label">Prompt salience, both ({_esc(la)} top half, {_esc(lb)} bottom half; one scale)</div>'
        f'<div class="ss-text ss-prompt ss-view-both">{prompt_html(cmp, "both")}</div>'
        f'<div class="ss-label">Difference ({_esc(lb)} − {_esc(la)})</div>'
        f'<div class="ss-text ss-prompt ss-view-difference">{prompt_html(cmp, "difference")}</div>'
        f'<div style="margin-top:6px">{_legend("Shared scale", cmp.scale)}'
        f'{_legend(f"Difference {lb} − {la}", cmp.difference_scale)}</div>'
        + (f'<div class="ss-label">Largest changes</div><ol class="ss-top">{top}</ol>' if top else "")
        + "</div>"
    )


def render_document(cmp: SalienceComparison, title: str | None = None) -> str:
    """One self-contained HTML file (no network: no scripts, fonts, images or links)."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{_esc(title or 'Sequence Salience: compare')}</title></head>\n"
        f"<body style=\"margin:16px\">{render_fragment(cmp, title)}</body></html>\n"
    )
