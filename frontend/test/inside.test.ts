import {describe, expect, it} from 'vitest';

import {
  addIntervention, describeIntervention, formatDelta, formatProb, formatRank, hashString,
  insideModels, interventionKey, interventionsJson, modelGroup, probPolyline, removeIntervention,
  searchStatus, setScope, settlesAt, describeTraced, shouldPoll, showToken, toggleMode, traceKey, traceTarget,
} from '../src/inside/logic.js';
import {comparisonRows, layerDeltas} from '../src/inside/run.js';
import {
  type IndexStatus, type InterventionPayload, type LayerTrace, parseIntervention, parseSearch, parseTrace, type SearchPayload,
  type TracePayload,
} from '../src/inside/payload.js';
import type {SharedTarget} from '../src/shared/target_store.js';

function preds(rank: number, prob: number) {
  return {ids: [5, 6], tokens: [' Paris', ' London'], probs: [0.6, 0.2], target_rank: rank, target_prob: prob};
}

function layer(i: number, rank: number, prob: number): LayerTrace {
  return {
    layer: i, before: preds(rank + 1, prob / 2), after: preds(rank, prob), max_coef: 3, ffn_norm: 1,
    sub_updates: [{layer: i, index: 7, coef: -1.5, norm: 2, score: 3, top_ids: [5], top_tokens: [' Paris']}],
  };
}

function trace(ranks: number[], probs: number[]): TracePayload {
  return {
    family: 'llama', ids: [1, 2, 3], position: 2, target_id: 5, target_token: ' Paris',
    layers: ranks.map((r, i) => layer(i, r, probs[i])), output: preds(ranks[ranks.length - 1], probs[probs.length - 1]),
    seconds: 0.1, t: 4, n_targets: 8,
  };
}

function shared(t0: number, t1: number): SharedTarget {
  return {
    datapointId: 'dp1', input: {prompt: 'q'}, salienceModel: '_smollm2_salience', text: 'q a b c',
    promptEnd: 1, tokens: ['<s>', 'q', ' a', ' b', ' c'], offsets: [[0, 0], [0, 1], [1, 3], [3, 5], [5, 7]],
    nPromptTokens: 2, t0, t1, method: 'grad_norm', granularity: 'word',
  };
}

describe('parsing', () => {
  it('accepts a well-formed trace and names the broken field', () => {
    const t = trace([3, 0], [0.1, 0.7]);
    expect(parseTrace(structuredClone(t)).layers).toHaveLength(2);
    const bad = structuredClone(t) as any;
    bad.layers[1].after.probs.pop();
    expect(() => parseTrace(bad)).toThrow(/layers\[1\]\.after/);
    const bad2 = structuredClone(t) as any;
    bad2.layers[1].layer = 5;
    expect(() => parseTrace(bad2)).toThrow(/layers\[1\]\.layer is 5/);
    expect(() => parseTrace(null)).toThrow(/no trace object/);
    expect(() => parseSearch({hits: []})).toThrow(/hits, index/);
    expect(() => parseIntervention({interventions: []})).toThrow(/interventions, before, after/);
  });
});

describe('models and targets', () => {
  it('derives the inside models from the salience model', () => {
    expect(modelGroup('_smollm2_salience')).toBe('smollm2');
    expect(modelGroup('mymodel')).toBe('mymodel');
    expect(insideModels('smollm2')).toEqual({trace: '_smollm2_inside_trace', intervene: '_smollm2_inside_intervene',
                                             search: '_smollm2_inside_search'});
  });
  it('traces the first token of the selected span', () => {
    expect(traceTarget(null)).toBeNull();
    const whole = traceTarget(shared(0, 3))!;
    expect(whole).toMatchObject({t: 0, nTargets: 3, token: ' a', whole: true, group: 'smollm2'});
    const one = traceTarget(shared(1, 3))!;
    expect(one).toMatchObject({t: 1, token: ' b', whole: false});
    expect(traceKey(one)).not.toBe(traceKey(whole));
    expect(traceKey(traceTarget({...shared(1, 2), granularity: 'token'})!)).toBe(traceKey(one));
    expect(traceTarget({...shared(0, 0), tokens: ['<s>', 'q']})).toBeNull();  // no response tokens
  });
  it('numbers the traced token as the salience module numbers the span (1-based, "of N")', () => {
    // The salience module says "tokens 2–3 of 3" for {t0: 1, t1: 3} (shared/tokens.ts, as every view).
    expect(describeTraced(traceTarget(shared(1, 3))!)).toBe(
        'response token 2 of 3 — the first of the selected tokens 2–3 of 3; click one token to trace it');
    expect(describeTraced(traceTarget(shared(1, 2))!)).toBe('response token 2 of 3');
    expect(describeTraced(traceTarget(shared(0, 3))!)).toMatch(/^response token 1 of 3 — the whole response/);
  });
});

describe('intervention list', () => {
  it('adds once, toggles, removes and serialises canonically', () => {
    let list = addIntervention([], 12, 300);
    list = addIntervention(list, 3, 9, 'on');
    list = addIntervention(list, 12, 300, 'on');  // already listed: unchanged
    expect(list).toEqual([{layer: 12, index: 300, mode: 'off', scope: 'all'}, {layer: 3, index: 9, mode: 'on', scope: 'all'}]);
    list = toggleMode(list, interventionKey({layer: 12, index: 300}));
    expect(list[0].mode).toBe('on');
    expect(interventionsJson(list)).toBe(
        '[{"layer":3,"index":9,"mode":"on","scope":"all"},{"layer":12,"index":300,"mode":"on","scope":"all"}]');
    expect(interventionsJson([...list].reverse())).toBe(interventionsJson(list));
    expect(removeIntervention(list, '3:9')).toEqual([{layer: 12, index: 300, mode: 'on', scope: 'all'}]);
    // off → on → on_layer_max → off; the scope is kept per intervention and sent.
    list = toggleMode(list, '12:300');
    expect(list[0].mode).toBe('on_layer_max');
    expect(toggleMode(list, '12:300')[0].mode).toBe('off');
    list = setScope(list, '3:9', 'position');
    expect(interventionsJson(list)).toBe(
        '[{"layer":3,"index":9,"mode":"on","scope":"position"},{"layer":12,"index":300,"mode":"on_layer_max","scope":"all"}]');
    expect(describeIntervention({layer: 3, index: 9, mode: 'on', scope: 'position', value: 12.3456, position: 40}))
        .toBe('L3·v9 on (12.3) @pos');
  });
  it('hashes strings stably', () => {
    expect(hashString('')).toBe('811c9dc5');  // FNV-1a offset basis
    expect(hashString('a')).toBe('e40c292c');  // FNV-1a("a")
    expect(hashString('[1]')).not.toBe(hashString('[2]'));
  });
});

describe('display', () => {
  it('formats probabilities, ranks and tokens', () => {
    expect(formatProb(0.8312)).toBe('0.831');
    expect(formatProb(0.04123)).toBe('0.0412');
    expect(formatProb(0.99971)).toBe('1.00');
    expect(formatProb(0.00041)).toBe('4.1e-4');
    expect(formatDelta(0.0123)).toBe('+0.012');
    expect(formatDelta(-0.000021)).toBe('−2.1e-5');
    expect(formatDelta(0)).toBe('±0');
    expect(formatProb(1e-9)).toBe('<1e-6');
    expect([0, 1, 2, 3, 10, 11, 12, 20, 21, 110].map(formatRank))
        .toEqual(['1st', '2nd', '3rd', '4th', '11th', '12th', '13th', '21st', '22nd', '111th']);
    expect(formatRank(4917)).toBe('4,918th');
    expect(showToken(' a\n')).toBe('␣a⏎');
    expect(showToken('')).toBe('∅');
  });
  it('draws p by layer on a 0..1 axis', () => {
    expect(probPolyline([0, 0.5, 1], 100, 10)).toBe('0.0,10.0 50.0,5.0 100.0,0.0');
    expect(probPolyline([2], 100, 10)).toBe('50.0,0.0');
    expect(probPolyline([], 100, 10)).toBe('');
  });
  it('finds where the target becomes and stays the top prediction', () => {
    expect(settlesAt(trace([5, 0, 2, 0, 0], [0, 0, 0, 0, 0]).layers)).toBe(3);
    expect(settlesAt(trace([5, 1], [0, 0]).layers)).toBe(-1);
  });
});

describe('comparison', () => {
  const before = trace([3, 0], [0.1, 0.7]);
  const after = trace([5, 2], [0.05, 0.1]);
  after.output = {...after.output, tokens: [' London', ' Paris']};
  const r: InterventionPayload = {
    interventions: [{layer: 1, index: 7, mode: 'off'}],
    before: {trace: before, generation: {text: 'Paris.', stopped_by: 'eos'}, n_prompt_tokens: 3,
             top_salient: [[1, ' France', 0.5], [2, ' capital', 0.2]], salience_method: 'grad_x_input',
             salience_total: 1, seconds: 1},
    after: {trace: after, generation: {text: 'London.', stopped_by: 'eos'}, n_prompt_tokens: 3,
            top_salient: [[1, ' France', 0.4], [2, ' capital', 0.3]], salience_method: 'grad_x_input',
            salience_total: 1, seconds: 1},
  };
  it('lists prediction, generation and salience before and after', () => {
    const rows = comparisonRows(r);
    expect(rows.map((x) => x.label)).toEqual(['p(␣Paris)', 'rank of ␣Paris', 'top prediction', 'generated',
                                              'most salient (grad_x_input)']);
    expect(rows[0]).toMatchObject({before: '0.700', after: '0.100 (−0.600)', changed: true});
    expect(rows[1]).toMatchObject({before: '1st', after: '3rd', changed: true});
    expect(rows[2]).toMatchObject({before: '␣Paris', after: '␣London'});
    expect(rows[3]).toMatchObject({before: 'Paris.', after: 'London.', changed: true});
    expect(rows[4]).toMatchObject({before: 'France, capital', after: 'France, capital', changed: false});
    expect(layerDeltas(r)).toEqual([{layer: 0, before: 0.1, after: 0.05}, {layer: 1, before: 0.7, after: 0.1}]);
  });
});

describe('search', () => {
  const s = (state: string, built: number, eta: Partial<IndexStatus> = {}): SearchPayload => ({
    query: 'Paris', tokens: [[5, ' Paris']], hits: [], total: 3, layers_searched: built, num_layers: 30,
    index: {kind: 'value_index', state: state as IndexStatus['state'], done: built, total: 30, elapsed_s: 12.4,
            error: 'boom', stage: 'building', eta_s: null, eta_low_s: null, eta_high_s: null, ...eta},
  });
  it('polls while the index build job is queued or running and says what was searched', () => {
    expect(shouldPoll(null)).toBe(false);
    expect(shouldPoll(s('running', 4))).toBe(true);
    expect(shouldPoll(s('queued', 0))).toBe(true);
    expect(shouldPoll(s('done', 30))).toBe(false);
    expect(shouldPoll(s('error', 2))).toBe(false);
    expect(shouldPoll(s('cancelled', 2))).toBe(false);
    expect(searchStatus(s('running', 4))).toBe(
        '3 values in layers 0–3 so far (4/30 layers indexed, 12 s); more appear as the index builds.');
    expect(searchStatus(s('running', 4, {eta_s: 50, eta_low_s: 40, eta_high_s: 60}))).toBe(
        '3 values in layers 0–3 so far (4/30 layers indexed, 12 s, about 40–60 s left); more appear as the index builds.');
    expect(searchStatus(s('running', 4, {waiting: true}))).toBe(
        '3 values in layers 0–3 so far (4/30 layers indexed, 12 s, waiting for the model); more appear as the index builds.');
    expect(searchStatus(s('done', 30))).toBe('3 values across all 30 layers.');
    expect(searchStatus(s('error', 2))).toBe('The value index failed: boom');
    expect(searchStatus(s('cancelled', 2))).toBe(
        '3 values in layers 0–1 so far (2/30 layers indexed); the index build stopped: search again to go on building it.');
  });
  it('a projection-ranked search needs no index and does not poll', () => {
    const p = {...s('building', 4), ranking: 'projection' as const, total: 46080};
    expect(shouldPoll(p)).toBe(false);
    expect(searchStatus(p)).toBe(
        'All 46,080 values of the 30 layers ranked by their projection score (E·v)[token]; strongest first.');
  });
});
