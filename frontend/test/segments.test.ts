/**
 * Segment methods in the salience module's controller (src/salience/controller.ts): the first
 * highlight stays the gradient's; at a granularity with a default segment method (the server's
 * `default_at`) that method is measured in a background job (polled) and shown once measured, with
 * the gradient one call away; a change of granularity re-measures; at word granularity it is measured
 * only on request, at the cost the button names. Against a stand-in for LIT's services.
 */
import {afterEach, beforeEach, describe, expect, it, vi} from 'vitest';

import registry from './fixtures/method_registry.json';
import fixture from './fixtures/small_payload.json';
import {CompareRoom} from '../src/salience/compare/room.js';
import {SalienceController} from '../src/salience/controller.js';
import {POLL_MS, type SalienceHost} from '../src/salience/page.js';
import type {PatternMatcher} from '../src/salience/pattern_runner.js';
import type {SegmentPayload} from '../src/salience/segment_payload.js';
import {segmentInput} from '../src/salience/request.js';
import {parseRegistry} from '../src/shared/methods.js';
import type {IndexedInputLike} from '../src/shared/request.js';
import {fakeSalienceHost, withFirstMap} from './support/salience_host.js';

type Data = Record<string, unknown>;

const N = fixture.tokens.length;
const T = N - fixture.n_prompt_tokens;
const REG = parseRegistry(registry);

/** Values the server would send for a segment request: distinct per granularity, so that a mix-up shows. */
function segmentAnswer(data: Data, extra: Partial<SegmentPayload> = {}): SegmentPayload {
  const scale = data['granularity'] === 'sentence' ? 1 : data['granularity'] === 'paragraph' ? 10 : 100;
  return {
    method: data['segment_method'] as string, granularity: data['granularity'] as string, pattern: null,
    removal: data['removal'] as string, span: [0, T], count: 0, values: [2 * scale, -scale],
    spans: [[17, 30], [30, 41]], segment_index: [1, 2],
    token_values: Array.from({length: N}, (_, i) => (i < 4 ? scale : i < 8 ? -scale / 4 : 0)),
    original_logprob: -3, quality: {}, warning: '',
    stats: {rows: 3, tokens: 40, tokens_computed: 20, prefix_reuse: true, saved: 0.5}, ...extra,
  };
}

/** A host that answers the first highlight with the fixture, and each segment request `running` `polls` times
 * before its values. Its registry names no first map (the gradient stays it, whatever the shipped figures say;
 * confirm.test.ts follows a named first map). */
function fakeHost(polls = 1, extra: Partial<SegmentPayload> = {}) {
  const seen = new Map<string, number>();
  return fakeSalienceHost(withFirstMap(registry, null), (data) => {
    const key = `${data['segment_method']}@${data['granularity']}`;
    const n = (seen.get(key) ?? 0) + 1;
    seen.set(key, n);
    const status = {kind: 'seg', state: n > polls ? 'done' : 'running', done: n > polls ? 2 : 1, total: 2,
                    elapsed_s: 0.1, eta_s: n > polls ? null : 0.1, error: ''};
    return [{salience: n > polls ? {segments: segmentAnswer(data, extra), detail: status} : {detail: status}}];
  });
}

const dp = (): IndexedInputLike => ({id: 'dp1', data: {_id: 'dp1', prompt: 'The cat sat. It was red.', target: 'Red cat.'},
                                     meta: {}});
const segmentCalls = (calls: Data[]) => calls.filter((c) => c['detail'] === 'segments');

/** A controller with the registry read, segmenting by sentence (2 segments), and dp() selected. */
async function selectedBySentence(polls: number, extra: Partial<SegmentPayload> = {}) {
  const {host, calls} = fakeHost(polls, extra);
  const ctl = new SalienceController(host);
  ctl.registry();
  ctl.setSegmentation('sentence', '', 2);
  await ctl.select(dp());
  return {ctl, calls};
}

beforeEach(() => { vi.useFakeTimers(); });
afterEach(() => { vi.useRealTimers(); });

describe('segment methods in the controller', () => {
  it('shows the gradient first, then leave one sentence out once measured, and the gradient back on request', async () => {
    const {ctl, calls} = await selectedBySentence(1);
    // The first highlight is the gradient's; the default segment method's job starts right after it.
    expect(calls[0]['detail']).toBe('span');
    expect(ctl.method).toBe('grad_norm');
    expect(ctl.pendingDefault()).toBe('leave_one_out');
    expect(segmentCalls(calls)).toHaveLength(1);
    expect(segmentCalls(calls)[0]).toMatchObject({segment_method: 'leave_one_out', granularity: 'sentence',
                                                  removal: 'filler', target_span: `0:${T}`, pattern: ''});
    await vi.advanceTimersByTimeAsync(0);
    expect(ctl.segmentDetail).toMatchObject({state: 'running', done: 1, total: 2});
    expect(ctl.method).toBe('grad_norm');  // still measuring: the gradient stays on screen
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(segmentCalls(calls)).toHaveLength(2);  // the same request again: the poll
    expect(ctl.method).toBe('leave_one_out');
    expect(ctl.autoShown).toBe(true);
    expect(Array.from(ctl.tokenValues()!)).toEqual(segmentAnswer({granularity: 'sentence'}).token_values);
    expect(ctl.methodPayload()).toEqual({signed: true, matrix: null});
    // Worded from the record's facts (its kind: per sentence; its cost unit), not "by removing each" for every method.
    expect(ctl.precision()).toBe(`measured per sentence: ${REG.segment('leave_one_out')!.cost_unit}; 3 prompts scored, ` +
                                 '50 % of the work saved by the cached prefix');
    expect(ctl.precision()).toContain('one forward per segment');
    ctl.showGradient();
    expect(ctl.method).toBe('grad_norm');
    expect(ctl.pendingDefault()).toBeNull();  // no second automatic switch for this selection
    await vi.advanceTimersByTimeAsync(5 * POLL_MS);
    expect(ctl.method).toBe('grad_norm');
    ctl.dispose();
  });

  it('counts only the forwards that ran where leave one out took values from the first map', async () => {
    // The server's confirming leave one out reuses the sentences the first map verified ("reused" of them) and
    // scores the others: the status line says so, not "one forward per segment" (was: the record's cost unit).
    const stats = {rows: 2, tokens: 40, tokens_computed: 20, prefix_reuse: true, saved: 0.5};
    const some = await selectedBySentence(0, {quality: {reused: 1}, stats});
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(some.ctl.method).toBe('leave_one_out');
    expect(some.ctl.precision()).toBe("measured per sentence: one forward for each of 1 of 2 sentences; the other 1 " +
                                      "are the first map's exact values; 2 prompts scored, 50 % of the work saved by the cached prefix");
    some.ctl.dispose();
    const all = await selectedBySentence(0, {quality: {reused: 2}, stats: {...stats, rows: 1}});
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(all.ctl.precision()).toBe("measured per sentence: every sentence's value is the first map's exact " +
                                     'measurement (2 of 2); 1 prompt scored, 50 % of the work saved by the cached prefix');
    expect(all.ctl.precision()).not.toContain('one forward per segment');
    all.ctl.dispose();
  });

  it('re-measures on a change of granularity and stops polling the superseded job', async () => {
    const {ctl, calls} = await selectedBySentence(2);
    await vi.advanceTimersByTimeAsync(3 * POLL_MS);
    expect(ctl.method).toBe('leave_one_out');
    // Paragraphs also default to leave one out: the first map (the gradient: the host's registry names none) is
    // back on screen while leave one out is measured again per paragraph.
    ctl.setSegmentation('paragraph', '', 1);
    expect(ctl.method).toBe('grad_norm');
    expect(ctl.tokenValues()).not.toBeNull();
    expect(ctl.pendingDefault()).toBe('leave_one_out');
    expect(ctl.autoMeasuring()).toBe('leave_one_out');
    await vi.advanceTimersByTimeAsync(0);
    ctl.setSegmentation('line', '', 1);  // moved on before the paragraph job finished
    const paragraphPolls = segmentCalls(calls).filter((c) => c['granularity'] === 'paragraph').length;
    await vi.advanceTimersByTimeAsync(4 * POLL_MS);
    expect(segmentCalls(calls).filter((c) => c['granularity'] === 'paragraph')).toHaveLength(paragraphPolls);
    expect(ctl.segmentValues()?.granularity).toBe('line');
    expect(ctl.tokenValues()![0]).toBe(100);
    // Back to sentences: measured before, shown from the cache without a request.
    const before = calls.length;
    ctl.setSegmentation('sentence', '', 2);
    expect(ctl.tokenValues()![0]).toBe(1);
    expect(calls).toHaveLength(before);
    // Words have no default segment method: the switched-to method gives way to the gradient.
    ctl.setSegmentation('word', '', 6);
    expect(ctl.method).toBe('grad_norm');
    expect(ctl.autoShown).toBe(false);
    ctl.dispose();
  });

  it('measures per word only on request, naming the cost, and says what the server refused', async () => {
    const {host, calls} = fakeHost(0);
    const ctl = new SalienceController(host);
    ctl.registry();
    await ctl.select(dp());  // word granularity (the element's default): no segment job
    await vi.advanceTimersByTimeAsync(2 * POLL_MS);
    expect(segmentCalls(calls)).toHaveLength(0);
    ctl.setSegmentation('word', '', 6);
    ctl.setMethod('leave_one_out');
    expect(ctl.segmentsOnRequest()).toBe(true);
    expect(ctl.segmentCost()).toBe(7);  // one forward per word, plus the unedited prompt
    expect(ctl.segmentCost('ablation_surrogate')).toBe(33);  // its default 32 random ablations, plus the unedited
    expect(ctl.detailState()).toBe('off');
    expect(segmentCalls(calls)).toHaveLength(0);
    ctl.measureSegments();
    await vi.advanceTimersByTimeAsync(0);
    expect(segmentCalls(calls)).toHaveLength(1);
    expect(segmentCalls(calls)[0]).toMatchObject({granularity: 'word', segment_method: 'leave_one_out'});
    expect(ctl.tokenValues()![0]).toBe(100);
    // A refusal (4xx) is shown, one line, with the server's words.
    host.getPreds = async () => { throw new Error('Uncaught error: Input fields "granularity": "regex": no removable segments. Fix: ...\n\nDetails: tb'); };
    ctl.setMethod('ablation_surrogate');
    ctl.setSegmentation('regex', 'zzz', 0);
    await vi.advanceTimersByTimeAsync(0);
    expect(ctl.segmentError).toBe('Input fields "granularity": "regex": no removable segments. Fix: ...');
    ctl.dispose();
  });

  it('sends the count field of a counted segment method and the pattern only with regex', () => {
    const span = {t0: 1, t1: 2};
    const sur = segmentInput(REG, dp(), {method: 'ablation_surrogate', count: 32, granularity: 'regex', pattern: 'a+',
                                         removal: 'delete', span}, 3).data;
    expect(sur).toMatchObject({detail: 'segments', segment_method: 'ablation_surrogate', surrogate_masks: 32,
                               pattern: 'a+', removal: 'delete', target_span: '1:2'});
    const loo = segmentInput(REG, dp(), {method: 'leave_one_out', count: 0, granularity: 'line', pattern: 'a+',
                                         removal: 'filler', span}, 4).data;
    expect(loo['pattern']).toBe('');
    expect('surrogate_masks' in loo).toBe(false);
    expect(() => segmentInput(REG, dp(), {method: 'grad_norm', count: 0, granularity: 'line', pattern: '',
                                          removal: 'filler', span}, 5)).toThrow(/not a segment method/);
  });
});


describe('Compare an edit with a segment method on screen', () => {
  it('asks the compare model for both prompts\' segment values and colours the prompt with them', async () => {
    const {ctl, calls} = await selectedBySentence(0);
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.method).toBe('leave_one_out');
    // The pinned datapoint: the compare model answers the pinned salience (the fixture) and both sides'
    // segment values (pinned ×3, selected as the module's own request answers).
    const compareCalls: Data[] = [];
    const own = ctl['host'] as SalienceHost;
    const host: SalienceHost = {
      ...own,
      models: () => ({...own.models(), _m_compare: {spec: {output: {compare: {__name__: 'LitType'}}}}}),
      getPreds: async (inputs, model, ...rest) => {
        if (model !== '_m_compare') return own.getPreds(inputs, model, ...rest);
        const data = inputs[0].data;
        compareCalls.push(data);
        const side = {response: ' x', ids: [1], tokens: [' x'], logprobs: [-1], total: -1};
        const seg = segmentAnswer(data);
        return [{compare: {under_a: side, under_b: side, delta: 0, per_token_delta: [0], forwards: 1,
                           pinned_salience: structuredClone(fixture), pinned_salience_passes: 0,
                           old_answer_salience: null, old_answer_segments: null,
                           pinned_segments: {segments: {...seg, token_values: seg.token_values.map((v) => 3 * v)}},
                           selected_segments: {segments: seg}}}];
      },
    };
    const room = new CompareRoom(host);
    const pinned: IndexedInputLike = {id: 'dp0', data: {_id: 'dp0', prompt: 'The cat sat. It was blue.', target: 'Red cat.'}, meta: {}};
    const patterns = {matches: () => []} as unknown as PatternMatcher;
    // Pinned while the gradient is on screen: the gradient's comparison, no segment fields.
    ctl.showGradient();
    await room.update(true, pinned, dp());
    room.sync(ctl);
    await vi.advanceTimersByTimeAsync(0);
    expect(compareCalls[compareCalls.length - 1]!['segment_method']).toBeUndefined();
    expect(compareCalls[compareCalls.length - 1]!['compare_view']).toBe('edit');  // Compare an edit's view, always sent
    expect(room.model(ctl, 'sentence', '', 1, patterns)!.values).not.toBeNull();
    // Leave one out chosen: both prompts are measured; the prompt waits for them, saying so.
    ctl.setMethod('leave_one_out');
    room.sync(ctl);
    const waiting = room.model(ctl, 'sentence', '', 1, patterns)!;
    expect(waiting.values).toBeNull();
    expect(waiting.valuesNote).toBe('Measuring Leave one segment out on both prompts…');
    await vi.advanceTimersByTimeAsync(0);
    expect(compareCalls[compareCalls.length - 1]).toMatchObject({segment_method: 'leave_one_out', granularity: 'sentence', removal: 'filler',
                                               with_pinned_salience: true, pinned_prompt: 'The cat sat. It was blue.'});
    expect(compareCalls[compareCalls.length - 1]!['target_span']).toBeUndefined();  // both whole responses
    const m = room.model(ctl, 'sentence', '', 1, patterns)!;
    expect(m.values).not.toBeNull();
    // Per aligned prompt segment: the token values summed; the pinned side's are 3× the selected side's.
    // (NaN: a segment only one side has.)
    const shown = Array.from(m.values!.b).map((v, i) => [v, m.values!.a[i]])
        .filter(([b, a]) => Number.isFinite(b) && Number.isFinite(a) && b !== 0);
    expect(shown.length).toBeGreaterThan(0);
    for (const [b, a] of shown) expect(a).toBeCloseTo(3 * b!, 9);
    expect(room.scaleFor(ctl)).toBe(m.values!.scale.scale);  // the map takes it: one scale for one method and prompt
    expect(calls.length).toBeGreaterThan(0);
    room.dispose();
    ctl.dispose();
  });
});
