import {describe, expect, it} from 'vitest';
import fixture from './fixtures/small_payload.json';
import {parsePayload} from '../src/salience/payload.js';
import {pinnedSelection} from '../src/shared/lit_module.js';
import {costText} from '../src/salience/compare/view.js';
import {alignTexts, changed, diffKeys} from '../src/salience/compare/alignment.js';
import {alignSegmentations} from '../src/salience/compare/alignment.js';
import {compareInput, compareModelName, describeDelta, differenceScale, isComparing, parseCross, promptValues,
        sharedScale, wholeResponseValues} from '../src/salience/compare/logic.js';
import {segment} from '../src/shared/aggregate/index.js';
import {COMPARE_VIEW_EDIT} from '../src/shared/fields.js';

// alignTexts on hand-derived texts: alignment_cases.test.ts (the cases pytest reads too).

describe('diffKeys', () => {
  it('gives difflib-style opcodes', () => {
    expect(diffKeys(['a', 'b', 'c'], ['a', 'x', 'c', 'd'])).toEqual(
        [['equal', 0, 1, 0, 1], ['replace', 1, 2, 1, 2], ['equal', 2, 3, 2, 3], ['insert', 3, 3, 3, 4]]);
    expect(diffKeys([], [])).toEqual([]);
    expect(diffKeys(['x', 'y'], ['y', 'x'])).toEqual([['insert', 0, 0, 0, 1], ['equal', 0, 1, 1, 2], ['delete', 1, 2, 2, 2]]);
    expect(changed(alignTexts('same words', 'same  words'))).toBe(false);
    expect(changed(alignTexts('same words', 'same word'))).toBe(true);
    expect(diffKeys(['a'], [])).toEqual([['delete', 0, 1, 0, 0]]);
  });
});

describe('scales (hand-derived; values per aligned segment and B − A: alignment_cases.test.ts)', () => {
  it('one shared scale for both sides, a signed one for the difference', () => {
    expect(sharedScale(true, [1, -5, NaN], [3], 2)).toEqual({signed: true, scale: 5, intensity: 2});
    expect(differenceScale([0.5, -2, NaN])).toEqual({signed: true, scale: 2, intensity: 1});
  });
  it('takes the shared scale from single prompt segments, as the map does, not from a replaced run\'s sum', () => {
    // One token per word; "aa" equal, "bb cc" replaced by "xx yy" (one aligned run), then the response "zz".
    const offsets: Array<[number, number]> = [[0, 2], [2, 5], [5, 8], [8, 11]];
    const segA = segment('aa bb cc zz', offsets, 'word'), segB = segment('aa xx yy zz', offsets, 'word');
    const prompts = alignSegmentations('aa bb cc zz', segA, 'aa xx yy zz', segB, [0, 8], [0, 8]);
    expect(prompts.segments.map((s) => s.kind)).toEqual(['equal', 'replace']);
    const v = promptValues(prompts, segA, [1, 3, 4, 50], segB, [1, -2, 2, 60], [8, 8], true, 2);
    expect(Array.from(v.a)).toEqual([1, 7]);  // the run's sum colours the run
    expect(Array.from(v.b)).toEqual([1, 0]);
    // The scale: the largest |value| of one prompt segment of either side (cc's 4), not the run's 7 nor the response's.
    expect(v.scale).toEqual({signed: true, scale: 4, intensity: 2});
    expect(v.diffScale).toEqual({signed: true, scale: 7, intensity: 2});
    // The replaced run colours each of its words by its own value (the maps'), not by the run's sum; an equal
    // segment has no pieces. Spans in code points of each side's text ("bb " 3–6, "cc" 6–8: the prompt ends at 8).
    expect(v.runs.a).toEqual([[], [{start: 3, end: 6, seg: 1, value: 3}, {start: 6, end: 8, seg: 2, value: 4}]]);
    expect(v.runs.b).toEqual([[], [{start: 3, end: 6, seg: 1, value: -2}, {start: 6, end: 8, seg: 2, value: 2}]]);
  });
});

describe('the compare request and payload', () => {
  const selected = {id: 'b', data: {prompt: 'P5', system: '', target: ''}, meta: {}};
  const pinned = {id: 'a', data: {prompt: 'P3', system: 'S', target: ''}, meta: {}};
  it('sends the pinned fields with the selected datapoint', () => {
    const input = compareInput(selected, pinned, COMPARE_VIEW_EDIT);
    expect(input.data).toMatchObject({prompt: 'P5', pinned_prompt: 'P3', pinned_system: 'S', pinned_target: '',
                                      compare_view: 'edit'});
    expect(input.id).toBe('b~compare-a');
    expect(compareModelName('smollm2')).toBe('_smollm2_compare');
  });
  it('sends the extra method\'s count and names it in the id', () => {
    const input = compareInput(selected, pinned, COMPARE_VIEW_EDIT, {ig_steps: 16, smooth_grad_samples: 0},
                               'integrated_gradients#16');
    expect(input.data).toMatchObject({ig_steps: 16, smooth_grad_samples: 0, pinned_prompt: 'P3', old_answer: false,
                                      with_pinned_salience: false});
    expect(input.id).toBe('b~compare-a-integrated_gradients#16');
    const view = compareInput(selected, pinned, COMPARE_VIEW_EDIT, {}, 'grad_norm', true, true);
    expect(view.data).toMatchObject({old_answer: true, with_pinned_salience: true});
    expect(view.id).toBe('b~compare-a-grad_norm-old-sal');
  });
  it('takes the whole response from the matrix, else from the span the payload holds', () => {
    const p = parsePayload(structuredClone(fixture));
    const T = p.target_logprobs.length;
    const m = p.methods['grad_x_input']!.matrix!;
    const whole = wholeResponseValues(p, 'grad_x_input', true)!;
    for (let i = 0; i < p.tokens.length; i++) expect(whole[i]).toBeCloseTo(m.reduce((s, row) => s + row[i], 0), 9);
    const partial = parsePayload({...structuredClone(fixture), methods: {grad_x_input: {signed: true, matrix: null}},
                                  spans: {[`0:${T}`]: {grad_x_input: p.tokens.map((_, i) => i)}}});
    expect(Array.from(wholeResponseValues(partial, 'grad_x_input', true)!)).toEqual(p.tokens.map((_, i) => i));
    expect(wholeResponseValues(partial, 'grad_norm', false)).toBeNull();
  });
  it('compares only with a pinned datapoint and another one selected', () => {
    expect(isComparing(true, pinned, selected)).toBe(true);
    expect(isComparing(false, pinned, selected)).toBe(false);
    expect(isComparing(true, pinned, pinned)).toBe(false);
    expect(isComparing(true, null, selected)).toBe(false);
  });
  it('parses and names the broken field', () => {
    const side = {response: ' 5', ids: [1, 2], tokens: [' ', '5'], logprobs: [-1, -2], total: -3};
    const ok = parseCross({under_a: side, under_b: {...side, logprobs: [-1, -4], total: -5}, delta: -2,
                           per_token_delta: [0, -2], forwards: 1});
    expect(ok.delta).toBe(-2);
    expect(() => parseCross({under_a: side, delta: 1})).toThrow(/"under_b" is not an object/);
    expect(() => parseCross({under_a: {...side, tokens: ['x']}, under_b: side, delta: 0, per_token_delta: null}))
        .toThrow(/under_a/);
    expect(describeDelta(-4.4256)).toBe('−4.426 (the edit makes the pinned answer less likely)');
    expect(costText(ok)).toBe('(1 teacher-forced forward; pinned salience from the cache)');
    expect(costText({...ok, forwards: 2, pinned_salience_passes: 1}))
        .toBe('(2 teacher-forced forwards; pinned salience computed (1 forward + backward))');
  });
});

describe('pinnedSelection', () => {
  it("reads LIT's pinned SelectionService through LitModule's selectionService getter (index 1)", () => {
    const services = [{primarySelectedInputData: {id: 'main'}}, {primarySelectedInputData: {id: 'pinned'}}];
    class LitModuleLike {
      selectionServiceIndex = 0;
      get selectionService() {
        return services[this.selectionServiceIndex];
      }
    }
    class OurModule extends LitModuleLike {}
    const el = new OurModule();
    expect(el.selectionService.primarySelectedInputData.id).toBe('main');
    expect(pinnedSelection(el)?.primarySelectedInputData?.id).toBe('pinned');
    expect(pinnedSelection({})).toBeNull();  // another LIT: no getter, no comparison
  });
});
