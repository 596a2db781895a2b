/**
 * The salience methods as the server publishes them: one list, read once from the salience
 * model's output spec (`spec.output.method_registry.default`, docs/architecture.md,
 * "Frontend rooms"), so that method names, labels, signedness and count fields are spelled in
 * the core library's registry only. Colours of curves are presentation and stay here.
 */
import type {ModelInfoLike} from './request.js';

/** The output field whose `default` holds the list. */
export const METHOD_REGISTRY_FIELD = 'method_registry';

export type CountUnit = 'steps' | 'samples';

/**
 * "token": a value for every token and target token, from gradients (aggregated here without the
 * server). "segment": a value per segment of one segmentation, from forward passes over prompts with
 * segments removed (leave one out, the ContextCite surrogate): a change of granularity re-measures.
 */
export type MethodKind = 'token' | 'segment';

/** One method, as published (snake_case as on the wire). */
export interface MethodInfo {
  name: string;
  label: string;
  /** Short UI name ("IG", "SmoothGrad"). */
  short: string;
  /** The name the module's method select shows: the label, or a shorter one where the label does not fit it (absent on
   * an older server: the label). */
  menu?: string;
  signed: boolean;
  linear: boolean;
  /** Input field carrying its count, for a method computed on request; else null. */
  count_field: string | null;
  /** What the count counts; for a token method also the key of the count in its payload entry. */
  count_unit: string | null;
  default_count: number;
  max_count: number | null;
  /** Short name in request ids and the job kind prefix ("ig", "sg"). */
  tag: string | null;
  /** `detail` value that starts its per-token matrix in the background. */
  matrix_detail: string | null;
  cost_unit: string;
  /** When to trust the method's map, one sentence (absent on an older server). */
  trust?: string;
  /** Absent on an older server: "token". */
  kind?: MethodKind;
  /** A segment method's `detail` value (its request starts or polls its job); else null. */
  detail?: string | null;
  /** Granularities at which the module shows this segment method once its forwards finish. */
  default_at?: string[];
  /** Granularities at which the "measure" button runs this segment method by default (absent on an older server). */
  request_default_at?: string[];
  /** The granularities the method computes at; null (or absent on an older server): every one. */
  granularities?: string[] | null;
  /** The segment method whose values this one reports first, before it measures anything (its job's values so far:
   * attention_verified's learned estimate); null (or absent on an older server): none. */
  first_look?: string | null;
  /** A segment method that measures a fixed share of the segments: min(S, max(at_least, floor(share × S))) ablated
   * prompts of S segments (sequence_salience/methods/base.py budget_rows; word_verified: a quarter, at least five);
   * null (or absent on an older server): one per segment. */
  budget?: {share: number; at_least: number} | null;
  /** Whether its measured values are exact leave one out, so that leave one out takes them from its result instead of
   * scoring them again (the server's `exact_values_of`); absent on an older server: false. */
  exact_measured?: boolean;
}

/** A token method the server computes only on request, with a count (0 = off). */
export interface ExtraMethodInfo extends MethodInfo {
  count_field: string;
  count_unit: CountUnit;
  max_count: number;
  tag: string;
  matrix_detail: string;
}

/** A segment method: its values come from a background job per segmentation (`detail`). */
export interface SegmentMethodInfo extends MethodInfo {
  kind: 'segment';
  detail: string;
  /** The `detail` that asks how many of a request's segments another exact method measured on the server already
   * (lit_app/schema/method_registry.py SEGMENT_KNOWN_DETAIL; an `exact_measured` method's); null or absent (an older
   * server): not asked. */
  known_detail?: string | null;
  default_at: string[];
}

export function isSegmentInfo(m: MethodInfo): m is SegmentMethodInfo {
  return m.kind === 'segment';
}

function isExtra(m: MethodInfo): m is ExtraMethodInfo {
  return m.count_field !== null && !isSegmentInfo(m);
}

export class MethodRegistry {
  private readonly byName: ReadonlyMap<string, MethodInfo>;
  /** The token methods computed on request, in display order. */
  readonly extras: readonly ExtraMethodInfo[];
  /** The segment methods, in display order. */
  readonly segments: readonly SegmentMethodInfo[];
  /** The token (gradient) methods, in display order. */
  readonly tokens: readonly MethodInfo[];

  /** `methods` in display order. */
  constructor(readonly methods: readonly MethodInfo[]) {
    this.byName = new Map(methods.map((m) => [m.name, m]));
    this.extras = methods.filter(isExtra);
    this.segments = methods.filter(isSegmentInfo);
    this.tokens = methods.filter((m) => !isSegmentInfo(m));
  }

  /** The method's facts when it is a segment method; else undefined. */
  segment(name: string): SegmentMethodInfo | undefined {
    const m = this.byName.get(name);
    return m !== undefined && isSegmentInfo(m) ? m : undefined;
  }

  isSegment(name: string): boolean {
    return this.segment(name) !== undefined;
  }

  /** The segment methods offered at `granularity` (their `granularities`), in display order. */
  segmentsAt(granularity: string): readonly SegmentMethodInfo[] {
    return this.segments.filter((m) => m.granularities == null || m.granularities.includes(granularity));
  }

  /** The segment method shown at `granularity` once measured (the server's `default_at`), or undefined. */
  defaultSegment(granularity: string): SegmentMethodInfo | undefined {
    return this.segments.find((m) => m.default_at.includes(granularity));
  }

  /**
   * The segment method the "measure" button runs by default at `granularity`, where segment methods are measured
   * only on request (the server's `request_default_at`: word_verified at word, coarse-to-fine at token), or undefined.
   */
  requestSegment(granularity: string): SegmentMethodInfo | undefined {
    return this.segments.find((m) => (m.request_default_at ?? []).includes(granularity));
  }

  get(name: string): MethodInfo | undefined {
    return this.byName.get(name);
  }

  /** The method's label, or its name when the server does not know it. */
  label(name: string): string {
    return this.byName.get(name)?.label ?? name;
  }

  /** The method's name in the method select (`menu`; its label on an older server), or its name when unknown. */
  menu(name: string): string {
    const m = this.byName.get(name);
    return m?.menu ?? m?.label ?? name;
  }

  /** The method's facts when it is computed on request; else undefined. */
  extra(name: string): ExtraMethodInfo | undefined {
    const m = this.byName.get(name);
    return m !== undefined && isExtra(m) ? m : undefined;
  }

  isExtra(name: string): boolean {
    return this.extra(name) !== undefined;
  }
}

function fail(where: string, what: string): never {
  throw new Error(`Malformed method registry: ${where} ${what}. Fix: serve this page from the same version's ` +
                  'server (python -m lit_app.server).');
}

const STRING_KEYS = ['name', 'label', 'short', 'cost_unit'] as const;
const BOOLEAN_KEYS = ['signed', 'linear'] as const;
const EXTRA_KEYS = ['count_field', 'count_unit', 'max_count', 'tag', 'matrix_detail'] as const;

/**
 * Checks the published list.
 * @throws Error naming the entry and field that is wrong.
 */
export function parseRegistry(x: unknown): MethodRegistry {
  if (!Array.isArray(x) || x.length === 0) fail('the list', 'is missing or empty');
  const seen = new Set<string>();
  x.forEach((m: Record<string, unknown>, i) => {
    const where = `entry ${i}${typeof m?.['name'] === 'string' ? ` ("${m['name']}")` : ''}`;
    if (m == null || typeof m !== 'object') fail(where, 'is not an object');
    for (const k of STRING_KEYS) if (typeof m[k] !== 'string') fail(where, `has no string "${k}"`);
    for (const k of BOOLEAN_KEYS) if (typeof m[k] !== 'boolean') fail(where, `has no boolean "${k}"`);
    if (typeof m['default_count'] !== 'number') fail(where, 'has no number "default_count"');
    if (m['kind'] === 'segment') {
      if (typeof m['detail'] !== 'string' || !Array.isArray(m['default_at'])) {
        fail(where, 'is a segment method without a string "detail" and a list "default_at"');
      }
      if (m['count_field'] !== null && (typeof m['count_unit'] !== 'string' || typeof m['max_count'] !== 'number')) {
        fail(where, 'has a count_field but no "count_unit" and "max_count"');
      }
    } else if (m['count_field'] !== null) {
      if (m['count_unit'] !== 'steps' && m['count_unit'] !== 'samples') fail(where, 'has a count_unit other than steps/samples');
      for (const k of EXTRA_KEYS) if (m[k] == null) fail(where, `has a count_field but no "${k}"`);
    }
    if (seen.has(m['name'] as string)) fail(where, 'repeats a name');
    seen.add(m['name'] as string);
  });
  return new MethodRegistry(x as MethodInfo[]);
}

/** The server's own maximum per count field (/get_info "requestLimits".max_counts: its --max_ig_steps, ...). */
export type CountLimits = Record<string, number>;

/**
 * The registry with each count's maximum lowered to the server's (`limits`, by count field): the rule's
 * `max_count` is what any server accepts, a server started with a lower --max_<count field> refuses more
 * (lit_app/edge/limits.py), so the page refuses it first, with that range; a default above it comes down too.
 */
export function withCountLimits(reg: MethodRegistry, limits: CountLimits | undefined): MethodRegistry {
  if (limits == null) return reg;
  return new MethodRegistry(reg.methods.map((m) => {
    const most = m.count_field === null ? undefined : limits[m.count_field];
    if (typeof most !== 'number' || m.max_count === null || most >= m.max_count) return m;
    const max = Math.max(1, most);
    return {...m, max_count: max, default_count: Math.min(m.default_count, max)};
  }));
}

/**
 * The registry a salience model publishes in its output spec (each count's maximum lowered to the server's
 * `limits`: `withCountLimits`), or null when it has none.
 * @throws Error when it has one that is malformed.
 */
export function registryOf(info: ModelInfoLike | undefined, limits?: CountLimits): MethodRegistry | null {
  const field = info?.spec?.output?.[METHOD_REGISTRY_FIELD] as {default?: unknown} | undefined;
  return field?.default == null ? null : withCountLimits(parseRegistry(field.default), limits);
}
