/**
 * Markup units (a chat marker plus its role name) kept atomic: where each unit reaches and the cut that makes
 * each one its own "markup" segment (the markup half of sequence_salience/aggregate/segments.py; segment.ts
 * applies it).
 */
import {type Chars, MARKUP_PATTERN} from './unicode.js';

const MARKUP_RE = new RegExp(MARKUP_PATTERN, 'gu');

/** Markup units: [unit starts, reach ends] (each unit plus the whitespace after it), sorted, disjoint. */
export function markupReach(chars: Chars): [number[], number[]] {
  const starts: number[] = [];
  const ends: number[] = [];
  for (const m of chars.text.matchAll(MARKUP_RE)) {
    starts.push(chars.cpOf[m.index!]);
    ends.push(chars.nonspaceFrom(chars.cpOf[m.index! + m[0].length]));
  }
  return [starts, ends];
}

/** Index of the last unit starting at or before p, if p lies in its reach; else -1. */
export function reachAt(reach: [number[], number[]], p: number): number {
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

/** Makes each markup unit an atomic "markup" segment of a base segmentation (see sequence_salience/aggregate/segments.py). */
export function cutMarkup(chars: Chars, starts: number[], kinds: string[], reach: [number[], number[]]):
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

