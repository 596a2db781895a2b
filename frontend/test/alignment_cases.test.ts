/**
 * alignTexts (src/compare/logic.ts) on the cases shared with pytest (tests/data/alignment_cases.json,
 * tests/unit/test_alignment_cases.py: sequence_salience/compare/alignment.py): one diff in both languages.
 */
import {describe, expect, test} from 'vitest';

import cases from '../../tests/data/alignment_cases.json';
import {alignedText, alignTexts} from '../src/compare/logic.js';
import type {Granularity} from '../src/shared/aggregate/index.js';

interface AlignmentCase {
  id: string;
  a: string;
  b: string;
  granularity: string;
  rows: string[][];
  spans?: Array<[number, number[], number[]]>;
  segment_counts?: number[][];
}

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
    });
  }
});
