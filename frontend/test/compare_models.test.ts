import {describe, expect, it} from 'vitest';
import registry from './fixtures/method_registry.json';
import {comparedMethod, compareSides, crossInput, crossRows, modelPair, ownLogprob, pairShownBy,
        type Side} from '../src/salience/compare_models/logic.js';
import {parseRegistry} from '../src/shared/methods.js';
import {CompareModelsRoom} from '../src/salience/compare_models/room.js';
import {fakeServer} from './support/fake_server.js';
import {parseCross} from '../src/salience/compare/logic.js';
import {PINNED_PROMPT_FIELD, PINNED_TARGET_FIELD} from '../src/shared/fields.js';

const GEN = {spec: {input: {}, output: {response: {__name__: 'GeneratedText'}}}};
const SAL = {spec: {input: {}, output: {salience: {__name__: 'LitType'}}}};

/** "Q: add two" + response, one token per word (code point offsets), values by hand. */
function side(model: string, response: string, values: number[], logp: number[]): Side {
  const prompt = 'Q: add two';
  const text = prompt + response;
  const offsets: Array<[number, number]> = [[0, 2], [2, 6], [6, 10]];
  let at = prompt.length;
  for (const w of response.split(/(?= )/)) {
    offsets.push([at, at + w.length]);
    at += w.length;
  }
  return {model, text, promptEnd: prompt.length, offsets, roleSpans: [], values, targetLogprobs: logp};
}

describe('modelPair', () => {
  it('takes the first two selected generation models that have a salience companion', () => {
    const models = {a: GEN, _a_salience: SAL, b: GEN, _b_salience: SAL, c: GEN};
    expect(modelPair(['a', 'b'], models)).toEqual(['a', 'b']);
    expect(modelPair(['c', 'b', 'a'], models)).toEqual(['b', 'a']);  // c has no salience model
    expect(modelPair(['a'], models)).toBeNull();
  });
});

describe('compareSides', () => {
  it('aligns one prompt, puts both maps on one scale and takes B − A (hand values)', () => {
    const a = side('a', ' four', [1, -2, 0.5, 0], [-0.5]);
    const b = side('b', ' 4 ok', [0.5, 3, 0.5, 0, 0], [-1, -2]);
    const v = compareSides(a, b, true);
    expect(v.labels).toEqual(['a', 'b']);
    expect(v.responseA).toBe(' four');
    expect(v.responseB).toBe(' 4 ok');
    // Prompt words: "Q", ":", "add", "two" (the word granularity splits "Q:" into "Q" and ":").
    const finiteA = Array.from(v.a).filter(Number.isFinite);
    const sumA = finiteA.reduce((s, x) => s + x, 0);
    expect(sumA).toBeCloseTo(1 - 2 + 0.5, 12);
    const sumB = Array.from(v.b).filter(Number.isFinite).reduce((s, x) => s + x, 0);
    expect(sumB).toBeCloseTo(0.5 + 3 + 0.5, 12);
    expect(Array.from(v.diff)).toEqual(Array.from(v.b, (x, k) => x - v.a[k]));
    expect(v.prompts.segments.every((s) => s.kind === 'equal')).toBe(true);
    expect(v.scale).toMatchObject({signed: true, scale: 3});  // the largest |value| of either side
    expect(v.diffScale.scale).toBe(5);  // "add": 3 − (−2)
    expect(v.responses.segments.some((s) => s.kind !== 'equal')).toBe(true);
    expect(ownLogprob(b)).toBe(-3);
    // At the module's intensity: the legends end where the module's map does (scale / intensity).
    expect(compareSides(a, b, true, 'word', 2).scale).toEqual({signed: true, scale: 3, intensity: 2});
  });
});

describe('crossInput and crossRows', () => {
  it('asks a model for the other answer as a compare request pinned to the same prompt', () => {
    const sel = {id: 'x', data: {prompt: 'Q: add two', system: 's', target: ''}, meta: {}};
    const req = crossInput(sel, ' four', 'a');
    expect(req.data[PINNED_PROMPT_FIELD]).toBe('Q: add two');
    expect(req.data[PINNED_TARGET_FIELD]).toBe(' four');
    expect(req.data['prompt']).toBe('Q: add two');
    expect(req.id).not.toBe(crossInput(sel, ' 4 ok', 'b').id);
    const lp = (total: number) => ({response: 'r', ids: [1], tokens: ['r'], logprobs: [total], total});
    const crossA = parseCross({under_a: lp(-7), under_b: lp(-7), delta: 0, per_token_delta: [0], forwards: 2});
    const crossB = parseCross({under_a: lp(-9), under_b: lp(-9), delta: 0, per_token_delta: [0], forwards: 2});
    const a = side('a', ' four', [1, -2, 0.5, 0], [-0.5]);
    const b = side('b', ' 4 ok', [0.5, 3, 0.5, 0, 0], [-1, -2]);
    const rows = crossRows(compareSides(a, b, true), a, b, crossA, crossB);
    expect(rows).toEqual([{answerOf: 'a', underA: -0.5, underB: -7}, {answerOf: 'b', underA: -9, underB: -3}]);
  });
});

describe('activeModel (the salience module follows LIT\'s model selector)', () => {
  it('keeps the rendered model while selected, else takes the first selected', async () => {
    const {activeModel} = await import('../src/shared/request.js');
    expect(activeModel('a', ['a', 'b'])).toBe('a');
    expect(activeModel('a', ['b'])).toBe('b');  // a switched off
    expect(activeModel('', ['b', 'a'])).toBe('b');
    expect(activeModel('a', [])).toBe('a');
    expect(activeModel(undefined, [])).toBe('');
  });
});

describe('pairShownBy', () => {
  it('puts the section in the salience module of the pair’s first model only', () => {
    const models = {a: GEN, _a_salience: SAL, b: GEN, _b_salience: SAL, c: GEN};
    expect(pairShownBy('a', ['a', 'b'], models)).toEqual(['a', 'b']);
    expect(pairShownBy('b', ['a', 'b'], models)).toBeNull();
    expect(pairShownBy('b', ['c', 'b', 'a'], models)).toEqual(['b', 'a']);  // c has no salience model
    expect(pairShownBy('a', ['a'], models)).toBeNull();
  });
  it('says in the second model\'s module that its map keeps its own scale, and where both share one', () => {
    const models = {a: GEN, _a_salience: SAL, b: GEN, _b_salience: SAL, c: GEN};
    const note = (shown: string, selected: string[]) => {
      const room = new CompareModelsRoom(fakeServer(models, () => []).host);
      room.update(null, selected, shown);
      return room.ownScaleNote();
    };
    expect(note('b', ['a', 'b'])).toBe("scale of b alone; Compare models (in a's module) puts a and b on one scale");
    expect(note('a', ['a', 'b'])).toBe('');  // the first model's map takes the shared scale while the section shows it
    expect(note('b', ['b'])).toBe('');
    expect(note('c', ['a', 'b', 'c'])).toBe('');  // not one of the pair
  });
});

describe('comparedMethod', () => {
  const reg = parseRegistry(registry);
  it('takes the module’s token method, with the count of one computed on request', () => {
    expect(comparedMethod(reg, {method: 'grad_norm', gradient: 'grad_norm', counts: {}, segment: null}))
        .toEqual({method: 'grad_norm', label: 'Gradient norm', extra: null, segment: null, note: '', key: 'grad_norm'});
    expect(comparedMethod(reg, {method: 'integrated_gradients', gradient: 'integrated_gradients',
                                counts: {integrated_gradients: 32}, segment: null}))
        .toEqual({method: 'integrated_gradients', label: 'Integrated gradients (32 steps)', segment: null,
                  extra: {method: 'integrated_gradients', count: 32}, note: '', key: 'integrated_gradients#32'});
    // No count set yet: the registry's default.
    expect(comparedMethod(reg, {method: 'smooth_grad', gradient: 'smooth_grad', counts: {}, segment: null})?.extra)
        .toEqual({method: 'smooth_grad', count: 8});
  });

  it('takes a segment method with the module’s segmentation (not its span); waits for a method', () => {
    const ask = {method: 'ablation_surrogate', count: 32, granularity: 'sentence', pattern: '', removal: 'filler'};
    const m = comparedMethod(reg, {method: 'ablation_surrogate', gradient: 'integrated_gradients', counts: {},
                                   segment: {...ask, span: {t0: 2, t1: 3}}});
    expect(m).toEqual({method: 'ablation_surrogate', label: 'Ablation surrogate (ContextCite)', extra: null,
                       segment: ask, key: 'seg:ablation_surrogate#32@sentence//filler',
                       note: 'measured per sentence on each model\'s whole response'});
    // Not measured yet by the module (no settings): its gradient method.
    expect(comparedMethod(reg, {method: 'leave_one_out', gradient: 'grad_x_input', counts: {}, segment: null})?.method)
        .toBe('grad_x_input');
    expect(comparedMethod(reg, {method: '', gradient: '', counts: {}, segment: null})).toBeNull();
  });
});
