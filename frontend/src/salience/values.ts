/**
 * What the server sent for one selection beyond the payload itself, kept so that going
 * back to a span, a method or a count shows it again without a request: span values the
 * server computed, the per-token matrices of the methods computed on request (by method
 * and count) and the server's completeness checks (integrated gradients'). Keys name a method's
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
 * The completeness check (IG's) of the values on screen for one target span, as the server gave it
 * (lit_app/wrappers/payloads.py completeness_payload; display/view.py CompletenessCheck says the rule): the page reads
 * the verdict and derives none.
 */
export interface CompletenessVerdict {
  /** The largest relative error the server accepts for these values. */
  tolerance: number;
  /** The server's check of this span, or null: it checked the whole response, each token and each span it computed,
   * not this one (a span of several tokens read from the per-token matrix). */
  check: SpanCompleteness | null;
  /** Whether the values are hidden until shown anyway: the check failed, or the span was not checked. */
  rejected: boolean;
}

export class ServerValues {
  /** Span values by spanKey(values name, span). */
  private readonly spans = new Map<string, Float64Array>();
  /** Per-token payloads of the extra methods, by extraKey (method and count). */
  private readonly matrices = new Map<string, MethodPayload>();
  /** The server's completeness checks (IG's), by "values name|t0:t1", and each checked method's tolerance. */
  private readonly checks = new Map<string, SpanCompleteness>();
  private readonly tolerances = new Map<string, number>();

  clear() {
    this.spans.clear();
    this.matrices.clear();
    this.checks.clear();
    this.tolerances.clear();
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

  /**
   * The server's verdict on the values named `name` (valuesName: the method, with its count for one computed on
   * request) for `span`; null for a method the server does not check (or an older server).
   */
  verdict(method: string, name: string, span: TargetSpan): CompletenessVerdict | null {
    const tolerance = this.tolerances.get(method);
    if (tolerance === undefined) return null;
    const check = this.checks.get(spanKey(name, span)) ?? null;
    return {tolerance, check, rejected: check === null || check.rejected};
  }

  /** Keeps the completeness checks an answer carries (its `completeness`), for the values it names (with `extra`'s count). */
  absorbChecks(reg: MethodRegistry, completeness: SaliencePayload['completeness'], extra: Extra | null) {
    for (const [method, c] of Object.entries(completeness ?? {})) {
      this.tolerances.set(method, c.tolerance);
      const name = valuesName(reg, method, extra);
      if (name === null) continue;
      for (const [key, check] of Object.entries(c.spans)) {
        const [t0, t1] = key.split(':').map(Number);
        this.checks.set(spanKey(name, {t0, t1}), check);
      }
    }
  }

  /** Keeps what a payload carries: the spans computed directly, extra methods' matrices, the completeness checks. */
  absorbPayload(reg: MethodRegistry, p: SaliencePayload, extra: Extra | null) {
    this.absorbChecks(reg, p.completeness, extra);
    for (const [key, vals] of Object.entries(p.spans ?? {})) {
      const [t0, t1] = key.split(':').map(Number);
      for (const [method, v] of Object.entries(vals ?? {})) {
        const name = valuesName(reg, method, extra);
        if (v == null || name === null) continue;
        this.spans.set(spanKey(name, {t0, t1}), Float64Array.from(v));
      }
    }
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
}
