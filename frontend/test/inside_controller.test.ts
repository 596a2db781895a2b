/**
 * The "Inside the model" controller (src/inside/controller.ts) against a stand-in server: the
 * trace waits until the module is shown; the intervention run sends its list, polls the results
 * so far, ends with the result, and cancel (by the user or by another token) stops it here and on
 * the server; the search asks again while the value index is built.
 */
import {afterEach, beforeEach, describe, expect, it, vi} from 'vitest';

import {InsideController, RUN_POLL_MS, SHOWN_POLL_MS} from '../src/inside/controller.js';
import {SEARCH_POLL_MS} from '../src/inside/search.js';
import type {PartialIntervention, TracePayload} from '../src/inside/payload.js';
import type {SharedTarget} from '../src/shared/target_store.js';
import {fakeJobServer, type Call} from './support/fake_server.js';

const MODELS = {_m_inside_trace: {}, _m_inside_intervene: {}, _m_inside_search: {}};

const target = (datapointId = 'dp1', t0 = 0): SharedTarget => ({
  datapointId, input: {prompt: 'q'}, salienceModel: '_m_salience', text: 'q a b', promptEnd: 1,
  tokens: ['q', ' a', ' b'], offsets: [[0, 1], [1, 3], [3, 5]], nPromptTokens: 1, t0, t1: t0 + 1,
  method: 'grad_norm', granularity: 'word',
});

/** A one-layer trace whose target probability is `prob`. */
function trace(prob: number): TracePayload {
  const p = {ids: [5], tokens: [' a'], probs: [prob], target_rank: 0, target_prob: prob};
  return {family: 'llama', ids: [1, 5], position: 1, target_id: 5, target_token: ' a', t: 0, n_targets: 2,
          layers: [{layer: 0, before: p, after: p, max_coef: 1, ffn_norm: 1, sub_updates: []}], output: p, seconds: 0.1};
}

const partial = (prob: number): PartialIntervention => ({
  interventions: [{layer: 0, index: 3, mode: 'off'}], steps: [], before: {trace: trace(0.9)}, after: {trace: trace(prob)},
});

/** A server whose traces answer at once, runs when the test says, and statuses report `job()`. */
function insideServer(job: () => Record<string, unknown> | null = () => null) {
  const server = fakeJobServer(MODELS, 'inside_action', 'inside_intervention', job,
                               (c) => (c.model === '_m_inside_trace' ? [{inside_trace: trace(0.9)}] : null));
  let shown = true;
  const host = {...server.host, isShown: () => shown, isConnected: () => true};
  return {...server, host, show: (on: boolean) => { shown = on; }};
}

/** A controller with the trace of `target()` loaded and one intervention listed. */
async function ready(s: ReturnType<typeof insideServer>) {
  const ctl = new InsideController(s.host);
  ctl.onTarget(target());
  await vi.advanceTimersByTimeAsync(0);
  ctl.add(0, 3, 'off');
  return ctl;
}

beforeEach(() => { vi.useFakeTimers(); });
afterEach(() => { vi.useRealTimers(); });

describe('InsideController', () => {
  it('traces the token once the module is shown, and keeps the trace for the same token', async () => {
    const s = insideServer();
    s.show(false);
    const ctl = new InsideController(s.host);
    ctl.onTarget(target('dp1', 1));
    expect(ctl.status).toBe('waiting');
    expect(ctl.message).toBe('Will trace ␣b when this tab is open.');
    await vi.advanceTimersByTimeAsync(3 * SHOWN_POLL_MS);
    expect(s.calls).toHaveLength(0);
    s.show(true);
    await vi.advanceTimersByTimeAsync(SHOWN_POLL_MS);
    expect(s.calls).toHaveLength(1);
    expect(s.calls[0]).toMatchObject({model: '_m_inside_trace', fields: ['inside_trace']});
    expect(s.calls[0].input.data).toMatchObject({inside_t: 1, prompt: 'q'});
    expect(ctl.status).toBe('ready');
    expect(ctl.trace?.output.target_prob).toBe(0.9);
    ctl.onTarget({...target('dp1', 1), granularity: 'sentence'});  // the same token: no second trace
    expect(ctl.trace).not.toBeNull();
    expect(s.calls).toHaveLength(1);
  });

  it('runs the interventions: the list goes, the results so far show, then the result', async () => {
    let job: Record<string, unknown> | null = null;
    const s = insideServer(() => job);
    const ctl = await ready(s);
    const done = ctl.run();
    expect([ctl.running, ctl.runState]).toEqual([true, 'running']);
    const [run] = s.of('run');
    expect(run.model).toBe('_m_inside_intervene');
    expect(JSON.parse(run.input.data['interventions'] as string)).toEqual([{layer: 0, index: 3, mode: 'off', scope: 'all'}]);
    job = {action: 'run', stage: 'trace', done: 1, total: 1, elapsed_s: 0, cancelled: false, partial: partial(0.2)};
    await vi.advanceTimersByTimeAsync(RUN_POLL_MS);
    expect(ctl.runs.progress?.stage).toBe('trace');
    expect(ctl.shownResult()).toEqual(partial(0.2));
    const result = {interventions: [], before: {trace: trace(0.9)}, after: {trace: trace(0.1)}};
    s.runs[0].resolve([{inside_intervention: result}]);
    await done;
    expect([ctl.running, ctl.runState, ctl.shownResult()]).toEqual([false, 'done', result]);
    expect(ctl.resultIsStale()).toBe(false);
    ctl.add(0, 4, 'on');
    expect(ctl.resultIsStale()).toBe(true);
  });

  it('cancels: the cancel request goes and the results so far stay, marked cancelled', async () => {
    const s = insideServer(() => ({action: 'run', stage: 'generate', done: 2, total: 8, elapsed_s: 1, cancelled: false,
                                   partial: partial(0.3)}));
    const ctl = await ready(s);
    const done = ctl.run();
    await vi.advanceTimersByTimeAsync(RUN_POLL_MS);
    ctl.cancelRun();
    expect(s.of('cancel')).toHaveLength(1);
    expect([ctl.runState, ctl.runNotice]).toEqual(['cancelled', 'Cancelled.']);
    expect(ctl.shownResult()).toEqual(partial(0.3));
    s.runs[0].resolve([{inside_intervention: {cancelled: true, partial: partial(0.4)}}]);
    await done;
    expect(ctl.shownResult()).toEqual(partial(0.3));  // the late answer of a cancelled run is not read
  });

  it('another token cancels the run quietly and forgets its results; a failure shows as one line', async () => {
    const s = insideServer(() => ({action: 'run', stage: 'trace', done: 0, total: 1, elapsed_s: 0, cancelled: false,
                                   partial: partial(0.3)}));
    const ctl = await ready(s);
    void ctl.run();
    await vi.advanceTimersByTimeAsync(RUN_POLL_MS);
    ctl.onTarget(target('dp1', 1));
    expect(s.of('cancel')).toHaveLength(1);
    expect([ctl.runState, ctl.runNotice, ctl.shownResult()]).toEqual(['idle', '', null]);
    expect(ctl.interventions).toHaveLength(1);  // the same prompt keeps its list
    await vi.advanceTimersByTimeAsync(0);
    const failed = ctl.run();
    s.runs[1].reject(new Error('Uncaught error: layer 9 does not exist. Fix: pick a layer below 1.\n\nDetails: ...'));
    await failed;
    expect([ctl.runState, ctl.runError]).toEqual(['error', 'layer 9 does not exist. Fix: pick a layer below 1.']);
    ctl.onTarget(target('dp2'));
    expect([ctl.runError, ctl.interventions]).toEqual(['', []]);  // another prompt: a fresh list
  });

  it('searches again while the value index is built, and stops once it is ready', async () => {
    const states = ['running', 'running', 'done'];  // the index's build job, in the `detail` status form
    const s = insideServer();
    const searches: Call[] = [];
    s.host.getPreds = async (inputs, model) => {
      searches.push({input: inputs[0], model, fields: []});
      return [{inside_search: {hits: [], tokens: [], index: {state: states[searches.length - 1]}}}];
    };
    const ctl = new InsideController(s.host);
    ctl.setQuery(' Paris ');
    await ctl.runSearch();
    expect(searches[0].model).toBe('_m_inside_search');  // the group from the models, before any target
    expect(searches[0].input.data).toMatchObject({query: 'Paris', limit: 30, ranking: 'top_k'});
    await vi.advanceTimersByTimeAsync(5 * SEARCH_POLL_MS);
    expect(searches).toHaveLength(3);
    expect(ctl.search?.index.state).toBe('done');
  });
});
