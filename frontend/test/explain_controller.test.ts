/**
 * The "Test this explanation" controller (src/explain/controller.ts) against a stand-in server:
 * the requests a test sends (its action, settings and span), its progress polled while it runs
 * (only its own action's), the result kept per key, settings refused before any request, cancel
 * (the cancel request, a late answer not kept) and another datapoint stopping the test.
 */
import {afterEach, beforeEach, describe, expect, it, vi} from 'vitest';

import {ExplainController, POLL_MS} from '../src/explain/controller.js';
import {faithfulnessStore} from '../src/shared/faithfulness_store.js';
import type {SharedTarget} from '../src/shared/target_store.js';
import registry from './fixtures/method_registry.json';
import {fakeJobServer, fakeServer} from './support/fake_server.js';

const MODELS = {
  _m_salience: {spec: {output: {salience: {__name__: 'LitType'}, method_registry: {__name__: 'LitType', default: registry}}}},
  _m_explain: {spec: {output: {explain: {}}}},
};

function target(datapointId = 'dp1', t0 = 1): SharedTarget {
  const tokens = ['Hi', ' there', '.', ' Yes'];
  return {datapointId, input: {prompt: 'Hi there.'}, salienceModel: '_m_salience', text: 'Hi there. Yes', promptEnd: 9,
          tokens, offsets: [[0, 2], [2, 8], [8, 9], [9, 13]], nPromptTokens: 3, t0: t0 - 1, t1: t0,
          method: 'grad_norm', granularity: 'regex'};
}

/** A server whose explain runs answer when the test says; status reads report `job`. */
const explainServer = (job: () => Record<string, unknown> | null) => fakeJobServer(MODELS, 'explain_action', 'explain', job);

beforeEach(() => { vi.useFakeTimers(); });
afterEach(() => { vi.useRealTimers(); });

describe('ExplainController', () => {
  it('runs a test with its settings, shows its own progress and keeps the result under its key', async () => {
    let job: Record<string, unknown> | null = {action: 'curves', stage: 'scoring', done: 1, total: 4, elapsed_s: 0};
    const s = explainServer(() => job);
    const ctl = new ExplainController(s.host);
    ctl.onTarget(target());
    ctl.set({steps: 5, methods: ['grad_x_input']});
    ctl.setTab('flips');
    const done = ctl.run('flips');
    expect(ctl.running).toBe('flips');
    expect(s.calls).toHaveLength(1);
    expect(s.calls[0].model).toBe('_m_explain');
    expect(s.calls[0].fields).toEqual(['explain']);
    // flips: the span, no granularity or curve settings; the regex granularity is sent as words for the others.
    expect(s.calls[0].input.data).toMatchObject({explain_action: 'flips', target_span: '0:1', prompt: 'Hi there.'});
    expect(s.calls[0].input.data['steps']).toBeUndefined();
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.jobs.progress).toBeNull();  // the server still reports a stopping test of another kind
    job = {action: 'flips', stage: 'verifying', done: 2, total: 8, elapsed_s: 1};
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.jobs.progress).toEqual(job);
    expect(s.of('status')[1].input.data['target_span']).toBeUndefined();  // a status read carries no span
    const flips = {flips: [], action: 'flips'};
    s.runs[0].resolve([{explain: flips}]);
    await done;
    expect(ctl.running).toBeNull();
    expect(ctl.result()).toBe(flips);
    ctl.setTab('curves');
    expect(ctl.result()).toBeUndefined();
    const curves = ctl.run('curves');
    expect(s.of('curves')[0].input.data).toMatchObject({steps: 5, removal: 'filler', methods: 'grad_x_input',
                                                        granularity: 'word'});
    s.runs[1].resolve([{explain: {n_removed: [0], curves: {}}}]);  // malformed: the check names the field
    await curves;
    expect(ctl.error).toBe('Malformed explain payload: "n_removed" needs at least two points');
    ctl.dispose();
  });

  it('refuses settings the server would refuse, before any request', async () => {
    const s = explainServer(() => null);
    const ctl = new ExplainController(s.host);
    ctl.onTarget(target());
    await ctl.run('contrastive');
    expect(ctl.error).toBe('Type a foil: the alternative response to contrast with.');
    ctl.set({igCap: 100000});
    await ctl.run('ig_auto');
    expect(ctl.error).toBe(`Most steps: use a whole number from 1 to ${registry.find((m) => m.name === 'integrated_gradients')!.max_count}.`);
    ctl.setTab('curves');
    expect(ctl.error).toBe('');
    const other = new ExplainController(fakeServer({}, () => []).host);
    other.onTarget(target());
    await other.run('flips');
    expect(other.error).toContain('The server has no "_m_explain" model');
    expect(s.calls).toHaveLength(0);
  });

  it('cancels: the cancel request goes, the notice shows and a late answer is not kept', async () => {
    const s = explainServer(() => null);
    const ctl = new ExplainController(s.host);
    ctl.onTarget(target());
    const done = ctl.run('flips');
    ctl.cancel();
    expect(ctl.running).toBeNull();
    expect(ctl.notice).toBe('Cancelled.');
    expect(s.of('cancel')).toHaveLength(1);
    s.runs[0].resolve([{explain: {flips: []}}]);
    await done;
    expect(ctl.result()).toBeUndefined();
    // A test the server cancelled itself (a newer job, the tab closed) says so too.
    const again = ctl.run('flips');
    s.runs[1].resolve([{explain: {cancelled: true, reason: 'a newer job replaced it'}}]);
    await again;
    expect([ctl.notice, ctl.result()]).toEqual(['Cancelled.', undefined]);
  });

  it('stops the test and forgets the results when another datapoint is selected', async () => {
    const s = explainServer(() => null);
    const ctl = new ExplainController(s.host);
    ctl.onTarget(target());
    const first = ctl.run('flips');
    s.runs[0].resolve([{explain: {flips: []}}]);
    await first;
    ctl.onTarget(target('dp1', 2));  // another span of the same prompt: the result stays
    void ctl.run('flips');
    ctl.onTarget(target('dp2'));
    expect(ctl.running).toBeNull();
    expect(ctl.notice).toBe('');  // cleared with the results
    expect(s.of('cancel')).toHaveLength(1);
    expect(ctl.results.size).toBe(0);
  });

  it('shows a server failure as one line', async () => {
    const s = explainServer(() => null);
    const ctl = new ExplainController(s.host);
    ctl.onTarget(target());
    const done = ctl.run('flips');
    s.runs[0].reject(new Error('Uncaught error: the span is empty. Fix: select a token.\n\nDetails: Traceback'));
    await done;
    expect(ctl.error).toBe('the span is empty. Fix: select a token.');
    expect(ctl.running).toBeNull();
  });

  it('shows the coarse curves from the status, then the full result replaces them; a cancel keeps them, marked', async () => {
    const curves = (steps: number, nRandom: number, preliminary: boolean, methods = 'grad_norm,grad_x_input') => ({
      span: [0, 1], granularity: 'word', removal: 'filler', methods: methods.split(','), n_random: nRandom,
      n_removed: Array.from({length: steps + 1}, (_, k) => k), curves: {random: {}}, preliminary, steps,
      ...(preliminary ? {refining: {steps: 10, n_random: 10, upper_bound: true}} : {}),
    });
    let job: Record<string, unknown> | null = {action: 'curves', stage: 'coarse_curves', done: 3, total: 9, elapsed_s: 1};
    const s = explainServer(() => job);
    const ctl = new ExplainController(s.host);
    ctl.onTarget(target());
    const run = ctl.run('curves');
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.result()).toBeUndefined();
    // A coarse result of other settings (the job this run replaced) is not shown.
    job = {action: 'curves', stage: 'curves', done: 1, total: 9, elapsed_s: 2, partial: curves(4, 3, true, 'grad_norm')};
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.result()).toBeUndefined();
    const coarse = curves(4, 3, true);
    job = {...job, partial: coarse};
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.result()).toEqual(coarse);
    expect(ctl.preliminary?.value.preliminary).toBe(true);
    const tested = {datapointId: 'dp1', text: 'Hi there. Yes', t0: 0, t1: 1};
    expect(faithfulnessStore.of('_m_salience', tested)).toBeNull();  // "Share this view" gets no coarse result
    const full = curves(10, 10, false);
    s.runs[0].resolve([{explain: full}]);
    await run;
    expect(ctl.result()).toEqual(full);
    expect(ctl.preliminary).toBeNull();
    expect(faithfulnessStore.of('_m_salience', tested)).toBe(ctl.result());  // the finished one, for its target
    // Run again with other steps, cancel while refining: the coarse result stays (the view marks it stopped).
    ctl.set({steps: 10, removal: 'delete'});
    job = {action: 'curves', stage: 'curves', done: 1, total: 9, elapsed_s: 2, partial: {...coarse, removal: 'delete'}};
    const again = ctl.run('curves');
    expect(ctl.result()).toBeUndefined();
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.result()).toMatchObject({preliminary: true, removal: 'delete'});
    ctl.cancel();
    s.runs[1].resolve([{explain: {cancelled: true}}]);
    await again;
    expect(ctl.running).toBeNull();
    expect(ctl.result()).toMatchObject({preliminary: true, removal: 'delete'});
    expect(faithfulnessStore.of('_m_salience', tested)).toEqual(full);  // a cancelled run publishes nothing
    ctl.onTarget(target('dp2'));  // another prompt forgets it
    expect(ctl.preliminary).toBeNull();
    ctl.dispose();
  });
});
