"""Share this view: one standalone HTML file of a result, with a notebook cell that reproduces it.

    from sequence_salience.display import share
    share.write_share(result, "view.html", model="default", method="grad_x_input", granularity="word")

The page holds what the salience view shows (display/html.py's fragment: the model's prompt and answer
coloured by segment, the legend, the facts and warnings such as IG's completeness or the surrogate's R², the top
segments), and beside it: the model, method and granularity (a segment method's fit and forward work too); the
answer x prompt matrix (target tokens x segments of the prompt and of the answer's earlier tokens, a number in
every cell, coloured by the same palette as the map: palette.py; a segment method's map is its one row, the span
explained); the faithfulness test's table when one is given (a FaithfulnessReport, or the explain wrapper's
curves payload), the rows of the method shown in bold; and a notebook cell (Python text) that recomputes the
result with the library (compute_salience, or ablation.segment_salience for a segment method) and shows the
same view.
No scripts, fonts, images or links: it opens offline. Every number shown also sits in a `data-value`
attribute with 9 significant digits (a float32 exactly), so a reader (and the tests) can check it against the result.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

import numpy as np

from sequence_salience.display import palette
from sequence_salience.display.html import GRANULARITY_LABELS, render_fragment
from sequence_salience.display.markup import esc
from sequence_salience.display.plot import segment_matrix, span_row
from sequence_salience.display.view import DEFAULT_TOP, View, make_view
from sequence_salience.errors import SalienceError
from sequence_salience.files import atomic_write_text
from sequence_salience.methods import get_any_method, is_segment_method
from sequence_salience.methods.base import AblationConfig
from sequence_salience.model import Generation
from sequence_salience.text import ChatPrompt

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
.ss-share tr.ss-shown td { font-weight: 600; }
.ss-share .ss-note { color: #5f6368; font-size: 12px; margin: 4px 0; }
.ss-share pre.ss-cell { background: #f8f9fa; border: 1px solid #dadce0; border-radius: 4px; padding: 8px;
  white-space: pre-wrap; word-break: break-all; font-size: 12px; }
"""


def explained_pair(result) -> tuple[ChatPrompt, Generation]:
    """The prompt (its text and roles, the chat template already applied) and the answer (its own token ids) that
    `result` explains: given to the library again they give the same tokens, without generating (the notebook cell's
    pair; the CLI's faithfulness test of a result)."""
    p, pe = result.n_prompt_tokens, result.prompt_end
    # A raw prompt got the tokenizer's special tokens (BOS): empty spans in the prompt; a templated one has none.
    templated = not any(bool(result.special[i]) and result.offsets[i][1] <= result.offsets[i][0] for i in range(p))
    ids = tuple(int(i) for i in result.ids[p:])
    offsets = tuple((int(s) - pe, int(e) - pe) for s, e in result.offsets[p:])
    roles = tuple((int(s), int(e), str(r)) for s, e, r in result.role_spans)
    return (ChatPrompt(text=result.text[:pe], role_spans=roles, templated=templated),
            Generation(text=result.text[pe:], ids=ids, offsets=offsets, stopped_by="eos"))


def notebook_cell(result, method: str, granularity: str, target: tuple[int, int], *, model: str,
                  pattern: str | None = None, ablation: AblationConfig | None = None) -> str:
    """Python text that recomputes `result` with the library (same tokens, same settings) and shows the view.

    The prompt is the result's own text and roles (the chat template already applied) and the answer its own
    token ids, so the cell reproduces the values without generating again. It defines `result`: the
    SalienceResult of a token method, or a segment method's SegmentSalience (ablation.segment_salience on the
    view's segmentation and span; display.show draws either).

    Args:
      model: what ss.load_model is given to load the same model ("default", a folder, a .gguf file, a Hub id).
      ablation: a segment method's AblationConfig (removal, seed, the surrogate's ablations ...); None: the
        defaults. Not used for a token method.
    """
    prompt, answer = explained_pair(result)
    t0, t1 = target
    pair = [
        f"lm = ss.load_model({model!r})",
        f"prompt = ss.ChatPrompt(text={prompt.text!r}, role_spans={prompt.role_spans!r}, "
        f"templated={prompt.templated!r})",
        f"target = Generation(text={answer.text!r}, ids={answer.ids!r}, offsets={answer.offsets!r}, stopped_by='eos')",
    ]
    show = f"ss.display.show(result, {method!r}, {granularity!r}, ({t0}, {t1}), pattern={pattern!r})"
    if is_segment_method(method):
        config = ablation if ablation is not None else AblationConfig()
        settings = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
        return "\n".join([
            "import sequence_salience as ss",
            "from sequence_salience.ablation import AblationConfig, segment_salience",
            "from sequence_salience.model import Generation",
            "",
            *pair,
            f"config = AblationConfig(**{settings!r})",
            f"result = segment_salience(lm, prompt, target, {method!r}, granularity={granularity!r}, "
            f"pattern={pattern!r}, span=({t0}, {t1}), config=config)",
            show,
        ]) + "\n"
    settings = {f.name: getattr(result.config, f.name) for f in dataclasses.fields(result.config)}
    if result.matrices:
        compute = f"ss.compute_salience(lm, prompt, target, methods=({method!r},), config=config)"
    else:
        compute = (f"ss.compute_span_result(lm, prompt, target, methods=({method!r},), t0={t0}, t1={t1}, "
                   "config=config)")
    return "\n".join([
        "import sequence_salience as ss",
        "from sequence_salience.model import Generation",
        "",
        *pair,
        f"config = ss.SalienceConfig(**{settings!r})",
        f"result = {compute}",
        show,
    ]) + "\n"


def _value_cell(v: float, cs: palette.ColorScale, cls: str = "") -> str:
    if not np.isfinite(v):
        return f'<td class="{cls}" data-value="nan">–</td>'
    bg, fg = palette.color_for(float(v), cs)
    return (f'<td class="{cls}" data-value="{float(v):.9g}" style="background:{bg};color:{fg}">'
            f"{esc(palette.format_value(float(v)))}</td>")


def _matrix_html(view: View) -> str:
    """The answer x prompt matrix of the view's method, target and segmentation, a number in every cell; a segment
    method's map is its one row (the span explained: those methods measure one target span at a time)."""
    result = view.result
    segment = is_segment_method(view.method)
    if segment:
        values, row, cols, col_segs = span_row(view)
        rows = [row]
    elif view.method not in result.matrices:
        return ('<p class="ss-note ss-no-matrix">No answer × prompt matrix: this result holds the explained span '
                "only. Compute the per-token matrices (compute_salience, or the CLI's --per-token) to share it.</p>")
    else:
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
    unit = GRANULARITY_LABELS[view.granularity]
    if segment:
        note = (f"One row: answer tokens {view.target[0]}–{view.target[1] - 1} together ({esc(view.method)} measures "
                f"one target span at a time); columns: {unit} of the prompt. Each cell: that segment's value, the "
                "map's.")
    else:
        note = (f"Rows: answer tokens {view.target[0]}–{view.target[1] - 1}; columns: {unit} of the prompt and of "
                "the answer (italic; zero where the row's token comes first). Each cell: that token's salience summed "
                "over the segment.")
    return (f'<div class="ss-scroll"><table class="ss-matrix" aria-label="answer by prompt salience">'
            f"<thead><tr><th>answer token \\ segment</th>{head}</tr></thead><tbody>{body}</tbody></table></div>"
            f'<p class="ss-note">{note}</p>')


@dataclasses.dataclass(frozen=True)
class FaithfulnessRow:
    """One row of the faithfulness test's table (explain.FaithfulnessReport.table()): AOPC in nats."""

    mode: str
    name: str
    aopc: float
    random_aopc: float
    random_std: float
    length_aopc: float
    verdict: str


@dataclasses.dataclass(frozen=True)
class FaithfulnessTable:
    """The faithfulness result a page shows: the test's rows, how it removed segments and which target it tested.

    Attributes:
      granularity, removal: the segments removed and how ("filler" | "delete").
      span: (t0, t1) the target tokens tested; None when not known (then not checked against the view's).
      rows: one per (mode, method ordering), as FaithfulnessReport.table().
    """

    granularity: str
    removal: str
    span: tuple[int, int] | None
    rows: tuple[FaithfulnessRow, ...]

    @classmethod
    def of(cls, source) -> "FaithfulnessTable":
        """From an explain.FaithfulnessReport, or the explain wrapper's `curves` payload (its `table`, `granularity`,
        `removal` and `span`: lit_app/wrappers/explain.py, what the browser holds). SalienceError naming the key
        and the fix for a malformed payload."""
        if isinstance(source, FaithfulnessTable):
            return source
        if hasattr(source, "table"):  # a FaithfulnessReport
            return cls(source.granularity, source.removal, tuple(int(t) for t in source.span),
                       tuple(_faith_row(r, i) for i, r in enumerate(source.table())))
        if not isinstance(source, Mapping):
            raise SalienceError(f"faithfulness={type(source).__name__}. Fix: pass an explain.FaithfulnessReport or "
                                "the curves payload of the explain wrapper (a mapping with 'table').")
        table, span = source.get("table"), source.get("span")
        if not isinstance(table, (list, tuple)) or not table:
            raise SalienceError("The faithfulness result has no 'table' rows. Fix: send the finished curves payload "
                                "of the explanation test (explain_action \"curves\"), not its progress.")
        if span is not None and not (isinstance(span, (list, tuple)) and len(span) == 2
                                     and all(isinstance(t, int) and not isinstance(t, bool) for t in span)):
            raise SalienceError(f"The faithfulness result's 'span' is {span!r}. Fix: [t0, t1], its target tokens.")
        return cls(_faith_text(source, "granularity"), _faith_text(source, "removal"),
                   None if span is None else (span[0], span[1]),
                   tuple(_faith_row(r, i) for i, r in enumerate(table)))


def _faith_text(d, key: str, where: str = "") -> str:
    v = d.get(key) if isinstance(d, Mapping) else None
    if not isinstance(v, str) or not v or len(v) > 200:
        raise SalienceError(f"The faithfulness result's {where}{key!r} is {v!r}. Fix: a short text, as "
                            "FaithfulnessReport.table() writes it.")
    return v


def _faith_row(r, i: int) -> FaithfulnessRow:
    where = f"table[{i}]."
    numbers = {}
    for key in ("aopc", "random_aopc", "random_std", "length_aopc"):
        v = r.get(key) if isinstance(r, Mapping) else None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise SalienceError(f"The faithfulness result's {where}{key!r} is {v!r}. Fix: a number (nats), as "
                                "FaithfulnessReport.table() writes it.")
        numbers[key] = float(v)
    return FaithfulnessRow(_faith_text(r, "mode", where), _faith_text(r, "name", where), verdict=_faith_text(
        r, "verdict", where), **numbers)


def _faithfulness_html(table: FaithfulnessTable, method: str) -> str:
    """The test's table; the rows of the method on screen (`method`, `method:abs`) marked `ss-shown`."""
    rows = []
    for r in table.rows:
        shown = " ss-shown" if r.name.split(":")[0] == method else ""
        rows.append(
            f'<tr class="ss-faith-row{shown}" data-mode="{esc(r.mode)}" data-name="{esc(r.name)}">'
            f"<td>{esc(r.mode)}</td><td>{esc(r.name)}</td>"
            f'<td data-value="{r.aopc:.9g}">{r.aopc:.3f}</td>'
            f'<td data-value="{r.random_aopc:.9g}">{r.random_aopc:.3f} ± {r.random_std:.3f}</td>'
            f'<td data-value="{r.length_aopc:.9g}">{r.length_aopc:.3f}</td><td>{esc(r.verdict)}</td></tr>')
    span = "" if table.span is None else f" Target tokens {table.span[0]}–{table.span[1] - 1}."
    return ('<table class="ss-faithfulness"><thead><tr><th>mode</th><th>ordering</th><th>AOPC (nats)</th>'
            f"<th>random</th><th>length</th><th>verdict</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
            f'<p class="ss-note">{esc(GRANULARITY_LABELS.get(table.granularity, table.granularity))} removed '
            f"({esc(table.removal)}); higher AOPC = more faithful; the method shown in bold.{span}</p>")


def share_html(result, method: str | None = None, granularity: str | None = None, target=None, *, model: str,
               pattern: str | None = None, faithfulness=None, segments=None, top: int = DEFAULT_TOP,
               title: str | None = None, ablation: AblationConfig | None = None) -> str:
    """The standalone HTML page of one view (module docstring).

    Args:
      result, method, granularity, target, pattern, segments, top: as display.render_html (a segment method's view:
        `result` its SegmentSalience, or the result with `segments`).
      model: the name given to ss.load_model (shown, and used by the notebook cell).
      faithfulness: the faithfulness test of the same prompt and target (an explain.FaithfulnessReport, or the
        explain wrapper's curves payload: FaithfulnessTable.of), or None.
      title: page heading (default: "Sequence Salience").
      ablation: a segment method's AblationConfig, for the notebook cell (None: the defaults with the values'
        own removal).

    Raises:
      SalienceError: as make_view; a faithfulness result of another target span than the view's, or malformed.
    """
    view = make_view(result, method, granularity, target, pattern=pattern, top=top, segments=segments)
    info = get_any_method(view.method)
    facts = view.segment_facts
    about = [("Model", model), ("Method", f"{info.label} ({view.method})"),
             ("Granularity", GRANULARITY_LABELS[view.granularity] + (f" /{view.pattern}/" if view.pattern else "")),
             ("Explained", view.describe_target()), ("Prompt", view.prompt), ("Answer", view.response)]
    if facts is not None:
        about += [("Fit", facts.fit_text())] if facts.fit_text() else []
        about += [("Measured", facts.cost_text())]
    about_html = "".join(f'<dt>{esc(k)}</dt><dd class="ss-about-{esc(k.lower())}">{esc(v)}</dd>' for k, v in about)
    faith = ""
    if faithfulness is not None:
        table = FaithfulnessTable.of(faithfulness)
        if table.span is not None and tuple(table.span) != tuple(view.target):
            raise SalienceError(f"The faithfulness result tested target tokens {table.span[0]}:{table.span[1]}, the "
                                f"view explains {view.target[0]}:{view.target[1]}. Fix: run the test on the target "
                                "shown, or share without it.")
        faith = f'<h2>Faithfulness</h2>{_faithfulness_html(table, view.method)}'
    if ablation is None and facts is not None:
        ablation = AblationConfig(removal=facts.removal)
    cell = notebook_cell(view.result, view.method, view.granularity, view.target, model=model, pattern=view.pattern,
                         ablation=ablation)
    page_title = title or "Sequence Salience"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(page_title)}</title><style>{_CSS}</style></head>\n<body><div class=\"ss-share\">"
        f"<h1 style=\"font-size:16px\">{esc(page_title)}</h1><dl class=\"ss-about\">{about_html}</dl>"
        f"<h2>Salience map</h2>{render_fragment(view, exact=True)}"
        f"<h2>Answer × prompt</h2>{_matrix_html(view)}{faith}"
        f'<h2>Reproduce in a notebook</h2><pre class="ss-cell">{esc(cell)}</pre></div></body></html>\n'
    )


def write_share(result, path: str | os.PathLike, method: str | None = None, granularity: str | None = None,
                target=None, **options) -> str:
    """Writes share_html(...) to `path` (atomically); returns the path. Options as share_html (model= needed)."""
    atomic_write_text(path, share_html(result, method, granularity, target, **options))
    return os.fspath(path)
