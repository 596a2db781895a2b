import {describe, expect, it} from 'vitest';

import {FORCED_TARGET_LABEL, isForcedTarget} from '../src/shared/forced_target.js';

describe('a forced target (shared/forced_target.ts)', () => {
  it('is a datapoint with its own non-empty target text', () => {
    expect(isForcedTarget({prompt: 'Review: great.', target: ' Positive'})).toBe(true);
    expect(isForcedTarget({prompt: 'What is the capital of France?', target: ''})).toBe(false);
    expect(isForcedTarget({prompt: 'What is the capital of France?'})).toBe(false);
    expect(isForcedTarget(null)).toBe(false);
    expect(isForcedTarget({target: 3})).toBe(false);  // not a text
  });
  it('is labelled as not the model\u2019s own answer', () => {
    expect(FORCED_TARGET_LABEL).toBe('Forced target — not the model\u2019s own answer');
  });
});
