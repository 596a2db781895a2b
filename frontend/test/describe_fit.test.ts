/**
 * describeFit (src/salience/segment_payload.ts): the surrogate's held-out R² as the server measures it,
 * the mean over random splits with its spread, so that a fit that crosses the warning line on some
 * splits does not read as one settled figure.
 */
import {describe, expect, it} from 'vitest';

import {describeFit, type SegmentPayload} from '../src/salience/segment_payload.js';

function withQuality(quality: Record<string, number | null>): SegmentPayload {
  return {
    method: 'ablation_surrogate', granularity: 'sentence', pattern: null, removal: 'filler', span: [0, 1], count: 32,
    values: [1], spans: [[0, 3]], segment_index: [0], token_values: [1], original_logprob: -1, quality, warning: '',
    stats: {rows: 32, tokens: 3, tokens_computed: 3, prefix_reuse: true, saved: 0},
  } as SegmentPayload;
}

describe('describeFit', () => {
  it('gives the mean R² and the spread over random splits', () => {
    expect(describeFit(withQuality({r2: 0.52, r2_low: 0.37, r2_high: 0.66, correlation: 0.8})))
        .toBe('held-out R² 0.52 (0.37–0.66 over random splits)');
  });
  it('gives the mean alone when every split agrees, and nothing without a fit', () => {
    expect(describeFit(withQuality({r2: 1, r2_low: 1, r2_high: 1}))).toBe('held-out R² 1.00');
    expect(describeFit(withQuality({}))).toBe('');
    expect(describeFit(withQuality({r2: null, r2_low: null, r2_high: null}))).toBe('held-out R² not computable');
  });
});
