// The progress line's words for a running IG / SmoothGrad span or per-token job (issue 35 point 4):
// "finishing…" once every unit is done, never "about 1 s left" without an estimate.
import {describe, expect, it} from 'vitest';

import {segmentProgress} from '../src/salience/coarse.js';
import {describeDetail, describeProgress, type DetailStatus} from '../src/salience/payload.js';

function running(done: number, total: number, eta_s: number | null): DetailStatus {
  return {kind: 'span', state: 'running', done, total, elapsed_s: 10, eta_s, error: ''};
}

describe('progress text', () => {
  it.each([
    [running(16, 32, 24), ' 50 % · about 24 s left'],
    [running(32, 32, null), ' 100 % · finishing…'],
    [running(32, 32, 0), ' 100 % · finishing…'],  // an older server's 0 s at 100 %
    [running(20, 32, null), ' 62 %'],  // the estimate ran out: no time is claimed
    [running(1, 21, 600), ' 4 % · about 10 min left'],
    [running(0, 0, null), ''],
  ])('%j reads %j', (d, text) => {
    expect(describeProgress(d)).toBe(text);
  });

  it.each([
    [{low: 40, high: 70}, ' 25 % · about 40–70 s left'],
    [{low: 24, high: 24.4}, ' 25 % · about 24 s left'],
    [{low: 29, high: 240}, ' 25 % · about 1–4 min left'],
    [{low: 0.2, high: 0.4}, ' 25 % · about 1 s left'],  // the last unit, nearly done
  ])('the range %j reads %j', ({low, high}, text) => {
    expect(describeProgress({...running(10, 40, (low + high) / 2), eta_low_s: low, eta_high_s: high})).toBe(text);
  });

  it('a stalled forward with units outstanding never reads "about 1 s left" (issue 43)', () => {
    // The server's range while the 11th of 40 forwards takes 120 s (tests/unit/test_progress_estimate.py).
    const stalled = {...running(10, 40, 1), eta_low_s: 29, eta_high_s: 6990};
    expect(describeProgress(stalled)).toBe(' 25 % · about 1–117 min left');
    expect(describeProgress(stalled)).not.toContain('about 1 s left');
  });

  it('a job paused behind a test the user started says so, with no time left', () => {
    const paused = {...running(10, 40, null), kind: 'grad', waiting: true, waiting_for: 'own'};
    expect(describeProgress(paused)).toBe(' 25 % · paused: your own work goes first');
    expect(describeDetail(paused)).toBe('per-token detail loading 25% (paused: your own work goes first)');
  });

  it('a job paused behind another client\'s click says whose, not "your own work" (issue 43, session 34)', () => {
    const paused = {...running(10, 40, null), waiting: true, waiting_for: 'other'};
    expect(describeProgress(paused)).toBe(' 25 % · paused: another user\'s work goes first');
    expect(describeDetail({...paused, kind: 'ig16'})).toBe(
        'per-token detail loading 25% (paused: another user\'s work goes first)');
    // A server that does not say whose (an older one): no claim of whose work it is.
    expect(describeProgress({...paused, waiting_for: undefined})).toBe(' 25 % · paused: waiting for the model');
  });

  it('a job taking turns with another client\'s equal job says so with its estimate at every poll (issue 43)', () => {
    // The server's status in the job's own turns and in the equal's alike (tests/unit/test_equal_wait_status.py);
    // session 36 sent "waiting" in the equal's turns only: "paused: …" and the estimate alternated poll by poll.
    const sharing = {...running(10, 40, 55), eta_low_s: 40, eta_high_s: 70, sharing: 'other'};
    expect(describeProgress(sharing)).toBe(' 25 % · sharing the model with another user\'s job · about 40–70 s left');
    expect(describeDetail({...sharing, kind: 'grad'})).toBe(
        'per-token detail loading 25% (sharing the model with another user\'s job · about 40–70 s left)');
    expect(describeProgress({...sharing, sharing: 'own'})).toBe(
        ' 25 % · sharing the model with your other work · about 40–70 s left');
    expect(describeProgress({...running(0, 40, null), sharing: 'other'})).toBe(
        ' 0 % · sharing the model with another user\'s job');  // before the first unit: no estimate claimed
    expect(segmentProgress({...sharing, kind: 'seg'})).toBe(
        ' (11 / 41 forwards · sharing the model with another user\'s job · about 40–70 s left)');
    // Behind a click (a true pause) it still says paused, without an estimate.
    expect(describeProgress({...sharing, waiting: true, waiting_for: 'other'})).toBe(
        ' 25 % · paused: another user\'s work goes first');
  });

  it('the per-token line says finishing at 100 %', () => {
    expect(describeDetail(running(7, 7, null))).toBe('per-token detail loading 100% (finishing…)');
  });
});

describe('a segment job\'s progress', () => {
  it('says it waits for another user\'s work before its first report (session 36: was nothing)', () => {
    const waiting = {...running(0, 0, null), kind: 'seg', waiting: true, waiting_for: 'other'};
    expect(segmentProgress(waiting)).toBe(' (paused: another user\'s work goes first)');
    expect(segmentProgress({...waiting, waiting: false})).toBe('');
    expect(segmentProgress(null)).toBe(' (waiting for the model…)');
    expect(segmentProgress({...running(4, 9, 12), stage: 'refining'})).toBe(' (refining: 5 / 10 forwards · about 12 s left)');
    expect(segmentProgress({...running(4, 9, null), waiting: true, waiting_for: 'own'})).toBe(
        ' (5 / 10 forwards · paused: your own work goes first)');
  });
});
