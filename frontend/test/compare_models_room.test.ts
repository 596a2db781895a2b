import {describe, expect, it} from 'vitest';
import registry from './fixtures/method_registry.json';
import type {MethodChoice} from '../src/salience/compare_models/logic.js';
import {CompareModelsRoom} from '../src/salience/compare_models/room.js';
import {COMPARE_FIELD} from '../src/shared/fields.js';
import {METHOD_REGISTRY_FIELD} from '../src/shared/methods.js';
import type {IndexedInputLike} from '../src/shared/request.js';

const GEN = {spec: {input: {}, output: {response: {__name__: 'GeneratedText'}}}};
// The salience companions publish the server's method registry (the fixture a Python test checks against lit_app's).
const SAL = {spec: {input: {}, output: {salience: {__name__: 'LitType'}, [METHOD_REGISTRY_FIELD]: {default: registry}}}};
const CMP = {spec: {input: {}, output: {compare: {__name__: 'LitType'}}}};
const MODELS = {a: GEN, _a_salience: SAL, _a_compare: CMP, b: GEN, _b_salience: SAL, _b_compare: CMP};
const PROMPT = 'Q: add two';
const ANSWER: Record<string, string> = {a: ' four', b: ' 4 ok'};
/** Whole-response values per method and model: each method's differ, so the view shows which one it used. */
const VALUES: Record<string, Record<string, number[]>> = {
  grad_norm: {a: [1, 2, 0.5, 0], b: [0.5, 3, 0.25, 0]},
  grad_x_input: {a: [1, -2, 0.5, 0], b: [0.5, 3, 0.5, 0]},
  smooth_grad: {a: [4, -1, 0, 0], b: [-2, 1, 0, 0]},
};
const GRAD_NORM: MethodChoice = {method: 'grad_norm', gradient: 'grad_norm', counts: {}, segment: null};

/** A stand-in for LIT's apiService on the room's requests to `_<model>_compare` (the room's state machine is under
 * test; the server's answers are tests/e2e/test_compare_models.py's): with `with_pinned_salience`, the "pinned"
 * datapoint's whole-response salience (the base methods, and a method computed on request only when its count
 * field is set, as lit_app/wrappers/compare.py answers through SharedLM.quick); without it, the other answer's log p. */
function host() {
  const calls: string[] = [];
  const bodies: Array<Record<string, unknown>> = [];
  let changes = 0;
  const logp = (response: string, total: number) => ({response, ids: [1], tokens: ['x'], logprobs: [total], total});
  return {
    calls, bodies, changes: () => changes,
    models: () => MODELS,
    changed: () => { changes++; },
    getPreds: async (inputs: IndexedInputLike[], model: string): Promise<Array<Record<string, unknown>>> => {
      calls.push(model);
      const data = inputs[0].data;
      bodies.push(data);
      const m = model.split('_')[1];
      const answer = String(data['pinned_target'] ?? '');
      let pinned = null, segments = null;
      if (data['with_pinned_salience'] === true) {
        const text = PROMPT + ANSWER[m];
        const span: Record<string, number[]> = {grad_norm: VALUES['grad_norm'][m], grad_x_input: VALUES['grad_x_input'][m]};
        if (Number(data['smooth_grad_samples']) > 0) span['smooth_grad'] = VALUES['smooth_grad'][m];
        if (data['segment_method']) {
          segments = {segments: {method: data['segment_method'], values: [0.5, -0.25, 3], spans: [[0, 2], [2, 6], [6, 10]],
                                 segment_index: [0, 2, 3], token_values: [0.5, -0.25, 3, 0]}};
        }
        pinned = {text, prompt_end: PROMPT.length, tokens: ['Q:', ' add', ' two', ANSWER[m]],
                  offsets: [[0, 2], [2, 6], [6, 10], [10, text.length]], n_prompt_tokens: 3, role_spans: [],
                  target_logprobs: [-1], methods: {}, spans: {'0:1': span}};
      }
      return [{[COMPARE_FIELD]: {under_a: logp(answer, -1), under_b: logp(answer, m === 'a' ? -7 : -9), delta: 0,
                                 per_token_delta: null, pinned_salience: pinned,
                                 pinned_segments: segments}}];
    },
  };
}

const X = {id: 'x', data: {prompt: PROMPT}, meta: {}};
const settle = () => new Promise((r) => setTimeout(r, 0));
async function until(room: CompareModelsRoom, state: string) {
  for (let i = 0; i < 20 && room.state !== state; i++) await settle();
  expect(room.state).toBe(state);
}
/** Model a's finite values per prompt word ("Q", ":", "add", "two"; the token "Q:" counts for "Q"). */
const finiteA = (room: CompareModelsRoom) => Array.from(room.view!.a).filter(Number.isFinite);

describe('CompareModelsRoom', () => {
  it('is off with one model, asks nothing while closed, compares both once opened and drops it all on closing', async () => {
    const h = host();
    const room = new CompareModelsRoom(h);
    room.sync('word', GRAD_NORM, 1);
    room.update(X, ['a'], 'a');
    expect(room.state).toBe('off');
    room.update(X, ['a', 'b'], 'a');
    expect(room.pair).toEqual(['a', 'b']);
    expect(room.state).toBe('closed');
    await settle();
    expect(h.calls).toEqual([]);
    room.toggle();
    await until(room, 'done');
    // Each model's whole-response salience, then each one's log p of the other's answer: all from the compare
    // wrappers (never a span request to `_<model>_salience`, which would supersede the salience module's own).
    expect(h.calls).toEqual(['_a_compare', '_b_compare', '_b_compare', '_a_compare']);
    expect(h.bodies.map((d) => d['with_pinned_salience'])).toEqual([true, true, false, false]);
    // Each as Compare models' view: the server supersedes a page's comparisons per view (lit_app/wrappers/compare.py).
    expect(h.bodies.map((d) => d['compare_view'])).toEqual(['models', 'models', 'models', 'models']);
    expect(room.view?.responseB).toBe(ANSWER['b']);
    // a's answer: own log p under a, b's score (−9) under b; b's answer: a's score (−7) under a.
    expect(room.rows).toEqual([{answerOf: 'a', underA: -1, underB: -9}, {answerOf: 'b', underA: -7, underB: -1}]);
    room.update(X, ['a', 'b'], 'a');  // the same datapoint, pair and method: not asked again
    await settle();
    expect(h.calls.length).toBe(4);
    // The module's map at words takes the maps' shared scale (one scale for one method on one prompt); the intensity
    // goes to both legends.
    expect(room.scaleFor('word')).toBe(room.view!.scale.scale);
    expect(room.scaleFor('sentence')).toBeNull();
    room.sync('word', GRAD_NORM, 3);
    expect(room.view!.scale.intensity).toBe(3);
    room.sync('regex', GRAD_NORM, 3);  // a regex shows as words: nothing changes
    expect(room.granularity).toBe('word');
    expect(room.scaleFor('regex')).toBeNull();  // the module's map is cut by the pattern, the section's by words
    room.toggle();
    expect(room.state).toBe('closed');
    expect(room.scaleFor('word')).toBeNull();
    expect(room.view).toBeNull();
    room.update(X, ['a', 'b'], 'b');  // the second model's salience module holds no section (it is in a's)
    expect(room.state).toBe('off');
    room.update(X, ['b'], 'b');
    expect(room.state).toBe('off');
  });

  it("shows the salience module's method: gradient norm's values, then SmoothGrad asked with the module's count", async () => {
    const h = host();
    const room = new CompareModelsRoom(h);
    room.update(X, ['a', 'b'], 'a');
    room.sync('word', GRAD_NORM, 1);
    room.toggle();
    await until(room, 'done');
    expect(room.method).toMatchObject({method: 'grad_norm', label: 'Gradient norm', extra: null, note: ''});
    expect(finiteA(room)).toEqual([1, 0, 2, 0.5]);  // grad_norm's a values of "Q:", " add", " two"
    expect(h.bodies[0]['smooth_grad_samples']).toBe(0);

    room.sync('word', {method: 'smooth_grad', gradient: 'smooth_grad', counts: {smooth_grad: 12}, segment: null}, 1);
    await until(room, 'done');
    expect(room.method?.label).toBe('SmoothGrad (× input) (12 samples)');
    const asked = h.bodies.filter((d) => d['with_pinned_salience'] === true).slice(2);
    expect(h.calls.slice(4, 6)).toEqual(['_a_compare', '_b_compare']);
    expect(asked.map((d) => [d['smooth_grad_samples'], d['ig_steps']])).toEqual([[12, 0], [12, 0]]);
    expect(finiteA(room)).toEqual([4, 0, -1, 0]);
  });

  it("measures the module's segment method on each model's whole response, with the module's segmentation", async () => {
    const h = host();
    const room = new CompareModelsRoom(h);
    room.update(X, ['a', 'b'], 'a');
    const ask = {method: 'leave_one_out', count: 0, granularity: 'word', pattern: '', removal: 'filler'};
    room.sync('word', {method: 'leave_one_out', gradient: 'grad_x_input', counts: {}, segment: {...ask, span: {t0: 0, t1: 1}}}, 1);
    room.toggle();
    await until(room, 'done');
    expect(room.method?.method).toBe('leave_one_out');
    const asked = h.bodies.filter((d) => d['with_pinned_salience'] === true);
    expect(asked.map((d) => [d['segment_method'], d['granularity'], d['removal']]))
        .toEqual([['leave_one_out', 'word', 'filler'], ['leave_one_out', 'word', 'filler']]);
    expect(finiteA(room)).toEqual([0.5, 0, -0.25, 3]);  // a's token_values of "Q:", " add", " two"
  });
});
