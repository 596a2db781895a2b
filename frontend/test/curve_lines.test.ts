// Method lines of the faithfulness charts: a line drawn later never hides one drawn before (issue 45).
import {describe, expect, it} from 'vitest';

import {methodStrokeWidth} from '../src/explain/results.js';

describe('methodStrokeWidth', () => {
  it('narrows each later line, so coinciding curves all show', () => {
    const widths = [0, 1, 2].map((i) => methodStrokeWidth(i, 3));
    expect(widths).toEqual([5, 3.5, 2]);
    expect(methodStrokeWidth(0, 1)).toBe(2);
    // Many lines share 6 px above the last: still strictly narrower, never wider than 8 px.
    const many = Array.from({length: 13}, (_, i) => methodStrokeWidth(i, 13));
    expect(many[0]).toBe(8);
    many.slice(1).forEach((w, k) => expect(w).toBeLessThan(many[k]!));
  });
});
