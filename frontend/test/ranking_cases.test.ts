/**
 * topSegments (src/salience/rank.ts) on the cases shared with pytest (tests/data/ranking_cases.json,
 * tests/unit/test_ranking_cases.py: sequence_salience/display/view.py top_segments).
 */
import {describe, expect, test} from 'vitest';

import cases from '../../tests/data/ranking_cases.json';
import {topSegments} from '../src/salience/rank.js';

describe('shared ranking cases', () => {
  for (const c of cases.cases) {
    test(c.id, () => {
      const values = Float64Array.from(c.values as Array<number | null>, (v) => (v === null ? NaN : v));
      expect(topSegments(values, c.k, c.signed, new Set(c.skip)).map((r) => [r.seg, r.value])).toEqual(c.top);
    });
  }
});
