/**
 * A stand-alone page for browser tests of the module without LIT or a model
 * server (tests/e2e/test_module_harness.py builds it with esbuild): a stand-in
 * LitModule with the services the module uses, answering getPreds from a
 * synthetic payload of any size, and the server's method registry
 * (test/fixtures/method_registry.json). Not part of the plugin bundle.
 *
 * Query parameters: n (prompt tokens, default 4000), t (target tokens, 16),
 * gram (1: ship the Gram matrix, 0: grad_norm spans come from the "server"),
 * fail (1: every request fails with a server-style error).
 */
import {LitElement} from 'lit';

import {makeModuleClass, TAG} from '../../src/salience_module.js';
import type {SaliencePayload} from '../../src/salience/payload.js';
import {packedIndex} from '../../src/salience/spans.js';
import registry from '../fixtures/method_registry.json';
import {rng} from './rng.js';

interface Call {
  model: string;
  fields: string[];
  data: Record<string, unknown>;
}

/** A payload following the contract: words, sentences of 12 words, paragraphs of 5 sentences. */
export function syntheticPayload(nPrompt: number, nTarget: number, withGram: boolean): SaliencePayload {
  const r = rng(7);
  const tokens: string[] = [];
  const offsets: Array<[number, number]> = [];
  let text = '';
  const add = (tok: string) => {
    tokens.push(tok);
    offsets.push([text.length, text.length + tok.length]);
    text += tok;
  };
  for (let i = 0; i < nPrompt; i++) {
    const endSentence = i % 12 === 11;
    add(`${i % 12 === 0 && i > 0 ? (i % 60 === 0 ? '\n\n' : ' ') : i === 0 ? '' : ' '}w${i}${endSentence ? '.' : ''}`);
  }
  const promptEnd = text.length;
  for (let t = 0; t < nTarget; t++) add(`${t === 0 ? '\n' : ' '}out${t}${t === nTarget - 1 ? '.' : ''}`);
  const n = tokens.length;
  const dims = 3;
  // Per-target, per-token gradient vectors, so that norms and Gram entries agree.
  const g = (t: number, i: number, d: number) => (i >= nPrompt + t ? 0 : Math.sin(i * 0.37 + t * 1.3 + d) * (0.2 + r()));
  const vec: number[][][] = [];
  for (let t = 0; t < nTarget; t++) {
    vec.push([]);
    for (let i = 0; i < n; i++) vec[t].push([g(t, i, 0), g(t, i, 1), g(t, i, 2)]);
  }
  const norm = vec.map((row) => row.map((v) => Math.hypot(...v)));
  const gxi = vec.map((row) => row.map((v) => v[0]));
  const width = (nTarget * (nTarget + 1)) / 2;
  const gram = withGram ? Array.from({length: n}, (_, i) => {
    const out = new Array<number>(width);
    for (let j = 0; j < nTarget; j++) {
      for (let k = j; k < nTarget; k++) {
        let s = 0;
        for (let d = 0; d < dims; d++) s += vec[j][i][d] * vec[k][i][d];
        out[packedIndex(j, k, nTarget)] = s;
      }
    }
    return out;
  }) : null;
  return {
    text, prompt_end: promptEnd, tokens, offsets, special: new Array(n).fill(false),
    n_prompt_tokens: nPrompt, role_spans: [[0, promptEnd, 'user'], [promptEnd, text.length, 'assistant']],
    target_logprobs: Array.from({length: nTarget}, () => -r()),
    methods: {
      grad_norm: {signed: false, matrix: norm, gram_packed: gram},
      grad_x_input: {signed: true, matrix: gxi},
    },
  };
}

const params = new URLSearchParams(typeof location === 'undefined' ? '' : location.search);
const N = Number(params.get('n') ?? 4000);
const T = Number(params.get('t') ?? 16);
const GRAM = params.get('gram') !== '0';
const FAIL = params.get('fail') === '1';

const harness = {
  payload: syntheticPayload(N, T, GRAM),
  calls: [] as Call[],
  /** The `detail="stream"` requests (the response as generated), kept apart from the salience calls. */
  streams: [] as Call[],
  /** The segment methods' requests (a granularity with a default segment method starts one), kept apart too. */
  segments: [] as Call[],
  reactions: [] as Array<() => void>,
  selected: null as {id: string; data: Record<string, unknown>; meta: Record<string, unknown>} | null,
  /** Selects a datapoint (as LIT's data table would). */
  select(id = 'dp1') {
    this.selected = {id, data: {_id: id, prompt: 'synthetic'}, meta: {}};
    for (const r of this.reactions) r();
  },
  async getPreds(inputs: Array<{data: Record<string, unknown>}>, model: string, fields: string[]) {
    if (inputs[0].data['detail'] === 'stream') {  // a server whose generation is done (cached)
      this.streams.push({model, fields, data: inputs[0].data});
      const text = this.payload.text.slice(this.payload.prompt_end);
      return [{salience: {stream: {state: 'done', text, tokens: T, max_new_tokens: T, stopped_by: 'eos'}}, response: text}];
    }
    if (inputs[0].data['detail'] === 'segments') {  // a segment method's job (docs/architecture.md "Segment salience")
      this.segments.push({model, fields, data: inputs[0].data});
      return [{salience: {detail: {kind: 'seg', state: 'queued', done: 0, total: 0, elapsed_s: 0, eta_s: null, error: ''}}}];
    }
    this.calls.push({model, fields, data: inputs[0].data});
    await new Promise((res) => setTimeout(res, 20));
    if (FAIL) {
      throw new Error("Uncaught error: prompt + target is 9,311 tokens; this model's context is 8,192. " +
                      'Fix: shorten the prompt.\n\nDetails: Traceback (most recent call last): ...');
    }
    const span = inputs[0].data['target_span'];
    if (typeof span === 'string') {
      const [t0, t1] = span.split(':').map(Number);
      const m = this.payload.methods.grad_norm!;
      // Not the exact norm of summed gradients; only shape matters here.
      const matrix = m.matrix!;
      const values = matrix[0].map((_, i) => matrix.slice(t0, t1).reduce((a, row) => a + row[i], 0));
      return [{span_salience: {grad_norm: values}}];
    }
    return [{salience: this.payload, response: this.payload.text.slice(this.payload.prompt_end)}];
  },
};

class LitModule extends LitElement {
  model = '';
  selectionService = {get primarySelectedInputData() { return harness.selected; }};
  appState = {
    currentDataset: 'synthetic', currentModels: ['fake'],
    metadata: {models: {fake: {spec: {output: {salience: {__name__: 'LitType'}, response: {},
                                               method_registry: {__name__: 'LitType', default: registry}}}}}},
  };
  apiService = {
    getPreds: (inputs: Array<{data: Record<string, unknown>}>, model: string, _d: string, _t: unknown[],
               fields: string[]) => harness.getPreds(inputs, model, fields),
  };
  loadLatest<T>(_key: string, p: Promise<T>): Promise<T> {
    return p;
  }
  reactImmediately<T>(getter: () => T, effect: (v: T) => void) {
    const run = () => effect(getter());
    harness.reactions.push(run);
    run();
  }
  override render() {
    return (this as unknown as {renderImpl(): unknown}).renderImpl();
  }
}

(window as unknown as {ssHarness: typeof harness}).ssHarness = harness;
customElements.define(TAG, makeModuleClass(LitModule));
