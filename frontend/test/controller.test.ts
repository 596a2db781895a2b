/**
 * The salience module's request state machine (src/salience/controller.ts) against a stand-in
 * for LIT's services: which requests it sends for a selection, a span, a method; what it keeps
 * from the answers; that a newer selection wins over an older answer; progressive detail by
 * polling; errors shown as one line. Expected values come from the fixture's own matrices.
 */
import {afterEach, beforeEach, describe, expect, it, vi} from 'vitest';

import registry from './fixtures/method_registry.json';
import fixture from './fixtures/small_payload.json';
import {SalienceController} from '../src/salience/controller.js';
import {POLL_MS, type SalienceHost} from '../src/salience/page.js';
import {STREAM_FIRST_MS, STREAM_MS, streamAdvanced, streamDelay} from '../src/salience/stream.js';
import type {StreamStatus} from '../src/salience/stream.js';
import type {SaliencePayload} from '../src/salience/payload.js';
import type {IndexedInputLike} from '../src/shared/request.js';
import {salienceModels} from './support/fake_server.js';

interface Call {
  input: IndexedInputLike;
  model: string;
  fields: string[];
}

type Answer = (c: Call) => Promise<Array<Record<string, unknown>>> | Array<Record<string, unknown>>;

/** A host whose getPreds records each call and answers with `answer`. */
function fakeHost(answer: Answer) {
  const calls: Call[] = [];
  let changes = 0;
  const host: SalienceHost = {
    modelName: () => 'm',
    models: () => salienceModels(registry),
    getPreds: async (inputs, model, fields) => {
      const c = {input: inputs[0], model, fields};
      calls.push(c);
      return answer(c);
    },
    loadLatest: (_key, promise) => promise,
    changed: () => { changes++; },
  };
  return {host, calls, changes: () => changes};
}

const payload = (): SaliencePayload => structuredClone(fixture) as unknown as SaliencePayload;
/** A datapoint with a typed target (no streaming of a generated response). */
const dp = (id = 'dp1'): IndexedInputLike => ({id, data: {_id: id, prompt: 'The cat sat.', target: 'Red cat.'}, meta: {}});
const T = fixture.tokens.length - fixture.n_prompt_tokens;  // 3
const N = fixture.tokens.length;

/** Sum of the rows t0..t1-1 of a [T][N] matrix. */
function rowSum(matrix: number[][], t0: number, t1: number): number[] {
  return matrix[0].map((_, i) => matrix.slice(t0, t1).reduce((a, row) => a + row[i], 0));
}

beforeEach(() => { vi.useFakeTimers(); });
afterEach(() => { vi.useRealTimers(); });

describe('SalienceController', () => {
  it('asks the hidden salience model for the first highlight and shows the whole response', async () => {
    const {host, calls, changes} = fakeHost(() => [{salience: payload()}]);
    const ctl = new SalienceController(host);
    ctl.markAction('warm-up');
    await ctl.select(dp());
    expect(calls).toHaveLength(1);
    expect(calls[0].model).toBe('_m_salience');
    expect(calls[0].fields).toEqual(['salience', 'response', 'span_salience']);
    expect(calls[0].input.data).toMatchObject({detail: 'span', ig_steps: 0, smooth_grad_samples: 0, _id: 'dp1~quick0'});
    expect(ctl.status).toBe('ready');
    expect(ctl.span).toEqual({t0: 0, t1: T});
    expect(ctl.tokenValues()).toHaveLength(N);  // grad_norm of the whole response, from the Gram matrix
    ctl.setMethod('grad_x_input');
    const gxi = Array.from(ctl.tokenValues()!);
    rowSum(fixture.methods.grad_x_input.matrix, 0, T).forEach((v, i) => expect(gxi[i]).toBeCloseTo(v, 12));
    expect(changes()).toBeGreaterThan(0);
    expect(ctl.finishedAction()?.name).toBe('method');
    expect(ctl.finishedAction()).toBeNull();
    // A closing page stops its jobs on the salience model it asked (src/salience/page_exit.ts).
    expect(ctl.exitRequest()).toEqual({model: '_m_salience', input: {id: 'page-closed', meta: {added: true},
                                                                   data: {detail: 'page_closed', _id: 'page-closed'}}});
    ctl.dispose();
  });

  it('reads the methods from the spec: the first is shown, extra methods start at their default counts', () => {
    const {host} = fakeHost(() => []);
    const ctl = new SalienceController(host);
    expect(ctl.exitRequest()).toBeNull();  // nothing asked of the server yet: nothing to stop
    expect(ctl.registry()?.methods.map((m) => m.name)).toEqual(registry.map((m) => m.name));
    expect(ctl.method).toBe(registry[0].name);
    expect(ctl.counts).toEqual({integrated_gradients: 16, smooth_grad: 8});
    expect(ctl.extra()).toBeNull();
    ctl.setMethod('smooth_grad');
    expect(ctl.extra()).toEqual({method: 'smooth_grad', count: 8});
  });

  it('says so, before any request, when the server publishes no method registry or no salience model', async () => {
    const cases: Array<[ReturnType<SalienceHost['models']>, string]> = [
      [{m: {spec: {output: {response: {}}}}, _m_salience: {spec: {output: {salience: {__name__: 'LitType'}}}}},
       '"_m_salience" publishes no "method_registry" in its output spec'],
      [{m: {spec: {output: {response: {}}}}}, 'Model "m" has no "salience" output, nor does "_m_salience"'],
    ];
    for (const [models, message] of cases) {
      const {host, calls} = fakeHost(() => []);
      host.models = () => models;
      const ctl = new SalienceController(host);
      await ctl.select(dp());
      expect(calls).toHaveLength(0);
      expect(ctl.status).toBe('error');
      expect(ctl.message).toContain(message);
    }
  });

  it('lets a newer selection win over an older answer', async () => {
    const pending: Array<(v: Array<Record<string, unknown>>) => void> = [];
    const {host} = fakeHost(() => new Promise((resolve) => pending.push(resolve)));
    const ctl = new SalienceController(host);
    const first = ctl.select(dp('old'));
    const second = ctl.select(dp('new'));
    const newer = payload();
    newer.target_logprobs = [-1, -2, -3];
    pending[1]([{salience: newer}]);
    await second;
    pending[0]([{salience: payload()}]);
    await first;
    expect(ctl.input?.id).toBe('new');
    expect(ctl.payload?.target_logprobs).toEqual([-1, -2, -3]);
    ctl.dispose();
  });

  it('shows a server failure as its first line and ends the timed action', async () => {
    const {host} = fakeHost(() => {
      throw new Error("Uncaught error: prompt + target is 9,311 tokens; this model's context is 8,192. Fix: shorten it." +
                      '\n\nDetails: Traceback ...');
    });
    const ctl = new SalienceController(host);
    await ctl.select(dp());
    expect(ctl.status).toBe('error');
    expect(ctl.message).toBe("prompt + target is 9,311 tokens; this model's context is 8,192. Fix: shorten it.");
    expect(ctl.finishedAction()).toBeNull();
  });

  it('asks the server for a grad_norm span the payload cannot give, and keeps the answer', async () => {
    const served = Array.from({length: N}, (_, i) => i / 10);
    const {host, calls} = fakeHost((c) => {
      if (c.input.data['target_span'] === undefined) {
        const p = payload();
        p.methods.grad_norm!.gram_packed = null;  // no Gram matrix: a span of 2 tokens needs the server
        p.spans = {[`0:${T}`]: {grad_norm: served.map(() => 1)}};  // the whole response, computed directly
        return [{salience: p}];
      }
      return [{span_salience: {grad_norm: served, grad_x_input: served.map((v) => -v)}, salience: {}}];
    });
    const ctl = new SalienceController(host);
    await ctl.select(dp());
    expect(ctl.setSpan({t0: 1, t1: 3})).toBe(true);
    expect(ctl.side?.kind).toBe('loading');
    expect(ctl.tokenValues()).toBeNull();
    await vi.runAllTimersAsync();
    expect(calls).toHaveLength(2);
    expect(calls[1].input.data).toMatchObject({detail: 'span', target_span: '1:3'});
    expect(calls[1].fields).toEqual(['span_salience', 'salience']);
    expect(ctl.side).toBeNull();
    expect(Array.from(ctl.tokenValues()!)).toEqual(served);
    expect(ctl.setSpan({t0: 1, t1: 3})).toBe(false);
    // Back to the same span later: no second request.
    ctl.setSpan({t0: 0, t1: 1});
    ctl.setSpan({t0: 1, t1: 3});
    await vi.runAllTimersAsync();
    expect(calls).toHaveLength(2);
    ctl.dispose();
  });

  it('computes an extra method per span at its count, and a changed count asks again', async () => {
    const sg = Array.from({length: N}, (_, i) => i);
    const {host, calls} = fakeHost((c) => {
      if (c.input.data['target_span'] === undefined) return [{salience: payload()}];
      const samples = c.input.data['smooth_grad_samples'] as number;
      return [{span_salience: {smooth_grad: sg.map((v) => v * samples)}, salience: {}}];
    });
    const ctl = new SalienceController(host);
    await ctl.select(dp());
    ctl.setMethod('smooth_grad');
    await vi.runAllTimersAsync();
    expect(calls[1].input.data).toMatchObject({target_span: `0:${T}`, smooth_grad_samples: 8, ig_steps: 0});
    expect(Array.from(ctl.tokenValues()!)).toEqual(sg.map((v) => v * 8));
    expect(ctl.precision()).toContain('per-token SmoothGrad off');
    ctl.setCount('smooth_grad', 3);
    await vi.runAllTimersAsync();
    expect(calls[2].input.data).toMatchObject({smooth_grad_samples: 3});
    expect(Array.from(ctl.tokenValues()!)).toEqual(sg.map((v) => v * 3));
    ctl.dispose();
  });

  it('refuses a count outside the allowed range in words, sends nothing, and keeps the last count (issue 35)', async () => {
    const {host, calls} = fakeHost((c) => {
      if (c.input.data['target_span'] === undefined) return [{salience: payload()}];
      return [{span_salience: {integrated_gradients: Array(N).fill(c.input.data['ig_steps'])}, salience: {}}];
    });
    const ctl = new SalienceController(host);
    await ctl.select(dp());
    ctl.setMethod('integrated_gradients');
    await vi.runAllTimersAsync();
    const sent = calls.length;
    for (const typed of ['0', '300', '100000']) {
      ctl.enterCount('integrated_gradients', typed);
      await vi.runAllTimersAsync();
      expect(ctl.countErrors['integrated_gradients']).toBe(
          `IG steps must be a whole number from 1 to 256, not ${typed}; still using 16.`);
    }
    expect(calls.length).toBe(sent);
    expect(ctl.counts['integrated_gradients']).toBe(16);
    ctl.enterCount('integrated_gradients', '4');
    await vi.runAllTimersAsync();
    expect(ctl.countErrors['integrated_gradients']).toBeUndefined();
    expect(calls[calls.length - 1].input.data).toMatchObject({ig_steps: 4});
    expect(Array.from(ctl.tokenValues()!)).toEqual(Array(N).fill(4));
    ctl.dispose();
  });

  it('polls the background matrices and merges them when they are done', async () => {
    const full = payload();
    const {host, calls} = fakeHost((c) => {
      if (c.input.data['detail'] === 'poll') {
        const n = calls.filter((x) => x.input.data['detail'] === 'poll').length;
        if (n === 1) return [{salience: {detail: {kind: 'grad', state: 'running', done: 1, total: 3, elapsed_s: 1, eta_s: 2, error: ''}}}];
        return [{salience: {...full, detail: {kind: 'grad', state: 'done', done: 3, total: 3, elapsed_s: 2, eta_s: 0, error: ''}}}];
      }
      const p = payload();
      for (const m of Object.values(p.methods)) m!.matrix = null;
      p.spans = {[`0:${T}`]: {grad_norm: fixture.methods.grad_norm.matrix[0].map(() => 1)}};
      p.detail = {kind: 'grad', state: 'queued', done: 0, total: 3, elapsed_s: 0, eta_s: null, error: ''};
      return [{salience: p}];
    });
    const ctl = new SalienceController(host);
    await ctl.select(dp());
    expect(ctl.methodPayload()?.matrix).toBeNull();
    expect(Array.from(ctl.tokenValues()!).every((v) => v === 1)).toBe(true);  // the span the server sent
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.detail?.state).toBe('running');
    expect(ctl.precision()).toMatch(/per-token detail loading 33%/);
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.detail?.state).toBe('done');
    expect(ctl.methodPayload()?.matrix).toEqual(fixture.methods.grad_norm.matrix);
    ctl.setSpan({t0: 2, t1: 3});  // one row of the matrix: no request
    expect(Array.from(ctl.tokenValues()!)).toEqual(fixture.methods.grad_norm.matrix[2]);
    await vi.advanceTimersByTimeAsync(5 * POLL_MS);
    expect(calls.filter((c) => c.input.data['detail'] === 'poll')).toHaveLength(2);
    ctl.dispose();
  });

  it('counts seconds while it waits, not while tokens stream (they are the progress)', async () => {
    const stream = (state: string, text: string, tokens: number) =>
      [{salience: {stream: {state, text, tokens, max_new_tokens: 64, stopped_by: ''}}, response: text}];
    let tokens = false;
    const {host, changes} = fakeHost((c) => {
      if (c.input.data['detail'] !== 'stream') return new Promise(() => {});  // the first highlight: pending
      // Before the first token the server answers after its wait (here 900 ms); then one token each time.
      return tokens ? stream('running', 'It', 1) : new Promise((r) => setTimeout(() => r(stream('queued', '', 0)), 900));
    });
    const ctl = new SalienceController(host);
    void ctl.select({id: 'g1', data: {_id: 'g1', prompt: 'When?', target: ''}, meta: {}});
    await vi.advanceTimersByTimeAsync(2000);
    expect(ctl.tokensStreaming()).toBe(false);
    expect(ctl.elapsed).toBe(2);  // waiting for the model: the seconds count, and each one re-renders
    let before = changes();
    await vi.advanceTimersByTimeAsync(1000);
    expect(changes()).toBeGreaterThan(before);
    tokens = true;
    await vi.advanceTimersByTimeAsync(1000);
    expect(ctl.tokensStreaming()).toBe(true);
    before = changes();
    await vi.advanceTimersByTimeAsync(3000);  // the same token in every answer: nothing new to show
    expect(changes()).toBe(before);  // no re-render for the seconds while tokens stream
    ctl.dispose();
  });

  it('streams the response: long polls from the first-highlight request on, then once a second, re-rendering only on news', async () => {
    const stream = (state: string, text: string, tokens: number) =>
      [{salience: {stream: {state, text, tokens, max_new_tokens: 64, stopped_by: ''}}, response: text}];
    // The n-th stream request's answer (the model is slow: a repeated answer brings nothing new).
    const answers = [stream('queued', '', 0), stream('queued', '', 0), stream('running', 'It', 1),
                     stream('running', 'It', 1), stream('running', 'It is', 2)];
    let release: (v: Array<Record<string, unknown>>) => void = () => {};
    const {host, calls} = fakeHost((c) => {
      // The first highlight's progress reads (every wait over a second shows its %: issue 43): nothing counted yet.
      if (c.input.data['detail'] === 'span_progress') {
        return [{salience: {detail: {kind: 'span', state: 'running', done: 0, total: 0, elapsed_s: 1, eta_s: null, error: ''}}}];
      }
      if (c.input.data['detail'] !== 'stream') return new Promise((r) => { release = r; });
      const n = calls.filter((x) => x.input.data['detail'] === 'stream').length;
      return answers[Math.min(n, answers.length) - 1];
    });
    const streamCalls = () => calls.filter((c) => c.input.data['detail'] === 'stream');
    const streams = () => streamCalls().length;
    const ctl = new SalienceController(host);
    const gen: IndexedInputLike = {id: 'g1', data: {_id: 'g1', prompt: 'When does it arrive?', target: ''}, meta: {}};
    const selected = ctl.select(gen);
    await vi.advanceTimersByTimeAsync(0);  // the first ask goes with the first-highlight request, no wait
    expect(streams()).toBe(1);
    expect(streamCalls()[0].input.data['stream_after']).toBe(0);  // nothing shown yet
    const waiting = ctl.streaming;
    expect(waiting).toMatchObject({state: 'queued', text: ''});
    expect(ctl.message).toBe('Waiting for the model…');
    await vi.advanceTimersByTimeAsync(STREAM_FIRST_MS);  // nothing yet (the server waited): ask again at once
    expect(streams()).toBe(2);
    expect(ctl.streaming).toBe(waiting);  // the same answer: not re-rendered
    await vi.advanceTimersByTimeAsync(STREAM_FIRST_MS);  // the first token
    expect(streams()).toBe(3);
    const first = ctl.streaming;
    expect(first).toMatchObject({state: 'running', text: 'It', tokens: 1});
    expect(ctl.message).toBe('Generating the response: 1 of at most 64 tokens…');
    await vi.advanceTimersByTimeAsync(STREAM_FIRST_MS);  // from now on once a second
    expect(streams()).toBe(3);
    await vi.advanceTimersByTimeAsync(STREAM_MS - STREAM_FIRST_MS);
    expect(streams()).toBe(4);
    expect(streamCalls()[3].input.data['stream_after']).toBe(1);  // the server waits for a second token
    expect(ctl.streaming).toBe(first);  // the same answer: kept as it was
    await vi.advanceTimersByTimeAsync(STREAM_MS);
    expect(streams()).toBe(5);
    expect(ctl.streaming).toMatchObject({text: 'It is', tokens: 2});
    // A hidden tab: no polls until it shows again.
    const g = globalThis as {document?: unknown};
    g.document = {hidden: true};
    try {
      await vi.advanceTimersByTimeAsync(4 * STREAM_MS);
      expect(streams()).toBe(5);
    } finally {
      delete g.document;
    }
    await vi.advanceTimersByTimeAsync(STREAM_MS);
    expect(streams()).toBe(6);
    release([{salience: payload()}]);
    await selected;
    expect(ctl.streaming).toBeNull();
    expect(ctl.status).toBe('ready');
    await vi.advanceTimersByTimeAsync(4 * STREAM_MS);
    expect(streams()).toBe(6);  // no poll after the first highlight
    ctl.dispose();
  });
});

describe('status line: what is on screen now (issue 19)', () => {
  /** A promise resolved or rejected from outside. */
  function deferred() {
    let resolve!: (v: Array<Record<string, unknown>>) => void;
    let reject!: (e: Error) => void;
    const promise = new Promise<Array<Record<string, unknown>>>((res, rej) => { resolve = res; reject = rej; });
    return {promise, resolve, reject};
  }
  /** The first highlight without a Gram matrix: every span other than the whole response needs the server. */
  const firstHighlight = () => {
    const p = payload();
    p.methods.grad_norm!.gram_packed = null;
    p.methods.grad_norm!.matrix = null;
    p.methods.grad_x_input!.matrix = null;
    p.spans = {[`0:${T}`]: {grad_norm: Array(N).fill(1), grad_x_input: Array(N).fill(1)}};
    return [{salience: p}];
  };
  /** Answers each span_progress poll with `detail(n)` (n: the polls so far, this one included) and any other
   * request with `rest`; `polls()` counts the polls. */
  function spanProgress(detail: (n: number) => Record<string, unknown>, rest: Answer) {
    let polls = 0;
    const answer: Answer = (c) => {
      if (c.input.data['detail'] !== 'span_progress') return rest(c);
      polls++;
      return [{salience: {detail: detail(polls)}}];
    };
    return {answer, polls: () => polls};
  }

  it('says "computing" while the span computes, "exact for this span" once its values are shown, "per-token ready" with the matrix', async () => {
    const pending = deferred();
    const {host} = fakeHost((c) => (c.input.data['target_span'] === undefined ? firstHighlight() : pending.promise));
    const ctl = new SalienceController(host);
    await ctl.select(dp());
    expect(ctl.precision()).toMatch(/^exact for this span/);  // the whole response came with the payload
    ctl.setSpan({t0: 1, t1: 3});
    expect(ctl.tokenValues()).toBeNull();
    expect(ctl.precision()).toBe(`computing tokens 2–3 of ${T}…`);
    expect(ctl.detailState()).toBe('computing');
    pending.resolve([{span_salience: {grad_norm: Array(N).fill(2), grad_x_input: Array(N).fill(2)}, salience: {}}]);
    await vi.runAllTimersAsync();
    expect(ctl.precision()).toMatch(/^exact for this span/);
    expect(ctl.side).toBeNull();
    // With the per-token matrix in the payload, the status says so.
    const ready = new SalienceController(fakeHost(() => [{salience: payload()}]).host);
    await ready.select(dp());
    expect(ready.precision()).toBe('per-token detail ready: retargeting is instant');
    ctl.dispose();
    ready.dispose();
  });

  it('shows no "Cancelled" of a method the user left; the new method\'s values replace the status', async () => {
    const ig = deferred();
    const sg = deferred();
    const {host} = fakeHost((c) => {
      if (c.input.data['target_span'] === undefined) return firstHighlight();
      return (c.input.data['ig_steps'] as number) > 0 ? ig.promise : sg.promise;
    });
    const ctl = new SalienceController(host);
    await ctl.select(dp());
    ctl.setMethod('integrated_gradients');
    await vi.advanceTimersByTimeAsync(0);
    expect(ctl.side?.kind).toBe('loading');
    ctl.setMethod('smooth_grad');  // same span, another method: the server cancels the IG request
    await vi.advanceTimersByTimeAsync(0);
    ig.reject(new Error('Cancelled: a newer selection replaced this request.'));
    await vi.advanceTimersByTimeAsync(0);
    expect(ctl.side?.kind).toBe('loading');  // still computing SmoothGrad; no red line
    sg.resolve([{span_salience: {smooth_grad: Array(N).fill(3)}, salience: {}}]);
    await vi.runAllTimersAsync();
    expect(ctl.side).toBeNull();
    expect(Array.from(ctl.tokenValues()!)).toEqual(Array(N).fill(3));
    ctl.dispose();
  });

  it('shows the percentage and time left of an IG span while it runs, from span_progress polls', async () => {
    const ig = deferred();
    const progress = spanProgress(
        (n) => ({kind: 'span', state: 'running', done: 8 * n, total: 32, elapsed_s: 2 * n, eta_s: 6 / n, error: ''}),
        (c) => (c.input.data['target_span'] === undefined ? firstHighlight() : ig.promise));
    const {host, calls} = fakeHost(progress.answer);
    const ctl = new SalienceController(host);
    await ctl.select(dp());
    ctl.setMethod('integrated_gradients');
    expect(ctl.side).toEqual({kind: 'loading', text: `Integrated gradients (16 steps) for whole response (${T} tokens)…`});
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.side?.text).toBe(`Integrated gradients (16 steps) for whole response (${T} tokens)… 25 % · about 6 s left`);
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.side?.text).toMatch(/… 50 % · about 3 s left$/);
    ig.resolve([{span_salience: {integrated_gradients: Array(N).fill(5)}, salience: {}}]);
    await vi.advanceTimersByTimeAsync(0);
    expect(ctl.side).toBeNull();
    const before = calls.length;
    await vi.advanceTimersByTimeAsync(5 * POLL_MS);
    expect(calls.length).toBe(before);  // no polls once the span is there
    expect(progress.polls()).toBe(2);
    ctl.dispose();
  });

  it('drops an IG span\'s progress line, its status reads and its job once the user switches to another method (issue 35)', async () => {
    const ig = deferred();
    const progress = spanProgress(
        () => ({kind: 'span', state: 'running', done: 8, total: 32, elapsed_s: 2, eta_s: 6, error: '', job_id: 'span-7'}),
        (c) => {
          if (c.input.data['detail'] === 'span_cancel') return [{salience: {detail: {state: 'running'}}}];
          return c.input.data['target_span'] === undefined ? firstHighlight() : ig.promise;
        });
    const {host, calls} = fakeHost(progress.answer);
    const ctl = new SalienceController(host);
    await ctl.select(dp());
    ctl.setMethod('integrated_gradients');
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.side?.text).toMatch(/25 % · about 6 s left$/);
    ctl.setMethod('grad_x_input');  // from the payload: no request, nothing to wait for
    expect(ctl.side).toBeNull();
    // The server is told to stop the IG job, by the id its progress named (a late cancel stops no newer job).
    const cancels = calls.filter((c) => c.input.data['detail'] === 'span_cancel');
    expect(cancels.map((c) => c.input.data['span_job'])).toEqual(['span-7']);
    const before = progress.polls();
    await vi.advanceTimersByTimeAsync(3 * POLL_MS);
    expect(progress.polls()).toBe(before);
    expect(ctl.side).toBeNull();
    ig.resolve([{span_salience: {integrated_gradients: Array(N).fill(5)}, salience: {}}]);
    await vi.runAllTimersAsync();
    expect(ctl.side).toBeNull();
    ctl.dispose();
  });

  it('a long first highlight with a gradient method shows the pass\'s progress as a range (issue 43)', async () => {
    // Was: a 5,000-word prompt showed a clock and no progress for 4 minutes (only IG and SmoothGrad were followed).
    const main = deferred();
    const {host} = fakeHost((c) => {
      if (c.input.data['detail'] === 'span_progress') {
        return [{salience: {detail: {kind: 'span', state: 'running', done: 30, total: 90, elapsed_s: 20, eta_s: 55,
                                     eta_low_s: 40, eta_high_s: 70, error: '', job_id: 'span-3'}}}];
      }
      return main.promise;
    });
    const ctl = new SalienceController(host);
    const selected = ctl.select(dp());
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.message).toBe('Computing salience for the whole response… 33 % · about 40–70 s left');
    main.resolve(firstHighlight());
    await selected;
    expect(ctl.status).toBe('ready');
    ctl.dispose();
  });

  /** A span_progress status of job `id`. */
  const spanStatus = (id: string, state: string, done: number, total: number, eta: number | null = null) =>
    [{salience: {detail: {kind: 'span', state, done, total, elapsed_s: 1, eta_s: eta, error: '', job_id: id}}}];

  it('does not show an older span job\'s progress as a newer run\'s, nor cancel it in its place (issue 35)', async () => {
    // The server answers span_progress with the datapoint's latest span job: the 16-step one until the
    // 256-step request gets there (here its first read still names span-1, at 100 %).
    const reads: Record<number, Array<ReturnType<typeof spanStatus>>> = {
      16: [spanStatus('span-1', 'running', 8, 16, 1)],
      256: [spanStatus('span-1', 'running', 16, 16), spanStatus('span-2', 'running', 8, 256, 30)],
    };
    const runs: Record<number, ReturnType<typeof deferred>> = {16: deferred(), 256: deferred()};
    let steps = 16;
    const {host, calls} = fakeHost((c) => {
      const detail = c.input.data['detail'];
      if (detail === 'span_progress') return reads[steps].length > 1 ? reads[steps].shift()! : reads[steps][0];
      if (detail === 'span_cancel') return [{salience: {detail: {state: 'running'}}}];
      if (c.input.data['target_span'] === undefined) return firstHighlight();
      return runs[c.input.data['ig_steps'] as number].promise;
    });
    const ctl = new SalienceController(host);
    await ctl.select(dp());
    ctl.setMethod('integrated_gradients');
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.side?.text).toMatch(/\(16 steps\).*… 50 % · about 1 s left$/);
    steps = 256;
    ctl.enterCount('integrated_gradients', '256');
    runs[16].reject(new Error('Cancelled: a newer selection replaced this request.'));
    const label = `Integrated gradients (256 steps) for whole response (${T} tokens)…`;
    expect(ctl.side?.text).toBe(label);
    await vi.advanceTimersByTimeAsync(POLL_MS);  // the read names span-1, the 16-step job: nothing of it shows
    expect(ctl.side?.text).toBe(label);
    await vi.advanceTimersByTimeAsync(POLL_MS);  // the 256-step job's own progress
    expect(ctl.side?.text).toBe(`${label} 3 % · about 30 s left`);
    ctl.setMethod('grad_x_input');  // switching away stops the 256-step job, by its own id
    const cancels = calls.filter((c) => c.input.data['detail'] === 'span_cancel').map((c) => c.input.data['span_job']);
    expect(cancels).toEqual(['span-1', 'span-2']);  // the 16-step job when superseded, then the 256-step one
    runs[256].resolve([{span_salience: {integrated_gradients: Array(N).fill(5)}, salience: {}}]);
    await vi.runAllTimersAsync();
    ctl.dispose();
  });

  it('takes no finished job as a run\'s own before it read its running one (issue 35)', async () => {
    // The run's first read names a job no read named before, already done: an older run's (whose progress was
    // never read) or this one's, about to answer. Neither shows, and a later cancel names the running job.
    const reads = [spanStatus('span-5', 'done', 16, 16), spanStatus('span-6', 'running', 64, 256, 20)];
    const ig = deferred();
    const {host, calls} = fakeHost((c) => {
      const detail = c.input.data['detail'];
      if (detail === 'span_progress') return reads.length > 1 ? reads.shift()! : reads[0];
      if (detail === 'span_cancel') return [{salience: {detail: {state: 'running'}}}];
      if (c.input.data['target_span'] === undefined) return firstHighlight();
      return ig.promise;
    });
    const ctl = new SalienceController(host);
    await ctl.select(dp());
    ctl.setCount('integrated_gradients', 256);
    ctl.setMethod('integrated_gradients');
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.side?.text).not.toMatch(/%/);
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.side?.text).toMatch(/… 25 % · about 20 s left$/);
    ctl.setMethod('grad_x_input');
    expect(calls.filter((c) => c.input.data['detail'] === 'span_cancel').map((c) => c.input.data['span_job']))
        .toEqual(['span-6']);
    ig.resolve([{span_salience: {integrated_gradients: Array(N).fill(5)}, salience: {}}]);
    await vi.runAllTimersAsync();
    ctl.dispose();
  });

  it('cancels a per-token IG matrix job by its id once the user switches to another method, and stops polling it (issue 35)', async () => {
    let polls = 0;
    const running = {kind: 'ig16', state: 'running', done: 2, total: 48, elapsed_s: 1, eta_s: 20, error: '', job_id: 'ig16-3'};
    const {host, calls} = fakeHost((c) => {
      const detail = c.input.data['detail'];
      if (detail === 'ig_matrix') return [{salience: {detail: running}}];
      if (detail === 'poll' && c.input.data['ig_steps'] === 16) {
        polls++;
        return [{salience: {detail: running}}];
      }
      if (detail === 'matrix_cancel') return [{salience: {detail: {...running, state: 'cancelled'}}}];
      if (c.input.data['target_span'] === undefined && c.input.data['ig_steps'] === 0) return firstHighlight();
      return [{span_salience: {integrated_gradients: Array(N).fill(1)}, salience: {}}];
    });
    const ctl = new SalienceController(host);
    await ctl.select(dp());
    ctl.setMethod('integrated_gradients');
    ctl.setPerToken('integrated_gradients', true);
    await vi.advanceTimersByTimeAsync(2 * POLL_MS);
    expect(calls.filter((c) => c.input.data['detail'] === 'ig_matrix')).toHaveLength(1);
    expect(polls).toBeGreaterThan(0);
    ctl.setMethod('grad_x_input');
    await vi.advanceTimersByTimeAsync(POLL_MS);
    // The server is told to stop that job, by the id its status named; the page polls it no more.
    const cancels = calls.filter((c) => c.input.data['detail'] === 'matrix_cancel');
    expect(cancels.map((c) => c.input.data['matrix_job'])).toEqual(['ig16-3']);
    const before = polls;
    await vi.advanceTimersByTimeAsync(4 * POLL_MS);
    expect(polls).toBe(before);
    // Back to IG: its matrix is asked for again (the cancelled job is not waited for).
    ctl.setMethod('integrated_gradients');
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(calls.filter((c) => c.input.data['detail'] === 'ig_matrix')).toHaveLength(2);
    ctl.dispose();
  });

  it('shows the percentage and time left of the first highlight when the method is IG', async () => {
    const first = deferred();
    let polls = 0;
    const {host} = fakeHost((c) => {
      if (c.input.data['detail'] === 'span_progress') {
        polls++;
        return [{salience: {detail: polls === 1 ? {kind: 'span', state: 'queued', done: 0, total: 0, elapsed_s: 0, eta_s: null, error: ''}
                                                 : {kind: 'span', state: 'running', done: 4, total: 16, elapsed_s: 1, eta_s: 3, error: ''}}}];
      }
      return first.promise;
    });
    const ctl = new SalienceController(host);
    ctl.registry();
    ctl.setMethod('integrated_gradients');
    const selecting = ctl.select(dp());
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.message).toBe('Computing salience…');  // queued: nothing to add (the row has a target: nothing is generated)
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.message).toBe('Integrated gradients (16 steps) for the whole response… 25 % · about 3 s left');
    first.resolve(firstHighlight());
    await selecting;
    await vi.advanceTimersByTimeAsync(3 * POLL_MS);
    expect(polls).toBe(2);  // no poll once the first highlight is there
    expect(ctl.status).toBe('ready');
    ctl.dispose();
  });

  it('says "Generating the response" only for a row without a target (issue 35: a forced target generates nothing)', async () => {
    const first = deferred();
    const {host} = fakeHost((c) => (c.input.data['detail'] === 'stream' ? [{salience: {}}] : first.promise));
    const ctl = new SalienceController(host);
    const forced = ctl.select(dp());  // target 'Red cat.'
    expect(ctl.status).toBe('loading');
    expect(ctl.message).toBe('Computing salience…');
    const own: IndexedInputLike = {id: 'dp2', data: {_id: 'dp2', prompt: 'The cat sat.', target: ''}, meta: {}};
    const generating = ctl.select(own);
    expect(ctl.message).toBe('Generating the response and computing salience…');
    first.resolve(firstHighlight());
    await Promise.all([forced, generating]);
    ctl.dispose();
  });

  it('clears an error once the user moves on, and after a request that succeeds', async () => {
    let failNext = true;
    const {host} = fakeHost((c) => {
      if (c.input.data['target_span'] === undefined) return firstHighlight();
      if (failNext) {
        failNext = false;
        throw new Error('Cancelled: a newer selection replaced this request.');
      }
      return [{span_salience: {grad_norm: Array(N).fill(4), grad_x_input: Array(N).fill(4)}, salience: {}}];
    });
    const ctl = new SalienceController(host);
    await ctl.select(dp());
    ctl.setSpan({t0: 1, t1: 2});
    await vi.runAllTimersAsync();
    expect(ctl.side).toEqual({kind: 'error', text: 'Cancelled: a newer selection replaced this request.'});
    ctl.setSpan({t0: 2, t1: 3});  // another span: the old error is not about it
    expect(ctl.side?.kind).toBe('loading');
    await vi.runAllTimersAsync();
    expect(ctl.side).toBeNull();
    expect(ctl.precision()).toMatch(/^exact for this span/);
    ctl.dispose();
  });
});

describe('stream polls', () => {
  const s = (state: StreamStatus['state'], text: string, tokens: number): StreamStatus =>
      ({state, text, tokens, max_new_tokens: 64, stopped_by: ''});

  it('wait less before the first token than after it', () => {
    expect(streamDelay(null)).toBe(STREAM_FIRST_MS);
    expect(streamDelay(s('queued', '', 0))).toBe(STREAM_FIRST_MS);
    expect(streamDelay(s('running', 'It', 1))).toBe(STREAM_MS);
    expect(STREAM_MS).toBeGreaterThan(STREAM_FIRST_MS);
  });

  it('count as news only longer text or another state, never shorter text', () => {
    expect(streamAdvanced(null, s('queued', '', 0))).toBe(true);
    expect(streamAdvanced(s('queued', '', 0), s('queued', '', 0))).toBe(false);
    expect(streamAdvanced(s('queued', '', 0), s('running', '', 0))).toBe(true);
    expect(streamAdvanced(s('running', 'It', 1), s('running', 'It is', 2))).toBe(true);
    expect(streamAdvanced(s('running', 'It is', 2), s('running', 'It', 1))).toBe(false);  // answered out of order
    expect(streamAdvanced(s('running', 'It is', 2), s('done', 'It is', 2))).toBe(true);
  });
});
