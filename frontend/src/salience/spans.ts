/**
 * Salience of a target span [t0, t1) of response tokens, computed from the
 * payload without a model pass where the maths allows it.
 *
 * The rule of sequence_salience/result.py `span_from_rows` (cases shared with pytest:
 * tests/data/span_cases.json): a method linear in the target's log-prob (the registry's
 * `linear`: grad×input, integrated gradients, SmoothGrad) sums its rows, whatever its sign; a
 * one-token span is its row, for any method; otherwise (gradient norm) the norm of the summed
 * gradient vectors, sqrt(sum_{j,k in span} G_i[j,k]) from the packed Gram matrix, and without a
 * Gram matrix the server must be asked (returns null).
 */
import type {MethodPayload} from './payload.js';

/** A half-open range of target token indices, t0 < t1. */
export interface TargetSpan {
  t0: number;
  t1: number;
}

/** Index into a packed upper-triangular row (j <= k) of a T x T matrix. */
export function packedIndex(j: number, k: number, numTargets: number): number {
  if (j > k) [j, k] = [k, j];
  return j * numTargets - (j * (j - 1)) / 2 + (k - j);
}

function sumRows(matrix: number[][], t0: number, t1: number, n: number): Float64Array {
  const out = new Float64Array(n);
  for (let t = t0; t < t1; t++) {
    const row = matrix[t];
    for (let i = 0; i < n; i++) out[i] += row[i];
  }
  return out;
}

/**
 * Salience over all N tokens for the target span, or null when only the server can compute it
 * (a method that is not linear, no Gram matrix and a span of > 1 token). `linear`: the method's
 * registry record (shared/methods.ts `MethodInfo.linear`).
 */
export function spanSalience(
    m: MethodPayload, span: TargetSpan, numTokens: number, linear: boolean): Float64Array|null {
  if (m.matrix == null) return null;  // not computed yet (progressive salience)
  const numTargets = m.matrix.length;
  const t0 = Math.max(0, span.t0);
  const t1 = Math.min(numTargets, span.t1);
  if (t1 <= t0) return new Float64Array(numTokens);
  if (linear) return sumRows(m.matrix, t0, t1, numTokens);
  if (t1 - t0 === 1) return Float64Array.from(m.matrix[t0]);
  if (m.gram_packed == null) return null;
  const out = new Float64Array(numTokens);
  for (let i = 0; i < numTokens; i++) {
    const g = m.gram_packed[i];
    let s = 0;
    for (let j = t0; j < t1; j++) {
      const base = packedIndex(j, j, numTargets);
      s += g[base];
      for (let k = j + 1; k < t1; k++) s += 2 * g[base + (k - j)];
    }
    out[i] = Math.sqrt(Math.max(0, s));
  }
  return out;
}

/** The `target_span` input value the server understands: "t0:t1". */
export function spanToString(span: TargetSpan): string {
  return `${span.t0}:${span.t1}`;
}

/** Cache key for a (method, span) pair. */
export function spanKey(method: string, span: TargetSpan): string {
  return `${method}@${span.t0}:${span.t1}`;
}
