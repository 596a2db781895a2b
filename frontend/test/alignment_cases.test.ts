/**
 * alignTexts (src/salience/compare/alignment.ts) on the cases shared with pytest (tests/data/alignment_cases.json,
 * tests/unit/test_alignment_cases.py: sequence_salience/compare/alignment.py): one diff in both languages.
 */
import {describe, expect, test} from 'vitest';

import cases from '../../tests/data/alignment_cases.json';
import {alignedText, alignedValues, alignTexts, difference} from '../src/salience/compare/alignment.js';
import type {Granularity} from '../src/shared/aggregate/index.js';

interface AlignmentCase {
  id: string;
  a: string;
  b: string;
  granularity: string;
  rows: string[][];
  spans?: Array<[number, number[], number[]]>;
  segment_counts?: number[][];
  values?: Record<'a' | 'b' | 'aligned_a' | 'aligned_b' | 'difference', Array<number | null>>;
}

const nan = (xs: Array<number | null>): number[] => xs.map((x) => (x === null ? NaN : x));

describe('shared alignment cases', () => {
  for (const c of (cases as unknown as {cases: AlignmentCase[]}).cases) {
    test(c.id, () => {
      const al = alignTexts(c.a, c.b, c.granularity as Granularity);
      expect(al.segments.map((s, k) => [s.kind, alignedText(al, k, 'a').trim(), alignedText(al, k, 'b').trim()]))
          .toEqual(c.rows);
      for (const [k, a, b] of c.spans ?? []) expect([al.segments[k].a, al.segments[k].b]).toEqual([a, b]);
      for (const [k, nA, nB] of c.segment_counts ?? []) {
        expect([al.segments[k].aSegs.length, al.segments[k].bSegs.length]).toEqual([nA, nB]);
      }
      if (c.values !== undefined) {
        const {a, b} = alignedValues(al, nan(c.values.a), nan(c.values.b));
        expect(Array.from(a)).toEqual(nan(c.values.aligned_a));
        expect(Array.from(b)).toEqual(nan(c.values.aligned_b));
        expect(Array.from(difference(al, a, b))).toEqual(nan(c.values.difference));
      }
    });
  }
});
