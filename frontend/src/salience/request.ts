/**
 * The salience module's requests: the inputs for the first highlight, span
 * requests, progress polls and the methods computed on request (integrated
 * gradients, SmoothGrad) with their counts. How to reach the server at all
 * (derived inputs, error messages) is ../shared/request.ts.
 */
import {derivedInput, type IndexedInputLike} from '../shared/request.js';
import type {MethodName} from './payload.js';

export const SPAN_SALIENCE_FIELD = 'span_salience';
export const IG_STEPS_FIELD = 'ig_steps';
export const SMOOTH_GRAD_SAMPLES_FIELD = 'smooth_grad_samples';
export const TARGET_SPAN_FIELD = 'target_span';

export const DETAIL_FIELD = 'detail';

/** Methods the server computes only on request, each with a count (0 = off). */
export type ExtraMethodName = Extract<MethodName, 'integrated_gradients' | 'smooth_grad'>;

export interface ExtraMethodInfo {
  /** Input field carrying the count. */
  field: string;
  /** `detail` value that starts the method's per-token matrix in the background. */
  matrixDetail: string;
  /** Short name in request ids. */
  tag: string;
  /** What the count counts; also the payload key of the method's count ("steps", "samples"). */
  unit: 'steps' | 'samples';
  /** Short name in the UI ("per-token IG", "IG steps"). */
  short: string;
  defaultCount: number;
  maxCount: number;
}

/** One table for the methods computed on request; mirrors EXTRA_METHODS in lit_app/models.py. */
export const EXTRA_METHODS: Readonly<Record<ExtraMethodName, ExtraMethodInfo>> = {
  integrated_gradients: {field: IG_STEPS_FIELD, matrixDetail: 'ig_matrix', tag: 'ig', unit: 'steps', short: 'IG',
                         defaultCount: 16, maxCount: 256},
  smooth_grad: {field: SMOOTH_GRAD_SAMPLES_FIELD, matrixDetail: 'smooth_grad_matrix', tag: 'sg', unit: 'samples',
                short: 'SmoothGrad', defaultCount: 8, maxCount: 256},
};

export const EXTRA_METHOD_NAMES = Object.keys(EXTRA_METHODS) as ExtraMethodName[];

export function isExtraMethod(method: string): method is ExtraMethodName {
  return Object.prototype.hasOwnProperty.call(EXTRA_METHODS, method);
}

/** A method computed on request at a count, e.g. {method: 'smooth_grad', count: 8}; null: none. */
export interface Extra {
  method: ExtraMethodName;
  count: number;
}

/** Name of an extra method's values at a count (the count changes the values), e.g. "smooth_grad#8". */
export function extraKey(extra: Extra): string {
  return `${extra.method}#${extra.count}`;
}

/** Every count field, 0 except the chosen method's, so a request never asks for two at once. */
function countFields(extra: Extra | null): Record<string, number> {
  const out: Record<string, number> = {};
  for (const name of EXTRA_METHOD_NAMES) out[EXTRA_METHODS[name].field] = 0;
  if (extra !== null) out[EXTRA_METHODS[extra.method].field] = extra.count;
  return out;
}

function countTag(extra: Extra | null): string {
  return extra === null ? '0' : `${EXTRA_METHODS[extra.method].tag}${extra.count}`;
}

/** The full payload at once (blocking; every matrix, the extra method's too). */
export function fullInput(input: IndexedInputLike, extra: Extra | null = null): IndexedInputLike {
  return derivedInput(input, countFields(extra), `full${countTag(extra)}`);
}

/** First highlight: the whole response's salience now (the extra method's too), the matrices in the background. */
export function quickInput(input: IndexedInputLike, extra: Extra | null = null): IndexedInputLike {
  return derivedInput(input, {[DETAIL_FIELD]: 'span', ...countFields(extra)}, `quick${countTag(extra)}`);
}

/** The exact salience of target tokens [t0, t1) (the extra method's too, when given). */
export function spanInput(input: IndexedInputLike, t0: number, t1: number, extra: Extra | null = null): IndexedInputLike {
  return derivedInput(input, {[DETAIL_FIELD]: 'span', [TARGET_SPAN_FIELD]: `${t0}:${t1}`, ...countFields(extra)},
                      `span${t0}-${t1}-${countTag(extra)}`);
}

/** The greedy response generated so far (never waits for the model): shown while the first highlight computes. */
export function streamInput(input: IndexedInputLike, n: number): IndexedInputLike {
  return derivedInput(input, {[DETAIL_FIELD]: 'stream'}, `stream-${n}`);
}

/** Whether the module explains the model's own response (no typed target): then it can stream it. */
export function explainsGeneration(input: IndexedInputLike): boolean {
  const target = input.data['target'];
  return target == null || target === '';
}

/** Progress of a background job: null, the gradient matrices; else that method's per-token matrix. */
export function pollInput(input: IndexedInputLike, extra: Extra | null, n: number): IndexedInputLike {
  return derivedInput(input, {[DETAIL_FIELD]: 'poll', ...countFields(extra)}, `poll${countTag(extra)}-${n}`);
}

/** Starts the extra method's per-token matrix in the background. */
export function matrixInput(input: IndexedInputLike, extra: Extra): IndexedInputLike {
  return derivedInput(input, {[DETAIL_FIELD]: EXTRA_METHODS[extra.method].matrixDetail, ...countFields(extra)},
                      `matrix${countTag(extra)}`);
}

/** A count typed by the user for an extra method (rounded), or null when it is outside 1..maxCount. */
export function parseCount(value: string, method: ExtraMethodName): number | null {
  const v = Math.round(Number(value));
  return value.trim() !== '' && v >= 1 && v <= EXTRA_METHODS[method].maxCount ? v : null;
}

/** The job kind the server reports for a background job ("grad", "ig16", "sg8"). */
export function jobKind(extra: Extra | null): string {
  return extra === null ? 'grad' : countTag(extra);
}

