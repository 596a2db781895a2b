/**
 * Aggregates token salience to word, sentence, paragraph, line, regex and role
 * segments in the browser, without a server call.
 *
 * A port of `sequence_salience/aggregate/`, file for file: segments.py is segment.ts (with its base
 * segmenters in segment_units.ts and the markup units in segment_markup.ts), reductions.py reduce.ts,
 * patterns.py pattern.ts (compiling and running: pattern_run.ts), unicode_tables.py unicode.ts; the same
 * rules, the same names (camelCase here), checked against the same cases in
 * `tests/data/aggregation_cases.json`. Read the Python package docstring for
 * the rules; they are summarised here:
 *
 * - Positions (offsets, role spans, segment starts/ends) are Unicode code point
 *   indices, as in Python and in the server payload; JS strings index UTF-16
 *   code units, so this module converts internally.
 * - Segments partition the text (except `token`): a segment runs to the next
 *   segment's start, so whitespace joins the earlier unit.
 * - A token belongs to the segment containing its first non-whitespace
 *   character (else its start, clamped into the text).
 * - Markup units (MARKUP_PATTERN: a chat marker plus the role name written
 *   right after it, "<|im_start|>user") are atomic "markup" segments at every
 *   granularity; at `token` granularity the tokens anchored in a unit or the
 *   whitespace after it are kind "markup".
 * - Template markup (kind "markup") is excluded: NaN in `aggregate` unless
 *   `keepExcluded`, NaN and no say in the scale in the normalisation helpers.
 * - Custom regexes: the subset common to Python `re` and JS `RegExp`
 *   (`checkPattern`), translated so that both match identically. The text
 *   between matches ("gap") is context: `matchesOnly` leaves it unscored.
 *
 * Pure TypeScript: no DOM, no lit.
 */
export * from './types.js';
export {ABBREVIATIONS, MARKER_PATTERN, MARKUP_PATTERN, TEMPLATE_ROLE_NAMES, WHITESPACE} from './unicode.js';
export {segment} from './segment.js';
export * from './reduce.js';
export {asTyped, checkPattern, type PatternBounds} from './pattern.js';
export {compilePattern, MATCH_WORKER_SOURCE, PATTERN_TIMEOUT_MS} from './pattern_run.js';
