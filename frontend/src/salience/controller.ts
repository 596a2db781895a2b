/**
 * The Sequence Salience module's requests and what they bring back, without LIT or a DOM:
 * the first highlight (one request, the response streaming in meanwhile), the per-token
 * matrices computed in the background (polled), spans the payload cannot give (asked for),
 * the methods computed on request at a count (their spans, or their whole matrix), and the
 * caches that keep all of it per selection. The element (module.ts) owns the view state
 * (granularity, cursor, drag) and renders; it passes this class LIT's services as a
 * `SalienceHost` and re-renders when `host.changed()` is called.
 *
 * Every selection bumps `generation`; a request or poll of an older one ends without
 * touching the state, and the server cancels jobs nobody polls.
 *
 * About 500 lines, one class: the first highlight, the stream, the polls, span and matrix
 * requests all read and settle the same per-selection state (generation, pending requests,
 * the side status); what they bring back is values.ts's, the templates view.ts's.
 */
import {checkPattern} from '../shared/aggregate/index.js';
import {RESPONSE_FIELD, SALIENCE_FIELD, SPAN_SALIENCE_FIELD} from '../shared/fields.js';
import {JobClient, poll, type ServerHost} from '../shared/jobs.js';
import {METHOD_REGISTRY_FIELD, registryOf, type MethodRegistry, type SegmentMethodInfo} from '../shared/methods.js';
import {errorMessage, salienceModelFor, type IndexedInputLike} from '../shared/request.js';
import {describeDetail, describeProgress, describeStream, isFinal, numTargets, parseDetail, parsePayload, parseSegments,
        parseStream, type DetailStatus, type MethodPayload, type SaliencePayload, type SegmentPayload,
        type StreamStatus} from './payload.js';
import {explainsGeneration, extraKey, jobKind, matrixCancelInput, matrixInput, parseCount, pollInput, quickInput, segmentInput, segmentKey,
        spanCancelInput, spanInput, spanProgressInput, streamInput, type Extra, type SegmentAsk} from './request.js';
import {firstMapAt, nextAutoStep, type AutoStep, type FirstMapShown} from './confirm.js';
import {spanKey, spanSalience, type TargetSpan} from './spans.js';
import {ServerValues, withoutExtras} from './values.js';
import {describeSpan, wholeResponse} from './target.js';

/** How often the module asks for the progress of the per-token matrices. */
export const POLL_MS = 700;
/**
 * How often it asks for the response generated so far while the first highlight is computed. Each ask is
 * a long poll (`stream_after`: the server answers when there are more tokens than shown, or after about a
 * second), so before the first token the next ask follows at once (STREAM_FIRST_MS, a floor against a
 * server that answers at once) and the first token shows the moment it exists; after it, once a second.
 * Each request costs the page about 10 ms of CPU and the server 1-2 ms, taken from the generation on a
 * 2-core machine: one a second rather than two brought the first highlight from 1.06x to 0.99x LIT's
 * generation + span, and the long poll drops the empty polls before the first token (docs/benchmarks.md).
 */
export const STREAM_FIRST_MS = 100;
export const STREAM_MS = 1000;

/** The wait before the next stream request, given what is shown. */
export function streamDelay(shown: StreamStatus | null): number {
  return shown !== null && shown.text !== '' ? STREAM_MS : STREAM_FIRST_MS;
}

/** Whether a stream answer shows something new: longer text or another state (a poll answered out
 * of order must not take text away, and an unchanged one need not re-render the page). */
export function streamAdvanced(shown: StreamStatus | null, s: StreamStatus): boolean {
  if (shown === null) return true;
  if (s.text.length < shown.text.length) return false;
  return s.text !== shown.text || s.state !== shown.state || s.tokens !== shown.tokens;
}

/** How many span job ids the module remembers (isOwnSpanStatus): far more than one selection's runs. */
export const MAX_SPAN_JOBS_SEEN = 64;

/**
 * Whether a `span_progress` status is the progress of this run's span job. The server answers the latest span
 * job of the datapoint, an older run's until this run's request gets there: a status naming a job that progress
 * reads named before this run started (`earlier`), another job than the one this run took as its own
 * (`adopted`; '' before), or, before that, a finished job, is not this run's progress, nor the job its cancel
 * names. (The "100 % · finishing…" of issue 35 at the start of a newer IG count was the new job's own gradient
 * pass, which span_progress no longer counts: lit_app/wrappers/salience.py.) A status without an id (an older server) is.
 */
export function isOwnSpanStatus(status: DetailStatus, earlier: ReadonlySet<string>, adopted: string): boolean {
  const id = status.job_id;
  if (id === undefined || id === '') return true;
  if (earlier.has(id)) return false;
  return adopted === '' ? !isFinal(status) : id === adopted;
}

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

export type Status = 'idle' | 'loading' | 'ready' | 'error';

/** What the controller needs from LIT (the element passes its services). */
export interface SalienceHost extends ServerHost {
  /** The model the module is for: LIT's module model, else the first selected one. */
  modelName(): string;
  /** LIT's loadLatest: resolves to null when a later call with the same key supersedes it. */
  loadLatest<T>(key: string, promise: Promise<T>): Promise<T | null>;
}

/** A user action being timed until the first frame that shows its result. */
export interface Action {
  name: string;
  t: number;
}

/** The cache key of segment values: every setting that changes them, and the target span. */
export function segmentCacheKey(ask: SegmentAsk): string {
  return `${segmentKey(ask)}|${ask.span.t0}:${ask.span.t1}`;
}

export class SalienceController {
  status: Status = 'idle';
  /** Error (status 'error') or progress text (status 'loading'). */
  message = '';
  payload: SaliencePayload | null = null;
  /** The method shown (a registry name; the registry's first once it is known). */
  method = '';
  /** Step / sample count of each method computed on request (IG steps, SmoothGrad samples). */
  counts: Record<string, number> = {};
  /** Per extra method, the refusal of the count last typed (enterCount); absent once a count is accepted. */
  countErrors: Record<string, string> = {};
  /** Whether the user asked for an extra method's full per-token matrix (else it is computed per span). */
  perToken: Record<string, boolean> = {};
  span: TargetSpan = {t0: 0, t1: 0};
  /** Progress or error of a secondary request (IG, span), shown beside the text. */
  side: {kind: 'loading' | 'error'; text: string} | null = null;
  /** Bumped when a cache gains data, to re-render. */
  version = 0;
  /** Progress of the per-token gradient matrices (computed in the background). */
  detail: DetailStatus | null = null;
  /** Progress of each extra method's per-token matrix, when asked for. */
  extraDetail: Record<string, DetailStatus | null | undefined> = {};
  /** The response generated so far, while the first highlight is computed (null: none to show). */
  streaming: StreamStatus | null = null;
  input: IndexedInputLike | null = null;
  salienceModel: string | null = null;

  // Segment methods (values per segment of one segmentation, from forwards; a background job each).
  /** The segmentation the element shows (segment methods are measured on it). */
  granularity = 'word';
  /** The regex of granularity "regex". */
  pattern = '';
  removal = DEFAULT_REMOVAL;
  /** Removable prompt segments at this granularity, as the element counts them: leave one out's cost. */
  segmentCount = 0;
  /** Progress of the segment job behind what is on screen (or measured for the automatic switch). */
  segmentDetail: DetailStatus | null = null;
  /** A segment request the server refused (names the field) or that failed; '' when none. */
  segmentError = '';
  /** Whether the module switched to the method on screen itself (the default segment method, once measured). */
  autoShown = false;
  /** The gradient method to go back to from a segment method. */
  gradientMethod = '';
  /** What the first map showed when the exact map replaced it (confirm.ts); null before, or once the user chose. */
  firstShown: FirstMapShown | null = null;

  /** Bumped on every selection: polls and requests of an older one stop. */
  private generation = 0;
  private pollCount = 0;
  private readonly values = new ServerValues();
  private readonly pendingSpans = new Set<string>();
  /** The first highlight of a selection (its clock, its IG / SmoothGrad progress): ../shared/jobs.ts. */
  private readonly main: JobClient<SaliencePayload | null, string>;
  /** The span request on screen (its IG / SmoothGrad progress); older ones still fill the caches when they end. */
  private readonly spans: JobClient<Array<Record<string, unknown>>, string>;
  /** Ids of the span jobs that progress reads named, newest last (the last MAX_SPAN_JOBS_SEEN). */
  private readonly spanJobsSeen: string[] = [];
  private action: Action | null = null;
  private reg: MethodRegistry | null = null;
  private regError = '';
  /** False once the user chose a method for this selection (or went back to the gradient): no automatic switch. */
  private autoSegment = true;
  /** Segment values by segmentCacheKey, and their token values as arrays. */
  private readonly segValues = new Map<string, {payload: SegmentPayload; tokens: Float64Array}>();
  private readonly pendingSegments = new Set<string>();
  /** Segment values the user asked for at an on-request granularity, by segmentCacheKey. */
  private readonly requestedSegments = new Set<string>();
  /** First maps whose job failed, by segmentCacheKey: there the gradient stays the first map. */
  private readonly firstFailed = new Set<string>();

  constructor(private readonly host: SalienceHost) {
    // Progress reads stop on an error (an older server without span progress: the values still come).
    const progress = {pollMs: POLL_MS, statusErrors: 'stop', pauseWhenHidden: true} as const;
    // While tokens stream in they are the progress (the line counts them): no re-render for the
    // seconds, whose repaint each second took from the generation on 2 cores (docs/benchmarks.md).
    this.main = new JobClient(host, {...progress, tickRenders: () => !this.tokensStreaming()});
    // No clock on screen. A superseded span job is cancelled by its id (a late cancel cannot stop a newer one).
    this.spans = new JobClient(host, {...progress, tickRenders: () => false, cancelSuperseded: true});
  }

  /** Seconds since loading started. */
  get elapsed(): number {
    return this.main.elapsed;
  }

  /** Stops polling (the server cancels jobs nobody polls) and the clock. */
  dispose() {
    this.generation++;
    this.main.dispose();
    this.spans.dispose();
  }

  /**
   * The server's methods, read once from the salience model's output spec (null while it is not
   * known, or when the server publishes none: `select` then says so).
   */
  registry(): MethodRegistry | null {
    if (this.reg !== null) return this.reg;
    const models = this.host.models();
    const model = salienceModelFor(this.host.modelName(), models);
    if (model === null) return null;
    try {
      this.reg = registryOf(models[model], this.host.countLimits?.());
    } catch (e) {
      this.regError = errorMessage(e);
    }
    if (this.reg === null) return null;
    if (this.reg.get(this.method) === undefined) this.method = this.reg.methods[0].name;
    if (this.gradientMethod === '') this.gradientMethod = this.reg.tokens[0]?.name ?? this.method;
    for (const m of this.reg.extras) {
      this.counts[m.name] ??= m.default_count;
      this.perToken[m.name] ??= false;
    }
    return this.reg;
  }

  // ------------------------------------------------------------ actions

  /** Starts timing a user action (`finishedAction` ends it). */
  markAction(name: string) {
    this.action = {name, t: performance.now()};
  }

  /** The timed action, once nothing it waits for is loading (then forgotten); else null. */
  finishedAction(): Action | null {
    const a = this.action;
    if (a === null || this.status === 'loading' || this.side?.kind === 'loading') return null;
    this.action = null;
    return a;
  }

  /** A new datapoint (or none): forgets everything of the previous one and asks for the first highlight. */
  async select(d: IndexedInputLike | null) {
    this.input = d;
    this.generation++;
    this.payload = null;
    this.streaming = null;
    this.detail = null;
    this.extraDetail = {};
    this.values.clear();
    this.pendingSpans.clear();
    this.side = null;
    this.segValues.clear();
    this.requestedSegments.clear();
    this.segmentDetail = null;
    this.segmentError = '';
    this.firstShown = null;
    this.firstFailed.clear();
    // The first highlight is the gradient's (one pass); the first map and the exact segment method follow (confirm.ts).
    this.autoSegment = true;
    this.autoShown = false;
    if (this.reg?.isSegment(this.method)) this.method = this.gradientMethod;
    if (d == null) {
      this.stopLoading('idle');
      return;
    }
    await this.fetchMain(d);
  }

  retry() {
    if (this.input !== null) void this.select(this.input);
  }

  /**
   * A new target span; `action` names the timed user action (null: not a user action, e.g. the span
   * widened to whole segments). Returns false when the span is the current one.
   */
  setSpan(span: TargetSpan, action: string | null = 'retarget'): boolean {
    if (span.t0 === this.span.t0 && span.t1 === this.span.t1) return false;
    if (action !== null) this.markAction(action);
    this.span = span;
    this.clearSideError();
    this.ensureData();
    this.host.changed();
    return true;
  }

  setMethod(method: string) {
    this.markAction('method');
    this.method = method;
    // The user chose: no automatic switch for this selection.
    this.autoSegment = false;
    this.autoShown = false;
    this.firstShown = null;
    if (this.reg !== null && !this.reg.isSegment(method)) this.gradientMethod = method;
    this.segmentError = '';
    this.clearSideError();
    this.ensureData();
    this.host.changed();
  }

  /** Stops the automatic steps (the "Stop" button while exact leave-one-out confirms the first map): the map on
   * screen stays, the job's polls stop, and the server cancels it as any segment job nobody polls. */
  stopConfirming() {
    this.autoSegment = false;
    this.segmentDetail = null;
    this.host.changed();
  }

  /** Back to the gradient from a segment method (the "Show gradient" button); no automatic switch after it. */
  showGradient() {
    this.setMethod(this.gradientMethod || (this.reg?.tokens[0]?.name ?? this.method));
  }

  /**
   * The segmentation the element shows (granularity, its regex) and how many removable prompt segments
   * it has. A segment method on screen is re-measured on the new one; one the module switched to itself (a first
   * map or the exact map) gives way to the gradient, and the automatic steps start again at the new granularity.
   */
  setSegmentation(granularity: string, pattern: string, segmentCount: number) {
    this.segmentCount = segmentCount;
    if (granularity === this.granularity && pattern === this.pattern) return;
    this.granularity = granularity;
    this.pattern = pattern;
    this.segmentError = '';
    this.segmentDetail = null;
    if (this.autoShown) {
      this.method = this.gradientMethod;
      this.autoShown = false;
    }
    this.ensureData();
    this.host.changed();
  }

  /**
   * At an on-request granularity, the faster segment method the server names for it (`request_default_at`:
   * coarse-to-fine at word) when the method on screen is another one measured segment by segment (no count);
   * else null.
   */
  requestDefault(): SegmentMethodInfo | null {
    const info = this.reg?.segment(this.method);
    const faster = this.reg?.requestSegment(this.granularity);
    if (info === undefined || faster === undefined || faster.name === info.name || info.count_field !== null) return null;
    return faster;
  }

  /** Whether the segment method on screen is the server's request default at this granularity (coarse-to-fine). */
  isRequestDefault(): boolean {
    return this.reg?.requestSegment(this.granularity)?.name === this.method;
  }

  /** Switches to segment method `method` and measures it (the request default's button). */
  measureWith(method: string) {
    this.setMethod(method);
    this.measureSegments();
  }

  /** Measures the segment method on screen at an on-request granularity (the button that says the cost). */
  measureSegments() {
    const ask = this.segmentAsk();
    if (ask === null) return;
    this.markAction('method');
    this.requestedSegments.add(segmentCacheKey(ask));
    this.ensureData();
    this.host.changed();
  }

  /** A count the user typed for an extra method: set when parseCount accepts it, else refused in words with
   * the allowed range (`countErrors`; the map keeps the last accepted count, and no request is sent). */
  enterCount(name: string, text: string) {
    const info = this.reg?.extra(name);
    if (info === undefined) return;
    const parsed = parseCount(text, info);
    if (typeof parsed === 'number') {
      this.setCount(name, parsed);
      return;
    }
    this.countErrors = {...this.countErrors, [name]: `${parsed}; still using ${this.counts[name] ?? info.default_count}.`};
    this.host.changed();
  }

  /** A new step / sample count for an extra method (already checked by parseCount). */
  setCount(name: string, count: number) {
    if (this.method === name) this.markAction('method');
    const {[name]: _refused, ...others} = this.countErrors;
    this.countErrors = others;
    this.counts = {...this.counts, [name]: count};
    this.clearSideError();
    this.ensureData();
    this.host.changed();
  }

  /** Turns an extra method's per-token matrix on or off. */
  setPerToken(name: string, on: boolean) {
    this.perToken = {...this.perToken, [name]: on};
    this.ensureData();
    this.host.changed();
  }

  /** An error about an earlier span, method or count is not about what the view shows next; nor is the progress
   * line of a span request for another span, method or count: its status reads stop and the server stops it (its
   * cancel names its job id: ../shared/jobs.ts `cancel`, lit_app/wrappers/salience.py `span_cancel`). */
  private clearSideError() {
    if (this.side?.kind === 'error') this.side = null;
    if (this.side?.kind === 'loading' && !this.pendingSpans.has(spanKey(this.valuesName(), this.span))) {
      this.spans.cancel();
      this.side = null;
    }
  }

  // ----------------------------------------------------------- derived

  /** The selected method with its count, when it is computed on request; else null. */
  extra(): Extra | null {
    const info = this.reg?.extra(this.method);
    return info === undefined ? null : {method: info.name, count: this.counts[info.name] ?? info.default_count};
  }

  /** Cache name of the current method's values: the method, the extra method with its count, or the segment
   * method with its segmentation. */
  valuesName(): string {
    const ask = this.segmentAsk();
    if (ask !== null) return `seg:${segmentKey(ask)}`;
    const extra = this.extra();
    return extra === null ? this.method : extraKey(extra);
  }

  /** What the segment method `method` (default: the one on screen) is measured on now; null for a token method. */
  segmentAsk(method: string = this.method): SegmentAsk | null {
    const info = this.reg?.segment(method);
    if (info === undefined) return null;
    return {method, count: info.count_field !== null ? info.default_count : 0, granularity: this.granularity,
            pattern: this.granularity === 'regex' ? this.pattern : '', removal: this.removal, span: this.span};
  }

  /** The segment values behind the view (the method on screen's), or null while they are not measured. */
  segmentValues(): SegmentPayload | null {
    const ask = this.segmentAsk();
    return ask === null ? null : this.segValues.get(segmentCacheKey(ask))?.payload ?? null;
  }

  /** Whether the segment method on screen waits for the user to ask (an on-request granularity, not asked yet). */
  segmentsOnRequest(): boolean {
    const ask = this.segmentAsk();
    return ask !== null && ON_REQUEST_GRANULARITIES.includes(ask.granularity) &&
        !this.requestedSegments.has(segmentCacheKey(ask)) && !this.segValues.has(segmentCacheKey(ask));
  }

  /** About how many forwards the segment method on screen costs: its count, or one per segment (+ the unedited prompt). */
  segmentCost(method: string = this.method): number {
    const info = this.reg?.segment(method);
    if (info === undefined) return 0;
    return (info.count_field !== null ? info.default_count : this.segmentCount) + 1;
  }

  /**
   * The exact segment method (the granularity's default) still to replace the first map on screen (the gradient, or
   * the first map the server names), or null (none at this granularity, the user chose a method or stopped, or it is
   * on screen).
   */
  pendingDefault(): string | null {
    return this.autoStep().kind === 'none' ? null : this.reg!.defaultSegment(this.granularity)!.name;
  }

  /** The segment method whose job the automatic steps wait for now (the first map's, then the exact one's), or null. */
  autoMeasuring(): string | null {
    const step = this.autoStep();
    return step.kind === 'measure' ? step.method : null;
  }

  /** The segment method the server names the first map at this granularity, or null: the gradient. */
  firstMap(): string | null {
    return this.reg === null ? null : firstMapAt(this.reg, this.granularity)?.name ?? null;
  }

  /** What the first map showed, when the exact map it was compared with is on screen now (else null). */
  confirmation(): FirstMapShown | null {
    const f = this.firstShown;
    const ask = this.segmentAsk();
    return f !== null && this.autoShown && ask !== null && segmentCacheKey(ask) === f.exactKey ? f : null;
  }

  /** The next automatic step (confirm.ts nextAutoStep) for what is on screen now. */
  private autoStep(): AutoStep {
    const reg = this.reg;
    if (reg === null || this.payload === null) return {kind: 'none'};
    const first = this.firstMap();
    const has = (m: string) => this.segValues.has(segmentCacheKey(this.segmentAsk(m)!));
    return nextAutoStep({auto: this.autoSegment, onScreen: this.method, onScreenIsSegment: reg.isSegment(this.method),
                         autoShown: this.autoShown, first, exact: reg.defaultSegment(this.granularity)?.name ?? null, has,
                         firstFailed: first !== null && this.firstFailed.has(segmentCacheKey(this.segmentAsk(first)!))});
  }

  /** The current method's payload; an extra method without its per-token matrix is {matrix: null}. */
  methodPayload(): MethodPayload | null {
    const p = this.payload;
    if (p === null) return null;
    const seg = this.reg?.segment(this.method);
    if (seg !== undefined) return {signed: seg.signed, matrix: null};
    const extra = this.extra();
    if (extra !== null) {
      return this.values.matrix(extra) ??
          {signed: this.reg!.get(extra.method)!.signed, matrix: null, [this.reg!.extra(extra.method)!.count_unit]: extra.count};
    }
    return p.methods[this.method] ?? null;
  }

  /** Token salience for the current method and span (or `span`, e.g. the whole response for the compare
   * view), or null while it is being fetched (or, for another span, not fetched). */
  tokenValues(span: TargetSpan = this.span): Float64Array | null {
    const p = this.payload;
    const m = this.methodPayload();
    if (p === null || m === null) return null;
    const ask = this.segmentAsk();
    if (ask !== null) return this.segValues.get(segmentCacheKey({...ask, span}))?.tokens ?? null;
    const linear = this.reg?.get(this.method)?.linear ?? false;  // unknown: the server answers (not a sum of rows)
    return spanSalience(m, span, p.tokens.length, linear) ?? this.values.span(spanKey(this.valuesName(), span)) ?? null;
  }

  /** Changes whenever tokenValues() may have changed (for memoising what is derived from it). */
  valuesKey(): string {
    return `${this.valuesName()}|${this.span.t0}:${this.span.t1}|${this.version}|${this.values.size}`;
  }

  /** Where the values on screen come from, for the status line (what is on screen now, never ahead of it). */
  precision(): string {
    const p = this.payload;
    const ask = this.segmentAsk();
    if (ask !== null) {
      const noun = SEGMENT_NOUNS[ask.granularity] ?? ask.granularity;
      const s = this.segmentValues();
      if (s === null && this.segmentError) return `not measured per ${noun}: see the error above`;
      if (s === null) return this.segmentsOnRequest() ? `not measured per ${noun} yet` : `measuring per ${noun}…`;
      const saved = s.stats.prefix_reuse && s.stats.saved > 0 ? `, ${Math.round(100 * s.stats.saved)} % of the work saved by the cached prefix` : '';
      if (s.measured !== undefined) {  // coarse-to-fine left some segments inside units that did not matter
        const exact = s.measured.filter((m) => m).length;
        return `measured per ${noun} coarse-to-fine: ${s.stats.rows} forwards, ${exact} of ${s.measured.length} ${noun}s exactly${saved}`;
      }
      // The record's own facts (kind segment: per segment of this granularity; its cost unit), not one sentence for all.
      const scored = `${s.stats.rows} ${s.stats.rows === 1 ? 'prompt' : 'prompts'} scored`;
      return `measured per ${noun}: ${this.reg!.segment(ask.method)!.cost_unit}; ${scored}${saved}`;
    }
    if (p !== null && this.tokenValues() === null) return `computing ${describeSpan(this.span, numTargets(p))}…`;
    const m = this.methodPayload();
    if (m?.matrix != null) return 'per-token detail ready: retargeting is instant';
    const extra = this.extra();
    if (extra !== null && !this.perToken[extra.method]) {
      return `exact for this span; per-token ${this.reg!.get(extra.method)!.short} off (each span is computed on request)`;
    }
    return `exact for this span; ${describeDetail(extra === null ? this.detail : this.extraDetail[extra.method])}`;
  }

  /** State of the background job behind the values ("off": an extra method's matrix not asked for). */
  detailState(): string {
    if (this.segmentAsk() !== null) {
      return this.segmentValues() !== null ? 'done' : this.segmentsOnRequest() ? 'off' : 'computing';
    }
    if (this.payload !== null && this.tokenValues() === null) return 'computing';
    const extra = this.extra();
    return extra !== null ? (this.extraDetail[extra.method]?.state ?? 'off') : (this.detail?.state ?? 'done');
  }

  /** The completeness error (IG's) summed over the span, when the shown method has one; else null. */
  completeness(): number | null {
    const m = this.methodPayload();
    if (m?.completeness_error) return m.completeness_error.slice(this.span.t0, this.span.t1).reduce((a, b) => a + b, 0);
    const extra = this.extra();
    return extra === null ? null : this.values.spanError(extra, this.span) ?? null;
  }

  // ---------------------------------------------------------- requests

  /** Whether the response is being generated and its tokens are on screen. */
  tokensStreaming(): boolean {
    return this.streaming !== null && this.streaming.state === 'running' && this.streaming.text !== '';
  }

  private stopLoading(status: Status, message = '') {
    this.main.reset();
    this.status = status;
    this.message = message;
    this.host.changed();
  }

  private async fetchMain(d: IndexedInputLike) {
    const model = this.host.modelName();
    this.salienceModel = salienceModelFor(model, this.host.models());
    if (this.salienceModel === null) {
      this.stopLoading('error', `Model "${model}" has no "${SALIENCE_FIELD}" output, nor does ` +
          `"_${model}_salience". Start the server with python -m lit_app.server.`);
      return;
    }
    const reg = this.registry();
    if (reg === null) {
      this.stopLoading('error', this.regError || `Model "${this.salienceModel}" publishes no "${METHOD_REGISTRY_FIELD}" ` +
          'in its output spec (a server older than this page). Start the server with python -m lit_app.server.');
      return;
    }
    this.markAction('select');
    this.status = 'loading';
    // A row with its own target generates nothing: say what runs (issue 35).
    this.message = explainsGeneration(d) ? 'Generating the response and computing salience…' : 'Computing salience…';
    const gen = this.generation;
    const current = () => gen === this.generation && this.input === d;
    // First highlight: the whole response from one forward + backward; the per-token matrices
    // follow in the background (pollDetail).
    const extra = this.extra();
    const info = extra === null ? undefined : reg.extra(extra.method)!;
    const label = extra === null ? 'Computing salience for the whole response…'
        : `${reg.label(extra.method)} (${extra.count} ${info!.count_unit}) for the whole response…`;
    const job = this.followSpanJob(d);
    const settled = await this.main.run({
      run: async () => {
        const req = this.host.getPreds([quickInput(reg, d, extra)], this.salienceModel!,
                                       [SALIENCE_FIELD, RESPONSE_FIELD, SPAN_SALIENCE_FIELD], 'Computing salience…');
        // Meanwhile the response streams in as it is generated.
        if (explainsGeneration(d)) void this.streamResponse(d, gen, this.main.latestTicket);
        const res = await this.host.loadLatest('salience', req);
        return res === null || !current() ? null : parsePayload(res[0]?.[SALIENCE_FIELD]);
      },
      // Any wait over a second shows its % and time left: the layers of the gradient pass (a long prompt's
      // takes minutes, issue 43), then IG's steps or SmoothGrad's samples.
      status: (n) => job.read(n),
      wanted: current,
      onProgress: (progress) => {
        if (progress !== '') this.message = label + progress;
      },
    });
    if (!settled.ok) {
      if (this.input !== d) return;
      this.action = null;
      this.stopLoading('error', settled.error);
      return;
    }
    const payload = settled.value;
    if (payload === null || !current()) return;  // a newer selection won
    this.streaming = null;
    this.values.absorbPayload(reg, payload, extra);
    this.span = wholeResponse(numTargets(payload));
    this.payload = payload;
    this.detail = payload.detail ?? null;
    this.stopLoading('ready');
    if (!isFinal(this.detail)) void this.pollDetail(d, gen, null);
    this.ensureData();
  }

  /**
   * Shows the response as it is generated (`detail="stream"` polls, which never wait for the
   * model) until the first-highlight request is answered.
   */
  private async streamResponse(d: IndexedInputLike, gen: number, ticket: number) {
    const current = () => this.main.isLatest(ticket) && gen === this.generation && this.input === d &&
        this.salienceModel !== null;
    await poll<StreamStatus | null>({
      wait: (n) => n === 1 ? 0 : streamDelay(this.streaming),  // the first ask goes with the first-highlight request
      wanted: current,
      hiddenWaitMs: STREAM_MS,
      read: async (n) => {
        const res = await this.host.getPreds([streamInput(d, n, this.streaming?.tokens ?? 0)], this.salienceModel!,
                                             [SALIENCE_FIELD], 'Generating the response…');
        return parseStream(res[0]?.[SALIENCE_FIELD]);
      },
      failed: () => undefined,  // an older server without streaming: the first highlight still comes
      take: (s) => {
        if (!current() || s === null) return false;
        if (!streamAdvanced(this.streaming, s)) return true;
        this.streaming = s;
        this.message = describeStream(s);
        this.host.changed();
        return true;
      },
    });
  }

  /** Whether the view still wants `extra`'s per-token matrix: its method and count selected, per-token on. */
  private matrixWanted(extra: Extra): boolean {
    const shown = this.extra();
    return shown !== null && extraKey(shown) === extraKey(extra) && this.perToken[extra.method] === true;
  }

  /**
   * Polls the background job for this selection until it ends: extra null is
   * the gradient matrices, else that method's per-token matrix at its count. An extra method's job the
   * view no longer wants (the user switched method or count, or turned per-token off) is cancelled by its
   * id (`jobId`, from its statuses), so it stops taking the model from what the view shows next.
   */
  private async pollDetail(d: IndexedInputLike, gen: number, extra: Extra | null, jobId = '') {
    await poll<Array<Record<string, unknown>>>({
      wait: () => POLL_MS,
      wanted: () => {
        if (gen !== this.generation || this.input !== d || this.salienceModel === null) return false;
        if (extra === null || this.matrixWanted(extra)) return true;
        this.setDetail(extra, null);
        if (jobId !== '') {
          // Its answer is the job's status; a failure leaves it to the heartbeat (lit_app/model/progressive.py).
          this.host.getPreds([matrixCancelInput(d, jobId)], this.salienceModel, [SALIENCE_FIELD],
                             'Stopping a per-token job…').catch(() => undefined);
        }
        return false;
      },
      read: () => this.host.getPreds([pollInput(this.reg!, d, extra, ++this.pollCount)], this.salienceModel!,
                                     [SALIENCE_FIELD], 'Per-token salience…'),
      failed: (e) => {
        if (gen !== this.generation) return;
        this.setDetail(extra, {kind: jobKind(this.reg!, extra), state: 'error', done: 0, total: 0,
                               elapsed_s: 0, eta_s: null, error: errorMessage(e)});
      },
      take: (res) => {
        if (gen !== this.generation || this.payload === null) return false;
        const raw = res[0]?.[SALIENCE_FIELD] as Record<string, unknown> | undefined;
        const status = parseDetail(raw);
        if (status?.job_id) jobId = status.job_id;
        if (raw != null && typeof raw['text'] === 'string') {
          const full = parsePayload(raw);
          if (full.tokens.length !== this.payload.tokens.length) return false;
          if (extra !== null) {
            const m = full.methods[extra.method];
            if (m?.matrix != null) this.values.setMatrix(extra, m);
          } else {
            this.payload = {...this.payload, methods: {...this.payload.methods, ...withoutExtras(this.reg!, full.methods)}};
          }
          this.setDetail(extra, status);
          this.version++;
          this.ensureData();
          this.host.changed();
          return false;
        }
        this.setDetail(extra, status);
        return !isFinal(status);
      },
    });
  }

  /** Records a job's progress; a job for a count the user has since changed (cancelled by the server) is ignored. */
  private setDetail(extra: Extra | null, status: DetailStatus | null) {
    if (extra === null) this.detail = status;
    else if (extra.count === this.counts[extra.method]) this.extraDetail = {...this.extraDetail, [extra.method]: status};
    this.host.changed();
  }

  /** Starts whatever server request the current view needs (a span not computable here, an extra method's matrix). */
  private ensureData() {
    const p = this.payload;
    if (p === null || this.input === null) return;
    const ask = this.segmentAsk();
    if (ask !== null) {
      if (this.segValues.has(segmentCacheKey(ask))) this.autoSwitch();  // a first map on screen: the exact map next
      else if (!this.segmentsOnRequest()) void this.fetchSegments(this.input, ask);
      return;
    }
    this.autoSwitch();
    const extra = this.extra();
    if (extra !== null && this.perToken[extra.method] && this.values.matrix(extra) === undefined) {
      void this.fetchMatrix(this.input, extra);
    }
    if (this.tokenValues() === null) void this.fetchSpan(this.input, this.span);
  }

  /** Asks for an extra method's per-token matrix (a background job on the server) and polls it. */
  private async fetchMatrix(d: IndexedInputLike, extra: Extra) {
    const key = `matrix:${extraKey(extra)}`;
    if (this.pendingSpans.has(key) || this.salienceModel === null) return;
    this.pendingSpans.add(key);
    const gen = this.generation;
    const info = this.reg!.extra(extra.method)!;
    try {
      const res = await this.host.getPreds([matrixInput(this.reg!, d, extra)], this.salienceModel, [SALIENCE_FIELD],
                                           `${info.short} for every token (${extra.count} ${info.count_unit})…`);
      if (gen !== this.generation) return;
      const started = parseDetail(res[0]?.[SALIENCE_FIELD]);
      this.setDetail(extra, started);
      if (this.side?.kind === 'error') this.side = null;  // the request went through: an older error is stale
      await this.pollDetail(d, gen, extra, started?.job_id ?? '');
    } catch (e) {
      if (gen === this.generation) {
        this.side = {kind: 'error', text: errorMessage(e)};
        this.host.changed();
      }
    } finally {
      this.pendingSpans.delete(key);
    }
  }

  /** The exact salience of one span, computed by the server (one forward + backward; IG, SmoothGrad: one batch). */
  private async fetchSpan(d: IndexedInputLike, span: TargetSpan) {
    const method = this.method;
    const extra = this.extra();
    const key = spanKey(this.valuesName(), span);
    if (this.pendingSpans.has(key) || this.salienceModel === null) return;
    this.pendingSpans.add(key);
    const gen = this.generation;
    const what = describeSpan(span, numTargets(this.payload!));
    const label = extra === null ? `Computing ${what}…`
        : `${this.reg!.label(method)} (${extra.count} ${this.reg!.extra(method)!.count_unit}) for ${what}…`;
    this.side = {kind: 'loading', text: label};
    this.host.changed();
    const onScreen = () => gen === this.generation && this.input === d &&
        spanKey(this.valuesName(), this.span) === key && this.side?.kind === 'loading';
    const job = this.followSpanJob(d);  // the server's id of this span job, from its first progress read
    const settled = await this.spans.run({
      run: () => this.host.getPreds([spanInput(this.reg!, d, span.t0, span.t1, extra)], this.salienceModel!,
                                    [SPAN_SALIENCE_FIELD, SALIENCE_FIELD], 'Computing span salience…'),
      // Its progress (% and time left) while on screen, for any wait over a second: the gradient pass's layers
      // (a long prompt), IG's steps or SmoothGrad's samples.
      status: (n) => job.read(n),
      cancel: () => job.jobId === '' ? Promise.resolve()
          : this.host.getPreds([spanCancelInput(d, job.jobId)], this.salienceModel!, [SALIENCE_FIELD], 'Stopping a span…'),
      wanted: onScreen,
      onProgress: (progress) => { this.side = {kind: 'loading', text: label + progress}; },
    });
    this.pendingSpans.delete(key);
    if (gen === this.generation) {
      const error = settled.ok ? this.absorbSpan(settled.value, span, key, method, extra) : settled.error;
      if (error === '') {
        this.settleLoading(key);
        // The values on screen are now this request's: an error left from an earlier one is stale.
        if (this.side?.kind === 'error' && spanKey(this.valuesName(), this.span) === key) this.side = null;
        this.version++;
      } else if (spanKey(this.valuesName(), this.span) === key) {
        this.side = {kind: 'error', text: error};
      } else {
        // A span, method or count the user has moved away from may be cancelled by the server: not an
        // error to show (e.g. "Cancelled: a newer selection replaced this request" above another method's map).
        this.settleLoading(key);
      }
      // The user moved on while this ran: fetch what is on screen now (never a retry loop on errors).
      const moved = this.span.t0 !== span.t0 || this.span.t1 !== span.t1 || this.method !== method;
      if (this.payload !== null && moved) this.ensureData();
    }
    this.host.changed();
  }

  /** Keeps a span answer's values; returns '' or the error to show (no values for the span asked). */
  private absorbSpan(res: Array<Record<string, unknown>>, span: TargetSpan, key: string, method: string,
                     extra: Extra | null): string {
    try {
      const all = (res[0]?.[SPAN_SALIENCE_FIELD] ?? {}) as Record<string, unknown>;
      this.values.absorbSpan(this.reg!, all, span, this.payload?.tokens.length, extra);
      const light = res[0]?.[SALIENCE_FIELD] as {span_ig_errors?: Record<string, number>} | undefined;
      this.values.absorbSpanErrors(light?.span_ig_errors, extra);
    } catch (e) {
      return errorMessage(e);
    }
    return this.values.span(key) === undefined
        ? `The server returned no "${SPAN_SALIENCE_FIELD}.${method}" of the right length.` : '';
  }

  /**
   * The automatic steps (confirm.ts): while the user has not chosen a method, at a granularity with a default
   * segment method (the server's `default_at`: exact leave-one-out), the first map (the server's `first_map_at`,
   * else the gradient) is shown, then the exact method is measured and replaces it once its values are there; what
   * the first map showed is kept (`firstShown`) for the verdict.
   */
  private autoSwitch() {
    const step = this.autoStep();
    if (step.kind === 'none' || this.input === null) return;
    if (step.kind === 'measure') {
      void this.fetchSegments(this.input, this.segmentAsk(step.method)!);
      return;
    }
    const before = this.tokenValues();
    if (!this.reg!.isSegment(this.method)) this.gradientMethod = this.method;
    if (step.kind === 'show-exact') {
      const signed = this.methodPayload()?.signed ?? this.reg!.get(this.method)?.signed ?? true;
      this.firstShown = before === null ? null
          : {method: this.method, signed, tokens: before, exactKey: segmentCacheKey(this.segmentAsk(step.method)!)};
    }
    this.method = step.method;
    this.autoShown = true;  // not a timed user action: a pending one (a click) keeps its timing
    this.segmentDetail = null;
    this.clearSideError();
    if (step.kind === 'show-first') this.autoSwitch();  // the exact method next
  }

  /** The cache key of the segment values the view wants now (on screen, or for the automatic steps); else null. */
  private wantedSegments(): string | null {
    const shown = this.segmentAsk();
    if (shown !== null && !this.segValues.has(segmentCacheKey(shown))) return segmentCacheKey(shown);
    const auto = this.autoMeasuring();
    if (auto !== null) return segmentCacheKey(this.segmentAsk(auto)!);
    return shown === null ? null : segmentCacheKey(shown);
  }

  /**
   * A segment job that ended without values (`message` says why). The first map's (e.g. a model without an attention
   * estimator): the gradient stays the first map and the exact method is measured; another's: the error is shown.
   */
  private segmentsFailed(key: string, message: string) {
    const first = this.firstMap();
    if (first !== null && this.autoMeasuring() === first && key === segmentCacheKey(this.segmentAsk(first)!)) {
      this.firstFailed.add(key);
      this.ensureData();
      return;
    }
    this.segmentError = message;
  }

  /**
   * Starts a segment method's job on the server and repeats the request (the poll) until the values come,
   * while the view still wants them: a view that moved on (another granularity, span, method or selection)
   * stops asking, and the server cancels the job (a newer segment request of the datapoint supersedes it;
   * one nobody polls is abandoned).
   */
  private async fetchSegments(d: IndexedInputLike, ask: SegmentAsk) {
    const key = segmentCacheKey(ask);
    if (this.pendingSegments.has(key) || this.salienceModel === null || this.payload === null) return;
    if (ask.pattern !== '') {
      try {  // the server's own bounds and dialect: a pattern it would refuse is not sent, and the reason is shown
        checkPattern(ask.pattern, this.host.patternBounds?.() ?? null);
      } catch (e) {
        this.segmentError = errorMessage(e);
        this.host.changed();
        return;
      }
    }
    this.pendingSegments.add(key);
    const gen = this.generation;
    const wanted = () => gen === this.generation && this.input === d && this.wantedSegments() === key;
    const n = this.payload.tokens.length;
    try {
      await poll<Array<Record<string, unknown>>>({
        wait: (i) => i === 1 ? 0 : POLL_MS,
        wanted: (i) => i === 1 || wanted(),
        read: (i) => this.host.getPreds([segmentInput(this.reg!, d, ask, i)], this.salienceModel!,
                                        [SALIENCE_FIELD], 'Measuring segments…'),
        take: (res) => {
          if (gen !== this.generation) return false;
          const {values, status} = parseSegments(res[0]?.[SALIENCE_FIELD], n);
          if (wanted()) this.segmentDetail = status;
          if (values !== null) {
            this.segValues.set(key, {payload: values, tokens: Float64Array.from(values.token_values)});
            this.version++;
            this.ensureData();
            this.host.changed();
            return false;
          }
          this.host.changed();
          if (status === null || status.state === 'cancelled' || status.state === 'error') {
            if (wanted()) this.segmentsFailed(key, status?.error || 'The server stopped measuring the segments. Retry by choosing the method again.');
            return false;
          }
          return true;
        },
      });
    } catch (e) {
      if (gen === this.generation && this.wantedSegments() === key) {
        this.segmentsFailed(key, errorMessage(e));
        this.host.changed();
      }
    } finally {
      this.pendingSegments.delete(key);
    }
  }

  /**
   * Follows the span job of a run that starts now (its request not sent yet). `read(n)` reads the progress of
   * the span being computed for `d` once (`detail="span_progress"`, never waits for the model): its percentage
   * and time left, '' before the model reports, null when the server answered another job than this run's
   * (isOwnSpanStatus: nothing new to show). `jobId`: the job's id once a read named it ('' before).
   */
  private followSpanJob(d: IndexedInputLike): {read(n: number): Promise<string | null>; readonly jobId: string} {
    const earlier = new Set(this.spanJobsSeen);
    const job = {
      jobId: '',
      read: async (n: number): Promise<string | null> => {
        const status = await this.spanStatus(d, n);
        if (status !== null && !isOwnSpanStatus(status, earlier, job.jobId)) return null;
        if (job.jobId === '' && status?.job_id) job.jobId = status.job_id;
        return describeProgress(status);
      },
    };
    return job;
  }

  private async spanStatus(d: IndexedInputLike, n: number): Promise<DetailStatus | null> {
    const res = await this.host.getPreds([spanProgressInput(d, n)], this.salienceModel!, [SALIENCE_FIELD], 'Span progress…');
    const status = parseDetail(res[0]?.[SALIENCE_FIELD]);
    const id = status?.job_id;
    if (id && !this.spanJobsSeen.includes(id)) {
      this.spanJobsSeen.push(id);
      if (this.spanJobsSeen.length > MAX_SPAN_JOBS_SEEN) this.spanJobsSeen.shift();
    }
    return status;
  }

  /**
   * Ends the loading state when the span request `done` finishes, unless the request for
   * what is on screen now is another one still running (an older span or method finished
   * first): the status keeps saying "computing" until the values shown are there.
   */
  private settleLoading(done: string) {
    if (this.side?.kind !== 'loading') return;
    const current = spanKey(this.valuesName(), this.span);
    if (current !== done && this.pendingSpans.has(current)) return;
    this.side = null;
  }
}
