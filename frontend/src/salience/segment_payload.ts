/**
 * A segment method's answer inside the `salience` field (docs/architecture.md, "Segment salience"): its values on
 * one segmentation, or its job's progress with its values so far, checked like the payload (payload.ts).
 */
import {malformed, parseDetail, type DetailStatus} from './payload.js';

/** The key of a segment method's values inside the `salience` answer (lit_app/schema/fields.py SEGMENTS). */
export const SEGMENTS_FIELD = 'segments';
/** Beside a running segment job's progress: its values so far, as SEGMENTS_FIELD's (fields.py PARTIAL_SEGMENTS). */
export const PARTIAL_SEGMENTS_FIELD = 'partial_segments';
/** The answer to a segment method's `known_detail` request: {method, measured} of the exact values the server holds
 * for it (fields.py KNOWN_EXACT), or null. */
export const KNOWN_EXACT_FIELD = 'known_exact';

/** A segment method's values for one target span on one segmentation (docs/architecture.md, "Segment salience"). */
export interface SegmentPayload {
  method: string;
  granularity: string;
  pattern: string | null;
  removal: string;
  span: [number, number];
  count: number;
  /** <float>[S]: one value per removable prompt segment (positive: it raises p(target)). */
  values: number[];
  /** S character spans [start, end) of those segments (code points), in text order. */
  spans: Array<[number, number]>;
  /** Index of each into the segmentation at this granularity. */
  segment_index: number[];
  /** <float>[N]: each segment's value spread over its tokens (summed per segment: the values back). */
  token_values: number[];
  original_logprob: number;
  /** The surrogate's fit: held-out "r2", "correlation" (null: could not be computed); leave one out: "reused", how
   * many values it took from the first map's exact measurement (absent: none). */
  quality: Record<string, number | null>;
  /** '' or what makes the values doubtful, with what to do. */
  warning: string;
  /** Forward work: rows scored (the unedited prompt included), tokens, tokens recomputed, share saved. */
  stats: {rows: number; tokens: number; tokens_computed: number; prefix_reuse: boolean; saved: number};
  /** Coarse-to-fine only, when it left segments unmeasured: <bool>[S] whether each value was measured; the value
   * of the coarser unit holding each unmeasured segment (null where measured) and that unit's granularity. */
  measured?: boolean[];
  coarse_values?: Array<number | null>;
  coarse_granularity?: string[];
  /** Set by the page on a running job's values so far (PARTIAL_SEGMENTS_FIELD): not the method's final map. */
  partial?: boolean;
}

/**
 * A segment request's answer: the values (with the job's final status), or only the job's progress, with its values
 * so far where it sends them (`partial`, marked `partial: true`; attention_verified: its estimate, then the segments
 * verified so far).
 * @throws Error naming the broken field of malformed values (`n`: the payload's token count).
 */
export function parseSegments(x: unknown, n: number): {values: SegmentPayload | null; status: DetailStatus | null;
                                                      partial: SegmentPayload | null} {
  const status = parseDetail(x);
  const answer = x as Record<string, unknown> | null;
  const s = checkedSegments(answer?.[SEGMENTS_FIELD], n, SEGMENTS_FIELD);
  const partial = s === null ? checkedSegments(answer?.[PARTIAL_SEGMENTS_FIELD], n, PARTIAL_SEGMENTS_FIELD) : null;
  return {values: s, status, partial: partial === null ? null : {...partial, partial: true}};
}

/** The segment values under `field`, checked; null when absent. */
function checkedSegments(x: unknown, n: number, field: string): SegmentPayload | null {
  const s = x as SegmentPayload | undefined;
  if (s == null) return null;
  if (!Array.isArray(s.values) || !Array.isArray(s.spans) || s.spans.length !== s.values.length) {
    malformed(`${field}.values and .spans differ in length`);
  }
  if (!Array.isArray(s.token_values) || s.token_values.length !== n) {
    malformed(`${field}.token_values has ${s.token_values?.length} values, expected N=${n}`);
  }
  if (s.measured !== undefined && (!Array.isArray(s.measured) || s.measured.length !== s.values.length ||
      s.coarse_values?.length !== s.values.length || s.coarse_granularity?.length !== s.values.length)) {
    malformed(`${field}.measured, .coarse_values and .coarse_granularity must each have one entry per segment`);
  }
  return s;
}

/** "held-out R² 0.62 (0.41–0.75 over random splits)" for a fit with a quality; '' without one. */
export function describeFit(s: SegmentPayload): string {
  const r2 = s.quality['r2'];
  if (r2 === undefined) return '';
  if (r2 === null) return 'held-out R² not computable';
  const low = s.quality['r2_low'], high = s.quality['r2_high'];
  const spread = typeof low === 'number' && typeof high === 'number' && high > low ?
      ` (${low.toFixed(2)}–${high.toFixed(2)} over random splits)` : '';
  return `held-out R² ${r2.toFixed(2)}${spread}`;
}
