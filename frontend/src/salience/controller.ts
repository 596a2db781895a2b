/**
 * The Sequence Salience module's controller, without LIT or a DOM: the user's choices (datapoint, span, method,
 * count, segmentation, the segment buttons); a new datapoint starts the first highlight (first_highlight.ts, the
 * class this one extends: one request, the response streaming in meanwhile). After each, `ensureData` starts the
 * request the view needs next: a span (span_requests.ts), an extra method's matrix (matrices.ts, which also
 * follows the gradient matrices after the first highlight) or a segment method (segments.ts). What it holds and
 * derives for the view is selection.ts's (the class first_highlight.ts's extends); what the server sent,
 * values.ts's; the templates, view.ts's. The element (salience_module.ts) owns the view state (cursor, drag) and
 * renders; it passes this class LIT's services as a `SalienceHost` (page.ts) and re-renders when
 * `host.changed()` is called.
 *
 * Every selection bumps `generation`; a request or poll of an older one ends without touching the state, and
 * the server cancels jobs nobody polls.
 */
import type {SegmentMethodInfo} from '../shared/methods.js';
import {hasSalienceField, type IndexedInputLike} from '../shared/request.js';
import {SalienceFirstHighlight} from './first_highlight.js';
import type {ExitRequest} from './page_exit.js';
import {pageClosedInput, parseCount} from './request.js';
import type {TargetSpan} from './spans.js';

export class SalienceController extends SalienceFirstHighlight {
  /** Stops polling (the server cancels jobs nobody polls) and the clock. */
  dispose() {
    this.generation++;
    this.main.dispose();
    this.spans.dispose();
  }

  /** What stops this page's background jobs as the page goes away (page_exit.ts); null before any request. */
  exitRequest(): ExitRequest | null {
    if (this.input === null || this.salienceModel === null) return null;
    // LIT's own prompt-debugging models (lit_convention.ts) answer no `detail` and run no job of ours.
    if (!hasSalienceField(this.host.models()[this.salienceModel]?.spec?.output)) return null;
    return {model: this.salienceModel, input: pageClosedInput()};
  }

  // ------------------------------------------------------------ actions

  /** A new datapoint (or none): forgets everything of the previous one and asks for the first highlight. */
  async select(d: IndexedInputLike | null) {
    this.input = d;
    this.generation++;
    this.payload = null;
    this.stream.shown = null;
    this.matrices.clear();
    this.values.clear();
    this.spans.clear();
    this.side = null;
    // The first highlight is the gradient's (one pass); the first map and the exact segment method follow (confirm.ts).
    this.segments.clear();
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
    this.afterChoice();
    return true;
  }

  setMethod(method: string) {
    this.markAction('method');
    this.method = method;
    this.segments.chosen();  // the user chose: no automatic switch for this selection
    if (this.reg !== null && !this.reg.isSegment(method)) this.gradientMethod = method;
    this.afterChoice();
  }

  /** Stops the automatic steps (the "Stop" button while exact leave-one-out confirms the first map): the map on
   * screen stays, the job's polls stop, and the server cancels it as any segment job nobody polls. */
  stopConfirming() {
    this.segments.stopConfirming();
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
    this.segments.count = segmentCount;
    if (!this.segments.setSegmentation(granularity, pattern)) return;
    this.ensureData();
    this.host.changed();
  }

  /**
   * At an on-request granularity, the faster segment method the server names for it (`request_default_at`:
   * word_verified at word, coarse-to-fine at token) when the method on screen is another one measured segment by segment (no count);
   * else null.
   */
  requestDefault(): SegmentMethodInfo | null {
    return this.segments.requestDefault(this.method);
  }

  /** Whether the segment method on screen is the server's request default at this granularity. */
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
    this.segments.request(ask);
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
    this.afterChoice();
  }

  /** Turns an extra method's per-token matrix on or off. */
  setPerToken(name: string, on: boolean) {
    this.perToken = {...this.perToken, [name]: on};
    this.ensureData();
    this.host.changed();
  }

  /** After a new span, method or count: stale side lines go, the requests the view needs start, it re-renders. */
  private afterChoice() {
    this.clearSideError();
    this.ensureData();
    this.host.changed();
  }

  /** An error about an earlier span, method or count, or the progress of a span request for another (span_requests.ts). */
  clearSideError() {
    this.spans.clearSideError();
  }

  // ---------------------------------------------------------- requests

  /** Starts whatever server request the current view needs (a span not computable here, an extra method's matrix). */
  ensureData() {
    const p = this.payload;
    if (p === null || this.input === null) return;
    const ask = this.segmentAsk();
    if (ask !== null) {
      this.segments.ensure(this.input, ask);
      return;
    }
    this.segments.autoSwitch();
    const extra = this.extra();
    if (extra !== null && this.perToken[extra.method] && this.values.matrix(extra) === undefined) {
      void this.matrices.fetch(this.input, extra);
    }
    if (this.tokenValues() === null) void this.spans.fetch(this.input, this.span);
  }
}
