/**
 * The Sequence Salience module's selection as the view reads it, without LIT or a DOM: the datapoint, the
 * method, count and span chosen, the first highlight's payload, the parts' state (span_requests.ts,
 * matrices.ts, segments.ts, stream.ts) and what is derived from them for the view (the token values on screen,
 * where they come from). It starts no request: the user's choices and the requests they start are controller.ts's (the
 * class that extends this one). The parts read and settle the selection through page.ts's `SaliencePage`.
 */
import {registryOf, type MethodRegistry} from '../shared/methods.js';
import {errorMessage, salienceModelFor, type IndexedInputLike} from '../shared/request.js';
import type {FirstMapShown} from './confirm.js';
import {BackgroundMatrices} from './matrices.js';
import type {SalienceHost, SaliencePage, SideStatus} from './page.js';
import {describeDetail, numTargets, type DetailStatus, type MethodPayload, type SaliencePayload} from './payload.js';
import {extraKey, segmentKey, type Extra, type SegmentAsk} from './request.js';
import type {SegmentPayload} from './segment_payload.js';
import {SegmentMethods} from './segments.js';
import {SpanRequests} from './span_requests.js';
import {spanKey, spanSalience, type TargetSpan} from './spans.js';
import {ResponseStream, type StreamStatus} from './stream.js';
import {describeSpan} from './target.js';
import {ServerValues, type CompletenessVerdict} from './values.js';

export type Status = 'idle' | 'loading' | 'ready' | 'error';

export abstract class SalienceSelection implements SaliencePage {
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
  /** Progress or error of a secondary request (IG, span, a per-token matrix), shown beside the text. */
  side: SideStatus = null;
  /** Bumped when a cache gains data, to re-render. */
  version = 0;
  input: IndexedInputLike | null = null;
  salienceModel: string | null = null;
  /** The gradient method to go back to from a segment method. */
  gradientMethod = '';
  /** Bumped on every selection: polls and requests of an older one stop. */
  generation = 0;
  /** The server's methods once read (`registry()`), else null. */
  reg: MethodRegistry | null = null;
  /** What the server sent beyond the payload (span values, extra methods' matrices), per selection. */
  readonly values = new ServerValues();

  protected readonly stream = new ResponseStream(this);
  protected readonly matrices = new BackgroundMatrices(this);
  protected readonly spans = new SpanRequests(this);
  protected readonly segments = new SegmentMethods(this);
  /** Why the registry could not be read ('' when it could, or before). */
  protected regError = '';

  constructor(readonly host: SalienceHost) {}

  /** Starts whatever server request the view needs now (controller.ts). */
  abstract ensureData(): void;
  /** Drops a side line that is not about what the view shows next (controller.ts). */
  abstract clearSideError(): void;

  // The parts' state, as the view reads it.
  /** The response generated so far, while the first highlight is computed (null: none to show). */
  get streaming(): StreamStatus | null { return this.stream.shown; }
  /** Progress of the per-token gradient matrices (computed in the background). */
  get detail(): DetailStatus | null { return this.matrices.detail; }
  /** Progress of each extra method's per-token matrix, when asked for. */
  get extraDetail(): Record<string, DetailStatus | null | undefined> { return this.matrices.extraDetail; }
  /** The segmentation the element shows (segment methods are measured on it), its regex, and how a segment is removed. */
  get granularity(): string { return this.segments.granularity; }
  get pattern(): string { return this.segments.pattern; }
  get removal(): string { return this.segments.removal; }
  /** Removable prompt segments at this granularity, as the element counts them: leave one out's cost. */
  get segmentCount(): number { return this.segments.count; }
  set segmentCount(n: number) { this.segments.count = n; }
  /** Progress of the segment job behind what is on screen (or measured for the automatic switch). */
  get segmentDetail(): DetailStatus | null { return this.segments.detail; }
  /** A segment request the server refused (names the field) or that failed; '' when none. */
  get segmentError(): string { return this.segments.error; }
  /** Whether the module switched to the method on screen itself (the default segment method, once measured). */
  get autoShown(): boolean { return this.segments.autoShown; }
  /** What the first map showed when the exact map replaced it (confirm.ts); null before, or once the user chose. */
  get firstShown(): FirstMapShown | null { return this.segments.firstShown; }

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
    return this.segments.ask(method);
  }

  /** The segment values behind the view (the method on screen's; while its job runs, its values so far, `partial`),
   * or null while they are not measured. */
  segmentValues(): SegmentPayload | null {
    const ask = this.segmentAsk();
    return ask === null ? null : this.segments.valuesOf(ask);
  }

  /** Whether the segment method on screen waits for the user to ask (an on-request granularity, not asked yet). */
  segmentsOnRequest(): boolean {
    const ask = this.segmentAsk();
    return ask !== null && this.segments.onRequest(ask);
  }

  /**
   * Whether the method on screen is being computed, its values to come without the user asking again: a segment
   * method measuring (not on request, not failed), or a method computed on request (IG, SmoothGrad) whose span is on
   * its way (no values yet, no error on the side line). The previous map stays meanwhile (previous_map.ts).
   */
  computing(): boolean {
    const ask = this.segmentAsk();
    if (ask !== null) return !this.segments.onRequest(ask) && this.segmentError === '';
    return this.extra() !== null && this.side?.kind !== 'error' && this.tokenValues() === null;
  }

  /** About how many forwards the segment method on screen costs: its count, or one per segment (+ the unedited prompt). */
  segmentCost(method: string = this.method): number {
    return this.segments.cost(method);
  }

  /**
   * The exact segment method (the granularity's default) still to replace the first map on screen (the gradient, or
   * the first map the server names), or null (none at this granularity, the user chose a method or stopped, or it is
   * on screen).
   */
  pendingDefault(): string | null {
    return this.segments.pendingDefault();
  }

  /** The segment method whose job the automatic steps wait for now (the first map's, then the exact one's), or null. */
  autoMeasuring(): string | null {
    return this.segments.autoMeasuring();
  }

  /** The segment method the server names the first map at this granularity, or null: the gradient. */
  firstMap(): string | null {
    return this.segments.firstMap();
  }

  /** A job's values so far in words (segments.ts `firstLook`). */
  firstLook(method: string, s: SegmentPayload, noun: string): string {
    return this.segments.firstLook(method, s, noun);
  }

  /** The method whose values a job's values so far are (segments.ts `partialName`). */
  partialName(method: string, s: SegmentPayload): string {
    return this.segments.partialName(method, s);
  }

  /** What the first map showed, when the exact map it was compared with is on screen now (else null). */
  confirmation(): FirstMapShown | null {
    return this.segments.confirmation();
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
    if (ask !== null) return this.segments.tokens(ask, span);
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
    if (ask !== null) return this.segments.precision(ask);
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
      const s = this.segmentValues();
      return s !== null && !s.partial ? 'done' : this.segmentsOnRequest() ? 'off' : 'computing';
    }
    if (this.payload !== null && this.tokenValues() === null) return 'computing';
    const extra = this.extra();
    return extra !== null ? (this.extraDetail[extra.method]?.state ?? 'off') : (this.detail?.state ?? 'done');
  }

  /**
   * The server's completeness check (IG's) of the values shown for `span` (default: the target on screen), held to its
   * tolerance; null when none applies (a method the server does not check, or no values yet).
   */
  completenessCheck(span: TargetSpan = this.span): CompletenessVerdict | null {
    if (this.payload === null || this.tokenValues(span) === null) return null;
    return this.values.verdict(this.method, this.valuesName(), span);
  }

  tokensStreaming(): boolean {
    return this.stream.tokensStreaming();
  }

}
