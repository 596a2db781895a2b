/**
 * The automatic steps of the segment methods (confirm.ts `nextAutoStep`, pure): while the user has not chosen a
 * method, the first map is shown, then the exact segment method is measured and shown in its place, and what the
 * first map showed is kept for the verdict. The class segments.ts's `SegmentMethods` extends: it measures the values
 * these steps wait for (`has`, `fetch`).
 */
import type {IndexedInputLike} from '../shared/request.js';
import {firstMapAt, nextAutoStep, type AutoStep, type FirstMapShown} from './confirm.js';
import type {SaliencePage} from './page.js';
import type {DetailStatus} from './payload.js';
import {segmentKey, type SegmentAsk} from './request.js';

/** The cache key of segment values: every setting that changes them, and the target span. */
export function segmentCacheKey(ask: SegmentAsk): string {
  return `${segmentKey(ask)}|${ask.span.t0}:${ask.span.t1}`;
}

export abstract class AutoSteps {
  /** The segmentation the element shows (segment methods are measured on it). */
  abstract granularity: string;
  /** Progress of the segment job behind what is on screen (or measured for the automatic switch). */
  detail: DetailStatus | null = null;
  /** Whether the module switched to the method on screen itself (the default segment method, once measured). */
  autoShown = false;
  /** What the first map showed when the exact map replaced it (confirm.ts); null before, or once the user chose. */
  firstShown: FirstMapShown | null = null;
  /** False once the user chose a method for this selection (or went back to the gradient): no automatic switch. */
  protected auto = true;
  /** First maps whose job failed, by segmentCacheKey: there the gradient stays the first map. */
  protected readonly firstFailed = new Set<string>();

  constructor(protected readonly page: SaliencePage) {}

  /** Whether the values of the segment request with this segmentCacheKey are measured. */
  protected abstract has(key: string): boolean;

  /** Whether its job's values so far (its first look) are there. */
  protected abstract hasPartial(key: string): boolean;

  /** Measures `ask` for the datapoint `d` (a server job, polled until its values come). */
  protected abstract fetch(d: IndexedInputLike, ask: SegmentAsk): Promise<void>;

  /** The exact segment method still to replace the first map on screen, or null (see the controller's). */
  pendingDefault(): string | null {
    return this.autoStep().kind === 'none' ? null : this.page.reg!.defaultSegment(this.granularity)!.name;
  }

  /** The segment method whose job the automatic steps wait for now (the first map's, then the exact one's), or null. */
  autoMeasuring(): string | null {
    const step = this.autoStep();
    return step.kind === 'measure' ? step.method : null;
  }

  /** The segment method the server names the first map at this granularity, or null: the gradient. */
  firstMap(): string | null {
    const reg = this.page.reg;
    return reg === null ? null : firstMapAt(reg, this.granularity)?.name ?? null;
  }

  /** What the first map showed, when the exact map it was compared with is on screen now (else null). */
  confirmation(): FirstMapShown | null {
    const f = this.firstShown;
    const ask = this.page.segmentAsk();
    return f !== null && this.autoShown && ask !== null && segmentCacheKey(ask) === f.exactKey ? f : null;
  }

  /**
   * The automatic steps (confirm.ts): while the user has not chosen a method, at a granularity with a default
   * segment method (the server's `default_at`: exact leave-one-out), the first map (the server's `first_map_at`,
   * else the gradient) is shown, then the exact method is measured and replaces it once its values are there; what
   * the first map showed is kept (`firstShown`) for the verdict.
   */
  autoSwitch() {
    const page = this.page;
    const step = this.autoStep();
    if (step.kind === 'none' || page.input === null) return;
    if (step.kind === 'measure') {
      void this.fetch(page.input, page.segmentAsk(step.method)!);
      return;
    }
    const before = page.tokenValues();
    if (!page.reg!.isSegment(page.method)) page.gradientMethod = page.method;
    if (step.kind === 'show-exact') {
      const signed = page.methodPayload()?.signed ?? page.reg!.get(page.method)?.signed ?? true;
      this.firstShown = before === null ? null
          : {method: page.method, signed, tokens: before, exactKey: segmentCacheKey(page.segmentAsk(step.method)!)};
    }
    page.method = step.method;
    this.autoShown = true;  // not a timed user action: a pending one (a click) keeps its timing
    if (step.kind === 'show-exact' || this.has(segmentCacheKey(page.segmentAsk(step.method)!))) this.detail = null;
    page.clearSideError();
    if (step.kind === 'show-first') this.autoSwitch();  // the exact method next, or the first map's job measured on
  }

  /** The next automatic step (confirm.ts nextAutoStep) for what is on screen now. */
  private autoStep(): AutoStep {
    const {reg, payload, method} = this.page;
    if (reg === null || payload === null) return {kind: 'none'};
    const first = this.firstMap();
    const key = (m: string) => segmentCacheKey(this.page.segmentAsk(m)!);
    return nextAutoStep({auto: this.auto, onScreen: method, onScreenIsSegment: reg.isSegment(method),
                         autoShown: this.autoShown, first, exact: reg.defaultSegment(this.granularity)?.name ?? null,
                         has: (m) => this.has(key(m)), hasPartial: (m) => this.hasPartial(key(m)), firstFailed: first !== null && this.firstFailed.has(key(first))});
  }
}
