"""Segmentation: token character spans -> word, sentence, paragraph, line, regex and role
segments, and the segment of each token (the rules: sequence_salience/aggregate/__init__.py)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import numpy as np

from sequence_salience.aggregate.patterns import match_spans
from sequence_salience.aggregate.unicode_tables import LN_CLASS, M_CLASS, WHITESPACE, WS_CODEPOINTS, bmp_view
from sequence_salience.errors import SalienceError

GRANULARITIES = ("token", "word", "sentence", "paragraph", "line", "regex", "role")
ROLES = ("system", "user", "assistant", "markup")

# Chat-template markers: atomic, always break sentences / paragraphs / lines.
MARKER_PATTERN = r"<\|[A-Za-z0-9_.:-]{1,64}\|>|<(?:start|end)_of_turn>|</?s>|\[/?INST\]"

# Role names that chat templates write right after a marker (ChatML, Gemma, Llama 3, Granite).
TEMPLATE_ROLE_NAMES = ("system", "user", "assistant", "model", "developer", "tool", "ipython")

# A markup unit: a marker plus the role name written right after it, if any.
MARKUP_PATTERN = f"(?:{MARKER_PATTERN})(?:(?:{'|'.join(TEMPLATE_ROLE_NAMES)})(?![A-Za-z0-9_]))?"

# Lower-cased words after which a single "." does not end a sentence.
ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs fig figs eq al approx dept inc ltd corp "
    "jan feb apr jun jul aug sep sept oct nov mt gov capt lt sgt vol pp cf ca".split()
)

_WS = re.escape(WHITESPACE)
_WORD_UNIT_RE = re.compile(
    f"(?P<marker>{MARKUP_PATTERN})"
    r"|(?P<number>[0-9]+(?:[.,][0-9]+)+)"
    f"|(?P<word>[{LN_CLASS}][{LN_CLASS}{M_CLASS}]*(?:['\u2019][{LN_CLASS}][{LN_CLASS}{M_CLASS}]*)*)"
    f"|(?P<punct>(?:(?!{MARKER_PATTERN})[^{LN_CLASS}{_WS}])+)"
)
_MARKUP_RE = re.compile(MARKUP_PATTERN)
_TERMINATOR_RE = re.compile(
    f"[.!?\u2026]+[\"')\\]\u201d\u2019]*(?=[{_WS}]|$)|[\u3002\uff01\uff1f]+[\"')\\]\u201d\u2019\u300d\u300f]*"
)
_WS_NO_NL = re.escape(WHITESPACE.replace("\n", ""))
_BLANK_LINE_RE = re.compile(f"\n(?:[{_WS_NO_NL}]*\n)+")
_DOTTED_RE = re.compile(r"[A-Za-z]{1,2}(?:\.[A-Za-z]{1,2})+")
_INITIAL_RE = re.compile("[A-Z]")
_ASCII_LETTERS_DOT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.")


@dataclasses.dataclass(frozen=True)
class Segmentation:
    """Segments of a text and the segment of each token.

    Attributes:
      granularity: one of GRANULARITIES.
      starts: int64 [S] segment start positions (code points).
      ends: int64 [S] segment end positions (exclusive).
      kinds: S labels: "word" | "punct" | "sentence" | "paragraph" | "line" |
        "match" | "gap" | "token" | "space" | "text" | "markup" | a role.
      excluded: bool [S], True for template markup (no score shown).
      token_segment: int64 [N] index of each token's segment (-1 only when the
        text is empty).
    """

    granularity: str
    starts: np.ndarray
    ends: np.ndarray
    kinds: tuple[str, ...]
    excluded: np.ndarray
    token_segment: np.ndarray

    def __len__(self) -> int:
        return len(self.kinds)

    def spans(self) -> list[tuple[int, int, str]]:
        """Returns [(start, end, kind)] for each segment."""
        return [(int(s), int(e), k) for s, e, k in zip(self.starts, self.ends, self.kinds)]

    def texts(self, text: str) -> list[str]:
        """Returns the text of each segment."""
        return [text[s:e] for s, e, _ in self.spans()]


# ----------------------------------------------------------------------------
# Segmenters: each returns (starts, kinds) with starts sorted and unique.


class _Chars:
    """Whitespace lookup over one text, vectorised."""

    def __init__(self, text: str):
        cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)  # [L]
        self.length = len(text)
        self.nonspace = np.flatnonzero(~np.isin(cps, WS_CODEPOINTS))  # [K] positions
        self.newlines = np.flatnonzero(cps == 10)  # [nl]

    def next_nonspace(self, positions: np.ndarray) -> np.ndarray:
        """First non-space position >= each of `positions`; `length` if none."""
        idx = np.searchsorted(self.nonspace, positions, side="left")
        padded = np.append(self.nonspace, self.length)
        return padded[idx]


def _base(chars: _Chars, starts, kind: str):
    """Sorted unique starts below the text length, 0 included, all of one kind."""
    if chars.length == 0:
        return np.zeros(0, np.int64), []
    all_starts = np.concatenate([np.asarray(starts, dtype=np.int64), [0]])
    all_starts = np.unique(all_starts[all_starts < chars.length])  # [S], starts with 0
    return all_starts, [kind] * len(all_starts)


def _markup_reach(text: str, chars: _Chars) -> tuple[np.ndarray, np.ndarray]:
    """(unit starts [U], reach ends [U]): each markup unit plus the whitespace after it."""
    spans = [m.span() for m in _MARKUP_RE.finditer(text)]
    starts = np.array([a for a, _ in spans], dtype=np.int64)  # [U]
    ends = chars.next_nonspace(np.array([b for _, b in spans], dtype=np.int64))  # [U]
    return starts, ends


def _in_reach(positions: np.ndarray, unit_starts: np.ndarray, reach_ends: np.ndarray) -> np.ndarray:
    """bool [K]: which positions lie in a unit's reach [start, end); the reaches are disjoint and sorted."""
    idx = np.searchsorted(unit_starts, positions, side="right") - 1  # [K] last unit starting at or before
    safe = np.maximum(idx, 0)
    return (idx >= 0) & (positions < reach_ends[safe]) if len(unit_starts) else np.zeros(len(positions), bool)


def _cut_markup(chars: _Chars, starts: np.ndarray, kinds: list[str], reach: tuple[np.ndarray, np.ndarray]):
    """Makes each markup unit an atomic "markup" segment of a base segmentation (module rules)."""
    unit_starts, reach_ends = reach
    if chars.length == 0 or len(unit_starts) == 0:
        return starts, kinds
    base_kinds = np.array(kinds, dtype=object)  # [S]

    def kind_at(p: np.ndarray) -> np.ndarray:
        return base_kinds[np.searchsorted(starts, p, side="right") - 1]

    inside = _in_reach(starts, unit_starts, reach_ends) & ~np.isin(starts, unit_starts)  # [S]
    add_units = unit_starts[kind_at(unit_starts) != "markup"]
    after = reach_ends[reach_ends < chars.length]
    after = after[kind_at(after) != "markup"]
    # First occurrence wins in np.unique: a unit's start is "markup" even where a base segment starts.
    all_starts = np.concatenate([add_units, starts[~inside], after])
    all_kinds = np.concatenate([np.full(len(add_units), "markup", dtype=object), base_kinds[~inside], kind_at(after)])
    uniq, first = np.unique(all_starts, return_index=True)
    return uniq.astype(np.int64), all_kinds[first].tolist()


def _segment_word(text: str, chars: _Chars):
    if not text:
        return np.zeros(0, np.int64), []
    starts, kinds = [], []
    for m in _WORD_UNIT_RE.finditer(bmp_view(text)):
        starts.append(m.start())
        kinds.append(m.lastgroup)
    if not starts:
        return np.zeros(1, np.int64), ["space"]
    starts[0] = 0
    kinds = ["markup" if k == "marker" else ("word" if k == "number" else k) for k in kinds]
    return np.array(starts, dtype=np.int64), kinds


def _dot_is_break(text: str, dot: int) -> bool:
    """Whether the single "." at `dot` (followed by whitespace) ends a sentence."""
    q = dot
    while q > 0 and text[q - 1] in _ASCII_LETTERS_DOT:
        q -= 1
    word = text[q:dot].lstrip(".")
    if word.lower() in ABBREVIATIONS or _DOTTED_RE.fullmatch(word) or _INITIAL_RE.fullmatch(word):
        return False
    # List item: only spaces/tabs and 1-3 digits between the line start and the dot.
    q = dot
    while q > 0 and "0" <= text[q - 1] <= "9":
        q -= 1
    if 1 <= dot - q <= 3:
        while q > 0 and text[q - 1] in " \t":
            q -= 1
        if q == 0 or text[q - 1] == "\n":
            return False
    return True


def _segment_sentence(text: str, chars: _Chars):
    ends = [chars.newlines + 1]
    term = []
    for m in _TERMINATOR_RE.finditer(text):
        if m.group() == "." and not _dot_is_break(text, m.start()):
            continue
        term.append(m.end())
    ends.append(np.array(term, dtype=np.int64))
    starts = chars.next_nonspace(np.concatenate(ends))
    return _base(chars, starts, "sentence")


def _segment_paragraph(text: str, chars: _Chars):
    ends = np.array([m.end() for m in _BLANK_LINE_RE.finditer(text)], dtype=np.int64)
    return _base(chars, chars.next_nonspace(ends), "paragraph")


def _segment_line(text: str, chars: _Chars):
    return _base(chars, chars.newlines + 1, "line")


def _segment_regex(text: str, pattern: str | None):
    if pattern is None:
        raise SalienceError("granularity 'regex' needs a pattern. Fix: pass pattern=r'...'.")
    spans = match_spans(pattern, text)
    bounds = [0] + [i for span in spans for i in span]
    match_starts = {start for start, _ in spans}
    starts = np.unique(np.array(bounds, dtype=np.int64))
    starts = starts[starts < len(text)]
    kinds = ["match" if s in match_starts else "gap" for s in starts.tolist()]
    return starts, kinds


def _segment_role(text: str, role_spans):
    if role_spans is None:
        raise SalienceError(
            "granularity 'role' needs role_spans [(start, end, role)]. "
            "Fix: pass the ChatPrompt.role_spans of the prompt (or the payload's role_spans)."
        )
    starts, kinds, pos = [], [], 0
    for item in role_spans:
        try:
            start, end, role = int(item[0]), int(item[1]), str(item[2])
        except (TypeError, ValueError, IndexError) as e:
            raise SalienceError(f"role span {item!r} is not (start, end, role). Fix: pass triples.") from e
        if role not in ROLES:
            raise SalienceError(f"role span {item!r}: role {role!r} is not one of {ROLES}. Fix: use one of them.")
        if start < pos or end < start or end > len(text):
            raise SalienceError(
                f"role span {item!r} overlaps the previous one, is reversed or runs past the text "
                f"(length {len(text)}). Fix: pass sorted, non-overlapping spans inside the text."
            )
        if start == end:
            continue
        if start > pos:
            starts.append(pos)
            kinds.append("text")
        starts.append(start)
        kinds.append(role)
        pos = end
    if pos < len(text):
        starts.append(pos)
        kinds.append("text")
    return np.array(starts, dtype=np.int64), kinds


def _check_offsets(text: str, offsets) -> np.ndarray:
    arr = np.asarray(offsets, dtype=np.int64)  # [N, 2]
    if arr.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise SalienceError(
            f"offsets have shape {arr.shape}; expected [N, 2] (start, end) character spans. "
            "Fix: pass one (start, end) pair per token."
        )
    bad = (arr[:, 0] < 0) | (arr[:, 1] < arr[:, 0]) | (arr[:, 1] > len(text))
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise SalienceError(
            f"token {k} has offsets {arr[k].tolist()} outside the text (length {len(text)}) or reversed. "
            "Fix: pass offsets into this exact text (code point indices, 0 <= start <= end <= len)."
        )
    return arr


def segment(
    text: str,
    offsets,
    granularity: str = "word",
    *,
    pattern: str | None = None,
    role_spans: Sequence[tuple[int, int, str]] | None = None,
) -> Segmentation:
    """Splits `text` into segments and assigns each token to one of them.

    Args:
      text: the full text the offsets index into.
      offsets: int [N, 2] token character spans (code points); empty spans allowed.
      granularity: one of GRANULARITIES.
      pattern: the user regex, for granularity "regex" (see compile_pattern).
      role_spans: [(start, end, role)], for granularity "role".

    Returns:
      A Segmentation (see the module docstring for the rules).

    Raises:
      SalienceError: unknown granularity, bad offsets, bad pattern or role spans.
    """
    offs = _check_offsets(text, offsets)  # [N, 2]
    n = len(text)
    if granularity not in GRANULARITIES:
        raise SalienceError(f"unknown granularity {granularity!r}. Fix: use one of {GRANULARITIES}.")
    chars = _Chars(text)
    # Token anchors: first non-space character inside the span, else the start.
    first = chars.next_nonspace(offs[:, 0])  # [N]
    anchor = np.minimum(np.where(first < offs[:, 1], first, offs[:, 0]), max(n - 1, 0))  # [N]
    if granularity == "token":
        markup = _in_reach(anchor, *_markup_reach(text, chars)) if n else np.zeros(len(offs), bool)  # [N]
        return Segmentation(
            granularity, offs[:, 0].copy(), offs[:, 1].copy(), tuple("markup" if m else "token" for m in markup),
            markup, np.arange(len(offs), dtype=np.int64),
        )
    if granularity == "word":
        starts, kinds = _segment_word(text, chars)
    elif granularity == "sentence":
        starts, kinds = _segment_sentence(text, chars)
    elif granularity == "paragraph":
        starts, kinds = _segment_paragraph(text, chars)
    elif granularity == "line":
        starts, kinds = _segment_line(text, chars)
    elif granularity == "regex":
        starts, kinds = _segment_regex(text, pattern)
    else:
        starts, kinds = _segment_role(text, role_spans)
    if granularity != "word":  # word units already keep markup units atomic (the cut would change nothing)
        starts, kinds = _cut_markup(chars, starts, kinds, _markup_reach(text, chars))
    ends = np.append(starts[1:], n).astype(np.int64)  # [S]
    if n == 0 or len(starts) == 0:
        token_segment = np.full(len(offs), -1, dtype=np.int64)
    else:
        token_segment = np.searchsorted(starts, anchor, side="right").astype(np.int64) - 1
    excluded = np.array([k == "markup" for k in kinds], dtype=bool)
    return Segmentation(granularity, starts, ends, tuple(kinds), excluded, token_segment)
