/** The target shared between the modules (src/shared/target_store.ts): one per model, each model's listeners only. */
import {describe, expect, it} from 'vitest';
import {TargetStore, type SharedTarget} from '../src/shared/target_store.js';

function target(salienceModel: string, t0 = 0): SharedTarget {
  return {datapointId: 'dp', input: {prompt: 'q'}, salienceModel, text: 'q a b', promptEnd: 1, tokens: ['q', ' a', ' b'],
          offsets: [[0, 1], [1, 3], [3, 5]], nPromptTokens: 1, t0, t1: t0 + 1, method: 'grad_norm', granularity: 'word'};
}

describe('TargetStore', () => {
  it("gives each model's followers that model's target only", () => {
    const store = new TargetStore();
    const seenA: Array<string | null> = [], seenB: Array<string | null> = [];
    store.subscribe('a', (t) => seenA.push(t === null ? null : `${t.salienceModel}:${t.t0}`));
    const unB = store.subscribe('b', (t) => seenB.push(t === null ? null : `${t.salienceModel}:${t.t0}`));
    store.publish('a', target('_a_salience', 0));
    store.publish('b', target('_b_salience', 1));
    store.publish('a', target('_a_salience', 0));  // the same target: no call
    store.publish('a', target('_a_salience', 1));
    expect(seenA).toEqual([null, '_a_salience:0', '_a_salience:1']);
    expect(seenB).toEqual([null, '_b_salience:1']);
    expect(store.get('b')?.salienceModel).toBe('_b_salience');
    // A late follower gets the current target of its model at once.
    const late: Array<string | null> = [];
    store.subscribe('b', (t) => late.push(t?.salienceModel ?? null));
    expect(late).toEqual(['_b_salience']);
    unB();
    store.publish('b', null);
    expect(seenB).toEqual([null, '_b_salience:1']);
    expect(store.get('b')).toBeNull();
    expect(late).toEqual(['_b_salience', null]);
  });
});
