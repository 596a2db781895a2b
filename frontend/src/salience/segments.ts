/**
 * The segment methods: values per segment of the segmentation the element shows, measured by forwards in a
 * server job each (its request repeated until the values come: ../shared/jobs.ts `poll`), at an on-request
 * granularity only once the user asks; and the automatic steps (confirm.ts): the first map, then the exact
 * segment method measured and shown in its place while the user has not chosen a method.
 */
import {checkPattern} from '../shared/aggregate/index.js';
import {SALIENCE_FIELD} from '../shared/fields.js';
import {poll} from '../shared/jobs.js';
import type {SegmentMethodInfo} from '../shared/methods.js';
import {errorMessage, type IndexedInputLike} from '../shared/request.js';
import {firstMapAt, nextAutoStep, type AutoStep, type FirstMapShown} from './confirm.js';
import {POLL_MS, type SaliencePage} from './page.js';
import {parseSegments, type DetailStatus, type SegmentPayload} from './payload.js';
import {segmentInput, segmentKey, type SegmentAsk} from './request.js';
import type {TargetSpan} from './spans.js';

/**
 * Granularities at which a segment method is measured only when the user asks (a button that says the
 * cost): one forward per word or token is many forwards. At the others its job starts at once.
 */
export const ON_REQUEST_GRANULARITIES: readonly string[] = ['token', 'word'];
/** How a segment is removed for the segment methods: as the explanation tests' default (a filler token each). */
export const DEFAULT_REMOVAL = 'filler';

/** The unit a segment method measures, for "measured per sentence". */
export const SEGMENT_NOUNS: Readonly<Record<string, string>> = {
  token: 'token', word: 'word', sentence: 'sentence', paragraph: 'paragraph', line: 'line', regex: 'regex match',
  role: 'chat role',
};

/** The cache key of segment values: every setting that changes them, and the target span. */
export function segmentCacheKey(ask: SegmentAsk): string {
  return `${segmentKey(ask)}|${ask.span.t0}:${ask.span.t1}`;
}

export class SegmentMethods {
  /** The segmentation the element shows (segment methods are measured on it). */
  granularity = 'word';
  /** The regex of granularity "regex". */
  pattern = '';
  removal = DEFAULT_REMOVAL;
  /** Removable prompt segments at this granularity, as the element counts them: leave one out's cost. */
  count = 0;
  /** Progress of the segment job behind what is on screen (or measured for the automatic switch). */
  detail: DetailStatus | null = null;
  /** A segment request the server refused (names the field) or that failed; '' when none. */
  error = '';
  /** Whether the module switched to the method on screen itself (the default segment method, once measured). */
  autoShown = false;
  /** What the first map showed when the exact map replaced it (confirm.ts); null before, or once the user chose. */
  firstShown: FirstMapShown | null = null;
  /** False once the user chose a method for this selection (or went back to the gradient): no automatic switch. */
  private auto = true;
  /** Segment values by segmentCacheKey, and their token values as arrays. */
  private readonly values = new Map<string, {payload: SegmentPayload; tokens: Float64Array}>();
  private readonly pending = new Set<string>();
  /** Segment values the user asked for at an on-request granularity, by segmentCacheKey. */
  private readonly requested = new Set<string>();
  /** First maps whose job failed, by segmentCacheKey: there the gradient stays the first map. */
  private readonly firstFailed = new Set<string>();

  constructor(private readonly page: SaliencePage) {}

  /** A new selection: its values are measured again, and the automatic steps start again. */
  clear() {
    this.values.clear();
    this.requested.clear();
    this.detail = null;
    this.error = '';
    this.firstShown = null;
    this.firstFailed.clear();
    this.auto = true;
    this.autoShown = false;
  }

  /** The user chose the method on screen: no automatic switch for this selection. */
  chosen() {
    this.auto = false;
    this.autoShown = false;
    this.firstShown = null;
    this.error = '';
  }

  /** Stops the automatic steps; the map on screen stays and its job's polls stop. */
  stopConfirming() {
    this.auto = false;
    this.detail = null;
  }

  /** A new segmentation (see the controller's setSegmentation); false when it is the one shown. */
  setSegmentation(granularity: string, pattern: string): boolean {
    if (granularity === this.granularity && pattern === this.pattern) return false;
    this.granularity = granularity;
    this.pattern = pattern;
    this.error = '';
    this.detail = null;
    if (this.autoShown) {
      this.page.method = this.page.gradientMethod;
      this.autoShown = false;
    }
    return true;
  }

  /** What the segment method `method` is measured on now; null for a token method. */
  ask(method: string): SegmentAsk | null {
    const info = this.page.reg?.segment(method);
    if (info === undefined) return null;
    return {method, count: info.count_field !== null ? info.default_count : 0, granularity: this.granularity,
            pattern: this.granularity === 'regex' ? this.pattern : '', removal: this.removal, span: this.page.span};
  }

  /** The segment values of `ask`, or null while they are not measured. */
  valuesOf(ask: SegmentAsk): SegmentPayload | null {
    return this.values.get(segmentCacheKey(ask))?.payload ?? null;
  }

  /** The token values of `ask` at `span`, or null while they are not measured. */
  tokens(ask: SegmentAsk, span: TargetSpan): Float64Array | null {
    return this.values.get(segmentCacheKey({...ask, span}))?.tokens ?? null;
  }

  /** Whether `ask` waits for the user to ask (an on-request granularity, not asked yet). */
  onRequest(ask: SegmentAsk): boolean {
    return ON_REQUEST_GRANULARITIES.includes(ask.granularity) &&
        !this.requested.has(segmentCacheKey(ask)) && !this.values.has(segmentCacheKey(ask));
  }

  /** The user asks for `ask` at an on-request granularity. */
  request(ask: SegmentAsk) {
    this.requested.add(segmentCacheKey(ask));
  }

  /** Where the values of `ask` on screen come from, for the status line (see the controller's precision). */
  precision(ask: SegmentAsk): string {
    const noun = SEGMENT_NOUNS[ask.granularity] ?? ask.granularity;
    const s = this.valuesOf(ask);
    if (s === null && this.error) return `not measured per ${noun}: see the error above`;
    if (s === null) return this.onRequest(ask) ? `not measured per ${noun} yet` : `measuring per ${noun}…`;
    const saved = s.stats.prefix_reuse && s.stats.saved > 0 ? `, ${Math.round(100 * s.stats.saved)} % of the work saved by the cached prefix` : '';
    if (s.measured !== undefined) {  // coarse-to-fine left some segments inside units that did not matter
      const exact = s.measured.filter((m) => m).length;
      return `measured per ${noun} coarse-to-fine: ${s.stats.rows} forwards, ${exact} of ${s.measured.length} ${noun}s exactly${saved}`;
    }
    // The record's own facts (kind segment: per segment of this granularity; its cost unit), not one sentence for all.
    const scored = `${s.stats.rows} ${s.stats.rows === 1 ? 'prompt' : 'prompts'} scored`;
    return `measured per ${noun}: ${this.page.reg!.segment(ask.method)!.cost_unit}; ${scored}${saved}`;
  }

  /** About how many forwards `method` costs: its count, or one per segment (+ the unedited prompt). */
  cost(method: string): number {
    const info = this.page.reg?.segment(method);
    if (info === undefined) return 0;
    return (info.count_field !== null ? info.default_count : this.count) + 1;
  }

  /** See the controller's requestDefault. */
  requestDefault(method: string): SegmentMethodInfo | null {
    const info = this.page.reg?.segment(method);
    const faster = this.page.reg?.requestSegment(this.granularity);
    if (info === undefined || faster === undefined || faster.name === info.name || info.count_field !== null) return null;
    return faster;
  }

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

  /** The segment requests the view needs for `ask` on screen: its job, or the automatic step after it. */
  ensure(d: IndexedInputLike, ask: SegmentAsk) {
    if (this.values.has(segmentCacheKey(ask))) this.autoSwitch();  // a first map on screen: the exact map next
    else if (!this.onRequest(ask)) void this.fetch(d, ask);
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
    this.detail = null;
    page.clearSideError();
    if (step.kind === 'show-first') this.autoSwitch();  // the exact method next
  }

  /** The next automatic step (confirm.ts nextAutoStep) for what is on screen now. */
  private autoStep(): AutoStep {
    const {reg, payload, method} = this.page;
    if (reg === null || payload === null) return {kind: 'none'};
    const first = this.firstMap();
    const key = (m: string) => segmentCacheKey(this.page.segmentAsk(m)!);
    return nextAutoStep({auto: this.auto, onScreen: method, onScreenIsSegment: reg.isSegment(method),
                         autoShown: this.autoShown, first, exact: reg.defaultSegment(this.granularity)?.name ?? null,
                         has: (m) => this.values.has(key(m)), firstFailed: first !== null && this.firstFailed.has(key(first))});
  }

  /** The cache key of the segment values the view wants now (on screen, or for the automatic steps); else null. */
  private wanted(): string | null {
    const shown = this.page.segmentAsk();
    if (shown !== null && !this.values.has(segmentCacheKey(shown))) return segmentCacheKey(shown);
    const auto = this.autoMeasuring();
    if (auto !== null) return segmentCacheKey(this.page.segmentAsk(auto)!);
    return shown === null ? null : segmentCacheKey(shown);
  }

  /**
   * A segment job that ended without values (`message` says why). The first map's (e.g. a model without an attention
   * estimator): the gradient stays the first map and the exact method is measured; another's: the error is shown.
   */
  private failed(key: string, message: string) {
    const first = this.firstMap();
    if (first !== null && this.autoMeasuring() === first && key === segmentCacheKey(this.page.segmentAsk(first)!)) {
      this.firstFailed.add(key);
      this.page.ensureData();
      return;
    }
    this.error = message;
  }

  /**
   * Starts a segment method's job on the server and repeats the request (the poll) until the values come,
   * while the view still wants them: a view that moved on (another granularity, span, method or selection)
   * stops asking, and the server cancels the job (a newer segment request of the datapoint supersedes it;
   * one nobody polls is abandoned).
   */
  private async fetch(d: IndexedInputLike, ask: SegmentAsk) {
    const page = this.page;
    const key = segmentCacheKey(ask);
    if (this.pending.has(key) || page.salienceModel === null || page.payload === null) return;
    if (ask.pattern !== '') {
      try {  // the server's own bounds and dialect: a pattern it would refuse is not sent, and the reason is shown
        checkPattern(ask.pattern, page.host.patternBounds?.() ?? null);
      } catch (e) {
        this.error = errorMessage(e);
        page.host.changed();
        return;
      }
    }
    this.pending.add(key);
    const gen = page.generation;
    const wanted = () => gen === page.generation && page.input === d && this.wanted() === key;
    const n = page.payload.tokens.length;
    try {
      await poll<Array<Record<string, unknown>>>({
        wait: (i) => i === 1 ? 0 : POLL_MS,
        wanted: (i) => i === 1 || wanted(),
        read: (i) => page.host.getPreds([segmentInput(page.reg!, d, ask, i)], page.salienceModel!,
                                        [SALIENCE_FIELD], 'Measuring segments…'),
        take: (res) => {
          if (gen !== page.generation) return false;
          const {values, status} = parseSegments(res[0]?.[SALIENCE_FIELD], n);
          if (wanted()) this.detail = status;
          if (values !== null) {
            this.values.set(key, {payload: values, tokens: Float64Array.from(values.token_values)});
            page.version++;
            page.ensureData();
            page.host.changed();
            return false;
          }
          page.host.changed();
          if (status === null || status.state === 'cancelled' || status.state === 'error') {
            if (wanted()) this.failed(key, status?.error || 'The server stopped measuring the segments. Retry by choosing the method again.');
            return false;
          }
          return true;
        },
      });
    } catch (e) {
      if (gen === page.generation && this.wanted() === key) {
        this.failed(key, errorMessage(e));
        page.host.changed();
      }
    } finally {
      this.pending.delete(key);
    }
  }
}
