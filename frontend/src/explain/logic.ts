/**
 * Pure logic of the "Test this explanation" module: request inputs, payload checks,
 * chart geometry, AOPC rows, status text and contrastive segment values. No DOM.
 */
import {aggregate, segment, type Segmentation} from '../shared/aggregate/index.js';
import {aboutLeft} from '../shared/time_left.js';
import type {MethodInfo, MethodRegistry} from '../shared/methods.js';
import type {SharedTarget} from '../shared/target_store.js';

/**
 * The budget of "Reduce prompt", shown before a run (lit_app/wrappers/explain.py REDUCE_MAX_SECONDS and
 * sequence_salience/explain/reduction.py ReductionConfig.max_steps; tests/unit/test_frontend_budgets.py).
 */
export const REDUCE_BUDGET = 'at most 120 s or 200 candidate checks';

export const EXPLAIN_FIELD = 'explain';
export const ACTIONS = ['curves', 'reduce', 'flips', 'contrastive', 'ig_auto'] as const;
export type Action = (typeof ACTIONS)[number];
export const MODES = ['deletion', 'insertion'] as const;
export type Mode = (typeof MODES)[number];

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
export const VERDICTS = ['beats random and length', 'within noise', 'worse', 'not decidable on this prompt'] as const;
export type Verdict = typeof VERDICTS[number];

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

export interface CurveEntry {
  logprobs: number[];
  aopc: number;
  low?: number[];
  high?: number[];
}

export interface CurvesPayload {
  span: [number, number];
  granularity: string;
  removal: string;
  filler: string;
  n_segments: number;
  n_removed: number[];
  original_logprob: number;
  empty_logprob: number;
  methods: string[];
  curves: Record<string, Partial<Record<Mode, CurveEntry>>>;
  gaps: Record<string, Partial<Record<Mode, number>>>;
  n_random: number;
  seconds: number;
  /** Curve names of the methods, each ordering ("grad_x_input", "grad_x_input:abs", ...). */
  ranked?: string[];
  noise_sigmas?: number;
  /** One row per (mode, method, ordering), with the baselines and the verdict (sequence_salience/explain/faithfulness.py). */
  table?: FaithfulnessRow[];
  /** The best order the test found (sequence_salience/explain/upper_bound.py); absent or null when not searched. */
  upper_bound?: UpperBound | null;
  /** The datapoint fields whose text was removed ("prompt", "system"); absent or null: the whole prompt. */
  fields?: string[] | null;
  /** Points per curve after the first (K = min(steps asked, segments)). */
  steps?: number;
  /** True for the coarse pass the job's status carries while the full result is computed (lit_app/wrappers/explain.py). */
  preliminary?: boolean;
  /** What refines a preliminary result: its points, random orders and whether it searches the upper bound. */
  refining?: {steps: number; n_random: number; upper_bound: boolean};
}

/**
 * The label of a preliminary (coarse) curves result: what it has, and what the full one will add.
 * `running`: whether the refinement is still computed (else it was stopped before it finished).
 */
export function preliminaryLabel(p: CurvesPayload, running: boolean): string {
  const k = p.steps ?? p.n_removed.length - 1;
  const coarse = `Coarse: ${k} step${k === 1 ? '' : 's'}, ${p.n_random} random order${p.n_random === 1 ? '' : 's'}` +
                 `${p.upper_bound ? '' : ', no upper bound'}`;
  const r = p.refining;
  const full = r ? ` to ${r.steps} steps, ${r.n_random} random orders${r.upper_bound ? ' and the upper bound' : ''}` : '';
  return running ? `${coarse} — refining${full}…`
                 : `${coarse} — the refinement${full} was stopped; run again for the full result.`;
}

/**
 * Whether a coarse result read from the job's status belongs to the run that asked for `fields`
 * (a status read can still see the job this run replaced, for the same prompt, before the server
 * started the new one).
 */
export function partialMatches(p: CurvesPayload, fields: Record<string, unknown>, span: [number, number]): boolean {
  return p.granularity === fields['granularity'] && p.removal === fields['removal'] &&
      p.methods.join(',') === fields['methods'] && p.refining?.steps === fields['steps'] &&
      p.span[0] === span[0] && p.span[1] === span[1];
}

/** The upper bound of a curves payload (lit_app/wrappers/explain.py `_upper_bound`). */
export interface UpperBound {
  /** The key of its curve in `curves`. */
  name: string;
  /** Forward rows its search added. */
  rows: number;
  /** The verdict text of a mode no order can decide. */
  undecidable: string;
  /** Per mode: "exhaustive", "greedy", or the tested curve that beat the greedy search. */
  search: Partial<Record<Mode, string>>;
  /** Per mode: whether the best order found beats random and length by the noise. */
  decidable: Partial<Record<Mode, boolean>>;
}

export interface FaithfulnessRow {
  mode: Mode;
  method: string;
  ordering: 'value' | 'signed' | 'abs';
  name: string;
  aopc: number;
  random_aopc: number;
  random_std: number;
  n_random: number;
  length_aopc: number;
  gap: number;
  gap_length: number;
  /** The upper bound's AOPC in this mode and whether any order can pass (null: not searched). */
  upper_bound_aopc?: number | null;
  decidable?: boolean | null;
  verdict: Verdict;
}

function fail(what: string): never {
  throw new Error(`Malformed explain payload: ${what}`);
}

/** Checks the "curves" payload; throws naming the broken field. */
export function parseCurves(x: unknown): CurvesPayload {
  const p = x as CurvesPayload;
  if (p == null || typeof p !== 'object') fail('expected an object');
  if (!Array.isArray(p.n_removed) || p.n_removed.length < 2) fail('"n_removed" needs at least two points');
  if (p.curves == null || p.curves['random'] == null) fail('"curves.random" is missing');
  for (const [name, byMode] of Object.entries(p.curves)) {
    for (const [mode, c] of Object.entries(byMode)) {
      if (!Array.isArray(c?.logprobs) || c.logprobs.length !== p.n_removed.length) {
        fail(`curves.${name}.${mode}.logprobs has ${c?.logprobs?.length} points, expected ${p.n_removed.length}`);
      }
    }
  }
  return p;
}

export interface Scale {
  /** Maps a data value to pixels. */
  (v: number): number;
  domain: [number, number];
}

export function linearScale(d0: number, d1: number, r0: number, r1: number): Scale {
  const span = d1 - d0 || 1;
  const f = ((v: number) => r0 + ((v - d0) / span) * (r1 - r0)) as Scale;
  f.domain = [d0, d1];
  return f;
}

/** [min, max] of finite values, padded by 5 % (a flat line gets +-0.5). */
export function paddedExtent(values: number[]): [number, number] {
  const finite = values.filter(Number.isFinite);
  if (finite.length === 0) return [0, 1];
  let lo = Math.min(...finite);
  let hi = Math.max(...finite);
  if (hi - lo < 1e-9) return [lo - 0.5, hi + 0.5];
  const pad = (hi - lo) * 0.05;
  return [lo - pad, hi + pad];
}

/** SVG path "M x y L x y ..." through the points (non-finite points are skipped). */
export function linePath(xs: number[], ys: number[], sx: Scale, sy: Scale): string {
  const parts: string[] = [];
  for (let i = 0; i < xs.length; i++) {
    if (!Number.isFinite(ys[i])) continue;
    parts.push(`${parts.length ? 'L' : 'M'}${sx(xs[i]).toFixed(1)} ${sy(ys[i]).toFixed(1)}`);
  }
  return parts.join(' ');
}

/** Closed SVG path of the band between low and high (the random orders' range). */
export function bandPath(xs: number[], low: number[], high: number[], sx: Scale, sy: Scale): string {
  if (xs.length === 0) return '';
  const top = xs.map((x, i) => `${i ? 'L' : 'M'}${sx(x).toFixed(1)} ${sy(high[i]).toFixed(1)}`);
  const bottom = xs.map((_, j) => {
    const i = xs.length - 1 - j;
    return `L${sx(xs[i]).toFixed(1)} ${sy(low[i]).toFixed(1)}`;
  });
  return [...top, ...bottom, 'Z'].join(' ');
}

/** x positions of a curve's points: the fraction of segments removed (or revealed). */
export function fractions(p: CurvesPayload): number[] {
  const n = Math.max(1, p.n_segments);
  return p.n_removed.map((k) => k / n);
}

/** Every log-prob drawn in one mode's chart (for a shared y range). */
export function chartValues(p: CurvesPayload, mode: Mode): number[] {
  const out: number[] = [];
  for (const byMode of Object.values(p.curves)) {
    const c = byMode[mode];
    if (c == null) continue;
    out.push(...c.logprobs, ...(c.low ?? []), ...(c.high ?? []));
  }
  return out;
}

export interface AopcRow {
  method: string;
  /** The curve's key: the method, or method + ":abs" for a signed method ranked by |value|. */
  name: string;
  label: string;
  ordering: string;
  color: string;
  aopc: number;
  random: number;
  randomStd: number;
  length: number;
  gap: number;
  gapLength: number;
  verdict: Verdict | null;
}

const ORDERING_LABEL: Record<string, string> = {value: '', signed: 'most positive first', abs: 'largest |value| first'};

/** One row per method and ordering for a mode, best gap to random first (with baselines and verdicts
 * from the server's table; an older payload without one gives rows without length and verdict).
 * `label` names a method (the registry's label). */
export function aopcRows(p: CurvesPayload, mode: Mode, label: (method: string) => string): AopcRow[] {
  const random = p.curves['random']?.[mode]?.aopc ?? NaN;
  const rows: AopcRow[] = [];
  if (p.table) {
    for (const r of p.table) {
      if (r.mode !== mode) continue;
      const ordering = ORDERING_LABEL[r.ordering] ?? r.ordering;
      rows.push({method: r.method, name: r.name, label: `${label(r.method)}${ordering ? ` (${ordering})` : ''}`,
                 ordering: r.ordering, color: curveColor(r.method), aopc: r.aopc, random: r.random_aopc,
                 randomStd: r.random_std, length: r.length_aopc, gap: r.gap, gapLength: r.gap_length, verdict: r.verdict});
    }
  } else {
    for (const m of p.methods) {
      const c = p.curves[m]?.[mode];
      if (c == null) continue;
      rows.push({method: m, name: m, label: label(m), ordering: 'value', color: curveColor(m),
                 aopc: c.aopc, random, randomStd: NaN, length: NaN, gap: c.aopc - random, gapLength: NaN, verdict: null});
    }
  }
  return rows.sort((a, b) => b.gap - a.gap);
}

/** What one mode's upper bound says, for the chart and the table (null: no bound in the payload). */
export interface BoundView {
  /** The key of its curve in the payload's `curves`. */
  name: string;
  aopc: number;
  decidable: boolean;
  /** How it was found, in words. */
  search: string;
  /** One sentence for the researcher. */
  text: string;
}

/** The upper bound of `mode` in words; `label` names a tested curve that beat the greedy search. */
export function boundView(p: CurvesPayload, mode: Mode, label: (name: string) => string): BoundView | null {
  const up = p.upper_bound;
  const curve = up ? p.curves[up.name]?.[mode] : undefined;
  if (!up || !curve || up.decidable[mode] === undefined) return null;
  const how = up.search[mode] ?? '';
  const search = how === 'exhaustive' ? 'exact search over every order'
      : how === 'greedy' ? 'greedy search' : `the order of ${label(how)} (greedy search found none better)`;
  const margin = `${p.noise_sigmas ?? 2}× the random spread`;
  const decidable = up.decidable[mode] === true;
  const text = decidable
      ? `Best order found (${search}): AOPC ${curve.aopc.toFixed(3)}; an order can beat random and length by ` +
        `${margin} on this prompt, so the verdicts can tell methods apart.`
      : `${up.undecidable[0].toUpperCase()}${up.undecidable.slice(1)}: even the best order found (${search}, AOPC ` +
        `${curve.aopc.toFixed(3)}) does not beat random and length by ${margin}, so no method can; “within noise” ` +
        'here says nothing against a method. More segments (a finer granularity) or a longer prompt can decide.';
  return {name: up.name, aopc: curve.aopc, decidable, search, text};
}

/** The server's job status, as the module shows it. */
export interface JobStatus {
  action: string;
  stage: string;
  done: number;
  total: number;
  elapsed_s: number;
  /** Results so far (the curves' coarse pass), when the job offers them. */
  partial?: unknown;
  /** The time left of the stage, as a range (lit_app/model/time_left.py); absent from older servers. */
  eta_s?: number | null;
  eta_low_s?: number | null;
  eta_high_s?: number | null;
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

export interface ContrastivePayload {
  text: string;
  tokens: string[];
  offsets: Array<[number, number]>;
  special: boolean[];
  role_spans: Array<[number, number, string]>;
  target: string;
  foil: string;
  target_logprob: number;
  foil_logprob: number;
  methods: Record<string, {signed: boolean; values: number[]}>;
  /** Where the prompt ends in `text` (after it: the answer before the span); the span [t0, t1). */
  prompt_end?: number;
  n_prompt_tokens?: number;
  span?: [number, number];
}

/** The n segments with the largest |value| (ties: text order), for the numbers beside the map. */
export function strongestSegments(text: string, seg: Segmentation, values: Float64Array, n = 8):
    Array<{seg: number; text: string; value: number}> {
  const out: Array<{seg: number; text: string; value: number}> = [];
  const chars = Array.from(text);  // segment bounds are code points
  for (let s = 0; s < values.length; s++) {
    if (seg.excluded[s] || !Number.isFinite(values[s])) continue;
    out.push({seg: s, text: chars.slice(seg.starts[s], seg.ends[s]).join('').trim(), value: values[s]});
  }
  return out.sort((a, b) => Math.abs(b.value) - Math.abs(a.value) || a.seg - b.seg).slice(0, n);
}

export function parseContrastive(x: unknown): ContrastivePayload {
  const p = x as ContrastivePayload;
  if (p == null || typeof p.text !== 'string') fail('"text" is not a string');
  if (!Array.isArray(p.offsets) || p.offsets.length !== p.tokens?.length) fail('"offsets" and "tokens" differ in length');
  for (const [m, v] of Object.entries(p.methods ?? {})) {
    if (!Array.isArray(v.values) || v.values.length !== p.tokens.length) fail(`methods.${m}.values has the wrong length`);
  }
  return p;
}

/**
 * Segment values of a contrastive map at a granularity, with the same segmentation and sum
 * reduction as the salience module (aggregate.ts).
 */
export function contrastiveSegments(p: ContrastivePayload, method: string, granularity: string, pattern?: string):
    {seg: Segmentation; values: Float64Array} {
  const seg = segment(p.text, p.offsets, granularity, {pattern, roleSpans: p.role_spans});
  const values = aggregate(p.methods[method].values, seg, 'sum') as Float64Array;
  return {seg, values: Float64Array.from(values)};
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

/** One integrated-gradients run of "IG steps needed". */
export interface IgRun {
  steps: number;
  error: number;
  relative_error: number;
  seconds: number;
}

/** The "ig_auto" payload (lit_app/wrappers/explain.py). */
export interface IgAutoPayload {
  span: [number, number];
  steps: number;
  stopped_by: 'tolerance' | 'cap';
  converged: boolean;
  tolerance: number;
  relative_error: number;
  error: number;
  delta: number;
  max_steps: number;
  schedule: number[];
  tried: IgRun[];
  seconds: number;
  /** At the cap: the steps the last doubling's rate says would reach the tolerance; null when the error was not falling steadily. */
  needed_steps?: number | null;
}

/** What "status" carries while the IG search runs: the counts tried so far and the best of them. */
export interface IgAutoPartial {
  tried: IgRun[];
  best_steps: number;
  best_relative_error: number;
}


/** Checks the "ig_auto" payload; throws naming the broken field. */
export function parseIgAuto(x: unknown): IgAutoPayload {
  const p = x as IgAutoPayload;
  if (p == null || typeof p !== 'object') fail('expected an object');
  if (!Array.isArray(p.tried) || p.tried.length === 0) fail('"tried" needs at least one run');
  if (p.stopped_by !== 'tolerance' && p.stopped_by !== 'cap') fail(`"stopped_by" is ${JSON.stringify(p.stopped_by)}`);
  if (p.stopped_by === 'tolerance' && p.tried[p.tried.length - 1].steps !== p.steps) {
    fail('"steps" is not the last run\'s step count');
  }
  const best = p.tried.reduce((a, b) => (b.relative_error < a.relative_error ? b : a));
  if (p.stopped_by === 'cap' && best.steps !== p.steps) fail('"steps" is not the best run\'s step count');
  return p;
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

/** One line on the outcome: the step count chosen, the error reached and whether the cap was hit. */
export function igAutoSummary(p: IgAutoPayload): string {
  const reached = `completeness error ${p.error.toPrecision(3)} nats = ${percent(p.relative_error)} of ` +
                  `F(x) − F(baseline) = ${p.delta.toPrecision(3)}`;
  return p.stopped_by === 'tolerance'
      ? `${p.steps} steps are enough: ${reached}, within the ${percent(p.tolerance)} tolerance.`
      : `Cap hit at ${p.max_steps} steps without meeting the ${percent(p.tolerance)} tolerance; the best count ` +
        `tried is ${p.steps} steps: ${reached}.`;
}

/**
 * What to do next, honestly: the steps to use; at the cap, more steps only where the error fell
 * steadily (the server's estimate, within the most it allows: `maxSteps`, 0 when unknown), else
 * another method or the figure reached.
 */
export function igAutoAdvice(p: IgAutoPayload, maxSteps: number): string {
  if (p.stopped_by === 'tolerance') return `Use ${p.steps} IG steps in the salience module for this span.`;
  const figure = `IG with ${p.steps} steps (the best tried) is off by ${percent(p.relative_error)}`;
  const n = p.needed_steps;
  if (n != null && (maxSteps === 0 || n <= maxSteps)) {
    return `The error at least halved at each of the last two doublings; at that rate about ${n} steps reach ` +
           `${percent(p.tolerance)}: set Most steps to ${n} and run again` +
           `${maxSteps ? ` (this server allows up to ${maxSteps})` : ''}.`;
  }
  if (n != null) {
    return `At the last doubling's rate about ${n} steps would be needed, more than this server allows ` +
           `(${maxSteps}). For sizes on this span use Gradient × input; ${figure}.`;
  }
  const path = p.tried.map((r) => percent(r.relative_error)).join(' → ');
  return `The error is not falling steadily as the steps double (${path}), so no step count can be promised. ` +
         `For sizes on this span use Gradient × input; ${figure}.`;
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
