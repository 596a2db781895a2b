/**
 * The previous map (issue 45 §3): while the method on screen is computed (a segment method's job, polled by
 * segments.ts; integrated gradients' or SmoothGrad's span, a batch of steps or samples), the prompt keeps the colours
 * of the last map shown for the same selection and target, marked as the previous one, until the new map replaces
 * it. Pure but for its memory of the last map; text_pane.ts draws it.
 */
import {aggregate, matchesOnly, type Segmentation} from '../shared/aggregate/index.js';
import type {MethodRegistry} from '../shared/methods.js';
import type {TargetSpan} from './spans.js';

/** What the previous map needs of the selection (the controller is one). */
export interface PreviousMapSource {
  readonly method: string;
  readonly span: TargetSpan;
  readonly generation: number;
  /** Whether the method on screen is being computed, its values to come without the user asking (selection.ts). */
  computing(): boolean;
  /** The values' name: the method, with its count for one computed on request ("smooth_grad#8"). */
  valuesName(): string;
  /** The method computed on request with its count, or null. */
  extra(): {count: number} | null;
}

/** The previous map as drawn: its method, sign convention and values per segment of the segmentation shown. */
export interface PreviousShown {
  method: string;
  /** The step / sample count of a method computed on request, else null. */
  count: number | null;
  signed: boolean;
  values: Float64Array;
}

/**
 * "Previous map (Gradient norm) — measuring Leave one segment out…" (a segment method measures by removing segments),
 * "… — computing Integrated gradients…" (a token method), from the registry's labels and kinds.
 */
export function previousMapLabel(reg: Pick<MethodRegistry, 'label' | 'isSegment' | 'extra'> | null,
                                 previous: Pick<PreviousShown, 'method' | 'count'>, measuring: string): string {
  const label = (m: string) => reg?.label(m) ?? m;
  const verb = reg === null || reg.isSegment(measuring) ? 'measuring' : 'computing';
  const unit = reg?.extra(previous.method)?.count_unit;
  const count = previous.count === null || unit === undefined ? '' : `, ${previous.count} ${unit}`;
  return `Previous map (${label(previous.method)}${count}) — ${verb} ${label(measuring)}…`;
}

interface Remembered {
  method: string;
  name: string;
  count: number | null;
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
    const name = src.valuesName();
    if (l !== null && l.tokens === tokens && l.name === name && l.generation === src.generation) return;
    this.last = {method: src.method, name, count: src.extra()?.count ?? null, signed, tokens, generation: src.generation,
                 t0: src.span.t0, t1: src.span.t1};
  }

  /**
   * The previous map to draw while the method on screen is computed: the last one of this selection and target, of
   * another method or count, at the segmentation shown; null when nothing computes (asked on request, failed) or none.
   */
  during(src: PreviousMapSource, seg: Segmentation): PreviousShown | null {
    const l = this.last;
    if (l === null || !src.computing()) return null;
    if (l.generation !== src.generation || l.t0 !== src.span.t0 || l.t1 !== src.span.t1 || l.name === src.valuesName()) {
      return null;
    }
    const m = this.memo;
    if (m !== null && m.tokens === l.tokens && m.seg === seg && m.shown.method === l.method) return m.shown;
    // As the map on screen is cut (shown_text.ts): summed per segment, regex matches only.
    const shown = {method: l.method, count: l.count, signed: l.signed,
                   values: matchesOnly(aggregate(l.tokens, seg, 'sum'), seg)};
    this.memo = {tokens: l.tokens, seg, shown};
    return shown;
  }
}
