/**
 * The answers of the explain model (lit_app/wrappers/explain.py) as the "Test this explanation" module reads
 * them: one shape per action and the job's status, and the checks that throw naming a broken field. No DOM.
 */

export const MODES = ['deletion', 'insertion'] as const;
export type Mode = (typeof MODES)[number];
export const VERDICTS = ['beats random and length', 'within noise', 'worse', 'not decidable on this prompt'] as const;
export type Verdict = typeof VERDICTS[number];

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

export function parseContrastive(x: unknown): ContrastivePayload {
  const p = x as ContrastivePayload;
  if (p == null || typeof p.text !== 'string') fail('"text" is not a string');
  if (!Array.isArray(p.offsets) || p.offsets.length !== p.tokens?.length) fail('"offsets" and "tokens" differ in length');
  for (const [m, v] of Object.entries(p.methods ?? {})) {
    if (!Array.isArray(v.values) || v.values.length !== p.tokens.length) fail(`methods.${m}.values has the wrong length`);
  }
  return p;
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
