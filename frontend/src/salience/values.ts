/**
 * What the server sent for one selection beyond the payload itself, kept so that going
 * back to a span, a method or a count shows it again without a request: span values the
 * server computed, the per-token matrices of the methods computed on request (by method
 * and count) and the completeness errors of spans (integrated gradients'). Keys name a method's
 * values as `valuesName` does: the method, or an extra method with its count ("smooth_grad#8").
 */
import type {MethodRegistry} from '../shared/methods.js';
import type {MethodPayload, SaliencePayload, SpanCompleteness} from './payload.js';
import {extraKey, type Extra} from './request.js';
import {spanKey, type TargetSpan} from './spans.js';

/**
 * Cache name of a method's values in the answer to a request with `extra`: the extra
 * method's carry its count (the count changes the values); another extra method's
 * values (not asked for) are ignored (null).
 */
export function valuesName(reg: MethodRegistry, method: string, extra: Extra | null): string | null {
  if (!reg.isExtra(method)) return method;
  return extra?.method === method ? extraKey(extra) : null;
}

/** Methods of a full payload without the extra methods (their matrices are kept per count). */
export function withoutExtras(reg: MethodRegistry, methods: SaliencePayload['methods']): SaliencePayload['methods'] {
  return Object.fromEntries(Object.entries(methods).filter(([name]) => !reg.isExtra(name)));
}

/**
 * IG's relative completeness error: |error| / |log p(x) − log p(x′)|, the log-prob change to the
 * baseline being the attributions' sum minus the error (as sequence_salience/explain/ig_quality.py
 * computes it). Null without values or with no change to compare with.
 */
export function relativeCompleteness(error: number, values: ArrayLike<number> | null): number | null {
  if (values === null) return null;
  let sum = 0;
  for (let i = 0; i < values.length; i++) if (Number.isFinite(values[i])) sum += values[i];
  const delta = sum - error;
  return Math.abs(delta) > 1e-12 ? Math.abs(error) / Math.abs(delta) : null;
}

/** A completeness check of the values on screen, with the tolerance it was held to. */
export interface CompletenessVerdict extends SpanCompleteness {
  tolerance: number;
}

/**
 * The completeness rule for `method`'s values of the span on screen: their error (`error`, summed over the span) against
 * the log-p change (the values' sum minus the error), held to the tolerance the server published for the method
 * (`p.completeness`; display/view.py CompletenessCheck computes the same). Null for a method the server does not check
 * (or an older server), or without the error or the values. `rejected`: the relative error is over the tolerance.
 */
export function completenessVerdict(p: Pick<SaliencePayload, 'completeness'>, method: string, error: number | null,
                                    values: ArrayLike<number> | null): CompletenessVerdict | null {
  const checked = p.completeness?.[method];
  if (checked === undefined || error === null || values === null) return null;
  const relative = relativeCompleteness(error, values);
  let sum = 0;
  for (let i = 0; i < values.length; i++) if (Number.isFinite(values[i])) sum += values[i];
  return {error, change: sum - error, relative, tolerance: checked.tolerance,
          rejected: relative !== null && relative > checked.tolerance};
}

export class ServerValues {
  /** Span values by spanKey(values name, span). */
  private readonly spans = new Map<string, Float64Array>();
  /** Per-token payloads of the extra methods, by extraKey (method and count). */
  private readonly matrices = new Map<string, MethodPayload>();
  /** Completeness error (IG) of spans computed directly, by "extraKey|t0:t1". */
  private readonly spanErrors = new Map<string, number>();

  clear() {
    this.spans.clear();
    this.matrices.clear();
    this.spanErrors.clear();
  }

  /** How many spans are kept (grows when one arrives). */
  get size(): number {
    return this.spans.size;
  }

  span(key: string): Float64Array | undefined {
    return this.spans.get(key);
  }

  matrix(extra: Extra): MethodPayload | undefined {
    return this.matrices.get(extraKey(extra));
  }

  setMatrix(extra: Extra, m: MethodPayload) {
    this.matrices.set(extraKey(extra), m);
  }

  /** The completeness error of a span of an extra method at a count, when the server sent one. */
  spanError(extra: Extra, span: TargetSpan): number | undefined {
    return this.spanErrors.get(`${extraKey(extra)}|${span.t0}:${span.t1}`);
  }

  /** Keeps what a payload carries: the spans computed directly, IG errors, extra methods' matrices. */
  absorbPayload(reg: MethodRegistry, p: SaliencePayload, extra: Extra | null) {
    for (const [key, vals] of Object.entries(p.spans ?? {})) {
      const [t0, t1] = key.split(':').map(Number);
      for (const [method, v] of Object.entries(vals ?? {})) {
        const name = valuesName(reg, method, extra);
        if (v == null || name === null) continue;
        this.spans.set(spanKey(name, {t0, t1}), Float64Array.from(v));
      }
    }
    this.absorbSpanErrors(p.span_ig_errors, extra);
    for (const info of reg.extras) {
      const m = p.methods[info.name];
      const count = m?.[info.count_unit];
      if (m?.matrix != null && count != null) this.setMatrix({method: info.name, count}, m);
    }
  }

  /** Keeps a span request's answer: every method's values of length n. */
  absorbSpan(reg: MethodRegistry, all: Record<string, unknown>, span: TargetSpan, n: number | undefined,
             extra: Extra | null) {
    for (const [m, values] of Object.entries(all)) {
      const k = valuesName(reg, m, extra);
      if (!Array.isArray(values) || values.length !== n || k === null) continue;
      this.spans.set(spanKey(k, span), Float64Array.from(values as number[]));
    }
  }

  /** Keeps the completeness errors of the spans a request for an extra method computed (the server sends IG's). */
  absorbSpanErrors(errors: Record<string, number> | undefined, extra: Extra | null) {
    if (extra === null) return;
    for (const [key, err] of Object.entries(errors ?? {})) this.spanErrors.set(`${extraKey(extra)}|${key}`, err);
  }
}
