/**
 * The salience module over a LIT user's own prompt-debugging models, built as
 * `lit_nlp.examples.prompt_debugging` builds them: `<model>` (generation:
 * `response`), `_<model>_tokenizer` (`tokens`) and `_<model>_salience` (takes
 * `prompt`, `target` and `target_mask`, 0/1 per token; returns TokenScores
 * `grad_l2` and `grad_dot_input` over the tokens, for the masked span). Such a
 * salience model has no `salience` payload: `litConventionHost` wraps the
 * module's host and answers its requests to that model with these three models,
 * so the controller works unchanged:
 *
 * - first highlight: the response (the datapoint's `target`, else the generation
 *   model's), the tokens of prompt and prompt + response, then ONE salience
 *   request with the whole response masked, shown as the payload's span;
 * - a clicked span: ONE salience request with that span masked (as LIT's own
 *   module does);
 * - the methods are theirs (LIT_REGISTRY, added to the salience model's spec:
 *   gradient norm and gradient × input);
 * - what needs our wrappers (lit_app.plugin.make_models) says so: the per-token
 *   matrices (retargeting without a request), integrated gradients, SmoothGrad,
 *   the response streamed while it is generated, chat roles; the inside and
 *   test modules name the models they miss.
 *
 * The tokens are LIT's "clean" token strings (GPT-2's "Ġ" and SentencePiece's
 * "▁" as "▁", newlines as "\n"); the text shown is their concatenation with
 * "▁" read as a space, so segments are found in it as in our payload.
 * LIT's `grad_dot_input` is the gradient of the loss (-log p) times the input:
 * its sign is flipped to our grad × input's (positive: supports the target).
 */
import {DETAIL_FIELD, RESPONSE_FIELD, SALIENCE_FIELD, SPAN_SALIENCE_FIELD, TARGET_SPAN_FIELD} from '../shared/fields.js';
import {derivedInput, isLitConventionSalience, typeName, type IndexedInputLike,
        type ModelInfoLike} from '../shared/request.js';
import type {SalienceHost} from './page.js';
import {METHOD_REGISTRY_FIELD, type MethodInfo} from '../shared/methods.js';
import type {DetailStatus, SaliencePayload} from './payload.js';

type MethodName = string;

export const TOKENS_FIELD = 'tokens';
export const TARGET_MASK_FIELD = 'target_mask';
/** LIT's field -> our method, with the sign that turns LIT's value into ours. */
export const LIT_FIELDS: ReadonlyArray<{field: string; method: MethodName; sign: number}> = [
  {field: 'grad_l2', method: 'grad_norm', sign: 1},
  {field: 'grad_dot_input', method: 'grad_x_input', sign: -1},
];
/**
 * The methods these models compute, as a method registry (../shared/methods.ts): LIT's salience
 * model publishes none, so the adapter adds this one to its spec; no method with a count.
 */
export const LIT_REGISTRY: readonly MethodInfo[] = [
  {name: 'grad_norm', label: 'Gradient norm (LIT grad_l2)', short: 'grad_l2', signed: false, linear: false,
   count_field: null, count_unit: null, default_count: 0, max_count: null, tag: null, matrix_detail: null,
   cost_unit: 'one forward + backward per span'},
  {name: 'grad_x_input', label: 'Gradient × input (LIT grad_dot_input)', short: 'grad_dot_input', signed: true,
   linear: true, count_field: null, count_unit: null, default_count: 0, max_count: null, tag: null,
   matrix_detail: null, cost_unit: 'one forward + backward per span'},
];
export const NEEDS_OUR_WRAPPERS =
    'LIT prompt-debugging models compute one span per request: per-token matrices (instant retargeting), ' +
    'integrated gradients, SmoothGrad, Inside the model and Test this explanation need Sequence Salience\'s ' +
    'wrappers (lit_app.plugin.make_models).';

export interface LitGroup {
  generation: string;
  salience: string;
  tokenizer: string;
  /** LIT_FIELDS present in the salience model's output. */
  fields: ReadonlyArray<{field: string; method: MethodName; sign: number}>;
}

/** The LIT-convention group of `model`, or null (no such companions, or ours, which has a `salience` payload). */
export function litConventionGroup(model: string, models: Record<string, ModelInfoLike>): LitGroup | null {
  const salience = `_${model}_salience`;
  const tokenizer = `_${model}_tokenizer`;
  const out = models[salience]?.spec?.output;
  if (out == null || !isLitConventionSalience(models[salience])) return null;
  if (models[tokenizer]?.spec?.output?.[TOKENS_FIELD] == null) return null;
  const fields = LIT_FIELDS.filter((f) => typeName(out[f.field]) === 'TokenScores');
  return fields.length > 0 ? {generation: model, salience, tokenizer, fields} : null;
}

/** A clean LIT token as text ("▁" is a space). */
export function tokenText(token: string): string {
  return token.replace(/▁/g, ' ');
}

/** Our payload for LIT-convention tokens: text, offsets, the prompt/response split; no matrices. */
export function payloadFromTokens(tokens: string[], nPrompt: number,
                                  whole: Partial<Record<MethodName, number[]>>): SaliencePayload {
  let text = '';
  const offsets: Array<[number, number]> = [];
  for (const t of tokens) {
    const s = tokenText(t);
    offsets.push([text.length, text.length + s.length]);
    text += s;
  }
  const t = tokens.length - nPrompt;
  const detail: DetailStatus = {kind: 'grad', state: 'unavailable', done: 0, total: 0, elapsed_s: 0, eta_s: null,
                                error: NEEDS_OUR_WRAPPERS};
  return {
    text, prompt_end: nPrompt > 0 ? offsets[nPrompt - 1][1] : 0, tokens, offsets,
    special: new Array(tokens.length).fill(false), n_prompt_tokens: nPrompt, role_spans: [],
    target_logprobs: [],  // LIT's salience model gives none: the module shows no log p
    methods: {grad_norm: {signed: false, matrix: null}, grad_x_input: {signed: true, matrix: null}},
    spans: {[`0:${t}`]: whole}, detail,
  };
}

/** LIT's scores of one masked span as our per-method values (sign-corrected), each of length n. */
export function spanValues(pred: Record<string, unknown>, group: LitGroup, n: number): Partial<Record<MethodName, number[]>> {
  const out: Partial<Record<MethodName, number[]>> = {};
  for (const f of group.fields) {
    const v = pred[f.field];
    if (!Array.isArray(v) || v.length !== n) {
      throw new Error(`"${group.salience}" returned ${Array.isArray(v) ? v.length : 'no'} "${f.field}" values ` +
                      `for ${n} tokens.`);
    }
    out[f.method] = (v as number[]).map((x) => f.sign * Number(x));
  }
  return out;
}

/** A 0/1 mask over n tokens, 1 on [from, to). */
export function mask(n: number, from: number, to: number): number[] {
  return Array.from({length: n}, (_, i) => (i >= from && i < to ? 1 : 0));
}

/** The datapoint behind a derived input (../shared/request.ts `derivedInput`): its own id, without our fields. */
export function litDatapoint(d: IndexedInputLike): IndexedInputLike {
  const id = d.id.split('~')[0];
  const data: Record<string, unknown> = {};
  const ours = new Set([DETAIL_FIELD, TARGET_SPAN_FIELD, '_id']);
  for (const [k, v] of Object.entries(d.data)) if (!ours.has(k)) data[k] = v;
  return {id, data: {...data, _id: id}, meta: d.meta};
}

/** The module's host, answering requests to a LIT-convention salience model with that model group. */
export function litConventionHost(host: SalienceHost): SalienceHost {
  /** Tokens and prompt length per datapoint id and target (asked once). */
  const known = new Map<string, {tokens: string[]; nPrompt: number; target: string}>();

  async function tokensOf(d: IndexedInputLike, group: LitGroup, target: string) {
    const key = `${d.id}|${target}`;
    const hit = known.get(key);
    if (hit) return hit;
    const [both, prompt] = await Promise.all([
      host.getPreds([derivedInput(d, {target}, 'lit-tokens')], group.tokenizer, [TOKENS_FIELD], 'Tokenizing…'),
      host.getPreds([derivedInput(d, {target: ''}, 'lit-prompt-tokens')], group.tokenizer, [TOKENS_FIELD]),
    ]);
    const tokens = (both[0]?.[TOKENS_FIELD] ?? []) as string[];
    const nPrompt = ((prompt[0]?.[TOKENS_FIELD] ?? []) as string[]).length;
    if (!Array.isArray(tokens) || nPrompt > tokens.length) {
      throw new Error(`"${group.tokenizer}" gave ${nPrompt} prompt tokens but ${tokens?.length} with the target.`);
    }
    const entry = {tokens, nPrompt, target};
    known.set(key, entry);
    return entry;
  }

  async function masked(d: IndexedInputLike, group: LitGroup, target: string, n: number, from: number, to: number) {
    const res = await host.getPreds([derivedInput(d, {target, [TARGET_MASK_FIELD]: mask(n, from, to)},
                                                  `lit-mask${from}-${to}`)],
                                    group.salience, group.fields.map((f) => f.field), 'Computing salience…');
    return spanValues(res[0] ?? {}, group, n);
  }

  async function answer(d: IndexedInputLike, group: LitGroup): Promise<Array<Record<string, unknown>>> {
    const detail = String(d.data[DETAIL_FIELD] ?? '');
    if (detail === 'stream') return [{[SALIENCE_FIELD]: {}}];  // nothing streams: the first highlight comes whole
    if (detail !== 'span' && detail !== '') {
      const status: DetailStatus = {kind: 'grad', state: 'unavailable', done: 0, total: 0, elapsed_s: 0, eta_s: null,
                                    error: NEEDS_OUR_WRAPPERS};
      return [{[SALIENCE_FIELD]: {detail: status}}];
    }
    let target = String(d.data['target'] ?? '');
    if (target === '') {
      // The datapoint as LIT's own modules send it (its id, none of our request fields), so that LIT's
      // prediction cache answers when its generated-text module or data table already asked.
      const gen = await host.getPreds([litDatapoint(d)], group.generation, [RESPONSE_FIELD],
                                      'Generating the response…');
      target = String(gen[0]?.[RESPONSE_FIELD] ?? '');
      if (target === '') throw new Error(`"${group.generation}" returned an empty "${RESPONSE_FIELD}".`);
    }
    const {tokens, nPrompt} = await tokensOf(d, group, target);
    const span = String(d.data[TARGET_SPAN_FIELD] ?? '');
    if (span !== '') {
      const [t0, t1] = span.split(':').map(Number);
      const values = await masked(d, group, target, tokens.length, nPrompt + t0, nPrompt + t1);
      return [{[SPAN_SALIENCE_FIELD]: values, [SALIENCE_FIELD]: {}}];
    }
    const whole = await masked(d, group, target, tokens.length, nPrompt, tokens.length);
    return [{[SALIENCE_FIELD]: payloadFromTokens(tokens, nPrompt, whole), [RESPONSE_FIELD]: target,
             [SPAN_SALIENCE_FIELD]: whole}];
  }

  /** LIT's models with LIT_REGISTRY in the salience model's spec (the controller reads the methods there). */
  function models(): Record<string, ModelInfoLike> {
    const all = host.models();
    const group = litConventionGroup(host.modelName(), all);
    if (group === null) return all;
    const info = all[group.salience];
    const methods = LIT_REGISTRY.filter((m) => group.fields.some((f) => f.method === m.name));
    const output = {...info.spec?.output, [METHOD_REGISTRY_FIELD]: {__name__: 'ListLitType', default: methods}};
    return {...all, [group.salience]: {...info, spec: {...info.spec, output}}};
  }

  return {
    ...host,
    modelName: () => host.modelName(),
    models,
    loadLatest: (key, promise) => host.loadLatest(key, promise),
    changed: () => host.changed(),
    getPreds(inputs, model, fields, loadMessage) {
      const group = litConventionGroup(host.modelName(), host.models());
      if (group === null || model !== group.salience || inputs.length !== 1) {
        return host.getPreds(inputs, model, fields, loadMessage);
      }
      return answer(inputs[0], group);
    },
  };
}
