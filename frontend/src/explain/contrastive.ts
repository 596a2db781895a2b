/** A contrastive map's segment values and its strongest segments, as the salience module segments text. No DOM. */
import {aggregate, segment, type Segmentation} from '../shared/aggregate/index.js';
import type {ContrastivePayload} from './payload.js';

/** The n segments with the largest |value| (ties: text order), for the numbers beside the map. */
export function strongestSegments(text: string, seg: Segmentation, values: Float64Array, n = 8):
    Array<{seg: number; text: string; value: number}> {
  const out: Array<{seg: number; text: string; value: number}> = [];
  const chars = Array.from(text);  // segment bounds are code points
  for (let s = 0; s < values.length; s++) {
    if (seg.excluded[s] || !Number.isFinite(values[s])) continue;
    out.push({seg: s, text: chars.slice(seg.starts[s], seg.ends[s]).join('').trim(), value: values[s]});
  }
  return out.sort((a, b) => Math.abs(b.value) - Math.abs(a.value) || a.seg - b.seg).slice(0, n);
}

/**
 * Segment values of a contrastive map at a granularity, with the same segmentation and sum
 * reduction as the salience module (aggregate.ts).
 */
export function contrastiveSegments(p: ContrastivePayload, method: string, granularity: string, pattern?: string):
    {seg: Segmentation; values: Float64Array} {
  const seg = segment(p.text, p.offsets, granularity, {pattern, roleSpans: p.role_spans});
  const values = aggregate(p.methods[method].values, seg, 'sum') as Float64Array;
  return {seg, values: Float64Array.from(values)};
}
