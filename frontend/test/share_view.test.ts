/**
 * "Share this view" from the salience controller (src/salience/share.ts shareView) against a stand-in for LIT's
 * services: a segment method not measured yet is refused in words with no request; once measured, the share
 * request carries its segment request's settings and the Test tab's finished faithfulness test of the target on
 * screen (shared/faithfulness_store.ts), and the page the wrapper answers is what is downloaded.
 */
import {afterEach, beforeEach, describe, expect, it, vi} from 'vitest';

import registry from './fixtures/method_registry.json';
import fixture from './fixtures/small_payload.json';
import {SalienceController} from '../src/salience/controller.js';
import {POLL_MS} from '../src/salience/page.js';
import {shareView} from '../src/salience/share.js';
import {faithfulnessStore} from '../src/shared/faithfulness_store.js';
import type {IndexedInputLike} from '../src/shared/request.js';
import {fakeSalienceHost, type Data} from './support/salience_host.js';

const downloads = vi.hoisted(() => [] as Array<{name: string; blob: Blob}>);
vi.mock('../src/shared/download.js', async (original) => ({
  ...(await original<typeof import('../src/shared/download.js')>()),
  download: (name: string, blob: Blob) => { downloads.push({name, blob}); },
}));

const N = fixture.tokens.length;
const T = N - fixture.n_prompt_tokens;
const PAGE = '<!DOCTYPE html><p>the page</p>';

/** Leave one out's values per sentence after `polls` polls; a share request answered with PAGE. */
function host(polls: number) {
  let n = 0;
  const segments = (data: Data) => {
    n += 1;
    const status = {kind: 'seg', state: n > polls ? 'done' : 'running', done: 1, total: 2, elapsed_s: 0.1, error: ''};
    const values = {method: data['segment_method'], granularity: data['granularity'], pattern: null,
                    removal: data['removal'], span: [0, T], count: 0, values: [2, -1], spans: [[17, 30], [30, 41]],
                    segment_index: [1, 2], token_values: Array.from({length: N}, (_, i) => (i < 4 ? 1 : 0)),
                    original_logprob: -3, quality: {}, warning: '',
                    stats: {rows: 3, tokens: 40, tokens_computed: 20, prefix_reuse: true, saved: 0.5}};
    return [{salience: n > polls ? {segments: values, detail: status} : {detail: status}}];
  };
  const fake = fakeSalienceHost(registry, segments);
  const ask = fake.host.getPreds;
  fake.host.getPreds = async (inputs, model, fields, message) =>
      model === '_m_share' ? (fake.calls.push(inputs[0].data), [{share: {html: PAGE}}]) : ask(inputs, model, fields, message);
  return fake;
}

const dp = (): IndexedInputLike => ({id: 'dp1', data: {_id: 'dp1', prompt: 'The cat sat. It was red.', target: 'Red cat.'},
                                     meta: {}});

beforeEach(() => { vi.useFakeTimers(); downloads.length = 0; });
afterEach(() => { vi.useRealTimers(); });

describe('share this view', () => {
  it('waits for a segment method\'s values, then sends its settings and the faithfulness test of this target', async () => {
    const {host: h, calls} = host(3);
    const ctl = new SalienceController(h);
    ctl.registry();
    ctl.setSegmentation('sentence', '', 2);
    await ctl.select(dp());
    ctl.setMethod('leave_one_out');
    const busy: boolean[] = [];
    await shareView(ctl, 'sentence', '', (on) => busy.push(on));
    expect(ctl.side).toEqual({kind: 'error', text: 'Share this view: Leave one segment out is not measured for this ' +
                                                  'target yet; share once its map is on screen.'});
    expect(calls.filter((c) => 'share_method' in c)).toHaveLength(0);
    expect(downloads).toHaveLength(0);

    await vi.advanceTimersByTimeAsync(4 * POLL_MS);
    expect(ctl.segmentValues()).not.toBeNull();
    const table = [{mode: 'deletion', name: 'leave_one_out', aopc: 1.25, random_aopc: 0.5, random_std: 0.1,
                    length_aopc: 0.7, verdict: 'beats random and length'}];
    faithfulnessStore.publish(ctl.salienceModel!, {datapointId: 'dp1', text: ctl.payload!.text, t0: 0, t1: T,
                                                   payload: {table, granularity: 'sentence', removal: 'filler',
                                                             span: [0, T], curves: {}}});
    await shareView(ctl, 'sentence', '', (on) => busy.push(on));
    const sent = calls.filter((c) => 'share_method' in c);
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({share_method: 'leave_one_out', granularity: 'sentence', removal: 'filler',
                                   target_span: `0:${T}`, faithfulness: {table, granularity: 'sentence', span: [0, T]}});
    expect(downloads).toHaveLength(1);
    expect(await downloads[0].blob.text()).toBe(PAGE);
    expect(busy).toEqual([true, false]);  // the refused share never started
    ctl.dispose();
  });
});
