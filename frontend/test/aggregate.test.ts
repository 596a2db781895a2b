/**
 * Tests for src/aggregate.ts against the JSON cases shared with pytest
 * (tests/data/aggregation_cases.json), plus seeded randomized property checks.
 */
import {describe, expect, test} from 'vitest';

import cases from '../../tests/data/aggregation_cases.json';

import {
  aggregate, aggregateSalience, checkPattern, compilePattern, MARKUP_PATTERN, MATCH_WORKER_SOURCE, matchesOnly, normalizeMaxAbs, normalizePercentile,
  percentile, SalienceError, segment, Segmentation, WHITESPACE,
} from '../src/shared/aggregate/index.js';
import {rng} from './support/rng.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const DATA: any = cases;  // the cases vary in shape; each test reads the fields it needs

type Nested = number | null | Nested[];

/** JSON null -> NaN, recursively. */
function nan(x: Nested): unknown {
  if (Array.isArray(x)) return x.map(nan);
  return x === null ? NaN : x;
}

function toPlain(v: Float64Array | Float64Array[]): unknown {
  return Array.isArray(v) ? v.map((r) => Array.from(r)) : Array.from(v);
}

function expectClose(got: unknown, want: unknown): void {
  if (Array.isArray(want)) {
    expect(Array.isArray(got)).toBe(true);
    expect((got as unknown[]).length).toBe(want.length);
    want.forEach((w, i) => expectClose((got as unknown[])[i], w));
  } else if (Number.isNaN(want as number)) {
    expect(Number.isNaN(got as number)).toBe(true);
  } else {
    expect(Math.abs((got as number) - (want as number))).toBeLessThanOrEqual(1e-9);
  }
}

function spans(seg: Segmentation): Array<[number, number, string]> {
  return Array.from(seg.starts, (s, i) => [s, seg.ends[i], seg.kinds[i]]);
}

/** Slices by code point indices. */
function cpSlice(text: string, s: number, e: number): string {
  return Array.from(text).slice(s, e).join('');
}

function runCase(c: any): [Segmentation, Float64Array | Float64Array[]] {
  const seg = segment(c.text, c.offsets, c.granularity, {pattern: c.pattern, roleSpans: c.role_spans});
  return [seg, aggregate(c.scores, seg, c.reduction, c.keep_excluded ?? false)];
}

describe('shared cases', () => {
  for (const c of DATA.cases) {
    test(c.id, () => {
      const [seg, values] = runCase(c);
      expect(spans(seg)).toEqual(c.expected.segments);
      if (c.expected.segment_texts !== null) {
        expect(spans(seg).map(([s, e]) => cpSlice(c.text, s, e))).toEqual(c.expected.segment_texts);
      }
      expect(Array.from(seg.tokenSegment)).toEqual(c.expected.token_segment);
      expect(Array.from(seg.excluded)).toEqual(seg.kinds.map((k) => (k === 'markup' ? 1 : 0)));
      expectClose(toPlain(values), nan(c.expected.aggregated));
      if (c.expected.matches_only !== undefined) {  // regex: the text between matches is context, not scored
        expectClose(Array.from(matchesOnly(values as Float64Array, seg)), nan(c.expected.matches_only));
      }
    });
  }
});

describe('regex subset rejected', () => {
  for (const c of DATA.regex_errors) {
    test(c.id, () => {
      let err: unknown;
      try {
        segment('abc', [[0, 1]], 'regex', {pattern: c.pattern});
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(SalienceError);
      expect((err as Error).message).toContain(c.message);
      expect((err as Error).message).toContain('Fix');
    });
  }
});

describe('bad input', () => {
  for (const c of DATA.bad_inputs) {
    test(c.id, () => {
      expect(() => {
        const seg = segment(c.text, c.offsets, c.granularity, {roleSpans: c.role_spans});
        aggregate(c.scores, seg, c.reduction ?? 'sum');
      }).toThrow(c.message);
    });
  }
});

describe('normalization', () => {
  for (const c of DATA.normalization) {
    test(c.id, () => {
      const values = nan(c.values) as any;
      const got = c.method === 'max_abs' ? normalizeMaxAbs(values, c.excluded ?? undefined)
                                         : normalizePercentile(values, c.q, c.excluded ?? undefined);
      expectClose(toPlain(got as any), nan(c.expected));
    });
  }
  test('percentile interpolates linearly like numpy', () => {
    expect(percentile([1, 2, 3, 4], 75)).toBeCloseTo(3.25, 12);
    expect(percentile([5], 30)).toBe(5);
    expect(percentile([3, 1, 2], 50)).toBe(2);
    expect(Number.isNaN(percentile([], 50))).toBe(true);
  });
  test('percentile q outside [0, 100] is an error', () => {
    expect(() => normalizePercentile([1], 120)).toThrow('outside');
  });
});

describe('regex translation', () => {
  test('translates ., ^, $, \\s to the Python meaning', () => {
    expect(checkPattern('^a.$')).toBe('(?<![^\\n])\\u{61}[^\\n](?![^\\n])');
    expect(checkPattern('\\s')).toBe('[\\t\\n\\v\\f\\r ]');
    expect(compilePattern('a').flags).toBe('gu');
  });
  test('an invalid pattern is reported as typed, not as its internal translation', () => {
    expect(() => compilePattern('(un\\dclosed')).toThrow('regex pattern "(un\\dclosed" is invalid: Unterminated group.');
    expect(() => compilePattern('(un\\dclosed')).not.toThrow('\\u{');
  });
  test('matches found elsewhere (the worker) segment as the pattern run here does', () => {
    const text = 'one, two; three. four\n\u{1F600} five, six';
    const offsets = Array.from(text.matchAll(/\S+\s*/gu), (m) => {
      const s = Array.from(text.slice(0, m.index!)).length;
      return [s, s + Array.from(m[0]).length];
    });
    const pattern = '[^,;.]+[,;.]?';
    // The worker's code, run here: it posts flat UTF-16 match spans.
    let posted: {spans?: number[]} = {};
    const worker = new Function('postMessage', `let onmessage; ${MATCH_WORKER_SOURCE}; return onmessage;`)(
      (d: {spans?: number[]}) => { posted = d; }) as (e: {data: unknown}) => void;
    worker({data: {id: 1, source: checkPattern(pattern), text}});
    expect(posted.spans!.length).toBe(10);  // five clauses ("four\n😀 five," is one: the class takes \n)
    const direct = segment(text, offsets, 'regex', {pattern});
    const viaWorker = segment(text, offsets, 'regex', {pattern, matches: posted.spans});
    expect(Array.from(viaWorker.starts)).toEqual(Array.from(direct.starts));
    expect(viaWorker.kinds).toEqual(direct.kinds);
    expect(Array.from(viaWorker.tokenSegment)).toEqual(Array.from(direct.tokenSegment));
  });
});

// ---------------------------------------------------------------------------
// Property checks with a seeded PRNG (support/rng.ts).

const FRAGMENTS = [
  'Hello', 'world', 'Dr.', '3.14', 'e.g.', 'U.S.', ' ', '  ', '\n', '\n\n', '\r\n', '.', '!', '?', ',', '...',
  '<|im_start|>', '<|im_end|>', '\u{1F600}', '\u6771\u4eac', '\u3002', '\u00a0', "don't", '1.', '\t',
  'na\u0303o', '\u2764\ufe0f', 'x', '(', ')', '-', '"', 'user', 'model', '<start_of_turn>',
];
const PARTITIONING = ['word', 'sentence', 'paragraph', 'line', 'regex', 'role'];
const WS = new Set(Array.from(WHITESPACE));

function randomText(r: () => number): string {
  const n = Math.floor(r() * 30);
  let s = '';
  for (let i = 0; i < n; i++) s += FRAGMENTS[Math.floor(r() * FRAGMENTS.length)];
  return s;
}

function randomCuts(r: () => number, len: number, max: number): number[] {
  const k = Math.floor(r() * (max + 1));
  return Array.from({length: k}, () => Math.floor(r() * (len + 1)));
}

function spansFromCuts(len: number, cuts: number[]): Array<[number, number]> {
  const points = Array.from(new Set([0, len, ...cuts])).sort((a, b) => a - b);
  return points.slice(1).map((b, i) => [points[i], b]);
}

function roleSpans(len: number, cuts: number[]): Array<[number, number, string]> {
  const roles = ['system', 'user', 'markup', 'assistant'];
  return spansFromCuts(len, cuts).map(([a, b], i) => [a, b, roles[i % 4]]);
}

function seg(text: string, offsets: number[][], g: string, cuts: number[] = []): Segmentation {
  const len = Array.from(text).length;
  return segment(text, offsets, g, {pattern: '[A-Za-z]+|\\d+(?:\\.\\d+)?', roleSpans: roleSpans(len, cuts)});
}

describe('properties (randomized, seeded)', () => {
  test('segments partition the text exactly', () => {
    const r = rng(1);
    for (let it = 0; it < 400; it++) {
      const text = randomText(r);
      const len = Array.from(text).length;
      const g = PARTITIONING[it % PARTITIONING.length];
      const s = seg(text, [], g, randomCuts(r, len, 6));
      if (len === 0) {
        expect(s.kinds.length).toBe(0);
        continue;
      }
      expect(s.starts[0]).toBe(0);
      expect(s.ends[s.ends.length - 1]).toBe(len);
      for (let i = 0; i < s.starts.length; i++) {
        expect(s.ends[i]).toBeGreaterThan(s.starts[i]);
        if (i + 1 < s.starts.length) expect(s.ends[i]).toBe(s.starts[i + 1]);
      }
    }
  }, 60_000);  // generous: CI machines are shared

  test('sum conserves the total; excluded segments are NaN by default', () => {
    const r = rng(2);
    for (let it = 0; it < 400; it++) {
      const text = randomText(r) || 'x';
      const len = Array.from(text).length;
      const cuts = randomCuts(r, len, 40);
      const offsets: number[][] = spansFromCuts(len, cuts);
      for (const p of randomCuts(r, len, 3)) offsets.push([p, p]);
      const g = [...PARTITIONING, 'token'][it % 7];
      const s = seg(text, offsets, g, cuts);
      const scores = [0, 1].map(() => offsets.map(() => r() * 2 - 1));
      const values = aggregate(scores, s, 'sum', true);
      const masked = aggregate(scores, s, 'sum');
      for (let t = 0; t < 2; t++) {
        const want = scores[t].reduce((a, b) => a + b, 0);
        expect(Math.abs(values[t].reduce((a, b) => a + b, 0) - want)).toBeLessThan(1e-9);
        for (let i = 0; i < s.kinds.length; i++) {
          if (s.excluded[i]) expect(Number.isNaN(masked[t][i])).toBe(true);
          else expect(masked[t][i]).toBe(values[t][i]);
        }
      }
      for (const k of s.tokenSegment) expect(k >= 0 && k < s.kinds.length).toBe(true);
    }
  }, 60_000);  // generous: CI machines are shared

  test('markup units ("<|im_start|>user") are never split and never scored', () => {
    const r = rng(4);
    const unitRe = new RegExp(MARKUP_PATTERN, 'gu');
    for (let it = 0; it < 300; it++) {
      const text = randomText(r);
      const len = Array.from(text).length;
      const g = [...PARTITIONING, 'token'][it % 7];
      const offsets = Array.from({length: len}, (_, k) => [k, k + 1]);  // one token per code point
      const s = seg(text, offsets, g, randomCuts(r, len, 6));
      for (const m of text.matchAll(unitRe)) {
        const a = Array.from(text.slice(0, m.index!)).length;
        const b = a + Array.from(m[0]).length;
        if (g !== 'token') expect(Array.from(s.starts).some((st) => st > a && st < b)).toBe(false);
        for (let k = a; k < b; k++) expect(s.excluded[s.tokenSegment[k]]).toBe(1);
      }
    }
  }, 60_000);  // generous: CI machines are shared

  test('uniform scores do not depend on the tokenization', () => {
    const r = rng(3);
    for (let it = 0; it < 300; it++) {
      const text = randomText(r) || 'x';
      const cps = Array.from(text);
      const len = cps.length;
      const g = ['word', 'sentence', 'paragraph', 'line', 'regex'][it % 5];
      const base = seg(text, [], g);
      const expected = Array.from(base.starts, (s, i) => cps.slice(s, base.ends[i]).filter((c) => !WS.has(c)).length);
      for (let k = 0; k < 2; k++) {
        // Token boundaries at segment starts, each possibly moved left into the whitespace before
        // it (GPT-2's "Ġthe"), plus random cuts inside segments.
        const cuts = randomCuts(r, len, 20);
        for (let s of base.starts) {
          let shift = Math.floor(r() * 4);
          while (shift > 0 && s > 0 && WS.has(cps[s - 1])) {
            s--;
            shift--;
          }
          cuts.push(s);
        }
        const offsets = spansFromCuts(len, cuts);
        const scores = offsets.map(([a, b]) => cps.slice(a, b).filter((c) => !WS.has(c)).length);
        const s = seg(text, offsets, g);
        expect(Array.from(s.starts)).toEqual(Array.from(base.starts));
        expect(Array.from(aggregate(scores, s, 'sum', true))).toEqual(expected);
      }
    }
  }, 60_000);  // generous: CI machines are shared
});

test('aggregateSalience is segment then aggregate', () => {
  const [seg, values] = aggregateSalience('a b', [[0, 1], [1, 3]], [1, 2], 'word');
  expect(Array.from(seg.starts)).toEqual([0, 2]);
  expect(Array.from(values as Float64Array)).toEqual([1, 2]);
});
