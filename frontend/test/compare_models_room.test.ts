import {describe, expect, it} from 'vitest';
import {COMPARE_MODELS_METHOD} from '../src/compare_models/logic.js';
import {CompareModelsRoom} from '../src/compare_models/room.js';
import {COMPARE_FIELD, SALIENCE_FIELD} from '../src/shared/fields.js';
import type {IndexedInputLike} from '../src/shared/request.js';

const GEN = {spec: {input: {}, output: {response: {__name__: 'GeneratedText'}}}};
const SAL = {spec: {input: {}, output: {salience: {__name__: 'LitType'}}}};
const MODELS = {a: GEN, _a_salience: SAL, _a_compare: SAL, b: GEN, _b_salience: SAL, _b_compare: SAL};
const PROMPT = 'Q: add two';
const ANSWER: Record<string, string> = {a: ' four', b: ' 4 ok'};

/** A stand-in for LIT's apiService on the room's two request kinds (the room's state machine is under test;
 * the server's answers are tests/e2e/test_compare_models.py's). */
function host() {
  const calls: string[] = [];
  let changes = 0;
  const logp = (response: string, total: number) => ({response, ids: [1], tokens: ['x'], logprobs: [total], total});
  return {
    calls, changes: () => changes,
    models: () => MODELS,
    changed: () => { changes++; },
    getPreds: async (inputs: IndexedInputLike[], model: string): Promise<Array<Record<string, unknown>>> => {
      calls.push(model);
      const m = model.split('_')[1];
      if (model.endsWith('_salience')) {
        const text = PROMPT + ANSWER[m];
        const offsets: Array<[number, number]> = [[0, 2], [2, 6], [6, 10], [10, text.length]];
        return [{[SALIENCE_FIELD]: {text, prompt_end: PROMPT.length, offsets, role_spans: [], target_logprobs: [-1]},
                 span_salience: {[COMPARE_MODELS_METHOD]: m === 'a' ? [1, -2, 0.5, 0] : [0.5, 3, 0.5, 0]}}];
      }
      const answer = String(inputs[0].data['pinned_target'] ?? '');
      return [{[COMPARE_FIELD]: {under_a: logp(answer, -1), under_b: logp(answer, m === 'a' ? -7 : -9), delta: 0,
                                 per_token_delta: null}}];
    },
  };
}

const X = {id: 'x', data: {prompt: PROMPT}, meta: {}};
const settle = () => new Promise((r) => setTimeout(r, 0));

describe('CompareModelsRoom', () => {
  it('is off with one model, asks nothing while closed, compares both once opened and drops it all on closing', async () => {
    const h = host();
    const room = new CompareModelsRoom(h);
    room.update(X, ['a']);
    expect(room.state).toBe('off');
    room.update(X, ['a', 'b']);
    expect(room.pair).toEqual(['a', 'b']);
    expect(room.state).toBe('closed');
    await settle();
    expect(h.calls).toEqual([]);
    room.toggle();
    for (let i = 0; i < 10 && room.state !== 'done'; i++) await settle();
    expect(room.state).toBe('done');
    expect(h.calls).toEqual(['_a_salience', '_b_salience', '_b_compare', '_a_compare']);
    expect(room.view?.responseB).toBe(ANSWER['b']);
    // a's answer: own log p under a, b's score (−9) under b; b's answer: a's score (−7) under a.
    expect(room.rows).toEqual([{answerOf: 'a', underA: -1, underB: -9}, {answerOf: 'b', underA: -7, underB: -1}]);
    room.update(X, ['a', 'b']);  // the same datapoint and pair: not asked again
    await settle();
    expect(h.calls.length).toBe(4);
    room.sync('regex');  // a regex shows as words: nothing changes
    expect(room.granularity).toBe('word');
    room.toggle();
    expect(room.state).toBe('closed');
    expect(room.view).toBeNull();
    room.update(X, ['b']);
    expect(room.state).toBe('off');
  });
});
