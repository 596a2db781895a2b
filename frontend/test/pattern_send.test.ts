/**
 * A regex the server would refuse (its published bounds, /get_info "requestLimits".pattern) is not sent:
 * the salience controller says why instead (issue 43: `a{99999999}` grew a server to 9.6 GB). Against a
 * stand-in for LIT's services, with the bounds of tests/data/pattern_bounds_cases.json (the server's).
 */
import {afterEach, beforeEach, describe, expect, it, vi} from 'vitest';

import cases from '../../tests/data/pattern_bounds_cases.json';
import registry from './fixtures/method_registry.json';
import {SalienceController} from '../src/salience/controller.js';
import type {PatternBounds} from '../src/shared/aggregate/index.js';
import type {IndexedInputLike} from '../src/shared/request.js';
import {fakeSalienceHost} from './support/salience_host.js';

const BOUNDS = (cases as unknown as {bounds: PatternBounds}).bounds;

function fakeHost() {
  return fakeSalienceHost(registry, () => [{salience: {detail: {kind: 'seg', state: 'running', done: 0, total: 2,
                                                                elapsed_s: 0, eta_s: null, error: ''}}}],
                          {patternBounds: () => BOUNDS});
}

const dp = (): IndexedInputLike => ({id: 'dp1', data: {_id: 'dp1', prompt: 'The cat sat. It was red.', target: 'Red cat.'},
                                     meta: {}});

async function measuring(pattern: string) {
  const {host, calls} = fakeHost();
  const ctl = new SalienceController(host);
  ctl.registry();
  ctl.setSegmentation('regex', pattern, 2);
  await ctl.select(dp());
  ctl.setMethod('leave_one_out');
  await vi.advanceTimersByTimeAsync(0);
  return {ctl, segmentCalls: calls.filter((c) => c['detail'] === 'segments')};
}

beforeEach(() => { vi.useFakeTimers(); });
afterEach(() => { vi.useRealTimers(); });

describe('a pattern the server would refuse', () => {
  for (const [pattern, why] of [['a{99999999}', 'repeat count 99999999'], ['(a{1000}){1000}', 'longer than 10,000'],
                                ['('.repeat(40) + 'a' + ')'.repeat(40), 'nest deeper than 32']]) {
    it(`is not sent, and the module says why: ${pattern.slice(0, 20)}`, async () => {
      const {ctl, segmentCalls} = await measuring(pattern);
      expect(segmentCalls).toHaveLength(0);
      expect(ctl.segmentError).toContain(why);
      expect(ctl.segmentError).toContain('Fix');
      expect(ctl.precision()).toBe('not measured per regex match: see the error above');  // not "measuring…"
      ctl.dispose();
    });
  }

  it('within the bounds, the segments are measured', async () => {
    const {ctl, segmentCalls} = await measuring('[^.]+');
    expect(segmentCalls).toHaveLength(1);
    expect(segmentCalls[0]).toMatchObject({granularity: 'regex', pattern: '[^.]+', segment_method: 'leave_one_out'});
    expect(ctl.segmentError).toBe('');
    ctl.dispose();
  });
});
