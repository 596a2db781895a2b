/**
 * Segmentation: word, sentence, paragraph, line, regex and role segments of a text, markup
 * units kept atomic, and the segment of each token (the rules: index.ts and sequence_salience/aggregate/segments.py).
 */
import {compilePattern} from './pattern.js';
import {GRANULARITIES, ROLES, SalienceError, type Granularity, type Segmentation, type SegmentOptions} from './types.js';
import {ABBREVIATIONS, charClass, Chars, MARKUP_PATTERN, WS, WS_NO_NL} from './unicode.js';

const MARKUP_RE = new RegExp(MARKUP_PATTERN, 'gu');
const TERMINATOR_RE = new RegExp(
  `[.!?\\u{2026}]+["')\\]\\u{201d}\\u{2019}]*(?=[${WS}]|$)` +
  `|[\\u{3002}\\u{ff01}\\u{ff1f}]+["')\\]\\u{201d}\\u{2019}\\u{300d}\\u{300f}]*`, 'gu');
const BLANK_LINE_RE = new RegExp(`\\n(?:[${WS_NO_NL}]*\\n)+`, 'gu');
const DOTTED_RE = /^[A-Za-z]{1,2}(?:\.[A-Za-z]{1,2})+$/;
const INITIAL_RE = /^[A-Z]$/;
const ASCII_LETTERS_DOT = new Set('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.');

/** Markup units: [unit starts, reach ends] (each unit plus the whitespace after it), sorted, disjoint. */
function markupReach(chars: Chars): [number[], number[]] {
  const starts: number[] = [];
  const ends: number[] = [];
  for (const m of chars.text.matchAll(MARKUP_RE)) {
    starts.push(chars.cpOf[m.index!]);
    ends.push(chars.nonspaceFrom(chars.cpOf[m.index! + m[0].length]));
  }
  return [starts, ends];
}

/** Index of the last unit starting at or before p, if p lies in its reach; else -1. */
function reachAt(reach: [number[], number[]], p: number): number {
  const [us, ue] = reach;
  let lo = 0;
  let hi = us.length - 1;
  let found = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (us[mid] <= p) {
      found = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return found >= 0 && p < ue[found] ? found : -1;
}

/** Sorted unique starts below the text length, 0 included, all of one kind. */
function base(chars: Chars, starts: number[], kind: string): [number[], string[]] {
  if (chars.length === 0) return [[], []];
  const uniq = Array.from(new Set([0, ...starts].filter((s) => s < chars.length))).sort((a, b) => a - b);
  return [uniq, uniq.map(() => kind)];
}

/** Makes each markup unit an atomic "markup" segment of a base segmentation (see sequence_salience/aggregate/segments.py). */
function cutMarkup(chars: Chars, starts: number[], kinds: string[], reach: [number[], number[]]):
    [number[], string[]] {
  const [us, ue] = reach;
  if (chars.length === 0 || us.length === 0) return [starts, kinds];
  const kindAt = (p: number): string => {  // base kind at position p (last start <= p)
    let lo = 0;
    let hi = starts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (starts[mid] <= p) lo = mid; else hi = mid - 1;
    }
    return kinds[lo];
  };
  const out = new Map<number, string>();
  for (let u = 0; u < us.length; u++) {  // a unit's start is "markup" even where a base segment starts
    if (kindAt(us[u]) !== 'markup') out.set(us[u], 'markup');
  }
  const unitStarts = new Set(us);
  for (let i = 0; i < starts.length; i++) {
    if (!out.has(starts[i]) && (unitStarts.has(starts[i]) || reachAt(reach, starts[i]) < 0)) {
      out.set(starts[i], kinds[i]);
    }
  }
  for (const a of ue) {
    if (a < chars.length && !out.has(a) && kindAt(a) !== 'markup') out.set(a, kindAt(a));
  }
  const sorted = Array.from(out.keys()).sort((a, b) => a - b);
  return [sorted, sorted.map((s) => out.get(s)!)];
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
function segmentWord(chars: Chars): [number[], string[]] {
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

function segmentSentence(chars: Chars): [number[], string[]] {
  const starts = chars.newlines.map((p) => chars.nonspaceFrom(p + 1));
  for (const m of chars.text.matchAll(TERMINATOR_RE)) {
    if (m[0] === '.' && !dotIsBreak(chars.text, m.index!)) continue;
    starts.push(chars.nonspaceFrom(chars.cpOf[m.index! + m[0].length]));
  }
  return base(chars, starts, 'sentence');
}

function segmentParagraph(chars: Chars): [number[], string[]] {
  const starts: number[] = [];
  for (const m of chars.text.matchAll(BLANK_LINE_RE)) {
    starts.push(chars.nonspaceFrom(chars.cpOf[m.index! + m[0].length]));
  }
  return base(chars, starts, 'paragraph');
}

function segmentLine(chars: Chars): [number[], string[]] {
  return base(chars, chars.newlines.map((p) => p + 1), 'line');
}

function segmentRegex(chars: Chars, pattern: string | undefined,
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

function segmentRole(chars: Chars, roleSpans: SegmentOptions['roleSpans']): [number[], string[]] {
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

function checkOffsets(chars: Chars, offsets: ArrayLike<ArrayLike<number>>): void {
  for (let k = 0; k < offsets.length; k++) {
    const o = offsets[k];
    if (o.length !== 2) {
      throw new SalienceError(
        `offsets[${k}] has ${o.length} entries; expected [N, 2] (start, end) character spans. ` +
        'Fix: pass one (start, end) pair per token.');
    }
    if (!(o[0] >= 0 && o[1] >= o[0] && o[1] <= chars.length)) {
      throw new SalienceError(
        `token ${k} has offsets [${o[0]}, ${o[1]}] outside the text (length ${chars.length}) or reversed. ` +
        'Fix: pass offsets into this exact text (code point indices, 0 <= start <= end <= len).');
    }
  }
}

/**
 * Splits `text` into segments and assigns each token to one of them.
 *
 * @param text the full text the offsets index into.
 * @param offsets [N][2] token spans in code points; empty spans allowed.
 * @param granularity one of GRANULARITIES.
 * @param opts pattern (granularity "regex"), roleSpans (granularity "role").
 * @throws SalienceError on unknown granularity, bad offsets, pattern or role spans.
 */
export function segment(text: string, offsets: ArrayLike<ArrayLike<number>>,
                        granularity: Granularity | string = 'word', opts: SegmentOptions = {}): Segmentation {
  const chars = new Chars(text);
  checkOffsets(chars, offsets);
  const nTok = offsets.length;
  const n = chars.length;
  // Token anchors: first non-space character inside the span, else the start (clamped into the text).
  const anchors = new Int32Array(nTok);
  for (let k = 0; k < nTok; k++) {
    const [s, e] = [offsets[k][0], offsets[k][1]];
    const first = chars.nonspaceFrom(s);
    anchors[k] = Math.max(0, Math.min(first < e ? first : s, n - 1));
  }
  if (granularity === 'token') {
    const starts = new Int32Array(nTok);
    const ends = new Int32Array(nTok);
    const tokenSegment = new Int32Array(nTok);
    const kinds: string[] = new Array(nTok).fill('token');
    const reach = n > 0 ? markupReach(chars) : [[], []] as [number[], number[]];
    for (let k = 0; k < nTok; k++) {
      starts[k] = offsets[k][0];
      ends[k] = offsets[k][1];
      tokenSegment[k] = k;
      if (reachAt(reach, anchors[k]) >= 0) kinds[k] = 'markup';
    }
    const excluded = Uint8Array.from(kinds, (k) => (k === 'markup' ? 1 : 0));
    return {granularity, starts, ends, kinds, excluded, tokenSegment};
  }
  let result: [number[], string[]];
  switch (granularity) {
    case 'word': result = segmentWord(chars); break;
    case 'sentence': result = segmentSentence(chars); break;
    case 'paragraph': result = segmentParagraph(chars); break;
    case 'line': result = segmentLine(chars); break;
    case 'regex': result = segmentRegex(chars, opts.pattern, opts.matches); break;
    case 'role': result = segmentRole(chars, opts.roleSpans); break;
    default:
      throw new SalienceError(
        `unknown granularity "${granularity}". Fix: use one of ${GRANULARITIES.join(', ')}.`);
  }
  // Word units already keep markup units atomic (the cut would change nothing there).
  const [startList, kinds] = granularity === 'word' ? result : cutMarkup(chars, result[0], result[1], markupReach(chars));
  const nSeg = startList.length;
  const starts = Int32Array.from(startList);
  const ends = new Int32Array(nSeg);
  for (let s = 0; s < nSeg; s++) ends[s] = s + 1 < nSeg ? starts[s + 1] : n;
  const tokenSegment = new Int32Array(nTok).fill(-1);
  if (n > 0 && nSeg > 0) {
    for (let k = 0; k < nTok; k++) {
      const anchor = anchors[k];
      // Last segment whose start <= anchor (binary search).
      let lo = 0;
      let hi = nSeg - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (starts[mid] <= anchor) lo = mid; else hi = mid - 1;
      }
      tokenSegment[k] = lo;
    }
  }
  const excluded = Uint8Array.from(kinds, (k) => (k === 'markup' ? 1 : 0));
  return {granularity: granularity as Granularity, starts, ends, kinds, excluded, tokenSegment};
}
