import {describe, expect, it} from 'vitest';

import {bandPath, chartValues, fractions, linearScale, linePath, paddedExtent} from '../src/explain/chart.js';
import {contrastiveSegments, strongestSegments} from '../src/explain/contrastive.js';
import {aopcRows, boundView, preliminaryLabel} from '../src/explain/curves.js';
import {igAutoAdvice, igAutoSummary} from '../src/explain/ig_auto.js';
import {
  describeStatus, explainInput, explainModelFor, igAutoSettings, mergePieces, percent, progressFraction, reduceFields,
  reductionMethod, resultKey, testedMethods, curveColor,
} from '../src/explain/logic.js';
import {parseContrastive, parseCurves, parseIgAuto, type CurvesPayload, type IgAutoPayload} from '../src/explain/payload.js';
import type {SharedTarget} from '../src/shared/target_store.js';
import {parseRegistry} from '../src/shared/methods.js';
import registry from './fixtures/method_registry.json';

/** The server's method registry (labels, IG's most steps), as published. */
const REG = parseRegistry(registry);
const label = (m: string) => REG.label(m);
const IG_MAX = REG.extra('integrated_gradients')!.max_count;

const target: SharedTarget = {
  datapointId: 'dp1', input: {prompt: 'Hello world. Bye.', system: ''}, salienceModel: '_smollm2_salience',
  text: 'Hello world. Bye. Ok', promptEnd: 17, tokens: ['Hello', ' world', '.', ' Bye', '.', ' Ok'],
  offsets: [[0, 5], [5, 11], [11, 12], [12, 16], [16, 17], [17, 20]], nPromptTokens: 5, t0: 0, t1: 1,
  method: 'grad_norm', granularity: 'sentence',
};

function curves(): CurvesPayload {
  return {
    span: [0, 1], granularity: 'sentence', removal: 'filler', filler: ' ', n_segments: 4, n_removed: [0, 2, 4],
    original_logprob: -1, empty_logprob: -5, methods: ['grad_norm', 'grad_x_input'],
    curves: {
      grad_norm: {deletion: {logprobs: [-1, -4, -5], aopc: 2.0}},
      grad_x_input: {deletion: {logprobs: [-1, -2, -5], aopc: 1.0}},
      random: {deletion: {logprobs: [-1, -3, -5], aopc: 1.5, low: [-1, -3.5, -5], high: [-1, -2.5, -5]}},
    },
    gaps: {}, n_random: 3, seconds: 1,
  };
}

describe('explain requests', () => {
  it('names the explain model after the salience model', () => {
    expect(explainModelFor('_smollm2_salience')).toBe('_smollm2_explain');
    expect(explainModelFor('gpt2')).toBe('_gpt2_explain');
  });

  it('sends the datapoint, the action and the target span under a fresh id', () => {
    const a = explainInput(target, 'curves', {steps: 5});
    const b = explainInput(target, 'curves', {steps: 5});
    expect(a.id).not.toBe(b.id);
    expect(a.data).toMatchObject({prompt: 'Hello world. Bye.', explain_action: 'curves', steps: 5, target_span: '0:1'});
    expect(a.data['_id']).toBe(a.id);
    expect(explainInput(target, 'status').data['target_span']).toBeUndefined();
  });

  it('keys results by datapoint, span and granularity (flips ignore granularity)', () => {
    const other = {...target, t1: 2};
    expect(resultKey(target, 'curves')).not.toBe(resultKey(other, 'curves'));
    expect(resultKey(target, 'curves')).not.toBe(resultKey({...target, granularity: 'word'}, 'curves'));
    expect(resultKey(target, 'flips')).toBe(resultKey({...target, granularity: 'word'}, 'flips'));
    // Contrastive explains the selected span against the foil at its position: another span, another result.
    expect(resultKey(target, 'contrastive', 'x')).not.toBe(resultKey(other, 'contrastive', 'x'));
    expect(resultKey(null, 'curves')).toBe('');
  });
});

describe('curves payload and chart', () => {
  it('validates the payload', () => {
    expect(parseCurves(curves()).methods).toEqual(['grad_norm', 'grad_x_input']);
    const bad = curves();
    bad.curves['grad_norm']!.deletion!.logprobs = [-1];
    expect(() => parseCurves(bad)).toThrow(/grad_norm\.deletion\.logprobs has 1 points, expected 3/);
    expect(() => parseCurves({n_removed: [0, 1], curves: {}})).toThrow(/curves.random/);
  });

  it('ranks methods by their AOPC gap to random', () => {
    const rows = aopcRows(curves(), 'deletion', label);
    expect(rows.map((r) => r.method)).toEqual(['grad_norm', 'grad_x_input']);
    expect(rows[0].gap).toBeCloseTo(0.5);
    expect(rows[1].gap).toBeCloseTo(-0.5);
    expect(aopcRows(curves(), 'insertion', label)).toEqual([]);
  });

  it('shows both orderings of a signed method with the baselines and the verdicts of the table', () => {
    const p = curves();
    const row = (name: string, ordering: 'value' | 'signed' | 'abs', aopc: number, verdict: string) => ({
      mode: 'deletion' as const, method: name.replace(/:abs$/, ''), ordering, name, aopc, random_aopc: 1.5,
      random_std: 0.1, n_random: 10, length_aopc: 1.8, gap: aopc - 1.5, gap_length: aopc - 1.8,
      verdict: verdict as 'worse'});
    p.table = [row('grad_norm', 'value', 2.0, 'beats random and length'), row('grad_x_input', 'signed', 1.0, 'worse'),
               row('grad_x_input:abs', 'abs', 1.7, 'within noise')];
    const rows = aopcRows(p, 'deletion', label);
    expect(rows.map((r) => [r.name, r.verdict])).toEqual([
      ['grad_norm', 'beats random and length'], ['grad_x_input:abs', 'within noise'], ['grad_x_input', 'worse']]);
    expect(rows[1].label).toBe('Gradient × input (largest |value| first)');
    expect(rows[2].label).toBe('Gradient × input (most positive first)');
    expect(rows[0].gapLength).toBeCloseTo(0.2);
    expect(rows[0].randomStd).toBe(0.1);
    expect(rows[0].length).toBe(1.8);
  });

  it('says when the prompt cannot decide, from the upper bound of the payload', () => {
    const p = curves();
    expect(boundView(p, 'deletion', label)).toBeNull();  // an older payload: no bound, no claim
    p.noise_sigmas = 2;
    p.curves['best'] = {deletion: {logprobs: [-1, -4.5, -5], aopc: 2.25}, insertion: {logprobs: [-5, -2, -1], aopc: 2.5}};
    p.upper_bound = {name: 'best', rows: 12, undecidable: 'not decidable on this prompt',
                     search: {deletion: 'exhaustive', insertion: 'grad_norm'}, decidable: {deletion: false, insertion: true}};
    const del = boundView(p, 'deletion', label)!;
    expect(del).toMatchObject({name: 'best', aopc: 2.25, decidable: false, search: 'exact search over every order'});
    expect(del.text).toMatch(/^Not decidable on this prompt: even the best order found \(exact search over every order, AOPC 2\.250\) does not beat random and length by 2× the random spread/);
    const ins = boundView(p, 'insertion', label)!;
    expect(ins.decidable).toBe(true);
    // A tested curve that beat the greedy search is named by the registry's label.
    expect(ins.search).toBe(`the order of ${REG.label('grad_norm')} (greedy search found none better)`);
    expect(ins.text).toMatch(/^Best order found .*AOPC 2\.500; an order can beat random and length/);
    // The bound's curve is part of the chart's y range.
    expect(chartValues(p, 'deletion')).toContain(-4.5);
    p.upper_bound.decidable = {};
    expect(boundView(p, 'deletion', label)).toBeNull();
  });

  it('maps points to SVG paths', () => {
    const p = curves();
    expect(fractions(p)).toEqual([0, 0.5, 1]);
    const sx = linearScale(0, 1, 0, 100);
    const sy = linearScale(-5, -1, 50, 0);
    expect(linePath([0, 0.5, 1], [-1, -3, -5], sx, sy)).toBe('M0.0 0.0 L50.0 25.0 L100.0 50.0');
    expect(linePath([0, 1], [NaN, -5], sx, sy)).toBe('M100.0 50.0');
    expect(bandPath([0, 1], [-5, -5], [-1, -1], sx, sy)).toBe('M0.0 0.0 L100.0 0.0 L100.0 50.0 L0.0 50.0 Z');
    expect(chartValues(p, 'deletion')).toContain(-3.5);
    expect(paddedExtent([-5, -1])).toEqual([-5.2, -0.8]);
    expect(paddedExtent([2, 2])).toEqual([1.5, 2.5]);
    expect(paddedExtent([])).toEqual([0, 1]);
  });
});

describe('status and pieces', () => {
  it('describes progress', () => {
    const s = {action: 'curves', stage: 'curves', done: 3, total: 12, elapsed_s: 1};
    expect(describeStatus(s, 'x')).toBe('Scoring edited prompts: 3 / 12 (25%)');
    // The stage's time left, from the same estimator as every job (issue 43).
    expect(describeStatus({...s, eta_s: 55, eta_low_s: 40, eta_high_s: 70}, 'x'))
        .toBe('Scoring edited prompts: 3 / 12 (25%) · about 40–70 s left');
    // Contrastive tests report gradient passes (units) like the others: a determinate percentage.
    const c = {action: 'contrastive', stage: 'contrastive', done: 1, total: 3, elapsed_s: 0};
    expect(describeStatus(c, 'x')).toBe('Gradient passes: 1 / 3 (33%)');
    expect(progressFraction(c)).toBeCloseTo(1 / 3);
    expect(describeStatus({...c, done: 3}, 'x')).toBe('Gradient passes: 3 / 3 (100%)');
    // The stages before a test's own progress say what runs (lit_app/wrappers/explain.py STAGE_*).
    expect(describeStatus({...c, stage: 'generating', total: 0}, 'x')).toBe('Generating the response to explain…');
    // (tokens so far out of the server's --max_new_tokens)
    expect(describeStatus({...c, stage: 'generating', done: 16, total: 64}, 'x')).toBe(
        'Generating the response to explain: 16 / 64 (25%)');
    expect(describeStatus({...c, stage: 'waiting', total: 0}, 'x')).toBe(
        'Waiting for the model (a click in another module goes first)…');
    expect(describeStatus({...s, stage: 'salience', done: 0, total: 0}, 'x')).toBe(
        'Computing the salience maps to test (a forward and backward pass)…');
    expect(progressFraction(s)).toBe(0.25);
    expect(describeStatus(null, 'Starting…')).toBe('Starting…');
    expect(progressFraction({...s, total: 0})).toBeNull();
    // The curves' coarse pass, then its refinement (the status carries the coarse result from then on).
    expect(describeStatus({...s, stage: 'coarse_curves'}, 'x')).toBe('Coarse pass: scoring edited prompts: 3 / 12 (25%)');
    expect(describeStatus({...s, partial: {}}, 'x')).toBe('Refining: Scoring edited prompts: 3 / 12 (25%)');
    expect(describeStatus({...s, stage: 'upper_bound', partial: {}}, 'x')).toBe(
        'Refining: Searching the best order (the upper bound that says whether this prompt can decide): 3 / 12 (25%)');
  });

  it('labels a coarse curves result with what it has and what refines it', () => {
    const p = {n_removed: [0, 2, 4, 5, 7], n_random: 3, steps: 4, upper_bound: null,
               refining: {steps: 10, n_random: 10, upper_bound: true}} as unknown as CurvesPayload;
    expect(preliminaryLabel(p, true)).toBe(
        'Coarse: 4 steps, 3 random orders, no upper bound — refining to 10 steps, 10 random orders and the upper bound…');
    expect(preliminaryLabel(p, false)).toBe('Coarse: 4 steps, 3 random orders, no upper bound — the refinement to 10 ' +
        'steps, 10 random orders and the upper bound was stopped; run again for the full result.');
  });

  it('merges neighbouring pieces of the same kind', () => {
    expect(mergePieces([['a ', false], ['b ', false], ['c', true], ['', true], ['d', true], ['e', false]]))
        .toEqual([['a b ', false], ['cd', true], ['e', false]]);
  });
});

describe('contrastive map', () => {
  const payload = {
    text: 'Hello world. Bye.', tokens: ['Hello', ' world', '.', ' Bye', '.'],
    offsets: [[0, 5], [5, 11], [11, 12], [12, 16], [16, 17]] as Array<[number, number]>,
    special: [false, false, false, false, false], role_spans: [[0, 17, 'user']] as Array<[number, number, string]>,
    target: ' A', foil: ' B', target_logprob: -1, foil_logprob: -3,
    methods: {grad_x_input: {signed: true, values: [1, 2, 3, -1, -2]}},
  };

  it('sums token values per segment like the salience module', () => {
    const p = parseContrastive(payload);
    const {seg, values} = contrastiveSegments(p, 'grad_x_input', 'sentence');
    expect(seg.starts.length).toBe(2);
    expect(Array.from(values)).toEqual([6, -3]);
    expect(Array.from(contrastiveSegments(p, 'grad_x_input', 'word').values)).toEqual([1, 2, 3, -1, -2]);
    // The numbers beside the map: largest |value| first, ties in text order.
    const w = contrastiveSegments(p, 'grad_x_input', 'word');
    expect(strongestSegments(p.text, w.seg, w.values, 3).map((r) => r.value)).toEqual([3, 2, -2]);
  });

  it('rejects values of the wrong length', () => {
    expect(() => parseContrastive({...payload, methods: {g: {signed: true, values: [1]}}})).toThrow(/methods.g.values/);
  });
});

describe('IG steps needed', () => {
  function igAuto(): IgAutoPayload {
    return {
      span: [0, 2], steps: 32, stopped_by: 'tolerance', converged: true, tolerance: 0.05, relative_error: 0.031,
      error: -0.0124, delta: 0.4, max_steps: 64, schedule: [8, 16, 32, 64],
      tried: [{steps: 8, error: 0.2, relative_error: 0.5, seconds: 1}, {steps: 16, error: 0.06, relative_error: 0.15, seconds: 2},
              {steps: 32, error: -0.0124, relative_error: 0.031, seconds: 4}],
      seconds: 7,
    };
  }

  it('turns the controls into request fields, or says what to fix', () => {
    expect(igAutoSettings(5, 64, IG_MAX)).toEqual({ig_tolerance: 0.05, ig_steps: 64});
    expect(igAutoSettings(0, 64, IG_MAX)).toMatch(/Tolerance/);
    expect(igAutoSettings(5, 0, IG_MAX)).toMatch(/from 1 to 256/);
    expect(igAutoSettings(5, 2.5, IG_MAX)).toMatch(/whole number/);
    expect(igAutoSettings(5, 257, IG_MAX)).toMatch(/from 1 to 256/);
    expect(explainInput(target, 'ig_auto', igAutoSettings(5, 64, IG_MAX) as Record<string, unknown>).data)
        .toMatchObject({explain_action: 'ig_auto', ig_tolerance: 0.05, ig_steps: 64, target_span: '0:1'});
  });

  it('keys results by span and settings, not granularity', () => {
    expect(resultKey(target, 'ig_auto', '5|64')).toBe(resultKey({...target, granularity: 'word'}, 'ig_auto', '5|64'));
    expect(resultKey(target, 'ig_auto', '5|64')).not.toBe(resultKey({...target, t1: 2}, 'ig_auto', '5|64'));
    expect(resultKey(target, 'ig_auto', '5|64')).not.toBe(resultKey(target, 'ig_auto', '1|64'));
  });

  it('says the steps chosen, the error reached and whether the cap was hit', () => {
    expect(igAutoSummary(parseIgAuto(igAuto()))).toBe(
        '32 steps are enough: completeness error -0.0124 nats = 3.1% of F(x) − F(baseline) = 0.400, within the 5.0% tolerance.');
    // At the cap the result is the best count tried, not the last one.
    const tried = [{steps: 8, error: 0.2, relative_error: 0.5, seconds: 1}, {steps: 16, error: 0.048, relative_error: 0.12, seconds: 2},
                   {steps: 32, error: 0.12, relative_error: 0.3, seconds: 4}, {steps: 64, error: 0.08, relative_error: 0.2, seconds: 8}];
    const capped = {...igAuto(), stopped_by: 'cap' as const, converged: false, steps: 16, relative_error: 0.12,
                    error: 0.048, tried, needed_steps: null};
    expect(igAutoSummary(parseIgAuto(capped))).toBe(
        'Cap hit at 64 steps without meeting the 5.0% tolerance; the best count tried is 16 steps: completeness error ' +
        '0.0480 nats = 12% of F(x) − F(baseline) = 0.400.');
    expect(percent(0.0004)).toBe('0.040%');
  });

  it('advises only what works: the steps found, an estimate within the server\'s most, or another method', () => {
    expect(igAutoAdvice(igAuto(), 256)).toBe('Use 32 IG steps in the salience module for this span.');
    const base = {...igAuto(), stopped_by: 'cap' as const, converged: false, steps: 64, relative_error: 0.12, error: 0.048,
                  tried: [...igAuto().tried.slice(0, 2), {steps: 32, error: 0.1, relative_error: 0.25, seconds: 4},
                          {steps: 64, error: 0.048, relative_error: 0.12, seconds: 8}]};
    // Not falling steadily (the server's estimate is null): no step count is promised.
    expect(igAutoAdvice({...base, needed_steps: null}, 256)).toBe(
        'The error is not falling steadily as the steps double (50% → 15% → 25% → 12%), so no step count can be ' +
        'promised. For sizes on this span use Gradient × input; IG with 64 steps (the best tried) is off by 12%.');
    expect(igAutoAdvice({...base, needed_steps: 140}, 256)).toBe(
        'The error at least halved at each of the last two doublings; at that rate about 140 steps reach 5.0%: set ' +
        'Most steps to 140 ' +
        'and run again (this server allows up to 256).');
    expect(igAutoAdvice({...base, needed_steps: 900}, 256)).toBe(
        'At the last doubling\'s rate about 900 steps would be needed, more than this server allows (256). For sizes ' +
        'on this span use Gradient × input; IG with 64 steps (the best tried) is off by 12%.');
  });

  it('validates the payload', () => {
    expect(() => parseIgAuto({...igAuto(), tried: []})).toThrow(/"tried"/);
    expect(() => parseIgAuto({...igAuto(), stopped_by: 'time'})).toThrow(/stopped_by/);
    expect(() => parseIgAuto({...igAuto(), steps: 16})).toThrow(/last run/);
    expect(() => parseIgAuto({...igAuto(), stopped_by: 'cap', steps: 8})).toThrow(/best run/);
  });

  it('describes IG progress in steps with a percentage', () => {
    const s = {action: 'ig_auto', stage: 'ig_steps', done: 24, total: 120, elapsed_s: 3};
    expect(describeStatus(s, 'x')).toBe('IG steps: 24 / 120 (20%)');
    // After the first count the status carries the best so far.
    const partial = {tried: [], best_steps: 8, best_relative_error: 0.67};
    expect(describeStatus({...s, partial}, 'x')).toBe('IG steps: 24 / 120 (20%) · best so far: 8 steps, 67% error');
  });
});

describe('reduce prompt settings', () => {
  it('sends the removal, deleting text unless filler is chosen', () => {
    expect(reduceFields('grad_x_input', 'filler')).toEqual({methods: 'grad_x_input', removal: 'filler'});
    expect(reduceFields(undefined, 'delete')).toEqual({methods: 'grad_norm', removal: 'delete'});
    expect(reduceFields('grad_norm', 'blank')).toEqual({methods: 'grad_norm', removal: 'delete'});
    expect(explainInput(target, 'reduce', {granularity: 'word', ...reduceFields('grad_norm', 'filler')}).data)
        .toMatchObject({explain_action: 'reduce', removal: 'filler', methods: 'grad_norm', target_span: '0:1'});
  });

  it('keeps filler and delete results apart', () => {
    expect(resultKey(target, 'reduce', 'grad_norm|filler')).not.toBe(resultKey(target, 'reduce', 'grad_norm|delete'));
  });
});

describe('segment methods in the explanation tests', () => {
  const reg = parseRegistry(registry);
  it('are offered for the curves only, and never order input reduction', () => {
    expect(testedMethods(reg, 'curves').map((m) => m.name)).toEqual(
        ['grad_norm', 'grad_x_input', 'smooth_grad', 'leave_one_out', 'ablation_surrogate', 'coarse_to_fine',
         'attention_attribution', 'attention_verified', 'word_verified']);
    expect(testedMethods(reg, 'contrastive').map((m) => m.name)).toEqual(['grad_norm', 'grad_x_input', 'smooth_grad']);
    expect(reductionMethod(reg, ['leave_one_out', 'grad_x_input'])).toBe('grad_x_input');
    expect(reductionMethod(reg, ['ablation_surrogate'])).toBe('grad_norm');
    expect(curveColor('leave_one_out')).not.toBe(curveColor('ablation_surrogate'));
  });
});
