/**
 * What the user sees first, then the confirm step (src/salience/confirm.ts, issue 42 §5): the next automatic step,
 * the comparison of the first map with the exact one and its words (hand-derived cases), and the controller
 * following the steps against a stand-in server: the first map the server names (`first_map_at`) shown once
 * measured, exact leave-one-out measured next and shown, what the first map showed kept for the verdict; a first
 * map whose job fails leaves the gradient as the first map; the Stop button ends the polls and keeps the map; a first
 * map whose job sends its values so far (attention_verified: the estimate, then verified segments) shows them at
 * once, named, and the exact job waits for its values.
 */
import {afterEach, beforeEach, describe, expect, it, vi} from 'vitest';

import registry from './fixtures/method_registry.json';
import fixture from './fixtures/small_payload.json';
import {segment} from '../src/shared/aggregate/index.js';
import {parseRegistry} from '../src/shared/methods.js';
import type {IndexedInputLike} from '../src/shared/request.js';
import {compareTops, describeVerdict, firstMapAt, nextAutoStep, verdictOn, type AutoState} from '../src/salience/confirm.js';
import {SalienceController} from '../src/salience/controller.js';
import {POLL_MS} from '../src/salience/page.js';
import type {SegmentPayload} from '../src/salience/segment_payload.js';
import {fakeSalienceHost, withFirstMap} from './support/salience_host.js';

type Data = Record<string, unknown>;

const N = fixture.tokens.length;
const T = N - fixture.n_prompt_tokens;
const FAST = 'attention_attribution';
const EXACT = 'leave_one_out';
const GRADIENT = 'grad_norm';
/** The fixture's registry with the fast method named the first map at sentence granularity (as a server whose
 * held-out figures pass the bar would publish it), and with none (the gradient stays the first map). */
const WITH_FIRST = withFirstMap(registry, FAST);
const NO_FIRST = withFirstMap(registry, null);

// The fixture's prompt: tokens 3-6 "The cat sat." (sentence A), 7-10 " It was red." (sentence B); 16-18 the response.
const A = [3, 4, 5, 6];
const B = [7, 8, 9, 10];
/** Token values putting `a` on sentence A and `b` on sentence B (spread over their tokens: the sums are a and b). */
function spread(a: number, b: number): number[] {
  return Array.from({length: N}, (_, i) => (A.includes(i) ? a / 4 : B.includes(i) ? b / 4 : 0));
}

function answer(data: Data, tokens: number[], rows: number): SegmentPayload {
  return {
    method: data['segment_method'] as string, granularity: data['granularity'] as string, pattern: null,
    removal: data['removal'] as string, span: [0, T], count: 0, values: [tokens[3] * 4, tokens[7] * 4],
    spans: [[17, 29], [29, 41]], segment_index: [1, 2], token_values: tokens, original_logprob: -3, quality: {},
    warning: '', stats: {rows, tokens: 40, tokens_computed: 20, prefix_reuse: false, saved: 0},
  };
}

/**
 * A host answering the first highlight with the fixture and each segment request `polls` times with progress before
 * its values: the fast map puts sentence B first, exact leave-one-out sentence A. `failing`: that method's job ends
 * in an error.
 */
function fakeHost(reg: unknown, polls = 1, failing = '') {
  const seen = new Map<string, number>();
  return fakeSalienceHost(reg, (data) => {
    const method = data['segment_method'] as string;
    const n = (seen.get(method) ?? 0) + 1;
    seen.set(method, n);
    const done = n > polls;
    if (done && method === failing) {
      return [{salience: {detail: {kind: 'seg', state: 'error', done: 0, total: 2, elapsed_s: 0, eta_s: null,
                                   error: 'No attention estimator for this model. Fix: run sequence-salience calibrate.'}}}];
    }
    const status = {kind: 'seg', state: done ? 'done' : 'running', done: done ? 2 : 1, total: 2, elapsed_s: 0.1,
                    eta_s: done ? null : 0.1, error: ''};
    const tokens = method === FAST ? spread(1, 3) : spread(5, -2);
    return [{salience: done ? {segments: answer(data, tokens, method === FAST ? 1 : 3), detail: status} : {detail: status}}];
  });
}

const dp = (): IndexedInputLike => ({id: 'dp1', data: {_id: 'dp1', prompt: 'The cat sat. It was red.', target: 'Red cat.'},
                                     meta: {}});
const segmentCalls = (calls: Data[], method?: string) =>
  calls.filter((c) => c['detail'] === 'segments' && (method === undefined || c['segment_method'] === method));

async function selected(reg: unknown, polls = 1, failing = '') {
  const {host, calls} = fakeHost(reg, polls, failing);
  const ctl = new SalienceController(host);
  ctl.registry();
  ctl.setSegmentation('sentence', '', 2);
  await ctl.select(dp());
  return {ctl, calls};
}

describe('the next automatic step', () => {
  const base: AutoState = {auto: true, onScreen: GRADIENT, onScreenIsSegment: false, autoShown: false, first: FAST,
                           exact: EXACT, has: () => false, hasPartial: () => false, firstFailed: false};
  const has = (...methods: string[]) => (m: string) => methods.includes(m);
  it.each([
    ['gradient on screen: the first map is measured', {}, {kind: 'measure', method: FAST}],
    ['its values there: shown', {has: has(FAST)}, {kind: 'show-first', method: FAST}],
    ['its values so far there (its first look): shown', {hasPartial: has(FAST)}, {kind: 'show-first', method: FAST}],
    ['its values so far on screen: its job measured on, the exact one not started',
     {onScreen: FAST, onScreenIsSegment: true, autoShown: true, hasPartial: has(FAST)}, {kind: 'measure', method: FAST}],
    ['first map on screen: the exact one is measured',
     {onScreen: FAST, onScreenIsSegment: true, autoShown: true, has: has(FAST)}, {kind: 'measure', method: EXACT}],
    ['exact values there: shown', {onScreen: FAST, onScreenIsSegment: true, autoShown: true, has: has(FAST, EXACT)},
     {kind: 'show-exact', method: EXACT}],
    ['no first map named: the gradient is the first map', {first: null}, {kind: 'measure', method: EXACT}],
    ['the first map failed: the gradient is the first map', {firstFailed: true}, {kind: 'measure', method: EXACT}],
    ['the exact map on screen: done', {onScreen: EXACT, onScreenIsSegment: true, autoShown: true}, {kind: 'none'}],
    ['a segment method the user chose: none', {onScreen: FAST, onScreenIsSegment: true, autoShown: false}, {kind: 'none'}],
    ['stopped or the user chose: none', {auto: false}, {kind: 'none'}],
    ['no exact method at this granularity: none', {exact: null}, {kind: 'none'}],
  ] as Array<[string, Partial<AutoState>, unknown]>)('%s', (_name, change, expected) => {
    expect(nextAutoStep({...base, ...change})).toEqual(expected);
  });
});

describe('the first map against the exact map', () => {
  it('confirms the same top segment and top three, in any order below the top', () => {
    const v = compareTops([5, 4, 3, 1, 0.5], false, [-6, 1, 2, 3, 0], true);
    // Signed exact map ranked by |value|: 0 (|-6|), 3, 2; the first map: 0, 1, 2. Segment 3 entered, 1 left.
    expect(v).toEqual({confirmed: false, before: [0, 1, 2], after: [0, 3, 2], entered: [3], left: [1]});
    expect(compareTops([5, 4, 3, 1], false, [9, 2, 3, 0.5], true)).toMatchObject({confirmed: true, after: [0, 2, 1]});
  });

  it('leaves the target segments and NaN out of both top lists', () => {
    // Segment 1 (the target) would top both lists; without it both put 3 first, then 2.
    expect(compareTops([NaN, 9, 1, 2], false, [NaN, -9, 1, 8], true, new Set([1])))
        .toEqual({confirmed: true, before: [3, 2], after: [3, 2], entered: [], left: []});
    // The same two segments, in the other order: the top one changed.
    expect(compareTops([NaN, 9, 1, 2], false, [NaN, 1, 8, 2], true, new Set([1])))
        .toEqual({confirmed: false, before: [3, 2], after: [2, 3], entered: [], left: []});
  });

  it('says what changed: the top segment before and after, the top three, and what moved', () => {
    const texts = ['Menu: onion soup.', 'I avoid garlic.', 'What should I order?', 'Be polite.'];
    const v = compareTops([1, 2, 3, 0], false, [3, 2, 0.5, 1], true);
    const w = describeVerdict(v, 'Gradient norm', 'Leave one segment out', 'sentence', (s) => texts[s]);
    expect(w.headline).toBe('Changed by exact leave one segment out: the top sentence is now “Menu: onion soup.” ' +
                            '(was “What should I order?”).');
    expect(w.before).toBe('First map (Gradient norm): 1. “What should I order?” 2. “I avoid garlic.” 3. “Menu: onion soup.”');
    expect(w.after).toBe('Exact: 1. “Menu: onion soup.” 2. “I avoid garlic.” 3. “Be polite.”');
    expect(w.moved).toBe('in: “Be polite.”; out: “What should I order?”');
    const same = describeVerdict(compareTops([3, 2, 1], false, [3, 1, 2], true), 'Gradient norm', 'Leave one segment out',
                                 'sentence', (s) => texts[s]);
    expect(same.headline).toBe('Confirmed by exact leave one segment out: the same top sentence and top 3 as the first ' +
                               'map (Gradient norm).');
  });
});

describe('the controller: first map, then exact leave-one-out', () => {
  beforeEach(() => { vi.useFakeTimers(); });
  afterEach(() => { vi.useRealTimers(); });

  it('reads the first map from the server\'s registry, not from a name of its own', () => {
    expect(firstMapAt(parseRegistry(WITH_FIRST), 'sentence')?.name).toBe(FAST);
    expect(firstMapAt(parseRegistry(WITH_FIRST), 'paragraph')).toBeUndefined();
    expect(firstMapAt(parseRegistry(NO_FIRST), 'sentence')).toBeUndefined();
  });

  it('shows the named first map once measured, then exact leave-one-out, keeping what the first map showed', async () => {
    const {ctl, calls} = await selected(WITH_FIRST);
    expect(ctl.method).toBe(GRADIENT);  // the first highlight
    expect(ctl.autoMeasuring()).toBe(FAST);
    expect(segmentCalls(calls)).toHaveLength(1);
    expect(segmentCalls(calls, FAST)).toHaveLength(1);  // the exact job waits: a new segment job supersedes the older
    await vi.advanceTimersByTimeAsync(POLL_MS);
    // The first map on screen, named; the exact method measured next, with its progress.
    expect(ctl.method).toBe(FAST);
    expect(ctl.autoShown).toBe(true);
    expect(ctl.pendingDefault()).toBe(EXACT);
    expect(ctl.autoMeasuring()).toBe(EXACT);
    expect(Array.from(ctl.tokenValues()!)).toEqual(spread(1, 3));
    expect(ctl.precision()).toBe(`measured per sentence: ${parseRegistry(WITH_FIRST).segment(FAST)!.cost_unit}; 1 prompt scored`);
    expect(segmentCalls(calls, EXACT)).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(0);
    expect(ctl.segmentDetail).toMatchObject({state: 'running', done: 1, total: 2});
    await vi.advanceTimersByTimeAsync(POLL_MS);
    // The exact map replaces it; the first map's values are kept for the verdict.
    expect(ctl.method).toBe(EXACT);
    expect(ctl.pendingDefault()).toBeNull();
    expect(ctl.firstShown).toMatchObject({method: FAST, signed: true});
    expect(Array.from(ctl.firstShown!.tokens)).toEqual(spread(1, 3));
    expect(ctl.confirmation()).toBe(ctl.firstShown);
    // On the module's sentence segmentation: the first map put "It was red." first, the exact one "The cat sat.".
    const seg = segment(fixture.text, fixture.offsets, 'sentence', {roleSpans: fixture.role_spans as never});
    const target = new Set([seg.starts.length - 1]);
    const v = verdictOn(seg, ctl.confirmation()!, ctl.tokenValues()!, true, target);
    const text = (s: number) => Array.from(fixture.text).slice(seg.starts[s], seg.ends[s]).join('').trim();
    expect(v.confirmed).toBe(false);
    expect([text(v.before[0]), text(v.after[0])]).toEqual(['It was red.', 'The cat sat.']);
    // Another span: the verdict belonged to the whole response's values.
    ctl.setSpan({t0: 0, t1: 1});
    expect(ctl.confirmation()).toBeNull();
    ctl.dispose();
  });

  it('keeps the gradient as the first map where the server names none, and compares it with the exact map', async () => {
    const {ctl, calls} = await selected(NO_FIRST);
    expect(ctl.firstMap()).toBeNull();
    expect(ctl.autoMeasuring()).toBe(EXACT);
    await vi.advanceTimersByTimeAsync(2 * POLL_MS);
    expect(segmentCalls(calls, FAST)).toHaveLength(0);
    expect(ctl.method).toBe(EXACT);
    expect(ctl.firstShown?.method).toBe(GRADIENT);
    expect(ctl.firstShown?.signed).toBe(false);
    ctl.dispose();
  });

  it('falls back to the gradient as the first map when the named one fails, and still confirms with the exact map', async () => {
    const {ctl, calls} = await selected(WITH_FIRST, 1, FAST);
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.method).toBe(GRADIENT);
    expect(ctl.segmentError).toBe('');  // not an error of what is on screen
    expect(ctl.autoMeasuring()).toBe(EXACT);
    await vi.advanceTimersByTimeAsync(2 * POLL_MS);
    expect(ctl.method).toBe(EXACT);
    expect(ctl.firstShown?.method).toBe(GRADIENT);
    expect(segmentCalls(calls, FAST)).toHaveLength(2);  // never asked again
    ctl.dispose();
  });

  it('stops confirming on request: the polls end and the first map stays', async () => {
    const {ctl, calls} = await selected(WITH_FIRST, 100);
    await vi.advanceTimersByTimeAsync(101 * POLL_MS);
    expect(ctl.method).toBe(FAST);
    await vi.advanceTimersByTimeAsync(3 * POLL_MS);
    const polls = segmentCalls(calls, EXACT).length;
    expect(polls).toBeGreaterThan(1);
    ctl.stopConfirming();
    expect(ctl.pendingDefault()).toBeNull();
    await vi.advanceTimersByTimeAsync(10 * POLL_MS);
    expect(segmentCalls(calls, EXACT).length).toBeLessThanOrEqual(polls + 1);  // at most the poll already on its way
    expect(ctl.method).toBe(FAST);
    ctl.dispose();
  });
});

describe('the first map\'s values so far (issue 42, session 37)', () => {
  beforeEach(() => { vi.useFakeTimers(); });
  afterEach(() => { vi.useRealTimers(); });
  const VERIFIED = 'attention_verified';

  /** attention_verified's job answers its values so far while it runs: the estimate (nothing verified, sentence B
   * first), then one sentence verified; its values after `polls` answers; exact leave-one-out after one more. */
  function partialHost(polls: number) {
    const seen = new Map<string, number>();
    return fakeSalienceHost(withFirstMap(registry, VERIFIED), (data) => {
      const method = data['segment_method'] as string;
      const n = (seen.get(method) ?? 0) + 1;
      seen.set(method, n);
      const done = method === VERIFIED ? n > polls : n > 1;
      const status = {kind: 'seg', state: done ? 'done' : 'running', done: n - 1, total: 2, elapsed_s: 0.1,
                      eta_s: null, error: ''};
      if (done) {
        const tokens = method === VERIFIED ? spread(4, 3) : spread(5, -2);
        return [{salience: {segments: answer(data, tokens, 3), detail: status}}];
      }
      if (method !== VERIFIED) return [{salience: {detail: status}}];
      const measured = n === 1 ? [false, false] : [true, false];
      const partial = {...answer(data, n === 1 ? spread(1, 2) : spread(4, 1), n), measured,
                       coarse_values: [1, 2].map((v, i) => measured[i] ? null : v),
                       coarse_granularity: measured.map((m) => m ? '' : 'estimate')};
      return [{salience: {partial_segments: partial, detail: status}}];
    });
  }

  it('shows the estimate with the first answer, named, then the verified map, and only then measures the exact map', async () => {
    const {host, calls} = partialHost(3);
    const ctl = new SalienceController(host);
    const reg = ctl.registry()!;
    ctl.setSegmentation('sentence', '', 2);
    await ctl.select(dp());
    await vi.advanceTimersByTimeAsync(0);
    // The first answer of the first map's job: its estimate on screen, hatched, named by the registry's first look.
    expect(segmentCalls(calls, VERIFIED)).toHaveLength(1);
    expect(ctl.method).toBe(VERIFIED);
    expect(ctl.autoShown).toBe(true);
    expect(ctl.segmentValues()?.partial).toBe(true);
    expect(Array.from(ctl.tokenValues()!)).toEqual(spread(1, 2));
    const look = reg.segment(VERIFIED)!.first_look!;
    expect(ctl.partialName(VERIFIED, ctl.segmentValues()!)).toBe(look);
    expect(ctl.firstLook(VERIFIED, ctl.segmentValues()!, 'sentence'))
        .toBe(`${reg.label(look)}: 0 of 2 sentences verified so far`);
    expect(ctl.detailState()).toBe('computing');
    expect(ctl.autoMeasuring()).toBe(VERIFIED);  // measured on: the exact job would supersede it
    expect(segmentCalls(calls, EXACT)).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(POLL_MS);
    // One sentence verified: named as the first map itself now.
    expect(ctl.firstLook(VERIFIED, ctl.segmentValues()!, 'sentence'))
        .toBe(`${reg.label(VERIFIED)}: 1 of 2 sentences verified so far`);
    expect(Array.from(ctl.tokenValues()!)).toEqual(spread(4, 1));
    expect(segmentCalls(calls, EXACT)).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(2 * POLL_MS);
    // Its values: the verified map, not partial; the exact map measured next.
    expect(ctl.method).toBe(VERIFIED);
    expect(ctl.segmentValues()?.partial).toBeUndefined();
    expect(Array.from(ctl.tokenValues()!)).toEqual(spread(4, 3));
    expect(ctl.autoMeasuring()).toBe(EXACT);
    await vi.advanceTimersByTimeAsync(2 * POLL_MS);
    expect(ctl.method).toBe(EXACT);
    expect(ctl.firstShown?.method).toBe(VERIFIED);
    expect(Array.from(ctl.firstShown!.tokens)).toEqual(spread(4, 3));  // the verdict compares the verified map
    ctl.dispose();
  });
});
