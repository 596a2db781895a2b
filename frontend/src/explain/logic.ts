/**
 * The vocabulary of the "Test this explanation" module and its requests: actions, colours, the methods each
 * test offers, request inputs and fields, and the job's status in words. No DOM. The answers' shapes and
 * checks: payload.ts; what the tests' results say: curves.ts, chart.ts, contrastive.ts, ig_auto.ts.
 */
import {aboutLeft} from '../shared/time_left.js';
import type {MethodInfo, MethodRegistry} from '../shared/methods.js';
import type {SharedTarget} from '../shared/target_store.js';
import type {IgAutoPartial, JobStatus} from './payload.js';

/**
 * The budget of "Reduce prompt", shown before a run (lit_app/wrappers/explain.py REDUCE_MAX_SECONDS and
 * sequence_salience/explain/reduction.py ReductionConfig.max_steps; tests/unit/test_frontend_budgets.py).
 */
export const REDUCE_BUDGET = 'at most 120 s or 200 candidate checks';

export const EXPLAIN_FIELD = 'explain';
export const ACTIONS = ['curves', 'reduce', 'flips', 'contrastive', 'ig_auto'] as const;
export type Action = (typeof ACTIONS)[number];

/** Line colours of the methods' curves (presentation), by the registry's method names. */
export const CURVE_COLORS: Readonly<Record<string, string>> = {
  grad_norm: '#7b1fa2', grad_x_input: '#1a73e8', smooth_grad: '#e37400', integrated_gradients: '#188038',
  leave_one_out: '#d93025', ablation_surrogate: '#00838f', coarse_to_fine: '#c2185b',
};
/** The line colour of a method the table above does not name. */
export const NEUTRAL_COLOR = '#000';
/**
 * The method whose step count the "IG steps" test searches. It is not offered for the curves,
 * reduction and contrastive tests (the server runs those with the gradient methods).
 */
export const IG_METHOD = 'integrated_gradients';

export function curveColor(method: string): string {
  return CURVE_COLORS[method] ?? NEUTRAL_COLOR;
}

/**
 * The methods the curves, reduction and contrastive tests offer, in the registry's order. The segment
 * methods (leave one out, the surrogate) are offered for the curves only: the server measures them on the
 * curves' own segments and removal; reduction and contrastive salience take token methods.
 */
export function testedMethods(reg: MethodRegistry, action: string = 'curves'): MethodInfo[] {
  return reg.methods.filter((m) => m.name !== IG_METHOD && (action === 'curves' || !reg.isSegment(m.name)));
}

/** The method whose order input reduction follows: the first token method ticked (segment methods order the curves only). */
export function reductionMethod(reg: MethodRegistry | null, ticked: readonly string[]): string | undefined {
  return ticked.find((m) => reg === null || !reg.isSegment(m)) ?? reg?.tokens[0]?.name;
}
export const RANDOM_COLOR = '#80868b';
export const LENGTH_COLOR = '#b06000';
export const UPPER_COLOR = '#00897b';

/** The explain model of a salience model: "_smollm2_salience" -> "_smollm2_explain". */
export function explainModelFor(salienceModel: string): string {
  return salienceModel.endsWith('_salience') ? `${salienceModel.slice(0, -'_salience'.length)}_explain`
                                             : `_${salienceModel}_explain`;
}

let nonce = 0;

/**
 * An input for the explain model: the datapoint's fields plus the action and its settings,
 * under a fresh id (LIT caches predictions by id; every test is a new request).
 */
export function explainInput(t: SharedTarget, action: string, extra: Record<string, unknown> = {}) {
  const id = `${t.datapointId}~explain-${action}-${Date.now()}-${nonce++}`;
  const data: Record<string, unknown> = {...t.input, explain_action: action, ...extra, _id: id};
  if (action !== 'status' && action !== 'cancel') data['target_span'] = `${t.t0}:${t.t1}`;
  return {id, data, meta: {added: true}};
}

/** What a result was computed for; a result is shown only while its key matches the view. */
export function resultKey(t: SharedTarget | null, action: Action, settings = ''): string {
  if (t === null) return '';
  const span = `${t.t0}:${t.t1}`;  // contrastive too: the selected span against the foil at its position
  const gran = action === 'flips' || action === 'contrastive' || action === 'ig_auto' ? '' : t.granularity;
  return [t.datapointId, t.text.length, action, span, gran, settings].join('|');
}

const STAGES: Record<string, string> = {
  curves: 'Scoring edited prompts', reduce: 'Checking removals', flips: 'Verifying flips',
  contrastive: 'Gradient passes', ig_steps: 'IG steps',
  // Before its first batch a test may generate the response, waits for the model (other work ends
  // its slice) and computes what it starts from: 15-25 s on a CPU, which a bare "Starting…" did
  // not explain (lit_app/wrappers/explain.py STAGE_*).
  starting: 'Starting', generating: 'Generating the response to explain',
  waiting: 'Waiting for the model (a click in another module goes first)',
  salience: 'Computing the salience maps to test (a forward and backward pass)',
  gradient: 'Computing the gradient that ranks candidate flips',
  // After the curves: the best order on the test's own metric (sequence_salience/explain/upper_bound.py).
  upper_bound: 'Searching the best order (the upper bound that says whether this prompt can decide)',
  // The curves' first, coarse pass (sequence_salience/explain/faithfulness.py faithfulness_stages).
  coarse_curves: 'Coarse pass: scoring edited prompts',
};

/** "Scoring edited prompts: 24 / 110 (22%)" (or the stage's name while the total is unknown). */
export function describeStatus(s: JobStatus | null, fallback: string): string {
  if (s == null) return fallback;
  // After the coarse result, the curves' stages refine it.
  const refining = s.action === 'curves' && s.partial != null && s.stage !== 'coarse_curves';
  const stage = (refining ? 'Refining: ' : '') + (STAGES[s.stage] ?? s.stage);
  const frac = progressFraction(s);
  const best = s.stage === 'ig_steps' ? igBestSoFar(s.partial) : '';
  const left = frac !== null && s.done < s.total ? aboutLeft(s) : '';
  return (frac === null ? `${stage}…` : `${stage}: ${s.done} / ${s.total} (${Math.floor(frac * 100)}%)`) +
      (left === '' ? '' : ` · ${left}`) + best;
}

/** Progress in [0, 1], or null when unknown. */
export function progressFraction(s: JobStatus | null): number | null {
  if (s == null || !(s.total > 0)) return null;
  return Math.max(0, Math.min(1, s.done / s.total));
}

/** Pieces of a field's text for "Reduce prompt": [text, removed] pairs, adjacent kept text merged. */
export function mergePieces(pieces: Array<[string, boolean]>): Array<[string, boolean]> {
  const out: Array<[string, boolean]> = [];
  for (const [text, removed] of pieces) {
    if (!text) continue;
    const last = out[out.length - 1];
    if (last && last[1] === removed) last[0] += text;
    else out.push([text, removed]);
  }
  return out;
}

/**
 * Request fields of "IG steps needed" from the controls (tolerance in percent, cap in steps;
 * maxSteps: the registry's max_count of IG), or a message saying what to fix.
 */
export function igAutoSettings(tolerancePercent: number, cap: number, maxSteps: number):
    {ig_tolerance: number; ig_steps: number} | string {
  if (!(tolerancePercent > 0 && tolerancePercent <= 100)) return 'Tolerance: use a percentage above 0 and at most 100.';
  if (!Number.isInteger(cap) || cap < 1 || cap > maxSteps) {
    return `Most steps: use a whole number from 1 to ${maxSteps}.`;
  }
  return {ig_tolerance: tolerancePercent / 100, ig_steps: cap};
}

/** "12.3%" (relative errors and tolerances). */
export function percent(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  const v = x * 100;
  return `${v >= 10 ? v.toFixed(0) : v >= 1 ? v.toFixed(1) : v.toPrecision(2)}%`;
}

/** " · best so far: 8 steps, 67% error" from the search's status (nothing before its first count). */
export function igBestSoFar(partial: unknown): string {
  const p = partial as IgAutoPartial | null | undefined;
  if (p == null || typeof p.best_steps !== 'number' || typeof p.best_relative_error !== 'number') return '';
  return ` · best so far: ${p.best_steps} steps, ${percent(p.best_relative_error)} error`;
}

/** Removal of input reduction: delete the text (default) or replace tokens by the filler (keep positions). */
export const REDUCE_REMOVALS = ['delete', 'filler'] as const;

/** Request fields of "Reduce prompt" (besides granularity): the ordering method and the removal. */
export function reduceFields(method: string | undefined, removal: string): {methods: string; removal: string} {
  const r = (REDUCE_REMOVALS as readonly string[]).includes(removal) ? removal : 'delete';
  return {methods: method ?? 'grad_norm', removal: r};
}
