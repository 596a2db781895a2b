/**
 * The segment methods: values per segment of the segmentation the element shows, measured by forwards in a
 * server job each (its request repeated until the values come: ../shared/jobs.ts `poll`), at an on-request
 * granularity only once the user asks. The automatic steps (the first map, then the exact segment method measured
 * and shown in its place while the user has not chosen a method) are auto_steps.ts's, the class this one extends.
 */
import {checkPattern} from '../shared/aggregate/index.js';
import {SALIENCE_FIELD} from '../shared/fields.js';
import {poll} from '../shared/jobs.js';
import type {SegmentMethodInfo} from '../shared/methods.js';
import {errorMessage, type IndexedInputLike} from '../shared/request.js';
import {AutoSteps, segmentCacheKey} from './auto_steps.js';
import {firstMapAt} from './confirm.js';
import {POLL_MS} from './page.js';
import {segmentInput, type SegmentAsk} from './request.js';
import {SegmentCost} from './segment_cost.js';
import {parseSegments, type SegmentPayload} from './segment_payload.js';
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

export class SegmentMethods extends AutoSteps {
  /** The segmentation the element shows (segment methods are measured on it). */
  granularity = 'word';
  /** The regex of granularity "regex". */
  pattern = '';
  removal = DEFAULT_REMOVAL;
  /** Removable prompt segments at this granularity, as the element counts them: leave one out's cost. */
  count = 0;
  /** A segment request the server refused (names the field) or that failed; '' when none. */
  error = '';
  /** Segment values by segmentCacheKey, and their token values as arrays. */
  private readonly values = new Map<string, {payload: SegmentPayload; tokens: Float64Array}>();
  /** A running job's values so far (its first look, `partial: true`), by segmentCacheKey, until its values come. */
  private readonly partials = new Map<string, {payload: SegmentPayload; tokens: Float64Array}>();
  private readonly pending = new Set<string>();
  /** Segment values the user asked for at an on-request granularity, by segmentCacheKey. */
  private readonly requested = new Set<string>();
  /** What a segment method costs, counting the values this page and the server measured already. */
  private readonly costs = new SegmentCost(this.page, (key) => this.values.get(key)?.payload);

  /** A new selection: its values are measured again, and the automatic steps start again. */
  clear() {
    this.values.clear();
    this.partials.clear();
    this.requested.clear();
    this.costs.clear();
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

  /** The segment values of `ask`, else its job's values so far (`partial: true`), or null while neither is there. */
  valuesOf(ask: SegmentAsk): SegmentPayload | null {
    const key = segmentCacheKey(ask);
    return (this.values.get(key) ?? this.partials.get(key))?.payload ?? null;
  }

  /** The token values of `ask` at `span` (else its job's values so far), or null while neither is there. */
  tokens(ask: SegmentAsk, span: TargetSpan): Float64Array | null {
    const key = segmentCacheKey({...ask, span});
    return (this.values.get(key) ?? this.partials.get(key))?.tokens ?? null;
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

  /** About how many forwards `method` costs (segment_cost.ts). */
  cost(method: string): number {
    return this.costs.cost(method, this.count);
  }

  /** Where the values of `ask` on screen come from, for the status line (see the controller's precision). */
  precision(ask: SegmentAsk): string {
    const noun = SEGMENT_NOUNS[ask.granularity] ?? ask.granularity;
    const s = this.valuesOf(ask);
    if (s === null && this.error) return `not measured per ${noun}: see the error above`;
    if (s === null) return this.onRequest(ask) ? `not measured per ${noun} yet` : `measuring per ${noun}…`;
    if (s.partial) return `${this.firstLook(ask.method, s, noun)}; hatched: estimated, not measured`;
    const saved = s.stats.prefix_reuse && s.stats.saved > 0 ? `, ${Math.round(100 * s.stats.saved)} % of the work saved by the cached prefix` : '';
    if (s.measured !== undefined) {  // coarse-to-fine or an estimate left some segments unmeasured
      const exact = s.measured.filter((m) => m).length;
      return `measured per ${noun} by ${this.page.reg!.label(ask.method)}: ${s.stats.rows} forwards, ${exact} of ${s.measured.length} ${noun}s exactly${saved}`;
    }
    // The record's own facts (kind segment: per segment of this granularity; its cost unit), not one sentence for all.
    const scored = `${s.stats.rows} ${s.stats.rows === 1 ? 'prompt' : 'prompts'} scored`;
    const reused = s.quality['reused'] ?? 0;  // values taken from another method's exact measurement: no forward ran
    if (reused > 0) {
      const ran = s.values.length - reused;
      const from = this.costs.knownFrom(ask);  // the first map's, or (at word) the measure button's
      const whose = from === null || firstMapAt(this.page.reg!, ask.granularity)?.name === from.info.name
        ? "the first map's" : `${from.info.label}'s`;
      const how = ran === 0 ? `every ${noun}'s value is ${whose} exact measurement (${reused} of ${reused})`
        : `one forward for each of ${ran} of ${s.values.length} ${noun}s; the other ${reused} are ${whose} exact values`;
      return `measured per ${noun}: ${how}; ${scored}${saved}`;
    }
    return `measured per ${noun}: ${this.page.reg!.segment(ask.method)!.cost_unit}; ${scored}${saved}`;
  }

  /** See the controller's requestDefault. */
  requestDefault(method: string): SegmentMethodInfo | null {
    const info = this.page.reg?.segment(method);
    const faster = this.page.reg?.requestSegment(this.granularity);
    if (info === undefined || faster === undefined || faster.name === info.name || info.count_field !== null) return null;
    return faster;
  }

  /** The segment requests the view needs for `ask` on screen: its job, or the automatic step after it. */
  ensure(d: IndexedInputLike, ask: SegmentAsk) {
    if (this.values.has(segmentCacheKey(ask))) this.autoSwitch();  // a first map on screen: the exact map next
    else if (!this.onRequest(ask)) void this.fetch(d, ask);
    else if (this.costs.knownFrom(ask) === null) {
      void this.costs.askKnown(d, ask);  // its button's cost: what the server holds
    }
  }

  protected has(key: string): boolean {
    return this.values.has(key);
  }

  protected hasPartial(key: string): boolean {
    return this.partials.has(key);
  }

  /**
   * A job's values so far in words, named by the registry: "Learned attention attribution: 0 of 14 sentences
   * verified so far" (the method's `first_look` while nothing is measured), then "Attention and gradient, verified:
   * 6 of 14 sentences verified so far" (its stop rule may end before every one is).
   */
  firstLook(method: string, s: SegmentPayload, noun: string): string {
    const reg = this.page.reg!;
    const verified = s.measured?.filter((m) => m).length ?? s.values.length;
    return `${reg.label(this.partialName(method, s))}: ${verified} of ${s.values.length} ${noun}s verified so far`;
  }

  /** The method whose values `s` (a job's values so far) are: its record's `first_look` while nothing is measured
   * (attention_verified's estimate is learned attention attribution's values), else the method itself. */
  partialName(method: string, s: SegmentPayload): string {
    const look = this.page.reg?.segment(method)?.first_look ?? null;
    return look !== null && s.measured !== undefined && !s.measured.some((m) => m) ? look : method;
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
      this.partials.delete(key);
      if (this.autoShown && this.page.method === first) {  // its values so far were on screen: the gradient again
        this.page.method = this.page.gradientMethod;
        this.autoShown = false;
      }
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
  protected async fetch(d: IndexedInputLike, ask: SegmentAsk) {
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
          const {values, status, partial} = parseSegments(res[0]?.[SALIENCE_FIELD], n);
          if (wanted()) this.detail = status;
          if (values === null && partial !== null) {  // its values so far: on screen until its values come
            this.partials.set(key, {payload: partial, tokens: Float64Array.from(partial.token_values)});
            page.version++;
            page.ensureData();
          }
          if (values !== null) {
            this.partials.delete(key);
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
