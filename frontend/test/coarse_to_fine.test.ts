/**
 * Coarse-to-fine leave one out in the browser: which segments it measured (src/salience/coarse.ts: the notes of
 * the hatched, unmeasured ones, the status summary, the staged progress), the payload check, and at word
 * granularity the controller's measure button running the server's request default (word_verified: an estimate,
 * then the best quarter measured; coarse-to-fine at token) with every word one click away. Against a stand-in for LIT's services.
 */
import {afterEach, beforeEach, describe, expect, it, vi} from 'vitest';

import registry from './fixtures/method_registry.json';
import fixture from './fixtures/small_payload.json';
import {coarseNote, describeRefinement, ESTIMATE_MARK, stageProgress, unmeasuredNotes} from '../src/salience/coarse.js';
import {SalienceController} from '../src/salience/controller.js';
import {POLL_MS} from '../src/salience/page.js';
import type {DetailStatus} from '../src/salience/payload.js';
import {parseSegments, type SegmentPayload} from '../src/salience/segment_payload.js';
import {parseRegistry} from '../src/shared/methods.js';
import type {IndexedInputLike} from '../src/shared/request.js';
import {fakeSalienceHost} from './support/salience_host.js';

const N = fixture.tokens.length;
const T = N - fixture.n_prompt_tokens;
const REG = parseRegistry(registry);
const C2F = REG.requestSegment('token')!.name;  // coarse-to-fine: the token button
const WORDS = REG.requestSegment('word')!.name;  // the word button: estimate, then the best quarter measured

function payload(method: string, measured?: boolean[]): SegmentPayload {
  const out: SegmentPayload = {
    method, granularity: 'word', pattern: null, removal: 'filler', span: [0, T], count: 0, values: [0.5, 0.01, 0.01],
    spans: [[0, 3], [4, 7], [8, 11]], segment_index: [0, 2, 4], token_values: Array.from({length: N}, () => 0),
    original_logprob: -3, quality: {}, warning: '', stats: {rows: 4, tokens: 40, tokens_computed: 20, prefix_reuse: true, saved: 0.5},
  };
  if (measured) {
    out.measured = measured;
    out.coarse_values = measured.map((m) => (m ? null : 0.02));
    out.coarse_granularity = measured.map((m) => (m ? '' : 'sentence'));
  }
  return out;
}

describe('what coarse-to-fine measured', () => {
  it('notes each unmeasured segment by its index into the segmentation, with its unit and coarse value', () => {
    const notes = unmeasuredNotes(payload(C2F, [true, false, false]));
    expect(Array.from(notes.keys())).toEqual([2, 4]);
    expect(notes.get(2)).toBe('inside a sentence that did not matter (coarse value 0.0200)');
    expect(coarseNote('paragraph', -0.123456)).toBe('inside a paragraph that did not matter (coarse value -0.123)');
    expect(unmeasuredNotes(payload('leave_one_out')).size).toBe(0);  // every value measured: no marks
    expect(unmeasuredNotes(null).size).toBe(0);
  });

  it('summarises the measured share, and nothing when all were measured', () => {
    expect(describeRefinement(payload(C2F, [true, false, false]), 'word')).toBe(
        '1 of 3 words measured exactly; hatched: inside a sentence that did not matter (its coarse value shared among its parts)');
    expect(describeRefinement(payload('leave_one_out'), 'word')).toBe('');
  });

  it('words an estimated segment as an estimate, not as a unit that did not matter (attention_verified)', () => {
    const p = payload(C2F, [true, false, false]);
    p.coarse_granularity = ['', ESTIMATE_MARK, 'sentence'];
    expect(unmeasuredNotes(p).get(2)).toBe('estimated, not measured (estimate 0.0200)');
    expect(unmeasuredNotes(p).get(4)).toBe('inside a sentence that did not matter (coarse value 0.0200)');
    expect(describeRefinement(p, 'word')).toBe('1 of 3 words measured exactly; hatched: inside a sentence that did not ' +
        'matter (its coarse value shared among its parts); estimated, not measured');
  });

  it('shows the stage of a staged job: coarse pass, then refining a of b', () => {
    const d = (stage?: string): DetailStatus => ({kind: 'seg', state: 'running', done: 4, total: 9, elapsed_s: 1, eta_s: 2,
                                                   error: '', ...(stage ? {stage} : {})});
    // The job counts the edited prompts; the line adds the unedited prompt's forward, as the cost and stats.rows do.
    expect(stageProgress(d('coarse pass'))).toBe('coarse pass: 5 / 10 forwards');
    expect(stageProgress(d('refining'))).toBe('refining: 5 / 10 forwards');
    expect(stageProgress(d())).toBe('5 / 10 forwards');
  });

  it('refuses marks that do not give one entry per segment', () => {
    const bad = payload(C2F, [true, false, false]);
    bad.coarse_values = [null];
    expect(() => parseSegments({segments: bad}, N)).toThrow(/one entry per segment/);
    expect(parseSegments({segments: payload(C2F, [true, false, false])}, N).values?.measured).toEqual([true, false, false]);
  });
});

describe('the measure button at word granularity', () => {
  const KNOWN = REG.segment('leave_one_out')!.known_detail!;  // how many words the server measured already
  function fakeHost(serverKnown: {method: string; measured: number} | null = null) {
    return fakeSalienceHost(registry, (data) => {
      const status = {kind: 'seg', state: 'done', done: 3, total: 3, elapsed_s: 0.1, eta_s: null, error: ''};
      const method = data['segment_method'] as string;
      const p = payload(method, method === WORDS ? [true, false, false] : undefined);
      if (method === WORDS) p.coarse_granularity = ['', ESTIMATE_MARK, ESTIMATE_MARK];
      if (method === 'leave_one_out') p.quality = {reused: 1};  // the word button's measured word, taken by the server
      return [{salience: {segments: p, detail: status}}];
    }, {}, serverKnown);
  }
  const dp = (): IndexedInputLike => ({id: 'dp1', data: {_id: 'dp1', prompt: 'The cat sat. It was red.', target: 'Red cat.'},
                                       meta: {}});

  beforeEach(() => { vi.useFakeTimers(); });
  afterEach(() => { vi.useRealTimers(); });

  it('runs the estimate-then-best-quarter method from leave one word out, and every word stays one click away', async () => {
    expect(WORDS).not.toBe(C2F);
    const {host, calls} = fakeHost();
    const ctl = new SalienceController(host);
    ctl.registry();
    await ctl.select(dp());
    ctl.setSegmentation('word', '', 40);
    ctl.setMethod('leave_one_out');
    expect(ctl.segmentsOnRequest()).toBe(true);
    expect(ctl.requestDefault()?.name).toBe(WORDS);
    expect(ctl.isRequestDefault()).toBe(false);
    expect(ctl.segmentCost()).toBe(40 + 1);  // nothing measured yet: every word
    // Its cost from its published budget: a quarter of 40 words is 10 forwards, + the unedited prompt's; every word 41.
    expect(ctl.segmentCost(WORDS)).toBe(10 + 1);
    expect(ctl.segmentCost('leave_one_out')).toBe(40 + 1);
    ctl.setSegmentation('word', '', 6);  // at least five: 5 of 6 words
    expect(ctl.segmentCost(WORDS)).toBe(5 + 1);
    ctl.measureWith(WORDS);
    await vi.advanceTimersByTimeAsync(POLL_MS);
    const segs = calls.filter((c) => c['detail'] === 'segments');
    expect(segs).toHaveLength(1);
    expect(segs[0]).toMatchObject({segment_method: WORDS, granularity: 'word'});
    expect(ctl.method).toBe(WORDS);
    expect(ctl.isRequestDefault()).toBe(true);
    expect(ctl.requestDefault()).toBeNull();  // on screen already
    expect(ctl.segmentValues()?.measured).toEqual([true, false, false]);
    expect(ctl.precision()).toBe(`measured per word by ${REG.label(WORDS)}: 4 forwards, 1 of 3 words exactly, 50 % of the work saved by the cached prefix`);
    // Every word: the method on screen, measured on request; its cost counts only the words the button did not
    // measure (the server takes that one's exact value: 6 - 1 words, + the unedited prompt), and its result says so.
    ctl.setMethod('leave_one_out');
    expect(ctl.segmentCost()).toBe(6 - 1 + 1);
    ctl.measureSegments();
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.precision()).toBe(`measured per word: one forward for each of 2 of 3 words; the other 1 are ${REG.label(WORDS)}'s ` +
        'exact values; 4 prompts scored, 50 % of the work saved by the cached prefix');
    expect(calls.filter((c) => c['detail'] === 'segments').map((c) => c['segment_method'])).toEqual([WORDS, 'leave_one_out']);
    // At token granularity the button runs coarse-to-fine; at sentence there is no request default: leave one out is
    // measured at once, as before.
    ctl.setSegmentation('token', '', 12);
    expect(ctl.requestDefault()?.name).toBe(C2F);
    ctl.setSegmentation('sentence', '', 2);
    expect(ctl.requestDefault()).toBeNull();
    ctl.dispose();
  });

  /** A fresh page on leave one out at word (6 words) whose server answers `known` to the known question. */
  async function freshPage(known: {method: string; measured: number}) {
    const {host, calls} = fakeHost(known);
    const ctl = new SalienceController(host);
    ctl.registry();
    await ctl.select(dp());
    ctl.setSegmentation('word', '', 6);
    ctl.setMethod('leave_one_out');
    await vi.advanceTimersByTimeAsync(0);
    return {ctl, calls};
  }

  it('on a fresh page, counts the words the server measured for another page (its word button) in the cost', async () => {
    const {ctl, calls} = await freshPage({method: WORDS, measured: 1});
    // Asked once, without starting a job; the button then states 6 - 1 words + the unedited prompt (was: 7).
    const asked = calls.filter((c) => c['detail'] === KNOWN);
    expect(asked).toHaveLength(1);
    expect(asked[0]).toMatchObject({segment_method: 'leave_one_out', granularity: 'word'});
    expect(calls.filter((c) => c['detail'] === 'segments')).toHaveLength(0);
    expect(ctl.segmentCost()).toBe(6 - 1 + 1);
    // The result names the method whose values the server took, not "the first map's".
    ctl.measureSegments();
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(ctl.precision()).toBe(`measured per word: one forward for each of 2 of 3 words; the other 1 are ${REG.label(WORDS)}'s ` +
        'exact values; 4 prompts scored, 50 % of the work saved by the cached prefix');
    expect(calls.filter((c) => c['detail'] === KNOWN)).toHaveLength(1);
    ctl.dispose();
  });

  it('on a fresh page, states no forward where the server holds the method\'s own result (another page measured it)', async () => {
    const {ctl} = await freshPage({method: 'leave_one_out', measured: 6});
    expect(ctl.segmentCost()).toBe(0);  // was 6 - 6 + 1: the unedited prompt's forward, which does not run either
    ctl.dispose();
  });
});
