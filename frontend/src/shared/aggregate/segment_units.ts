/**
 * The base segmenters of segments.py (sequence_salience/aggregate/segments.py), one per granularity: word,
 * sentence, paragraph, line, regex and role starts with their kinds, before segment.ts cuts the markup units.
 */
import {compilePattern} from './pattern_run.js';
import {ROLES, SalienceError, type SegmentOptions} from './types.js';
import {ABBREVIATIONS, charClass, type Chars, MARKUP_PATTERN, WS, WS_NO_NL} from './unicode.js';

const TERMINATOR_RE = new RegExp(
  `[.!?\\u{2026}]+["')\\]\\u{201d}\\u{2019}]*(?=[${WS}]|$)` +
  `|[\\u{3002}\\u{ff01}\\u{ff1f}]+["')\\]\\u{201d}\\u{2019}\\u{300d}\\u{300f}]*`, 'gu');
const BLANK_LINE_RE = new RegExp(`\\n(?:[${WS_NO_NL}]*\\n)+`, 'gu');
const DOTTED_RE = /^[A-Za-z]{1,2}(?:\.[A-Za-z]{1,2})+$/;
const INITIAL_RE = /^[A-Z]$/;
const ASCII_LETTERS_DOT = new Set('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.');

/** Sorted unique starts below the text length, 0 included, all of one kind. */
function base(chars: Chars, starts: number[], kind: string): [number[], string[]] {
  if (chars.length === 0) return [[], []];
  const uniq = Array.from(new Set([0, ...starts].filter((s) => s < chars.length))).sort((a, b) => a - b);
  return [uniq, uniq.map(() => kind)];
}

const MARKUP_STICKY = new RegExp(MARKUP_PATTERN, 'y');
const APOSTROPHES = new Set([0x27, 0x2019]);
const isDigit = (cp: number) => cp >= 0x30 && cp <= 0x39;

/**
 * Word units, scanned by hand (a regex with these classes is several times
 * slower in V8). Equivalent to Python's _WORD_UNIT_RE, tried in this order at
 * each non-space position: markup unit | number [0-9]+([.,][0-9]+)+ |
 * word [LN][LNM]*(['’][LN][LNM]*)* | punct run (non-LN, non-space, up to a marker).
 */
export function segmentWord(chars: Chars): [number[], string[]] {
  if (chars.length === 0) return [[], []];
  const text = chars.text;
  const cps = new Int32Array(chars.length);
  const cls = new Uint8Array(chars.length);
  for (let i = 0; i < chars.length; i++) {
    cps[i] = text.codePointAt(chars.u16Of[i])!;
    cls[i] = charClass(cps[i]);
  }
  const n = chars.length;
  const isSpace = (i: number) => chars.nextNonspace[i] !== i;
  const markerAt = (i: number): number => {  // end of a markup unit starting at i, or -1
    if (cps[i] !== 0x3c && cps[i] !== 0x5b) return -1;  // '<' or '['
    MARKUP_STICKY.lastIndex = chars.u16Of[i];
    const m = MARKUP_STICKY.exec(text);
    return m === null ? -1 : chars.cpOf[MARKUP_STICKY.lastIndex];
  };
  const starts: number[] = [];
  const kinds: string[] = [];
  let i = chars.nextNonspace[0];
  while (i < n) {
    starts.push(i);
    let j = markerAt(i);
    if (j >= 0) {
      kinds.push('markup');
    } else {
      j = -1;
      if (isDigit(cps[i])) {  // number
        let k = i;
        while (k < n && isDigit(cps[k])) k++;
        let reps = 0;
        while (k + 1 < n && (cps[k] === 0x2e || cps[k] === 0x2c) && isDigit(cps[k + 1])) {
          k += 1;
          while (k < n && isDigit(cps[k])) k++;
          reps++;
        }
        if (reps > 0) j = k;
      }
      if (j >= 0) {
        kinds.push('word');
      } else if (cls[i] === 1) {  // word
        let k = i + 1;
        for (;;) {
          while (k < n && cls[k] !== 0) k++;
          if (k + 1 < n && APOSTROPHES.has(cps[k]) && cls[k + 1] === 1) k += 2;
          else break;
        }
        j = k;
        kinds.push('word');
      } else {  // punct run
        let k = i + 1;
        while (k < n && cls[k] !== 1 && !isSpace(k) && markerAt(k) < 0) k++;
        j = k;
        kinds.push('punct');
      }
    }
    i = j < n ? chars.nextNonspace[j] : n;
  }
  if (starts.length === 0) return [[0], ['space']];
  starts[0] = 0;
  return [starts, kinds];
}

/** Whether the single "." at UTF-16 index `dot` (followed by whitespace) ends a sentence. */
function dotIsBreak(text: string, dot: number): boolean {
  // Only ASCII letters, dots and digits are scanned: UTF-16 index == code point steps.
  let q = dot;
  while (q > 0 && ASCII_LETTERS_DOT.has(text[q - 1])) q--;
  const word = text.slice(q, dot).replace(/^\.+/, '');
  if (ABBREVIATIONS.has(word.toLowerCase()) || DOTTED_RE.test(word) || INITIAL_RE.test(word)) {
    return false;
  }
  q = dot;
  while (q > 0 && text[q - 1] >= '0' && text[q - 1] <= '9') q--;
  if (dot - q >= 1 && dot - q <= 3) {
    while (q > 0 && (text[q - 1] === ' ' || text[q - 1] === '\t')) q--;
    if (q === 0 || text[q - 1] === '\n') return false;
  }
  return true;
}

export function segmentSentence(chars: Chars): [number[], string[]] {
  const starts = chars.newlines.map((p) => chars.nonspaceFrom(p + 1));
  for (const m of chars.text.matchAll(TERMINATOR_RE)) {
    if (m[0] === '.' && !dotIsBreak(chars.text, m.index!)) continue;
    starts.push(chars.nonspaceFrom(chars.cpOf[m.index! + m[0].length]));
  }
  return base(chars, starts, 'sentence');
}

export function segmentParagraph(chars: Chars): [number[], string[]] {
  const starts: number[] = [];
  for (const m of chars.text.matchAll(BLANK_LINE_RE)) {
    starts.push(chars.nonspaceFrom(chars.cpOf[m.index! + m[0].length]));
  }
  return base(chars, starts, 'paragraph');
}

export function segmentLine(chars: Chars): [number[], string[]] {
  return base(chars, chars.newlines.map((p) => p + 1), 'line');
}

export function segmentRegex(chars: Chars, pattern: string | undefined,
                      matches: ArrayLike<number> | undefined): [number[], string[]] {
  if (pattern === undefined) {
    throw new SalienceError("granularity 'regex' needs a pattern. Fix: pass opts.pattern.");
  }
  let spans: ArrayLike<number>;
  if (matches !== undefined) {
    spans = matches;
  } else {
    const found: number[] = [];
    for (const m of chars.text.matchAll(compilePattern(pattern))) {
      if (m[0].length > 0) found.push(m.index!, m.index! + m[0].length);
    }
    spans = found;
  }
  const bounds = new Set<number>([0]);
  const matchStarts = new Set<number>();
  for (let i = 0; i + 1 < spans.length; i += 2) {
    const s = chars.cpOf[spans[i]];
    bounds.add(s);
    bounds.add(chars.cpOf[spans[i + 1]]);
    matchStarts.add(s);
  }
  const starts = Array.from(bounds).filter((s) => s < chars.length).sort((a, b) => a - b);
  return [starts, starts.map((s) => (matchStarts.has(s) ? 'match' : 'gap'))];
}

export function segmentRole(chars: Chars, roleSpans: SegmentOptions['roleSpans']): [number[], string[]] {
  if (roleSpans === undefined) {
    throw new SalienceError(
      "granularity 'role' needs roleSpans [(start, end, role)]. Fix: pass the payload's role_spans.");
  }
  const starts: number[] = [];
  const kinds: string[] = [];
  let pos = 0;
  for (const item of roleSpans) {
    const [start, end, role] = item;
    if (!(ROLES as readonly string[]).includes(role)) {
      throw new SalienceError(
        `role span ${JSON.stringify(item)}: role "${role}" is not one of ${ROLES.join(', ')}. Fix: use one of them.`);
    }
    if (!Number.isInteger(start) || !Number.isInteger(end) || start < pos || end < start ||
        end > chars.length) {
      throw new SalienceError(
        `role span ${JSON.stringify(item)} overlaps the previous one, is reversed or runs past the text ` +
        `(length ${chars.length}). Fix: pass sorted, non-overlapping spans inside the text.`);
    }
    if (start === end) continue;
    if (start > pos) {
      starts.push(pos);
      kinds.push('text');
    }
    starts.push(start);
    kinds.push(role);
    pos = end;
  }
  if (pos < chars.length) {
    starts.push(pos);
    kinds.push('text');
  }
  return [starts, kinds];
}
