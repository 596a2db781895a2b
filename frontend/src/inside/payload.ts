/**
 * The payloads of the "Inside the model" models (lit_app/wrappers/inside.py; docs/architecture.md,
 * "Inside the model"): their fields, types and checks that name a broken field. No DOM, no LIT.
 */

import type {EtaFields} from '../shared/time_left.js';

/** top_k: the token is in the value's top-k (the index); projection: every value by (E·v)[token]. */
export type SearchRanking = 'top_k' | 'projection';

export interface Predictions {
  ids: number[];
  tokens: string[];
  probs: number[];
  target_rank: number;
  target_prob: number;
}

export interface SubUpdate {
  layer: number;
  index: number;
  coef: number;
  norm: number;
  score: number;
  top_ids: number[];
  top_tokens: string[];
}

export interface LayerTrace {
  layer: number;
  before: Predictions;
  after: Predictions;
  sub_updates: SubUpdate[];
  max_coef: number;
  ffn_norm: number;
}

export interface TracePayload {
  family: string;
  ids: number[];
  position: number;
  target_id: number;
  target_token: string;
  layers: LayerTrace[];
  output: Predictions;
  seconds: number;
  t: number;
  n_targets: number;
}

/**
 * off: coefficient 0. on: LM-Debugger's rule (one constant per layer, the largest |m|·‖v‖ at the
 * traced position of the plain run + 0.01; GPT-2 before the GELU, gated FFNs on the coefficient).
 * on_layer_max: just above the layer's largest coefficient at each position (the earlier rule).
 */
export type Mode = 'off' | 'on' | 'on_layer_max';
export const MODE_ORDER: readonly Mode[] = ['off', 'on', 'on_layer_max'];
/** all: every position (as LM-Debugger); position: only the traced position (P + t − 1). */
export type Scope = 'all' | 'position';
export const SCOPES: readonly Scope[] = ['all', 'position'];

export interface Intervention {
  layer: number;
  index: number;
  mode: Mode;
  scope?: Scope;  // 'all' when absent
  value?: number | null;  // the server's resolved "on" constant (in a run's payload)
  position?: number | null;  // the server's resolved position for scope "position"
}

export interface SidePayload {
  trace: TracePayload;
  generation: {text: string; stopped_by: string | null};
  n_prompt_tokens: number;
  top_salient: Array<[number, string, number]>;
  salience_method: string;
  salience_total: number | null;
  seconds: number | null;
}

/** One step of an intervention run: the traced forward, the regeneration, the salience. */
export interface RunStep {
  name: string;
  state: 'pending' | 'running' | 'done';
  seconds: number | null;
  /** Where the "before" side came from: "cached" (the server had it) or "computed". */
  before: string | null;
}

export interface InterventionPayload {
  interventions: Intervention[];
  before: SidePayload;
  after: SidePayload;
  steps?: RunStep[];
}

/** A run still going (or cancelled): what is computed so far; later parts are missing. */
export interface PartialIntervention {
  interventions: Intervention[];
  steps: RunStep[];
  before: Partial<SidePayload>;
  after: Partial<SidePayload>;
}

/** The server's status of a running intervention job (lit_app/model/user_jobs.py). */
export interface RunJob {
  action: string;
  stage: string;
  done: number;
  total: number;
  elapsed_s: number;
  cancelled: boolean;
  partial?: PartialIntervention;
}

/**
 * The value index's build: one job of the server's job table (lit_app/model/value_index.py), its status in the
 * `detail` wire form every job poll reads (docs/architecture.md, "Progressive salience"): `done` of `total` layers,
 * `stage` "building" (or "loading" from the disk cache), the time-left range.
 */
export interface IndexStatus extends EtaFields {
  kind: string;
  /** 'none': no search started it yet; 'cancelled': stopped (nobody searched for a while, or a cancel). */
  state: 'none' | 'queued' | 'running' | 'done' | 'cancelled' | 'error';
  done: number;
  total: number;
  elapsed_s: number;
  error: string;
  waiting?: boolean;
  stage?: string;
}

export interface SearchHit {
  layer: number;
  index: number;
  token_id: number;
  token: string;
  rank: number;
  score: number;
  top_tokens: string[];
}

export interface SearchPayload {
  query: string;
  tokens: Array<[number, string]>;
  hits: SearchHit[];
  total: number;
  layers_searched: number;
  num_layers: number;
  index: IndexStatus;
  ranking?: SearchRanking;
}

function fail(what: string): never {
  throw new Error(`Malformed inside-the-model payload: ${what}.`);
}

function isNumArray(a: unknown): a is number[] {
  return Array.isArray(a) && a.every((x) => typeof x === 'number');
}

function checkPredictions(p: unknown, where: string): Predictions {
  const o = p as Predictions;
  if (o == null || !isNumArray(o.ids) || !isNumArray(o.probs) || !Array.isArray(o.tokens) ||
      o.ids.length !== o.probs.length || o.tokens.length !== o.ids.length ||
      typeof o.target_rank !== 'number' || typeof o.target_prob !== 'number') {
    fail(`${where} is not {ids, tokens, probs, target_rank, target_prob} of equal lengths`);
  }
  return o;
}

/** Validates a trace payload (throws naming the broken field). */
export function parseTrace(raw: unknown): TracePayload {
  const t = raw as TracePayload;
  if (t == null || typeof t !== 'object') fail('no trace object');
  if (!Array.isArray(t.layers) || t.layers.length === 0) fail('"layers" is empty or missing');
  t.layers.forEach((l, i) => {
    if (l.layer !== i) fail(`layers[${i}].layer is ${l.layer}`);
    checkPredictions(l.before, `layers[${i}].before`);
    checkPredictions(l.after, `layers[${i}].after`);
    if (!Array.isArray(l.sub_updates)) fail(`layers[${i}].sub_updates is missing`);
  });
  checkPredictions(t.output, 'output');
  if (typeof t.t !== 'number' || typeof t.target_token !== 'string') fail('"t" or "target_token" is missing');
  return t;
}

export function parseIntervention(raw: unknown): InterventionPayload {
  const r = raw as InterventionPayload;
  if (r == null || !Array.isArray(r.interventions) || r.before == null || r.after == null) {
    fail('no {interventions, before, after}');
  }
  parseTrace(r.before.trace);
  parseTrace(r.after.trace);
  return r;
}

export function parseSearch(raw: unknown): SearchPayload {
  const r = raw as SearchPayload;
  if (r == null || !Array.isArray(r.hits) || r.index == null) fail('no {hits, index}');
  return r;
}

/** The status answer's job: null when none runs (or the answer is not a status). */
export function parseRunStatus(raw: unknown): RunJob | null {
  const job = (raw as {job?: unknown} | null)?.job as RunJob | null | undefined;
  if (job == null || typeof job.stage !== 'string') return null;
  if (job.partial != null && (!Array.isArray(job.partial.steps) || job.partial.before == null || job.partial.after == null)) {
    fail('the run status has a malformed "partial"');
  }
  return job;
}
