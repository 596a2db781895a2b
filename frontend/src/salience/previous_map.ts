/**
 * The previous map (issue 45 §3): while a segment method measures (its job polled by segments.ts), the prompt keeps
 * the colours of the last map shown for the same selection and target, marked as the previous one, until the new
 * map replaces it. Pure but for its memory of the last map; text_pane.ts draws it.
 */
import {aggregate, matchesOnly, type Segmentation} from '../shared/aggregate/index.js';
import type {MethodRegistry} from '../shared/methods.js';
import type {TargetSpan} from './spans.js';

/** What the previous map needs of the selection (the controller is one). */
export interface PreviousMapSource {
  readonly method: string;
  readonly span: TargetSpan;
  readonly generation: number;
  /** The segment method on screen waits for the user to ask (nothing measures). */
  segmentsOnRequest(): boolean;
  /** The segment request's refusal or failure ('' when none). */
  readonly segmentError: string;
  segmentAsk(): unknown | null;
}

/** The previous map as drawn: its method, sign convention and values per segment of the segmentation shown. */
export interface PreviousShown {
  method: string;
  signed: boolean;
  values: Float64Array;
}

/** "Previous map (Gradient norm) — measuring Leave one segment out…", from the registry's labels. */
export function previousMapLabel(reg: Pick<MethodRegistry, 'label'> | null, previous: string, measuring: string): string {
  const label = (m: string) => reg?.label(m) ?? m;
  return `Previous map (${label(previous)}) — measuring ${label(measuring)}…`;
}

interface Remembered {
  method: string;
  signed: boolean;
  tokens: Float64Array;
  generation: number;
  t0: number;
  t1: number;
}

export class PreviousMap {
  private last: Remembered | null = null;
  private memo: {tokens: Float64Array; seg: Segmentation; shown: PreviousShown} | null = null;

  /** The map on screen now (token values of `src.method`, not hidden by a completeness check): the next previous one. */
  remember(src: PreviousMapSource, tokens: Float64Array, signed: boolean) {
    const l = this.last;
    if (l !== null && l.tokens === tokens && l.method === src.method && l.generation === src.generation) return;
    this.last = {method: src.method, signed, tokens, generation: src.generation, t0: src.span.t0, t1: src.span.t1};
  }

  /**
   * The previous map to draw while the segment method on screen measures: the last one of this selection and target,
   * of another method, at the segmentation shown; null when nothing measures (asked on request, failed) or none.
   */
  during(src: PreviousMapSource, seg: Segmentation): PreviousShown | null {
    const l = this.last;
    if (l === null || src.segmentAsk() === null || src.segmentsOnRequest() || src.segmentError !== '') return null;
    if (l.generation !== src.generation || l.t0 !== src.span.t0 || l.t1 !== src.span.t1 || l.method === src.method) {
      return null;
    }
    const m = this.memo;
    if (m !== null && m.tokens === l.tokens && m.seg === seg && m.shown.method === l.method) return m.shown;
    // As the map on screen is cut (shown_text.ts): summed per segment, regex matches only.
    const shown = {method: l.method, signed: l.signed, values: matchesOnly(aggregate(l.tokens, seg, 'sum'), seg)};
    this.memo = {tokens: l.tokens, seg, shown};
    return shown;
  }
}
