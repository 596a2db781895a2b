/**
 * The completeness rule (salience/values.ts completenessVerdict): the values on screen are rejected when their
 * relative completeness error — |error| / |log p change|, the change being the values' sum minus the error — is over
 * the tolerance the server published for the method in the payload (`completeness`); no tolerance, no check.
 */
import {describe, expect, it} from 'vitest';
import {completenessVerdict} from '../src/salience/values.js';

const IG = 'integrated_gradients';
const published = {completeness: {[IG]: {tolerance: 0.05, spans: {}}}};

describe('completenessVerdict', () => {
  it('rejects the simple question\'s default-model case: error 4,426 % of the change', () => {
    // The log-p change is -1.0 and the error -44.26: the values sum to -45.26.
    const v = completenessVerdict(published, IG, -44.26, [-40, -5.26])!;
    expect(v.change).toBeCloseTo(-1.0, 12);
    expect(v.relative).toBeCloseTo(44.26, 12);
    expect(v.tolerance).toBe(0.05);
    expect(v.rejected).toBe(true);
  });

  it('accepts values whose error is within the tolerance, and at the tolerance itself', () => {
    expect(completenessVerdict(published, IG, 0.01, [0.5, 0.51])!.rejected).toBe(false);  // 1 %
    const atEdge = completenessVerdict({completeness: {[IG]: {tolerance: 0.25, spans: {}}}}, IG, 0.25, [1.25])!;
    expect(atEdge.relative).toBe(0.25);
    expect(atEdge.rejected).toBe(false);  // over the tolerance is rejected; equal is not
  });

  it('holds the values to the tolerance the payload states (the step search\'s, when it ran)', () => {
    const strict = {completeness: {[IG]: {tolerance: 0.005, spans: {}}}};
    expect(completenessVerdict(strict, IG, 0.01, [1.01])!.rejected).toBe(true);
    expect(completenessVerdict(published, IG, 0.01, [1.01])!.rejected).toBe(false);
  });

  it('ignores non-finite values (excluded markup) in the sum', () => {
    expect(completenessVerdict(published, IG, 0.5, [1, NaN, 0.5])!.change).toBeCloseTo(1.0, 12);
  });

  it('checks nothing for a method the server does not check, an older server, or without the error or values', () => {
    expect(completenessVerdict(published, 'grad_x_input', 1, [2])).toBeNull();
    expect(completenessVerdict({}, IG, 1, [2])).toBeNull();
    expect(completenessVerdict(published, IG, null, [2])).toBeNull();
    expect(completenessVerdict(published, IG, 1, null)).toBeNull();
  });

  it('rejects nothing when there is no change to compare with', () => {
    const v = completenessVerdict(published, IG, 1, [1])!;
    expect(v.relative).toBeNull();
    expect(v.rejected).toBe(false);
  });
});
