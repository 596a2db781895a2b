/**
 * src/salience/lit_convention.ts: the salience controller over a LIT user's own prompt-debugging
 * models (generation + tokenizer + HFSalienceModel-style salience), against a stand-in for LIT's
 * services that answers as those models do (clean tokens, TokenScores of a masked span). Checks
 * which requests are sent (one salience request per span, with the mask of that span), what the
 * module shows (text rebuilt from the tokens, values sign-corrected to grad x input) and that the
 * extras say they need our wrappers.
 */
import {describe, expect, it} from 'vitest';

import {SalienceController} from '../src/salience/controller.js';
import type {SalienceHost} from '../src/salience/page.js';
import {litConventionGroup, litConventionHost, mask, NEEDS_OUR_WRAPPERS, payloadFromTokens,
        tokenText} from '../src/salience/lit_convention.js';
import {describeDetail, parsePayload} from '../src/salience/payload.js';
import {salienceModelFor, type IndexedInputLike, type ModelInfoLike} from '../src/shared/request.js';

const TS = {__name__: 'TokenScores', align: 'tokens'};
const LIT_MODELS: Record<string, ModelInfoLike> = {
  lm: {spec: {input: {prompt: {}, target: {}}, output: {response: {__name__: 'GeneratedText'}}}},
  _lm_salience: {spec: {input: {prompt: {}, target: {}, target_mask: {__name__: 'TokenScores'}},
                        output: {grad_l2: TS, grad_dot_input: TS, tokens: {__name__: 'Tokens'}}}},
  _lm_tokenizer: {spec: {input: {prompt: {}}, output: {tokens: {__name__: 'Tokens'}}}},
};
// LIT's clean tokens of "Capital of France?" + " It is Paris."
const PROMPT_TOKENS = ['Capital', '▁of', '▁France', '?'];
const TARGET_TOKENS = ['▁It', '▁is', '▁Paris', '.'];
const ALL = [...PROMPT_TOKENS, ...TARGET_TOKENS];

interface Call {input: IndexedInputLike; model: string}

/** LIT's three models: the salience of token i for a mask is (i + 1) * (number of masked tokens). */
function litHost() {
  const calls: Call[] = [];
  const host: SalienceHost = {
    modelName: () => 'lm',
    models: () => LIT_MODELS,
    getPreds: async (inputs, model) => {
      const d = inputs[0];
      calls.push({input: d, model});
      if (model === 'lm') return [{response: ' It is Paris.'}];
      if (model === '_lm_tokenizer') return [{tokens: d.data['target'] ? ALL : PROMPT_TOKENS}];
      if (model === '_lm_salience') {
        const m = d.data['target_mask'] as number[];
        const k = m.reduce((a, b) => a + b, 0);
        return [{tokens: ALL, grad_l2: ALL.map((_, i) => (i + 1) * k), grad_dot_input: ALL.map((_, i) => -(i + 1))}];
      }
      throw new Error(`unknown model ${model}`);
    },
    loadLatest: (_key, promise) => promise,
    changed: () => {},
  };
  return {host, calls};
}

const dp = (): IndexedInputLike => ({id: 'dp1', data: {_id: 'dp1', prompt: 'Capital of France?', target: ''}, meta: {}});

describe('LIT-convention models', () => {
  it('finds their salience model by LIT names and recognises ours as not theirs', () => {
    expect(salienceModelFor('lm', LIT_MODELS)).toBe('_lm_salience');
    expect(litConventionGroup('lm', LIT_MODELS)?.fields.map((f) => f.field)).toEqual(['grad_l2', 'grad_dot_input']);
    const ours = {...LIT_MODELS, _lm_salience: {spec: {input: {target_mask: {}}, output: {salience: {__name__: 'LitType'},
                                                                                         grad_l2: TS}}}};
    expect(litConventionGroup('lm', ours)).toBeNull();
    expect(litConventionGroup('other', LIT_MODELS)).toBeNull();
  });

  it('rebuilds the text from clean tokens', () => {
    expect(tokenText('▁Paris')).toBe(' Paris');
    const p = parsePayload(payloadFromTokens(ALL, 4, {grad_norm: ALL.map(() => 1)}));
    expect(p.text).toBe('Capital of France? It is Paris.');
    expect(p.text.slice(...p.offsets[6])).toBe(' Paris');
    expect(p.text.slice(0, p.prompt_end)).toBe('Capital of France?');
    expect(describeDetail(p.detail)).toBe(NEEDS_OUR_WRAPPERS);
    expect(mask(5, 1, 3)).toEqual([0, 1, 1, 0, 0]);
  });

  it('paints the whole response from one salience request, then one request per clicked span', async () => {
    const {host, calls} = litHost();
    const ctl = new SalienceController(litConventionHost(host));
    await ctl.select(dp());
    expect(ctl.status).toBe('ready');
    expect(ctl.exitRequest()).toBeNull();  // LIT's models run no job of ours: a closing page sends them nothing
    expect(ctl.payload?.text).toBe('Capital of France? It is Paris.');
    const sal = calls.filter((c) => c.model === '_lm_salience');
    expect(sal).toHaveLength(1);
    expect(sal[0].input.data['target']).toBe(' It is Paris.');  // the generation model's response
    expect(sal[0].input.data['target_mask']).toEqual([0, 0, 0, 0, 1, 1, 1, 1]);
    // grad_l2 of the whole response (4 masked tokens): (i + 1) * 4
    expect(Array.from(ctl.tokenValues()!)).toEqual(ALL.map((_, i) => (i + 1) * 4));
    ctl.setMethod('grad_x_input');
    expect(Array.from(ctl.tokenValues()!)).toEqual(ALL.map((_, i) => i + 1));  // LIT's sign flipped

    ctl.setMethod('grad_norm');
    ctl.setSpan({t0: 2, t1: 3});  // " Paris"
    await new Promise((r) => setTimeout(r, 0));
    await new Promise((r) => setTimeout(r, 0));
    const spans = calls.filter((c) => c.model === '_lm_salience');
    expect(spans).toHaveLength(2);
    expect(spans[1].input.data['target_mask']).toEqual([0, 0, 0, 0, 0, 0, 1, 0]);
    expect(Array.from(ctl.tokenValues()!)).toEqual(ALL.map((_, i) => i + 1));
    // Going back to the whole response needs no request (kept from the first highlight).
    ctl.setSpan({t0: 0, t1: 4});
    expect(calls.filter((c) => c.model === '_lm_salience')).toHaveLength(2);
    expect(ctl.precision()).toContain(NEEDS_OUR_WRAPPERS);
  });

  it('offers their two methods only, and names our wrappers for the rest', async () => {
    const {host} = litHost();
    const wrapped = litConventionHost(host);
    const ctl = new SalienceController(wrapped);
    await ctl.select(dp());
    expect(ctl.registry()?.methods.map((m) => m.name)).toEqual(['grad_norm', 'grad_x_input']);
    expect(ctl.registry()?.extras).toEqual([]);
    expect(ctl.precision()).toContain('lit_app.plugin.make_models');
    // The host's other models are untouched; only the LIT salience model gains the registry.
    expect(wrapped.models()['lm']).toBe(LIT_MODELS['lm']);
    expect(LIT_MODELS['_lm_salience'].spec?.output?.['method_registry']).toBeUndefined();
  });
});
