"""Segment-level alignment of two texts: which words (sentences, lines, ...) are unchanged, inserted,
deleted or replaced between text A and text B.

The units are the aggregation's segments (sequence_salience/aggregate/segments.py), so an aligned
word is the same unit a salience value is aggregated over, chat-template markup units stay atomic,
and positions are code points (Unicode-safe: an emoji or a combining mark never splits). Segments
are compared by their text without surrounding whitespace (a segment carries the whitespace after
it), so a change of spacing alone aligns as equal. The diff is difflib.SequenceMatcher over the
segment keys (no junk heuristic), i.e. a longest-matching-block diff; the browser ports it
(frontend/src/salience/compare/alignment.ts `diffKeys`), and tests/data/alignment_cases.json holds the cases both check.

Rules:

* An "equal" aligned segment pairs ONE segment of A with one of B (so equal words keep their own
  values); "insert", "delete" and "replace" cover a run of changed segments on each side (a replace
  of "3 apples" by "4 pears" is one aligned segment).
* Spans are half-open character spans [start, end) into each text; the side that has no text
  ("insert" on A, "delete" on B) has an empty span at the position where the other side's text
  would go.
* `region` restricts the alignment to a prefix/sub-range of a text (e.g. the prompt part of a
  result's prompt+response text): only segments starting inside it take part, clipped to its end.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Sequence

import numpy as np

from sequence_salience.aggregate import Segmentation, segment
from sequence_salience.errors import SalienceError

KINDS = ("equal", "insert", "delete", "replace")
# Granularities that segment text without tokens (token granularity needs a tokenizer's offsets).
TEXT_GRANULARITIES = ("word", "sentence", "paragraph", "line")

Span = tuple[int, int]


@dataclasses.dataclass(frozen=True)
class AlignedSegment:
    """One entry of an alignment.

    Attributes:
      kind: "equal" | "insert" | "delete" | "replace".
      a, b: character span in text A / text B (empty on the side without text).
      a_segments, b_segments: indices of the segmentation's segments on each side (empty tuple on
        the side without text; one each for "equal").
    """

    kind: str
    a: Span
    b: Span
    a_segments: tuple[int, ...]
    b_segments: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Alignment:
    """The aligned segments of text A and text B, in text order on both sides.

    Attributes:
      text_a, text_b: the two texts (spans index into them).
      granularity: the segmentation used.
      segments: the aligned segments; their non-empty A spans tile A's region in order, and the same for B.
    """

    text_a: str
    text_b: str
    granularity: str
    segments: tuple[AlignedSegment, ...]

    def __len__(self) -> int:
        return len(self.segments)

    def text(self, k: int, side: str) -> str:
        """The text of aligned segment k on side "a" or "b"."""
        s, e = self.segments[k].a if side == "a" else self.segments[k].b
        return (self.text_a if side == "a" else self.text_b)[s:e]

    @property
    def changed(self) -> bool:
        """Whether anything differs (besides whitespace)."""
        return any(seg.kind != "equal" for seg in self.segments)

    def to_dict(self) -> dict:
        """A JSON-ready form: granularity and one {kind, a, b, text_a, text_b} per aligned segment."""
        return {"granularity": self.granularity, "segments": [
            {"kind": s.kind, "a": list(s.a), "b": list(s.b), "text_a": self.text(k, "a"), "text_b": self.text(k, "b")}
            for k, s in enumerate(self.segments)]}


def segment_key(text: str) -> str:
    """What two segments must share to align as equal: their text with whitespace collapsed and trimmed."""
    return " ".join(text.split())


def _units(text: str, seg: Segmentation, region: Span) -> list[tuple[int, int, int]]:
    """(segment index, start, end) of the segments starting inside region, clipped to it; blank ones dropped."""
    lo, hi = region
    out = []
    for s in range(len(seg)):
        a, b = int(seg.starts[s]), min(int(seg.ends[s]), hi)
        if lo <= a < hi and b > a and text[a:b].strip():
            out.append((s, a, b))
    return out


def _check_region(text: str, region: Span | None, name: str) -> Span:
    if region is None:
        return 0, len(text)
    lo, hi = int(region[0]), int(region[1])
    if not 0 <= lo <= hi <= len(text):
        raise SalienceError(f"{name}={region!r} is outside the text (length {len(text)}). "
                            "Fix: pass (start, end) with 0 <= start <= end <= len(text).")
    return lo, hi


def align_segmentations(
    text_a: str,
    seg_a: Segmentation,
    text_b: str,
    seg_b: Segmentation,
    *,
    region_a: Span | None = None,
    region_b: Span | None = None,
) -> Alignment:
    """Aligns two segmented texts (e.g. two results' texts segmented for their salience).

    Args:
      text_a, text_b: the texts the segmentations cover.
      seg_a, seg_b: from aggregate.segment over each text (same granularity).
      region_a, region_b: optional (start, end) ranges to align (default: the whole texts).

    Returns:
      An Alignment (see the module docstring for the rules).
    """
    if seg_a.granularity != seg_b.granularity:
        raise SalienceError(f"The segmentations differ ({seg_a.granularity} vs {seg_b.granularity}). "
                            "Fix: segment both texts at one granularity.")
    ra, rb = _check_region(text_a, region_a, "region_a"), _check_region(text_b, region_b, "region_b")
    ua, ub = _units(text_a, seg_a, ra), _units(text_b, seg_b, rb)
    keys_a = [segment_key(text_a[a:b]) for _, a, b in ua]
    keys_b = [segment_key(text_b[a:b]) for _, a, b in ub]

    def span(units, i1: int, i2: int, region: Span) -> Span:
        if i2 > i1:
            return units[i1][1], units[i2 - 1][2]
        if i1 < len(units):
            return units[i1][1], units[i1][1]
        end = units[-1][2] if units else region[0]
        return end, end

    out: list[AlignedSegment] = []
    matcher = difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for i, j in zip(range(i1, i2), range(j1, j2)):
                out.append(AlignedSegment("equal", ua[i][1:], ub[j][1:], (ua[i][0],), (ub[j][0],)))
            continue
        out.append(AlignedSegment(
            tag, span(ua, i1, i2, ra), span(ub, j1, j2, rb),
            tuple(u[0] for u in ua[i1:i2]), tuple(u[0] for u in ub[j1:j2]),
        ))
    return Alignment(text_a, text_b, seg_a.granularity, tuple(out))


def align_texts(text_a: str, text_b: str, granularity: str = "word") -> Alignment:
    """Aligns two plain texts (e.g. two responses) segment by segment.

    Args:
      granularity: one of TEXT_GRANULARITIES (segmentations that need no tokens).
    """
    if granularity not in TEXT_GRANULARITIES:
        raise SalienceError(f"align_texts granularity={granularity!r}. Fix: use one of {TEXT_GRANULARITIES}.")
    empty = np.zeros((0, 2), dtype=np.int64)
    return align_segmentations(text_a, segment(text_a, empty, granularity), text_b, segment(text_b, empty, granularity))


def aligned_values(alignment: Alignment, values_a: Sequence[float], values_b: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Per aligned segment, the value on each side: the sum of its segments' values.

    Args:
      values_a, values_b: float [S_a], [S_b] per-segment values (aggregate.aggregate; NaN for markup).

    Returns:
      (float64 [K], float64 [K]): NaN on the side without text, and where all its segments are NaN (markup).
    """
    va, vb = np.asarray(values_a, dtype=np.float64), np.asarray(values_b, dtype=np.float64)

    def side(idx: tuple[int, ...], v: np.ndarray) -> float:
        picked = v[list(idx)] if idx else np.zeros(0)
        finite = picked[np.isfinite(picked)]
        return float(finite.sum()) if len(finite) else float("nan")

    a = np.array([side(s.a_segments, va) for s in alignment.segments], dtype=np.float64)
    b = np.array([side(s.b_segments, vb) for s in alignment.segments], dtype=np.float64)
    return a, b


def difference(alignment: Alignment, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """b − a per aligned segment; text only one side has counts 0 on the other side
    (inserted text: +b, deleted text: −a); NaN where neither side has a value (markup)."""
    has_a = np.array([bool(s.a_segments) for s in alignment.segments])
    has_b = np.array([bool(s.b_segments) for s in alignment.segments])
    a0 = np.where(has_a, a, 0.0) if len(a) else a
    b0 = np.where(has_b, b, 0.0) if len(b) else b
    return b0 - a0
