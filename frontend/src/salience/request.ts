/**
 * The salience module's requests: the inputs for the first highlight, span
 * requests, progress polls and the methods computed on request (the registry's
 * methods with a count field: integrated gradients, SmoothGrad) with their
 * counts. How to reach the server at all (derived inputs, error messages) is
 * ../shared/request.ts; the methods are the server's (../shared/methods.ts).
 */
import {DETAIL_FIELD, GRANULARITY_FIELD, MATRIX_JOB_FIELD, SPAN_JOB_FIELD, PATTERN_FIELD, REMOVAL_FIELD, SEGMENT_METHOD_FIELD, STREAM_AFTER_FIELD,
        TARGET_SPAN_FIELD} from '../shared/fields.js';
import type {ExtraMethodInfo, MethodRegistry} from '../shared/methods.js';
import {derivedInput, type IndexedInputLike} from '../shared/request.js';
import type {TargetSpan} from './spans.js';

/** A method computed on request at a count, e.g. {method: 'smooth_grad', count: 8}; null: none. */
export interface Extra {
  method: string;
  count: number;
}

/** Name of an extra method's values at a count (the count changes the values), e.g. "smooth_grad#8". */
export function extraKey(extra: Extra): string {
  return `${extra.method}#${extra.count}`;
}

/** Every count field, 0 except the chosen method's, so a request never asks for two at once. */
export function countFields(reg: MethodRegistry, extra: Extra | null): Record<string, number> {
  const out: Record<string, number> = {};
  for (const m of reg.extras) out[m.count_field] = 0;
  if (extra !== null) out[info(reg, extra).count_field] = extra.count;
  return out;
}

function info(reg: MethodRegistry, extra: Extra): ExtraMethodInfo {
  const m = reg.extra(extra.method);
  if (m === undefined) throw new Error(`"${extra.method}" is not a method computed on request (no count field).`);
  return m;
}

function countTag(reg: MethodRegistry, extra: Extra | null): string {
  return extra === null ? '0' : `${info(reg, extra).tag}${extra.count}`;
}

/** The full payload at once (blocking; every matrix, the extra method's too). */
export function fullInput(reg: MethodRegistry, input: IndexedInputLike, extra: Extra | null = null): IndexedInputLike {
  return derivedInput(input, countFields(reg, extra), `full${countTag(reg, extra)}`);
}

/** First highlight: the whole response's salience now (the extra method's too), the matrices in the background. */
export function quickInput(reg: MethodRegistry, input: IndexedInputLike, extra: Extra | null = null): IndexedInputLike {
  return derivedInput(input, {[DETAIL_FIELD]: 'span', ...countFields(reg, extra)}, `quick${countTag(reg, extra)}`);
}

/** The exact salience of target tokens [t0, t1) (the extra method's too, when given). */
export function spanInput(reg: MethodRegistry, input: IndexedInputLike, t0: number, t1: number,
                          extra: Extra | null = null): IndexedInputLike {
  return derivedInput(input, {[DETAIL_FIELD]: 'span', [TARGET_SPAN_FIELD]: `${t0}:${t1}`, ...countFields(reg, extra)},
                      `span${t0}-${t1}-${countTag(reg, extra)}`);
}

/**
 * The greedy response generated so far (never waits for the model): shown while the first highlight computes.
 * `after`: the response tokens shown; the server answers when there are more, the generation is done or
 * about a second passed (lit_app/wrappers/salience.py STREAM_WAIT_S).
 */
export function streamInput(input: IndexedInputLike, n: number, after: number): IndexedInputLike {
  return derivedInput(input, {[DETAIL_FIELD]: 'stream', [STREAM_AFTER_FIELD]: after}, `stream-${n}`);
}

/** Whether the module explains the model's own response (no typed target): then it can stream it. */
export function explainsGeneration(input: IndexedInputLike): boolean {
  const target = input.data['target'];
  return target == null || target === '';
}

/** Progress of the span being computed for this datapoint (IG steps, SmoothGrad samples); never waits for the model. */
export function spanProgressInput(input: IndexedInputLike, n: number): IndexedInputLike {
  return derivedInput(input, {[DETAIL_FIELD]: 'span_progress'}, `span-progress-${n}`);
}

/** Stops the span job `jobId` (as its span_progress status named it); a cancel naming an older job stops nothing. */
export function spanCancelInput(input: IndexedInputLike, jobId: string): IndexedInputLike {
  return derivedInput(input, {[DETAIL_FIELD]: 'span_cancel', [SPAN_JOB_FIELD]: jobId}, `span-cancel-${jobId}`);
}

/** Stops the per-token matrix job `jobId` (as its status named it): the user switched away from its method or count. */
export function matrixCancelInput(input: IndexedInputLike, jobId: string): IndexedInputLike {
  return derivedInput(input, {[DETAIL_FIELD]: 'matrix_cancel', [MATRIX_JOB_FIELD]: jobId}, `matrix-cancel-${jobId}`);
}

/** Stops every background job of this page on the server (the page is going away: page_exit.ts). About no
 * datapoint (the page's jobs of every one stop), so it carries no text: a keepalive request's body is bounded. */
export function pageClosedInput(): IndexedInputLike {
  return {id: 'page-closed', data: {[DETAIL_FIELD]: 'page_closed', _id: 'page-closed'}, meta: {added: true}};
}

/** Progress of a background job: null, the gradient matrices; else that method's per-token matrix. */
export function pollInput(reg: MethodRegistry, input: IndexedInputLike, extra: Extra | null, n: number): IndexedInputLike {
  return derivedInput(input, {[DETAIL_FIELD]: 'poll', ...countFields(reg, extra)}, `poll${countTag(reg, extra)}-${n}`);
}

/** Starts the extra method's per-token matrix in the background. */
export function matrixInput(reg: MethodRegistry, input: IndexedInputLike, extra: Extra): IndexedInputLike {
  return derivedInput(input, {[DETAIL_FIELD]: info(reg, extra).matrix_detail, ...countFields(reg, extra)},
                      `matrix${countTag(reg, extra)}`);
}

/**
 * A count typed by the user for an extra method: the number when it is a whole number in 1..max_count (the
 * server refuses the rest with a 400 naming the field: lit_app/edge/limits.py), else the refusal in words with the
 * allowed range.
 */
export function parseCount(value: string, method: ExtraMethodInfo): number | string {
  const text = value.trim();
  const v = Number(text);
  if (text !== '' && Number.isInteger(v) && v >= 1 && v <= method.max_count) return v;
  return `${method.short} ${method.count_unit} must be a whole number from 1 to ${method.max_count}` +
      `${text === '' ? '' : `, not ${text}`}`;
}

/** The job kind the server reports for a background job ("grad", "ig16", "sg8"). */
export function jobKind(reg: MethodRegistry, extra: Extra | null): string {
  return extra === null ? 'grad' : countTag(reg, extra);
}

// A segment method's request (`detail` = the method's registry `detail`; docs/architecture.md "Segment salience").
/** What a segment method is measured on: every setting that changes its values. */
export interface SegmentAsk {
  method: string;
  /** The method's count (the surrogate's random ablations); 0 for a method without one. */
  count: number;
  granularity: string;
  /** The regex of granularity "regex" ('' otherwise). */
  pattern: string;
  removal: string;
  span: TargetSpan;
}

/** The cache name of a segment method's values: every setting of `ask` ("leave_one_out#0@sentence//filler"). */
export function segmentKey(ask: Omit<SegmentAsk, 'span'>): string {
  return `${ask.method}#${ask.count}@${ask.granularity}/${ask.pattern}/${ask.removal}`;
}

/**
 * Starts (or finds) the segment method's background job on the server, and polls it: the server
 * answers its progress until the values are there, then the values. `n` numbers the requests. `detail`: the method's
 * registry `known_detail` asks instead how many of its segments the server knows exactly already (no job).
 */
export function segmentInput(reg: MethodRegistry, input: IndexedInputLike, ask: SegmentAsk, n: number,
                             detail: string = reg.segment(ask.method)?.detail ?? ''): IndexedInputLike {
  const settings = segmentFields(reg, ask);  // throws for a method that is not a segment method
  const data: Record<string, unknown> = {
    [DETAIL_FIELD]: detail, ...settings, [TARGET_SPAN_FIELD]: `${ask.span.t0}:${ask.span.t1}`,
  };
  return derivedInput(input, data, `${detail}-${ask.method}-${ask.granularity}-${ask.span.t0}-${ask.span.t1}-${n}`);
}

/** The input fields of a segment method's settings (method, segmentation, removal, count; not the span): the
 * salience model's segment request and the compare model's (which measures both prompts with them). */
export function segmentFields(reg: MethodRegistry, ask: Omit<SegmentAsk, 'span'>): Record<string, unknown> {
  const info = reg.segment(ask.method);
  if (info === undefined) throw new Error(`"${ask.method}" is not a segment method.`);
  const data: Record<string, unknown> = {
    [SEGMENT_METHOD_FIELD]: ask.method, [GRANULARITY_FIELD]: ask.granularity,
    [PATTERN_FIELD]: ask.granularity === 'regex' ? ask.pattern : '', [REMOVAL_FIELD]: ask.removal,
  };
  if (info.count_field !== null) data[info.count_field] = ask.count;
  return data;
}
