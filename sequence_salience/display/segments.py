"""Segment methods' values in the salience views (terminal, HTML, notebook), through the token path.

A segment method (leave_one_out, ablation_surrogate) gives one value per removable segment of one
segmentation (ablation.SegmentSalience). The views draw token salience summed per segment
(view.make_view), so a SegmentSalience enters them as its `token_values()` -- each value spread
evenly over the segment's tokens -- stored as the result's span salience for its method: summed
at the granularity it was computed on, that gives the values back exactly. At any other
granularity the sums would mix segments, so a view of a segment method at another granularity is
an error that says how to recompute. What the colours cannot say (the surrogate's fit quality and
warning, the forward work) travels beside them as `SegmentFacts`, built from the SegmentSalience or
from its `to_json()` (as the CLI saves it next to a result).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, Union

import numpy as np

from sequence_salience.errors import SalienceError
from sequence_salience.methods.base import unmeasured_origin

if TYPE_CHECKING:  # pragma: no cover
    from sequence_salience.result import SalienceResult


class SegmentSalience(Protocol):
    """What display reads of an ablation.SegmentSalience (whose show() calls display, so display does
    not import ablation/: no import circle)."""

    method: str
    span: tuple[int, int]
    text: str
    n_tokens: int
    result: "SalienceResult | None"

    def token_values(self) -> np.ndarray: ...

    def to_json(self) -> dict: ...

# A segment method's values, or their JSON (SegmentSalience.to_json()) when read back from a file.
SegmentValues = Union["SegmentSalience", Mapping[str, Any]]


@dataclasses.dataclass(frozen=True)
class SegmentFacts:
    """What a view of a segment method says beside the colours.

    Attributes:
      method, granularity, pattern, removal, span: the computation (SegmentSalience's fields).
      quality: the fit's figures ("r2", "correlation", "intercept"; empty for leave one out).
      warning: "" or why the values are doubtful, with what to do.
      rows: ablated prompts scored; tokens: tokens they hold; computed: tokens run through the model.
      measured: how many segments' own values were measured (coarse_to_fine may leave some inside coarser units
        that did not matter; leave one out measures all); segments: how many there are; coarse_units: the
        granularities of those coarser units.
    """

    method: str
    granularity: str
    pattern: str | None
    removal: str
    span: tuple[int, int]
    quality: Mapping[str, float]
    warning: str
    rows: int
    tokens: int
    computed: int
    measured: int = 0
    segments: int = 0
    coarse_units: tuple[str, ...] = ()

    @classmethod
    def of(cls, values: SegmentValues) -> "SegmentFacts":
        d = values if isinstance(values, Mapping) else values.to_json()
        return cls(method=str(d["method"]), granularity=str(d["granularity"]), pattern=d.get("pattern"),
                   removal=str(d["removal"]), span=(int(d["span"][0]), int(d["span"][1])),
                   quality={k: float(v) for k, v in (d.get("quality") or {}).items()}, warning=str(d.get("warning") or ""),
                   rows=int(d["rows"]), tokens=int(d["tokens"]), computed=int(d["tokens_computed"]),
                   measured=sum(bool(s.get("measured", True)) for s in d.get("segments", ())),
                   segments=len(d.get("segments", ())),
                   coarse_units=tuple(sorted({str(s["coarse_granularity"]) for s in d.get("segments", ())
                                              if not s.get("measured", True)})))

    @property
    def saved(self) -> float:
        """Share of the rows' tokens the cached prefix saved (as PrefixStats.saved)."""
        return 1.0 - self.computed / self.tokens if self.tokens else 0.0

    def fit_text(self) -> str | None:
        """"fit on held-out ablations: R² 0.71 (0.55–0.80 over random splits), correlation 0.86", or None."""
        if "r2" not in self.quality:
            return None
        r2, corr = self.quality["r2"], self.quality.get("correlation", float("nan"))
        low, high = self.quality.get("r2_low", r2), self.quality.get("r2_high", r2)
        fmt = lambda v: f"{v:.2f}" if np.isfinite(v) else "n/a"
        spread = f" ({fmt(low)}\u2013{fmt(high)} over random splits)" if np.isfinite(low) and high > low else ""
        return f"fit on held-out ablations: R\u00b2 {fmt(r2)}{spread}, correlation {fmt(corr)}"

    def cost_text(self) -> str:
        """"33 forward rows (removal: filler); the cached prefix saved 41 % of 1,234 tokens"."""
        text = f"{self.rows} forward rows (removal: {self.removal})"
        if self.tokens:
            text += f"; the cached prefix saved {100 * self.saved:.0f} % of {self.tokens:,} tokens"
        if self.measured < self.segments:
            text += (f"; {self.measured} of {self.segments} {self.granularity}s measured exactly, the others "
                     f"{unmeasured_origin(self.coarse_units)}")
        return text


def check_granularity(facts: SegmentFacts, granularity: str, pattern: str | None) -> None:
    """SalienceError unless the view's segmentation is the one the values were computed on."""
    if granularity == facts.granularity and (granularity != "regex" or pattern == facts.pattern):
        return
    on = facts.granularity + (f" /{facts.pattern}/" if facts.granularity == "regex" else "")
    raise SalienceError(
        f"{facts.method}'s values live on {on} segments; shown at {granularity} they would mix segments. "
        f"Fix: show them at granularity {facts.granularity!r} (CLI: --granularity {facts.granularity}), or "
        f"recompute them at {granularity!r}: ablation.segment_salience(..., granularity={granularity!r}) "
        f"(CLI: explain --method {facts.method} --granularity {granularity}).")


def with_segment_values(result: "SalienceResult", values: Sequence["SegmentSalience"]) -> "SalienceResult":
    """`result` with each SegmentSalience's token_values() as the span salience of its method and span."""
    spans: dict[tuple[int, int], dict[str, np.ndarray]] = {k: dict(v) for k, v in result.spans.items()}
    for seg in values:
        if seg.text != result.text or seg.n_tokens != len(result.ids):
            raise SalienceError(f"The {seg.method} values were computed for another prompt or target. Fix: show "
                                "them with the result of their own pair (or just display.show(segment_salience)).")
        spans.setdefault(tuple(seg.span), {})[seg.method] = seg.token_values()  # [N]
    return dataclasses.replace(result, spans=spans)


def gather(result, segments: Sequence[SegmentValues] | SegmentValues | None
           ) -> tuple["SalienceResult", dict[str, SegmentFacts]]:
    """(the result to draw, facts per segment method) from make_view's `result` and `segments`.

    `result` may itself be a SegmentSalience (drawn on its own result); `segments` adds any number
    of SegmentSalience (their values join the result) or their JSON (facts only: the values are
    already in the result, as in a file the CLI wrote).
    """
    if segments is None:
        segments = ()
    elif isinstance(segments, Mapping) or hasattr(segments, "token_values"):
        segments = (segments,)
    segments = list(segments)
    if hasattr(result, "token_values"):  # a SegmentSalience
        if result.result is None:
            raise SalienceError("This SegmentSalience carries no result to draw on. Fix: pass "
                                "display.show(result, segments=seg) with the SalienceResult of its pair.")
        segments.insert(0, result)
        result = result.result
    objects = [s for s in segments if not isinstance(s, Mapping)]
    if objects:
        result = with_segment_values(result, objects)
    return result, {f.method: f for f in map(SegmentFacts.of, segments)}
