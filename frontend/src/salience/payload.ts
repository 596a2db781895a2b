/**
 * The `salience` output field (a LIT JsonDict) as documented in
 * docs/architecture.md, "LIT salience payload", plus a validator that turns a
 * malformed payload into an error that names the broken field, and the progress of
 * its background jobs (`detail`) in words. A segment method's answer: segment_payload.ts;
 * the response stream's: stream.ts.
 */
import {aboutLeft} from '../shared/time_left.js';
import {SHARING_FIELD, WAITING_FOR_FIELD, WAITING_OTHER, WAITING_OWN} from '../shared/fields.js';

export interface MethodPayload {
  signed: boolean;
  /**
   * <float>[T][N]: salience of token i for log p(target_t | prefix); null while the
   * server computes it in the background (progressive salience: see `detail`).
   */
  matrix: number[][] | null;
  /** Unsigned (norm) methods: <float>[N][T*(T+1)/2] packed upper-triangular Gram rows, or null. */
  gram_packed?: number[][] | null;
  /** A method with a count: the count, under its count unit (integrated gradients: steps). */
  steps?: number;
  /** (SmoothGrad: samples.) */
  samples?: number;
  /** Per target token: sum of attributions minus the log-prob difference to the baseline (IG). */
  completeness_error?: number[] | null;
  /** Per target token (the same for each: one run): path points evaluated (IG: ig_steps, or what its search used). */
  steps_used?: number[] | null;
  /** Per target token: forward rows run (IG: the path points and the two log-prob forwards). */
  forwards?: number[] | null;
}

/** The server's completeness check of one target span (lit_app/wrappers/payloads.py completeness_payload). */
export interface SpanCompleteness {
  error: number;
  /** log p(x) − log p(baseline) of the span: the attributions' sum minus the error. */
  change: number;
  relative: number | null;
  rejected: boolean;
}

/** A checked method's (one whose record names an error_extra: IG) tolerance and the spans the server checked. */
export interface MethodCompleteness {
  /** The largest relative completeness error accepted (field_rules.IG_TOLERANCE, or the step search's). */
  tolerance: number;
  spans: Record<string, SpanCompleteness>;
}

export type Role = 'system' | 'user' | 'assistant' | 'markup' | string;

export interface SaliencePayload {
  text: string;
  prompt_end: number;
  tokens: string[];
  offsets: Array<[number, number]>;
  special: boolean[];
  n_prompt_tokens: number;
  role_spans: Array<[number, number, Role]>;
  target_logprobs: number[];
  /** By method name (the server's method registry). */
  methods: Record<string, MethodPayload | undefined>;
  /** "t0:t1" -> method -> <float>[N]: spans the server computed directly (the first highlight). */
  spans?: Record<string, Record<string, number[] | undefined>>;
  /** "t0:t1" -> IG completeness error of that span. */
  span_ig_errors?: Record<string, number>;
  /** By checked method (IG): the completeness tolerance and the checks of the spans with values; absent from older servers. */
  completeness?: Record<string, MethodCompleteness>;
  /** Progress of the background computation of the matrices. */
  detail?: DetailStatus;
  /** torch dtype that produced the values, e.g. "float32" or "bfloat16". */
  dtype?: string;
}

/** Progress of a background job on the server (lit_app/model/progressive.py). */
export interface DetailStatus {
  kind: string;
  /** 'unavailable': these models cannot compute it (`error` says what would). */
  state: 'queued' | 'running' | 'done' | 'cancelled' | 'error' | 'none' | 'unavailable';
  done: number;
  total: number;
  elapsed_s: number;
  /** Seconds left: the middle of the range below (older servers: their one estimate); null without one. */
  eta_s: number | null;
  /** Seconds left as a range from the recent units' rate (lit_app/model/time_left.py); absent from older servers. */
  eta_low_s?: number | null;
  eta_high_s?: number | null;
  error: string;
  /** A span job's id (`detail="span_progress"`): what a `detail="span_cancel"` names to stop it, and only it;
   * a per-token matrix job's (its start and polls): what `detail="matrix_cancel"` names. */
  job_id?: string;
  /** A running job paused behind more urgent work (a test or intervention the user started, a click:
   * lit_app/model/scheduler.py); it has no estimate meanwhile (absent from older servers). */
  waiting?: boolean;
  /** While `waiting`: whose work goes first, the page's own (`WAITING_OWN`) or another client's (`WAITING_OTHER`);
   * absent when unknown (and from older servers). */
  [WAITING_FOR_FIELD]?: string;
  /** While it runs taking turns on the model with equal work: whose, another client's job (`WAITING_OTHER`) or
   * another of this page's (`WAITING_OWN`); its estimate counts those turns. Absent otherwise (and from older
   * servers). */
  [SHARING_FIELD]?: string;
  /** The stage of a job whose work comes in stages (coarse-to-fine: "coarse pass", then "refining", `total` then
   * counting the forwards known so far; word_verified: "batch 1 of 2", then "batch 2 of 2", `total` its budget);
   * absent for the others. */
  stage?: string;
}

/** A poll answer: only the progress (no "text"), or a complete payload. */
export function parseDetail(x: unknown): DetailStatus | null {
  if (x == null || typeof x !== 'object') return null;
  const d = (x as {detail?: DetailStatus}).detail;
  if (d == null || typeof d !== 'object' || typeof d.state !== 'string') return null;
  return d;
}

/** Whether a detail status is final (no more polling). */
export function isFinal(d: DetailStatus | null | undefined): boolean {
  return d == null || d.state === 'done' || d.state === 'cancelled' || d.state === 'error' || d.state === 'none' ||
      d.state === 'unavailable';
}

/** Human-readable progress, e.g. "per-token detail 40% (about 12 s left)". */
export function describeDetail(d: DetailStatus | null | undefined): string {
  if (d == null || d.state === 'done') return 'per-token detail ready: retargeting is instant';
  if (d.state === 'queued') return 'per-token detail queued';
  if (d.state === 'running') {
    const pct = d.total > 0 ? Math.floor((100 * d.done) / d.total) : 0;
    const left = timeLeft(d);
    return `per-token detail loading ${pct}%${left === '' ? '' : ` (${left})`}`;
  }
  if (d.state === 'error') return `per-token detail failed: ${d.error}`;
  if (d.state === 'unavailable') return d.error;
  return 'per-token detail stopped';
}

/** " 45 % · about 12 s left" for a running computation with a known total; '' before its first report. */
export function describeProgress(d: DetailStatus | null | undefined): string {
  if (d == null || d.state !== 'running' || d.total <= 0) return '';
  const pct = Math.floor((100 * d.done) / d.total);
  const left = timeLeft(d);
  return ` ${pct} %${left === '' ? '' : ` · ${left}`}`;
}

/** Whose work a waiting job waits for, in words (its status's `waiting_for`). */
const WAITING_WORDS: Record<string, string> = {
  [WAITING_OWN]: 'your own work goes first',
  [WAITING_OTHER]: 'another user\'s work goes first',
};

/** Whose work a job takes turns with, in words (its status's `sharing`). */
const SHARING_WORDS: Record<string, string> = {
  [WAITING_OWN]: 'sharing the model with your other work',
  [WAITING_OTHER]: 'sharing the model with another user\'s job',
};

/**
 * The time left of a running computation in words: "finishing…" once every unit is done (the result is
 * being assembled), "paused: your own work goes first" while it waits behind work of this page (a test, a click),
 * "paused: another user's work goes first" behind another client's, "paused: waiting for the model" when the server
 * does not say whose, "sharing the model with another user's job · about 40–70 s left" while it takes turns with
 * equal work (the same in its turns and the other's, the estimate counting both; was "paused" and an estimate by turns),
 * "about 40–70 s left" / "about 2–4 min left" from the server's range (lit_app/model/time_left.py: the recent units'
 * rate; it widens when the rate drops and never says "about 1 s" with units outstanding; "about 24 s left" when
 * both ends round alike, or from an older server's one estimate), '' when there is none.
 */
export function timeLeft(d: DetailStatus): string {
  if (d.total > 0 && d.done >= d.total) return 'finishing…';
  if (d.waiting) return `paused: ${WAITING_WORDS[d[WAITING_FOR_FIELD] ?? ''] ?? 'waiting for the model'}`;
  const sharing = SHARING_WORDS[d[SHARING_FIELD] ?? ''];
  if (sharing === undefined) return aboutLeft(d);
  const left = aboutLeft(d);
  return left === '' ? sharing : `${sharing} · ${left}`;
}

/** Number of target (response) tokens T. */
export function numTargets(p: SaliencePayload): number {
  return p.tokens.length - p.n_prompt_tokens;
}

/** A malformed payload (or segment answer: segment_payload.ts), as an error naming the broken field. */
export function malformed(msg: string): never {
  throw new Error(`Malformed salience payload: ${msg}`);
}

/**
 * Checks the shape of a payload received from the server.
 * @throws Error naming the first inconsistent field.
 */
export function parsePayload(x: unknown): SaliencePayload {
  if (x == null || typeof x !== 'object') malformed('expected an object');
  const p = x as SaliencePayload;
  if (typeof p.text !== 'string') malformed('"text" is not a string');
  if (!Array.isArray(p.tokens)) malformed('"tokens" is not a list');
  const n = p.tokens.length;
  if (!Array.isArray(p.offsets) || p.offsets.length !== n) {
    malformed(`"offsets" has ${p.offsets?.length} entries, "tokens" has ${n}`);
  }
  if (!Array.isArray(p.special)) p.special = new Array(n).fill(false);
  if (!Array.isArray(p.role_spans)) p.role_spans = [];
  if (typeof p.n_prompt_tokens !== 'number' || p.n_prompt_tokens < 0 ||
      p.n_prompt_tokens > n) {
    malformed(`"n_prompt_tokens" (${p.n_prompt_tokens}) not in [0, ${n}]`);
  }
  if (typeof p.prompt_end !== 'number') malformed('"prompt_end" is not a number');
  const t = n - p.n_prompt_tokens;
  if (p.methods == null || typeof p.methods !== 'object') {
    malformed('"methods" is missing');
  }
  for (const [key, vals] of Object.entries(p.spans ?? {})) {
    for (const [name, v] of Object.entries(vals ?? {})) {
      if (!Array.isArray(v) || v.length !== n) malformed(`spans["${key}"].${name} has ${v?.length} values, expected N=${n}`);
    }
  }
  for (const [name, m] of Object.entries(p.methods)) {
    if (m == null || m.matrix === null) continue;
    if (!Array.isArray(m.matrix) || m.matrix.length !== t) {
      malformed(`methods.${name}.matrix has ${m.matrix?.length} rows, expected T=${t}`);
    }
    for (const row of m.matrix) {
      if (row.length !== n) {
        malformed(`methods.${name}.matrix row has ${row.length} columns, expected N=${n}`);
      }
    }
    if (m.gram_packed != null) {
      const w = (t * (t + 1)) / 2;
      if (m.gram_packed.length !== n || (n > 0 && m.gram_packed[0].length !== w)) {
        malformed(`methods.${name}.gram_packed is not [N=${n}][T(T+1)/2=${w}]`);
      }
    }
  }
  return p;
}
