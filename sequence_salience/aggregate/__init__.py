"""Aggregates token salience to word, sentence, paragraph, line, regex and role segments.

Pure functions over (text, token character offsets, scores, granularity,
reduction). The TypeScript module `frontend/src/aggregate.ts` implements the
same rules so the browser can regroup without a server call; both are checked
against the named cases in `tests/data/aggregation_cases.json`.

Positions are Python string indices (Unicode code points), the unit of
tokenizer offsets; the TypeScript side converts from UTF-16.

Rules (the same in both languages):

* Segments are half-open character spans [start, end) that partition the whole
  text (except `token` granularity, whose segments are the token spans
  themselves). A segment runs from its start to the next segment's start, so
  whitespace between two units joins the EARLIER unit; whitespace before the
  first unit joins the first segment.
* `word`: a unit is a markup unit (see below), a number with inner separators ("3.14",
  "1,000"), a word (a letter/number followed by letters, numbers and combining
  marks, with inner apostrophes: "don't", "O'Neil"), or a run of other
  non-space characters (punctuation, symbols, emoji; a combining mark that
  does not follow a word counts here, e.g. the variation selector of an
  emoji). Hyphens split words. Letters, numbers and marks come from a frozen
  Unicode 14 table shared by both languages.
  Kinds: "word", "punct", "markup" ("space" for whitespace-only text).
* `sentence`: a sentence ends after a run of `.!?…` (plus closing quotes or
  brackets) followed by whitespace or the end, after `。！？`, and at every
  newline; the next sentence starts at the next non-space character. A single
  "." does not end a sentence after an abbreviation (ABBREVIATIONS, dotted
  forms like e.g. / U.S. / a.m., single capital initials) or after a list
  number at the start of a line ("1. First"). Decimals never break (no space
  after the dot).
* `paragraph`: a paragraph ends at a blank line (two newlines with only
  whitespace between); the next starts at the next non-space character.
* `line`: a line ends after each "\\n" (kept with its line); the next line
  starts right after it, so indentation belongs to its own line.
* Markup units (MARKUP_PATTERN): a chat marker (MARKER_PATTERN: `<|...|>`,
  `<start_of_turn>`, `</s>`, `[INST]`, ...) together with the role name a
  template writes right after it, if any: one of TEMPLATE_ROLE_NAMES, directly
  after the marker and not followed by [A-Za-z0-9_] (`<|im_start|>user`,
  `<start_of_turn>model`, `<|start_header_id|>assistant`; not "users", not
  " user"). A unit's reach is the unit plus the whitespace right after it.
  At every granularity except `token`, units are atomic segments of kind
  "markup": no segment starts inside a reach except at its unit's start; a
  segment starts at each unit and at the first non-space character after it,
  the latter with the kind the base segmentation has there. Where the base
  segmentation already has markup (a role span of role "markup"), no start is
  added, so the role's markup span is not split.
* `token`: each token is a segment of kind "token", or "markup" when its
  anchor (see token assignment) lies in a unit's reach; these are the tokens
  that fall in markup segments at `word` granularity.
* `regex`: every non-empty match of the user pattern is a segment ("match");
  the text between matches forms its own segments ("gap"), context that the
  views leave uncoloured and unranked (`matches_only`). The pattern must be
  in the subset common to Python `re` and JavaScript `RegExp` (see
  `compile_pattern`), and within `PATTERN_BOUNDS` (length, repeat counts, the
  length with repeats written out, group depth), checked before it is
  compiled. Matching is bounded by `PATTERN_TIMEOUT_S` of wall time (`match_spans`; a
  catastrophic-backtracking pattern such as `(a|a)+$` raises SalienceError
  instead of hanging the caller; it runs on the `regex` package, which has
  `re`'s semantics for this subset, releases the GIL and takes a timeout).
* `role`: one segment per given role span (start, end, role), role in ROLES;
  uncovered text (e.g. the generated target after the prompt) forms segments
  of kind "text".
* Token assignment: a token belongs to the one segment containing its anchor,
  the first non-whitespace character of its span (so "Ġthe" covering " the"
  goes with "the"); a whitespace-only or empty span (special tokens such as
  BOS) anchors at its start, clamped into the text. Byte-fallback pieces of
  one emoji / CJK character share its span and so its segment.
* Excluded segments: kind "markup" (template markup) is excluded. `aggregate`
  returns NaN for them unless `keep_excluded=True`; the normalisation helpers
  return NaN for them and leave them out of the scale.
* Reductions: `sum` (default), `mean`, `max`, `abs_sum` over the tokens
  assigned to a segment. A segment with no tokens scores 0 for sum/abs_sum and
  NaN for mean/max.

Typical use:

    seg = segment(text, offsets, "sentence")
    values = aggregate(matrix, seg, "sum")        # [T, S]
    colours = normalize_max_abs(values[0], seg.excluded)
"""

from __future__ import annotations

from __future__ import annotations

from sequence_salience.aggregate.patterns import PATTERN_BOUNDS, PATTERN_TIMEOUT_S, PatternBounds, check_pattern, \
    compile_pattern, match_spans, matchers_idle
from sequence_salience.aggregate.reductions import (
    REDUCTIONS,
    aggregate,
    aggregate_salience,
    matches_only,
    normalize_max_abs,
    normalize_percentile,
    percentile,
)
from sequence_salience.aggregate.segments import (
    ABBREVIATIONS,
    GRANULARITIES,
    MARKER_PATTERN,
    MARKUP_PATTERN,
    ROLES,
    TEMPLATE_ROLE_NAMES,
    Segmentation,
    segment,
)
from sequence_salience.aggregate.unicode_tables import WHITESPACE

__all__ = [
    "ABBREVIATIONS", "GRANULARITIES", "MARKER_PATTERN", "MARKUP_PATTERN", "PATTERN_BOUNDS", "PATTERN_TIMEOUT_S",
    "REDUCTIONS", "ROLES", "TEMPLATE_ROLE_NAMES", "WHITESPACE",
    "PatternBounds", "Segmentation", "aggregate", "aggregate_salience", "check_pattern", "compile_pattern",
    "match_spans", "matchers_idle", "matches_only", "normalize_max_abs", "normalize_percentile", "percentile", "segment",
]
