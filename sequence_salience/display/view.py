"""What a rendering of a SalienceResult shows, computed once for HTML, the terminal and plots.

The rules are the browser module's (frontend/src/element.ts, target.ts, rank.ts,
pieces.ts): token salience for the target span -> `aggregate.aggregate(.., "sum")`
over the chosen segmentation -> colour scale = largest |value| outside the
target's own segments -> top segments by |value| (signed) or value (unsigned),
skipping excluded markup, zeros and the target's segments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from sequence_salience import aggregate, field_rules
from sequence_salience.display import palette
from sequence_salience.display.segments import SegmentFacts, SegmentValues, check_granularity, gather
from sequence_salience.errors import SalienceError
from sequence_salience.methods import get_any_method, integrated_gradients

if TYPE_CHECKING:  # pragma: no cover
    from sequence_salience.result import SalienceResult

DEFAULT_TOP = 10


@dataclasses.dataclass(frozen=True)
class Piece:
    """A run of text drawn as one element: seg is the segment index or -1 (no token covers it)."""

    text: str
    seg: int
    response: bool


@dataclasses.dataclass(frozen=True)
class Ranked:
    seg: int
    value: float
    text: str
    in_response: bool


@dataclasses.dataclass(frozen=True)
class View:
    """Everything a renderer needs.

    Attributes:
      result: the SalienceResult shown.
      method: its method name; signed: diverging (True) or sequential colours.
      granularity, pattern: the segmentation asked for.
      target: (t0, t1) target tokens explained (half-open).
      seg: the segmentation of result.text.
      values: float64 [S] salience per segment (NaN for excluded markup).
      target_segments: segment indices covering the target tokens [t0, t1).
      response_segments: segment indices covering any response token.
      scale: the colour scale (largest |value| outside the target's segments, times intensity).
      ranked: the top segments, best first.
      pieces: text pieces in order covering all of result.text.
      span_logprob: log p(target tokens t0..t1-1).
      completeness_error: IG completeness error summed over the span, or None.
      completeness_relative: |completeness_error| / |log p(x) - log p(baseline)| (the change being the
        attributions' sum minus the error), or None; over IG_TOLERANCE the renderers warn.
      segment_facts: for a segment method shown with its facts: the fit, its warning, the cost.
      ig_cost: for integrated gradients' per-token results: (path points evaluated, forward rows run), else None.
      accepted_error: the relative completeness error accepted: the step search's tolerance when it ran
        (integrated_gradients.accepted_error), else IG_TOLERANCE.
    """

    result: "SalienceResult"
    method: str
    signed: bool
    granularity: str
    pattern: str | None
    target: tuple[int, int]
    seg: aggregate.Segmentation
    values: np.ndarray
    target_segments: frozenset[int]
    response_segments: frozenset[int]
    scale: palette.ColorScale
    ranked: tuple[Ranked, ...]
    pieces: tuple[Piece, ...]
    span_logprob: float
    completeness_error: float | None
    completeness_relative: float | None = None
    segment_facts: SegmentFacts | None = None
    ig_cost: tuple[int, int] | None = None
    accepted_error: float = field_rules.IG_TOLERANCE.default

    @property
    def prompt(self) -> str:
        return self.result.text[: self.result.prompt_end]

    @property
    def response(self) -> str:
        return self.result.text[self.result.prompt_end:]

    def target_text(self) -> str:
        """The text of the explained target tokens."""
        r = self.result
        offs = r.offsets[r.n_prompt_tokens + self.target[0]: r.n_prompt_tokens + self.target[1]]
        spans = [(int(s), int(e)) for s, e in offs if e > s]
        return r.text[min(s for s, _ in spans): max(e for _, e in spans)] if spans else ""

    def describe_target(self) -> str:
        t0, t1 = self.target
        if (t0, t1) == (0, self.result.num_targets):
            return f"the whole response ({t1} tokens)"
        return f"tokens {t0}:{t1} {self.target_text()!r}"

    def segment_text(self, s: int) -> str:
        return self.result.text[int(self.seg.starts[s]): int(self.seg.ends[s])]

    def color(self, s: int) -> tuple[str, str] | None:
        """(background, text) CSS colours of segment s, or None when it is not coloured."""
        v = self.values[s]
        if self.seg.excluded[s] or not np.isfinite(v):
            return None
        return palette.color_for(float(v), self.scale)


def visible_text(text: str) -> str:
    """A segment's text for a list: whitespace collapsed; a blank segment shown as its whitespace ("↵", "␣")."""
    shown = " ".join(text.split())
    if shown:
        return shown
    return "↵" * text.count("\n") if "\n" in text else ("␣" if text else "∅")


def token_values(result: "SalienceResult", method: str, t0: int, t1: int) -> np.ndarray:
    """Salience over all N tokens for target tokens [t0, t1); exact, no model pass. <float32>[N]."""
    if t1 - t0 == 1 and method in result.matrices:
        return np.asarray(result.matrices[method][t0], dtype=np.float32)  # one row: every method's exact value
    return result.span_salience(method, t0, t1)


def available_methods(result: "SalienceResult", target: tuple[int, int] | None = None) -> list[str]:
    """Methods with full matrices, then those computed directly for `target` (partial results)."""
    names = list(result.matrices)
    spans = getattr(result, "spans", None) or {}
    for key in ([target] if target is not None else list(spans)):
        names += [m for m in spans.get(key, {}) if m not in names]
    return names


def resolve_method(result: "SalienceResult", method: str | None, target: tuple[int, int] | None = None) -> str:
    have = available_methods(result, target)
    if method is None:
        if not have:
            raise SalienceError("This result has no salience for this target. Fix: compute_salience(..., methods=(...)).")
        return have[0]
    if method not in have:
        get_any_method(method)  # unknown names get the registry's message
        raise SalienceError(
            f"{method!r} was not computed for this result. Fix: use one of {have}, "
            f"or compute it with compute_salience(..., methods=({method!r},))."
        )
    return method


def resolve_target(result: "SalienceResult", target) -> tuple[int, int]:
    """None -> the whole response; an int t -> (t, t + 1); (t0, t1) checked against the response length."""
    num_t = result.num_targets
    if target is None:
        return 0, num_t
    if isinstance(target, (int, np.integer)):
        t0, t1 = int(target), int(target) + 1
    else:
        try:
            t0, t1 = (int(x) for x in target)
        except (TypeError, ValueError):
            raise SalienceError(f"target={target!r}. Fix: pass (t0, t1) target token indices, an int, or None.") from None
    if not 0 <= t0 < t1 <= num_t:
        raise SalienceError(f"Target span {t0}:{t1} is outside 0:{num_t}. Fix: pick target tokens in range.")
    return t0, t1


def _segments_of_tokens(seg: aggregate.Segmentation, first: int, last: int) -> frozenset[int]:
    ids = seg.token_segment[first:last]
    return frozenset(int(s) for s in ids if s >= 0)


def build_pieces(text: str, seg: aggregate.Segmentation, prompt_end: int) -> tuple[Piece, ...]:
    """Pieces in text order covering the whole text; a segment crossing the prompt end is split."""
    length = len(text)
    pe = max(0, min(length, prompt_end))
    pieces: list[Piece] = []

    def push(a: int, b: int, s: int) -> None:
        if b <= a:
            return
        if a < pe < b:
            push(a, pe, s)
            push(pe, b, s)
            return
        pieces.append(Piece(text[a:b], s, a >= pe))

    order = sorted(range(len(seg)), key=lambda s: (int(seg.starts[s]), s))
    pos = 0
    for s in order:
        a = max(pos, min(length, int(seg.starts[s])))
        b = min(length, int(seg.ends[s]))
        if b <= a:
            continue
        push(pos, a, -1)
        push(a, b, s)
        pos = b
    push(pos, length, -1)
    return tuple(pieces)


def top_segments(values: np.ndarray, k: int, signed: bool, skip=frozenset()) -> list[tuple[int, float]]:
    """The k best (segment, value) pairs; ties keep text order (as rank.ts topSegments; tests/data/ranking_cases.json)."""
    items = []
    for s, v in enumerate(values.tolist()):
        if not np.isfinite(v) or v == 0 or s in skip or (not signed and v < 0):
            continue
        items.append((s, v))
    items.sort(key=lambda r: (-(abs(r[1]) if signed else r[1]), r[0]))
    return items[: max(0, k)]


def make_view(
    result: "SalienceResult",
    method: str | None = None,
    granularity: str | None = None,
    target=None,
    *,
    pattern: str | None = None,
    top: int = DEFAULT_TOP,
    intensity: float = 1.0,
    segments: "Sequence[SegmentValues] | SegmentValues | None" = None,
) -> View:
    """Computes what to draw.

    Args:
      result: from compute_salience; or an ablation.SegmentSalience (a segment method's values,
        drawn on the result of its pair).
      method: a method in result.matrices or spans, or of `segments` (default: the first segment
        method given, else the first one computed).
      granularity: one of aggregate.GRANULARITIES ("regex" needs `pattern`); default: a segment
        method's own, else "word". A segment method is shown only at the granularity it was
        computed on (display/segments.py).
      target: (t0, t1) target tokens to explain, an int for one token, or None for the whole
        response (for a segment method: its own span).
      pattern: regex for granularity "regex" (default for a segment method: its own).
      top: how many top segments to list.
      intensity: colour multiplier (> 0), as the browser's slider: > 1 brightens faint salience.
      segments: ablation.SegmentSalience value(s) to show with the result, or their to_json()
        (facts only: the values already in result.spans, as the CLI saves them).

    Raises:
      SalienceError: unknown method or granularity, bad span, bad regex, intensity <= 0, a segment
        method at another granularity than its own.
    """
    result, facts_by_method = gather(result, segments)
    facts = facts_by_method.get(method if method is not None else next(iter(facts_by_method), ""))
    if facts is not None:  # a segment method: its own granularity, pattern and span unless given
        method = facts.method
        granularity = facts.granularity if granularity is None else granularity
        pattern = facts.pattern if pattern is None and granularity == "regex" else pattern
        target = facts.span if target is None else target
        check_granularity(facts, granularity, pattern)
    granularity = "word" if granularity is None else granularity
    _check_view_settings(granularity, pattern, intensity)
    t0, t1 = resolve_target(result, target)
    method = resolve_method(result, method, (t0, t1))
    signed = get_any_method(method).signed
    seg = aggregate.segment(result.text, result.offsets, granularity, pattern=pattern, role_spans=result.role_spans)
    # Regex: the matches are what is scored; the text between them is context (as in the browser).
    values = aggregate.matches_only(aggregate.aggregate(token_values(result, method, t0, t1), seg, "sum"), seg)  # [S]
    p = result.n_prompt_tokens
    target_segs = _segments_of_tokens(seg, p + t0, p + t1)
    response_segs = _segments_of_tokens(seg, p, len(result.ids))
    scale_values = [v for s, v in enumerate(values.tolist()) if np.isfinite(v) and s not in target_segs]
    cs = palette.ColorScale(signed=signed, scale=palette.max_abs(scale_values), intensity=float(intensity))
    ranked = tuple(Ranked(s, v, result.text[int(seg.starts[s]): int(seg.ends[s])], int(seg.starts[s]) >= result.prompt_end)
                   for s, v in top_segments(values, top, signed, target_segs))
    check = completeness_check(result, method, (t0, t1))
    return View(
        result=result,
        method=method,
        signed=signed,
        granularity=granularity,
        pattern=pattern,
        target=(t0, t1),
        seg=seg,
        values=values,
        target_segments=target_segs,
        response_segments=response_segs,
        scale=cs,
        ranked=ranked,
        pieces=build_pieces(result.text, seg, result.prompt_end),
        span_logprob=float(np.sum(result.target_logprobs[t0:t1], dtype=np.float64)),
        completeness_error=None if check is None else check.error,
        completeness_relative=None if check is None else check.relative,
        segment_facts=facts,
        ig_cost=_ig_cost(result, method, (t0, t1)),
        accepted_error=completeness_tolerance(result),
    )


def _check_view_settings(granularity: str, pattern: str | None, intensity: float) -> None:
    """SalienceError naming the fix for an unknown granularity, a regex without a pattern, or intensity <= 0."""
    if granularity not in aggregate.GRANULARITIES:
        raise SalienceError(f"Unknown granularity {granularity!r}. Fix: use one of {', '.join(aggregate.GRANULARITIES)}.")
    if granularity == "regex" and not pattern:
        raise SalienceError("granularity='regex' needs a pattern. Fix: pass pattern=r'[^,;.]+' (for example).")
    if not intensity > 0:
        raise SalienceError(f"intensity={intensity}. Fix: pass a positive number (1 = no change).")


def _completeness_errors(result: "SalienceResult", method: str, target: tuple[int, int]) -> np.ndarray | None:
    """The completeness errors of `method` (one with an error extra: IG) behind the view's span: the span's own
    when computed for it directly, else its target tokens' [t1 - t0]; None when there are none."""
    error_extra = getattr(get_any_method(method), "error_extra", None)  # IG's completeness error
    if error_extra is None:
        return None
    span_errors = getattr(result, "span_ig_errors", None) or {}
    if target in span_errors:
        return np.asarray([span_errors[target]])  # computed for this span directly
    if error_extra in result.extras:
        return result.extras[error_extra][target[0]:target[1]]
    return None


@dataclasses.dataclass(frozen=True)
class CompletenessCheck:
    """A method's completeness check on one target span (IG's: do the attributions add up to the log-p change?).

    Attributes:
      error: the sum of the attributions minus the change (the method's `error_extra` summed over the span, or the
        error of the span computed directly).
      change: log p(x) - log p(baseline) of the span: the attributions' sum minus the error.
      relative: |error| / |change|; None when the change is 0.
      tolerance: the largest relative error accepted (integrated_gradients.accepted_error: the step search's
        tolerance when it ran, else field_rules.IG_TOLERANCE's default), the one the browser is sent.
    """

    error: float
    change: float
    relative: float | None
    tolerance: float

    @property
    def rejected(self) -> bool:
        """The values fail the check: their relative error is over the tolerance."""
        return self.relative is not None and self.relative > self.tolerance


def completeness_check(result: "SalienceResult", method: str, target: tuple[int, int]) -> CompletenessCheck | None:
    """The completeness check of `method`'s values for target tokens `target`; None for a method whose record names
    no `error_extra`, or without the error (nor the span computed directly, nor the extra in the result)."""
    errors = _completeness_errors(result, method, target)
    if errors is None:
        return None
    error = float(np.sum(errors, dtype=np.float64))
    change = float(np.nansum(np.asarray(token_values(result, method, *target), dtype=np.float64))) - error
    relative = abs(error) / abs(change) if abs(change) > 1e-12 else None
    return CompletenessCheck(error, change, relative, completeness_tolerance(result))


def completeness_tolerance(result: "SalienceResult") -> float:
    """The largest relative completeness error accepted for `result`'s values (CompletenessCheck.tolerance)."""
    return integrated_gradients.accepted_error(result.config, IG_TOLERANCE)


def _ig_cost(result: "SalienceResult", method: str, target: tuple[int, int]) -> tuple[int, int] | None:
    """(steps used, forwards) of integrated gradients' per-token result, when the view shows those matrices."""
    extras = result.extras
    if method != integrated_gradients.NAME or integrated_gradients.STEPS_USED not in extras or (
            target in (getattr(result, "span_ig_errors", None) or {})):
        return None
    return int(extras[integrated_gradients.STEPS_USED][0]), int(extras[integrated_gradients.FORWARDS][0])


# Relative IG completeness error beyond which the renderers warn without the step search; the browser is sent it
# (the payload's `completeness`, lit_app/wrappers/payloads.py) and keeps no copy.
IG_TOLERANCE = field_rules.IG_TOLERANCE.default


def facts_lines(view: "View") -> list[str]:
    """The facts under the colours: log p of the target, IG's completeness error, a segment method's
    fit and forward work (terminal and HTML say the same)."""
    lines = [f"log p(target) = {view.span_logprob:.3f}"]
    if view.completeness_error is not None:
        rel = "" if view.completeness_relative is None else f" ({100 * view.completeness_relative:.1f} % of the change)"
        lines.append(f"IG completeness error {palette.format_value(view.completeness_error)}{rel}")
    if view.ig_cost is not None:
        lines.append(f"IG cost: {view.ig_cost[0]} steps, {view.ig_cost[1]} forwards")
    sf = view.segment_facts
    if sf is not None:
        fit = sf.fit_text()
        lines += ([fit] if fit else []) + [f"cost: {sf.cost_text()}"]
    return lines


def warnings(view: "View") -> list[str]:
    """What makes the view doubtful, each with its fix: IG's completeness, a poor surrogate fit."""
    found = [completeness_warning(view)]
    if view.segment_facts is not None:
        found.append(view.segment_facts.warning or None)
    return [w for w in found if w]


def completeness_warning(view: "View") -> str | None:
    """The warning the browser module shows when IG's attributions do not add up; None when they do."""
    rel, tol = view.completeness_relative, view.accepted_error
    if view.completeness_error is None or rel is None or rel <= tol:
        return None
    return (f"IG completeness error {palette.format_value(view.completeness_error)} is {100 * rel:.0f} % of the "
            f"log-prob change to the baseline (over {100 * tol:.0f} %): the attributions do not add up. "
            + integrated_gradients.search_note(view.result.config, view.ig_cost)
            + "where the error does not fall, use grad_x_input for sizes.")
