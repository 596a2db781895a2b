/**
 * Target selection over the response: which response segments can be
 * clicked, which target tokens each covers, dragging, and keyboard moves.
 * Pure functions; the element keeps the state.
 */
import type {Segmentation} from '../shared/aggregate/index.js';
import {describeTokens} from '../shared/tokens.js';
import type {TargetSpan} from './spans.js';

/** A clickable response segment and the target tokens [t0, t1) it covers. */
export interface TargetSegment {
  /** Segment index in the segmentation. */
  seg: number;
  t0: number;
  t1: number;
}

/**
 * Response segments in order, each with the range of target tokens whose
 * segment it is. Target token t is token nPrompt + t.
 */
export function targetSegments(seg: Segmentation, nPrompt: number): TargetSegment[] {
  const out: TargetSegment[] = [];
  const n = seg.tokenSegment.length;
  for (let k = nPrompt; k < n; k++) {
    const s = seg.tokenSegment[k];
    if (s < 0) continue;
    const t = k - nPrompt;
    const last = out[out.length - 1];
    if (last !== undefined && last.seg === s) {
      last.t1 = t + 1;
    } else {
      out.push({seg: s, t0: t, t1: t + 1});
    }
  }
  return out;
}

/** The whole response as a span. */
export function wholeResponse(numTargets: number): TargetSpan {
  return {t0: 0, t1: numTargets};
}

export function isWhole(span: TargetSpan, numTargets: number): boolean {
  return span.t0 <= 0 && span.t1 >= numTargets;
}

/** The span covered by dragging from one target segment to another (either order). */
export function dragSpan(a: TargetSegment, b: TargetSegment): TargetSpan {
  return {t0: Math.min(a.t0, b.t0), t1: Math.max(a.t1, b.t1)};
}

/** True when the target segment overlaps the span (it is drawn as selected). */
export function overlaps(ts: TargetSegment, span: TargetSpan): boolean {
  return ts.t0 < span.t1 && span.t0 < ts.t1;
}

/** Index of the first target segment overlapping the span, or -1. */
export function firstIndexIn(list: readonly TargetSegment[], span: TargetSpan): number {
  return list.findIndex((ts) => overlaps(ts, span));
}

/**
 * Keyboard: the cursor (index into the target segments) after a key press.
 * ArrowLeft/ArrowUp go back, ArrowRight/ArrowDown forward, Home/End jump;
 * from no cursor the first step lands on the first (or last) segment.
 * Returns null for keys it does not handle.
 */
export function moveCursor(cursor: number | null, key: string, count: number): number | null {
  if (count === 0) return null;
  const clamp = (i: number) => Math.max(0, Math.min(count - 1, i));
  switch (key) {
    case 'ArrowLeft':
    case 'ArrowUp':
      return cursor === null ? count - 1 : clamp(cursor - 1);
    case 'ArrowRight':
    case 'ArrowDown':
      return cursor === null ? 0 : clamp(cursor + 1);
    case 'Home':
      return 0;
    case 'End':
      return count - 1;
    default:
      return null;
  }
}

/**
 * The span after a keyboard action on the target segments: arrows move a
 * one-segment target (with `extendFrom`, the shift key, they extend from that
 * anchor), Enter/space select the cursor's segment, Escape resets to the
 * whole response. Returns null when the key changes nothing.
 */
export function spanForKey(
    list: readonly TargetSegment[], cursor: number | null, key: string,
    numTargets: number, extendFrom: number | null = null):
    {span: TargetSpan; cursor: number | null} | null {
  if (key === 'Escape') return {span: wholeResponse(numTargets), cursor: null};
  if (key === 'Enter' || key === ' ') {
    if (cursor === null || list[cursor] === undefined) return null;
    return {span: {t0: list[cursor].t0, t1: list[cursor].t1}, cursor};
  }
  const next = moveCursor(cursor, key, list.length);
  if (next === null) return null;
  const anchor = extendFrom !== null ? list[extendFrom] : undefined;
  const span = anchor ? dragSpan(anchor, list[next]) : {t0: list[next].t0, t1: list[next].t1};
  return {span, cursor: next};
}

/** Human-readable description of a span, e.g. "tokens 3–5 of 12" (the shared numbering: shared/tokens.ts). */
export function describeSpan(span: TargetSpan, numTargets: number): string {
  return describeTokens(span.t0, span.t1, numTargets);
}

/**
 * The span widened to whole target segments (used when the granularity
 * changes, so that the highlighted segments are exactly the target).
 * The whole response stays the whole response.
 */
export function snapSpan(list: readonly TargetSegment[], span: TargetSpan): TargetSpan {
  let t0 = span.t0;
  let t1 = span.t1;
  for (const ts of list) {
    if (!overlaps(ts, span)) continue;
    t0 = Math.min(t0, ts.t0);
    t1 = Math.max(t1, ts.t1);
  }
  return {t0, t1};
}
