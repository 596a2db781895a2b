/**
 * What the server sent for one selection beyond the payload itself, kept so that going
 * back to a span, a method or a count shows it again without a request: span values the
 * server computed, the per-token matrices of the methods computed on request (by method
 * and count) and integrated gradients' completeness errors of spans. Keys name a method's
 * values as `valuesName` does: the method, or an extra method with its count ("smooth_grad#8").
 */
import type {MethodPayload, SaliencePayload} from './payload.js';
import {EXTRA_METHOD_NAMES, EXTRA_METHODS, extraKey, isExtraMethod, type Extra} from './request.js';
import {spanKey, type TargetSpan} from './spans.js';

/**
 * Cache name of a method's values in the answer to a request with `extra`: the extra
 * method's carry its count (the count changes the values); another extra method's
 * values (not asked for) are ignored (null).
 */
export function valuesName(method: string, extra: Extra | null): string | null {
  if (!isExtraMethod(method)) return method;
  return extra?.method === method ? extraKey(extra) : null;
}

/** Methods of a full payload without the extra methods (their matrices are kept per count). */
export function withoutExtras(methods: SaliencePayload['methods']): SaliencePayload['methods'] {
  return Object.fromEntries(Object.entries(methods).filter(([name]) => !isExtraMethod(name)));
}

export class ServerValues {
  /** Span values by spanKey(values name, span). */
  private readonly spans = new Map<string, Float64Array>();
  /** Per-token payloads of the extra methods, by extraKey (method and count). */
  private readonly matrices = new Map<string, MethodPayload>();
  /** IG completeness error of spans computed directly, by "steps|t0:t1". */
  private readonly igErrors = new Map<string, number>();

  clear() {
    this.spans.clear();
    this.matrices.clear();
    this.igErrors.clear();
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

  igError(steps: number, span: TargetSpan): number | undefined {
    return this.igErrors.get(`${steps}|${span.t0}:${span.t1}`);
  }

  /** Keeps what a payload carries: the spans computed directly, IG errors, extra methods' matrices. */
  absorbPayload(p: SaliencePayload, extra: Extra | null) {
    for (const [key, vals] of Object.entries(p.spans ?? {})) {
      const [t0, t1] = key.split(':').map(Number);
      for (const [method, v] of Object.entries(vals ?? {})) {
        const name = valuesName(method, extra);
        if (v == null || name === null) continue;
        this.spans.set(spanKey(name, {t0, t1}), Float64Array.from(v));
      }
    }
    this.absorbIgErrors(p.span_ig_errors, extra);
    for (const name of EXTRA_METHOD_NAMES) {
      const m = p.methods[name];
      const count = m?.[EXTRA_METHODS[name].unit];
      if (m?.matrix != null && count != null) this.setMatrix({method: name, count}, m);
    }
  }

  /** Keeps a span request's answer: every method's values of length n. */
  absorbSpan(all: Record<string, unknown>, span: TargetSpan, n: number | undefined, extra: Extra | null) {
    for (const [m, values] of Object.entries(all)) {
      const k = valuesName(m, extra);
      if (!Array.isArray(values) || values.length !== n || k === null) continue;
      this.spans.set(spanKey(k, span), Float64Array.from(values as number[]));
    }
  }

  /** Keeps the IG completeness errors of the spans an IG request computed. */
  absorbIgErrors(errors: Record<string, number> | undefined, extra: Extra | null) {
    if (extra?.method !== 'integrated_gradients') return;
    for (const [key, err] of Object.entries(errors ?? {})) this.igErrors.set(`${extra.count}|${key}`, err);
  }
}
