/**
 * The completeness verdicts the page reads (salience/values.ts ServerValues.verdict): the server's check of each span
 * (lit_app/wrappers/payloads.py completeness_payload: the whole response, each token once the matrix exists, each span
 * it computed), kept per method and count as the answers carrying them arrive; the page derives none. A span the
 * server did not check is hidden like a rejected one; a method without a published tolerance is not checked.
 */
import {describe, expect, it} from 'vitest';
import registry from './fixtures/method_registry.json';
import {METHOD_REGISTRY_FIELD, registryOf} from '../src/shared/methods.js';
import type {SpanCompleteness} from '../src/salience/payload.js';
import {ServerValues} from '../src/salience/values.js';

const reg = registryOf({spec: {output: {[METHOD_REGISTRY_FIELD]: {default: registry}}}})!;
const IG = 'integrated_gradients';
// The simple question's default-model case: error -44.26 against a change of -1.0 (4,426 %).
const failed: SpanCompleteness = {error: -44.26, change: -1.0, relative: 44.26, rejected: true};
const held: SpanCompleteness = {error: 0.001, change: 1.0, relative: 0.001, rejected: false};

describe('ServerValues.verdict', () => {
  it("reads the server's check of the span, for the values of that count", () => {
    const v = new ServerValues();
    v.absorbChecks(reg, {[IG]: {tolerance: 0.05, spans: {'0:7': failed, '2:3': held}}}, {method: IG, count: 16});
    expect(v.verdict(IG, `${IG}#16`, {t0: 0, t1: 7})).toEqual({tolerance: 0.05, check: failed, rejected: true});
    expect(v.verdict(IG, `${IG}#16`, {t0: 2, t1: 3})).toEqual({tolerance: 0.05, check: held, rejected: false});
    // Another count's values were not checked by this answer: hidden, with no numbers of their own.
    expect(v.verdict(IG, `${IG}#32`, {t0: 0, t1: 7})).toEqual({tolerance: 0.05, check: null, rejected: true});
  });

  it('hides a span the server did not check (several tokens read from the matrix)', () => {
    const v = new ServerValues();
    v.absorbChecks(reg, {[IG]: {tolerance: 0.05, spans: {'0:1': held, '1:2': held}}}, {method: IG, count: 4});
    expect(v.verdict(IG, `${IG}#4`, {t0: 0, t1: 2})).toEqual({tolerance: 0.05, check: null, rejected: true});
  });

  it('checks nothing for a method without a published tolerance (or from an older server), and forgets on clear', () => {
    const v = new ServerValues();
    expect(v.verdict(IG, `${IG}#16`, {t0: 0, t1: 7})).toBeNull();
    v.absorbChecks(reg, {[IG]: {tolerance: 0.05, spans: {'0:7': failed}}}, {method: IG, count: 16});
    expect(v.verdict('grad_x_input', 'grad_x_input', {t0: 0, t1: 7})).toBeNull();
    v.clear();
    expect(v.verdict(IG, `${IG}#16`, {t0: 0, t1: 7})).toBeNull();
  });

  it("ignores an extra method's checks in an answer that did not ask for it (no count to file them under)", () => {
    const v = new ServerValues();
    v.absorbChecks(reg, {[IG]: {tolerance: 0.05, spans: {'0:7': held}}}, null);
    expect(v.verdict(IG, `${IG}#16`, {t0: 0, t1: 7})).toEqual({tolerance: 0.05, check: null, rejected: true});
  });
});
