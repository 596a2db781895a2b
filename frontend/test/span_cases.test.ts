/**
 * spanSalience (src/salience/spans.ts) on the cases shared with pytest (tests/data/span_cases.json,
 * tests/unit/test_span_cases.py: sequence_salience/result.py span_from_rows): one rule in both languages.
 */
import {describe, expect, test} from 'vitest';

import cases from '../../tests/data/span_cases.json';
import {packedIndex, spanSalience} from '../src/salience/spans.js';

interface SpanCase {
  id: string;
  method: {signed: boolean; linear: boolean};
  matrix: number[][];
  gram: number[][][] | null;
  span: number[];  // [t0, t1]
  expected: number[] | null;
}

/** [N][T][T] -> the payload's [N][T(T+1)/2] upper-triangular rows. */
function pack(gram: number[][][], T: number): number[][] {
  return gram.map((g) => {
    const row = new Array<number>((T * (T + 1)) / 2);
    for (let j = 0; j < T; j++) for (let k = j; k < T; k++) row[packedIndex(j, k, T)] = g[j][k];
    return row;
  });
}

describe('shared span cases', () => {
  for (const c of (cases as unknown as {cases: SpanCase[]}).cases) {
    test(c.id, () => {
      const T = c.matrix.length;
      const m = {signed: c.method.signed, matrix: c.matrix, gram_packed: c.gram === null ? null : pack(c.gram, T)};
      const got = spanSalience(m, {t0: c.span[0], t1: c.span[1]}, c.matrix[0].length, c.method.linear);
      if (c.expected === null) {
        expect(got).toBeNull();
      } else {
        expect(got).not.toBeNull();
        expect(got!.length).toBe(c.expected.length);
        c.expected.forEach((v, i) => expect(Math.abs(got![i] - v)).toBeLessThanOrEqual(1e-9));
      }
    });
  }
});
