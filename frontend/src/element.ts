/**
 * The Sequence Salience LIT module: a custom element subclassing LIT's own
 * LitModule (found at run time; see index.ts). It wires the pure modules
 * (payload, spans, aggregate, colormap, target, rank, pieces, request) to
 * LIT's services and renders; it holds no salience maths of its own.
 */
import {css, html, nothing, type PropertyValues, type TemplateResult} from 'lit';

import {aggregate, checkPattern, GRANULARITIES, segment, type Granularity, type Segmentation} from './aggregate.js';
import {colorFor, formatValue, legendGradient, legendStops, maxAbs, type ColorScale} from './colormap.js';
import {describeDetail, describeStream, isFinal, METHODS, numTargets, parseDetail, parsePayload, parseStream,
        type DetailStatus, type MethodName, type MethodPayload, type SaliencePayload, type StreamStatus} from './payload.js';
import {buildPieces, codePointToUtf16, segmentText, type Piece} from './pieces.js';
import {topSegments} from './rank.js';
import {errorMessage, explainsGeneration, EXTRA_METHOD_NAMES, EXTRA_METHODS, extraKey, isExtraMethod, jobKind,
        matrixInput, pollInput, quickInput, RESPONSE_FIELD, SALIENCE_FIELD, salienceModelFor, shouldDisplay,
        SPAN_SALIENCE_FIELD, spanInput, streamInput, parseCount, type Extra, type ExtraMethodName, type IndexedInputLike,
        type ModelInfoLike} from './request.js';
import {spanKey, spanSalience, type TargetSpan} from './spans.js';
import {targetStore} from './shared/target_store.js';
import {litModuleBase} from './shared/lit_services.js';
import {describeSpan, dragSpan, isWhole, overlaps, snapSpan, spanForKey, targetSegments, wholeResponse,
        type TargetSegment} from './target.js';

/** Custom-element tag. LIT 1.3.1 already defines "sequence-salience-module" (its own module). */
export const TAG = 'prompt-salience-module';

/** How often the module asks for the progress of the per-token matrices. */
const POLL_MS = 700;
/** How often it asks for the response generated so far while the first highlight is computed. */
const STREAM_MS = 250;
const TOP_K = 10;
const GRANULARITY_LABELS: Record<Granularity, string> = {
  token: 'Tokens', word: 'Words', sentence: 'Sentences', paragraph: 'Paragraphs',
  line: 'Lines', regex: 'Custom regex', role: 'Chat roles',
};

/** The LIT services this module uses (see DESIGN.md). */

type Status = 'idle' | 'loading' | 'ready' | 'error';

/** Defines the module class on top of LIT's LitModule and returns it. */
export function makeModuleClass(LitModule: unknown): CustomElementConstructor {
  const {Base, baseStyles} = litModuleBase(LitModule);

  class PromptSalienceModule extends Base {
    static title = 'Sequence Salience';
    static numCols = 12;
    static duplicateForModelComparison = false;
    static duplicateForExampleComparison = false;
    static infoMarkdown =
        'Which parts of the prompt drove the response. Click or drag over the response to choose the ' +
        'target (Escape: whole response); arrows move it, Shift+arrows extend it.';

    static template(model: string, selectionServiceIndex: number, shouldReact: number): TemplateResult {
      return html`<prompt-salience-module model=${model} .shouldReact=${shouldReact}
          selectionServiceIndex=${selectionServiceIndex}></prompt-salience-module>`;
    }

    static shouldDisplayModule(modelSpecs: Record<string, ModelInfoLike>): boolean {
      return shouldDisplay(modelSpecs);
    }

    static get properties() {
      return {
        status: {state: true}, message: {state: true}, elapsed: {state: true},
        payload: {state: true}, method: {state: true}, counts: {state: true},
        granularity: {state: true}, regex: {state: true}, span: {state: true},
        intensity: {state: true}, cursor: {state: true}, dragAnchor: {state: true},
        dragTo: {state: true}, side: {state: true}, version: {state: true},
        detail: {state: true}, extraDetail: {state: true}, perToken: {state: true}, streaming: {state: true},
      };
    }

    static get styles() {
      const base = baseStyles == null ? [] : Array.isArray(baseStyles) ? baseStyles : [baseStyles];
      return [...base, STYLES];
    }

    declare status: Status;
    /** Error (status 'error') or progress text (status 'loading'). */
    declare message: string;
    declare elapsed: number;
    declare payload: SaliencePayload | null;
    declare method: MethodName;
    /** Step / sample count of each method computed on request (IG steps, SmoothGrad samples). */
    declare counts: Record<ExtraMethodName, number>;
    declare granularity: Granularity;
    declare regex: string;
    declare span: TargetSpan;
    declare intensity: number;
    declare cursor: number | null;
    declare dragAnchor: number | null;
    declare dragTo: number | null;
    /** Progress or error of a secondary request (IG, span), shown beside the text. */
    declare side: {kind: 'loading' | 'error'; text: string} | null;
    /** Bumped when a cache gains data, to re-render. */
    declare version: number;
    /** Progress of the per-token gradient matrices (computed in the background). */
    declare detail: DetailStatus | null;
    /** Progress of each extra method's per-token matrix, when asked for. */
    declare extraDetail: Partial<Record<ExtraMethodName, DetailStatus | null>>;
    /** Whether the user asked for an extra method's full per-token matrix (else it is computed per span). */
    declare perToken: Record<ExtraMethodName, boolean>;
    /** The response generated so far, while the first highlight is computed (null: none to show). */
    declare streaming: StreamStatus | null;

    private input: IndexedInputLike | null = null;
    /** Bumped on every selection: polls and requests of an older one stop. */
    private generation = 0;
    private pollCount = 0;
    /** IG completeness error of spans computed directly, by "steps|t0:t1". */
    private spanIgErrors = new Map<string, number>();
    private salienceModel: string | null = null;
    /** Per-token payloads of the extra methods, by extraKey (method and count). */
    private extraPayloads = new Map<string, MethodPayload>();
    private serverSpans = new Map<string, Float64Array>();
    private pendingSpans = new Set<string>();
    private segCache = new Map<string, Segmentation>();
    private piecesCache = new Map<string, Piece[]>();
    private u16: Int32Array | null = null;
    private loadTimer: ReturnType<typeof setInterval> | undefined;
    private loadStart = 0;
    private actionStart: {name: string; t: number} | null = null;
    /** Values shown now, for the tooltip (segment values and their segmentation). */
    private shown: {values: Float64Array; seg: Segmentation; rank: Map<number, number>} | null = null;
    private valuesMemo: {key: string; seg: Segmentation; payload: SaliencePayload | null;
                         values: Float64Array | null} | null = null;
    private promptMemo: {pieces: Piece[]; values: Float64Array | null; scale: number; intensity: number;
                         signed: boolean; templates: TemplateResult[]} | null = null;
    private readonly onWindowMouseUp = () => this.finishDrag();

    constructor() {
      super();
      this.status = 'idle';
      this.message = '';
      this.elapsed = 0;
      this.payload = null;
      this.method = 'grad_norm';
      this.counts = Object.fromEntries(EXTRA_METHOD_NAMES.map((m) => [m, EXTRA_METHODS[m].defaultCount])) as
          Record<ExtraMethodName, number>;
      this.granularity = 'word';
      this.regex = String.raw`[^,;:.!?\n]+[,;:.!?]*\s*`;
      this.span = {t0: 0, t1: 0};
      this.intensity = 1;
      this.cursor = null;
      this.dragAnchor = null;
      this.dragTo = null;
      this.side = null;
      this.version = 0;
      this.detail = null;
      this.extraDetail = {};
      this.perToken = Object.fromEntries(EXTRA_METHOD_NAMES.map((m) => [m, false])) as Record<ExtraMethodName, boolean>;
      this.streaming = null;
    }

    override connectedCallback() {
      super.connectedCallback();
      window.addEventListener('mouseup', this.onWindowMouseUp);
    }

    override disconnectedCallback() {
      window.removeEventListener('mouseup', this.onWindowMouseUp);
      this.generation++;  // stops polling; the server cancels jobs nobody polls
      clearInterval(this.loadTimer);
      super.disconnectedCallback();
    }

    override firstUpdated(changed: PropertyValues) {
      (super.firstUpdated as ((c: PropertyValues) => void) | undefined)?.call(this, changed);
      this.reactImmediately(() => this.selectionService.primarySelectedInputData,
                            (d) => void this.onSelection(d));
    }

    override updated(changed: PropertyValues) {
      (super.updated as ((c: PropertyValues) => void) | undefined)?.call(this, changed);
      this.dataset['state'] = this.status;
      this.publishTarget();
      if (this.actionStart !== null && this.status !== 'loading' && this.side?.kind !== 'loading') {
        const {name, t} = this.actionStart;
        this.actionStart = null;
        // Time to the first frame painted with the result.
        requestAnimationFrame(() => setTimeout(() => {
          const ms = performance.now() - t;
          this.dataset['lastAction'] = name;
          this.dataset['lastActionMs'] = ms.toFixed(1);
          this.dispatchEvent(new CustomEvent('salience-rendered', {detail: {name, ms}, bubbles: true, composed: true}));
        }, 0));
      }
    }

    /** Tells the other modules of the bundle what is selected (shared/target_store.ts). */
    private publishTarget() {
      const p = this.payload;
      const d = this.input;
      if (p === null || d === null || this.salienceModel === null) {
        targetStore.publish(null);
        return;
      }
      targetStore.publish({
        datapointId: d.id, input: d.data, salienceModel: this.salienceModel, text: p.text,
        promptEnd: p.prompt_end, tokens: p.tokens, offsets: p.offsets, nPromptTokens: p.n_prompt_tokens,
        t0: this.span.t0, t1: this.span.t1, method: this.method, granularity: this.granularity,
      });
    }

    private markAction(name: string) {
      this.actionStart = {name, t: performance.now()};
    }

    // ---------------------------------------------------------------- data

    private startLoading(text: string) {
      this.status = 'loading';
      this.message = text;
      this.loadStart = performance.now();
      this.elapsed = 0;
      clearInterval(this.loadTimer);
      this.loadTimer = setInterval(() => {
        this.elapsed = Math.round((performance.now() - this.loadStart) / 1000);
      }, 1000);
    }

    private stopLoading(status: Status, message = '') {
      clearInterval(this.loadTimer);
      this.status = status;
      this.message = message;
    }

    private async onSelection(d: IndexedInputLike | null) {
      this.input = d;
      this.generation++;
      this.payload = null;
      this.streaming = null;
      this.detail = null;
      this.extraDetail = {};
      this.extraPayloads.clear();
      this.spanIgErrors.clear();
      this.serverSpans.clear();
      this.pendingSpans.clear();
      this.segCache.clear();
      this.piecesCache.clear();
      this.side = null;
      this.cursor = null;
      if (d == null) {
        this.stopLoading('idle');
        return;
      }
      await this.fetchMain(d);
    }

    private async fetchMain(d: IndexedInputLike) {
      const models = this.appState.metadata?.models ?? {};
      // Modules not duplicated per model get model="" from LIT: use the selected model.
      const model = this.model || this.appState.currentModels?.[0] || '';
      this.salienceModel = salienceModelFor(model, models);
      if (this.salienceModel === null) {
        this.stopLoading('error', `Model "${model}" has no "${SALIENCE_FIELD}" output, nor does ` +
            `"_${model}_salience". Start the server with python -m lit_app.server.`);
        return;
      }
      this.markAction('select');
      this.startLoading('Generating the response and computing salience…');
      const gen = this.generation;
      const answered = {done: false};
      try {
        // First highlight: the whole response from one forward + backward; the
        // per-token matrices follow in the background (pollDetail).
        const extra = this.extra();
        const req = this.apiService.getPreds(
            [quickInput(d, extra)], this.salienceModel, this.appState.currentDataset, [],
            [SALIENCE_FIELD, RESPONSE_FIELD, SPAN_SALIENCE_FIELD], 'Computing salience…');
        // Meanwhile the response streams in as it is generated.
        if (explainsGeneration(d)) void this.streamResponse(d, gen, answered);
        let res: Array<Record<string, unknown>> | null;
        try {
          res = await this.loadLatest('salience', req);
        } finally {
          answered.done = true;
        }
        if (res === null || this.input !== d || gen !== this.generation) return;  // a newer selection won
        this.streaming = null;
        const payload = parsePayload(res[0]?.[SALIENCE_FIELD]);
        this.absorbSpans(payload, extra);
        this.absorbExtraMatrices(payload);
        this.u16 = codePointToUtf16(payload.text);
        this.span = wholeResponse(numTargets(payload));
        this.payload = payload;
        this.detail = payload.detail ?? null;
        this.stopLoading('ready');
        if (!isFinal(this.detail)) void this.pollDetail(d, gen, null);
        this.ensureData();
      } catch (e) {
        if (this.input !== d) return;
        this.actionStart = null;
        this.stopLoading('error', errorMessage(e));
      }
    }

    /**
     * Shows the response as it is generated (`detail="stream"` polls, which never wait for the
     * model) until the first-highlight request is answered.
     */
    private async streamResponse(d: IndexedInputLike, gen: number, answered: {done: boolean}) {
      const current = () => !answered.done && gen === this.generation && this.input === d && this.salienceModel !== null;
      let n = 0;
      while (current()) {
        await new Promise((r) => setTimeout(r, STREAM_MS));
        if (!current()) return;
        let s: StreamStatus | null;
        try {
          const res = await this.apiService.getPreds(
              [streamInput(d, ++n)], this.salienceModel!, this.appState.currentDataset, [], [SALIENCE_FIELD],
              'Generating the response…');
          s = parseStream(res[0]?.[SALIENCE_FIELD]);
        } catch {
          return;  // an older server without streaming: the first highlight still comes
        }
        if (!current() || s === null) return;
        // Only ever longer: a poll answered out of order must not take text away.
        if (this.streaming === null || s.text.length >= this.streaming.text.length) this.streaming = s;
        this.message = describeStream(this.streaming);
      }
    }

    /** Keeps the spans a payload carries (computed directly by the server for a request with `extra`). */
    private absorbSpans(p: SaliencePayload, extra: Extra | null) {
      for (const [key, vals] of Object.entries(p.spans ?? {})) {
        const [t0, t1] = key.split(':').map(Number);
        for (const [method, v] of Object.entries(vals ?? {})) {
          const name = valuesName(method, extra);
          if (v == null || name === null) continue;
          this.serverSpans.set(spanKey(name, {t0, t1}), Float64Array.from(v));
        }
      }
      if (extra?.method !== 'integrated_gradients') return;
      for (const [key, err] of Object.entries(p.span_ig_errors ?? {})) {
        this.spanIgErrors.set(`${extra.count}|${key}`, err);
      }
    }

    /** Keeps the per-token matrices of extra methods a payload carries, by method and count. */
    private absorbExtraMatrices(p: SaliencePayload) {
      for (const name of EXTRA_METHOD_NAMES) {
        const m = p.methods[name];
        const count = m?.[EXTRA_METHODS[name].unit];
        if (m?.matrix != null && count != null) this.extraPayloads.set(extraKey({method: name, count}), m);
      }
    }

    /** The selected method with its count, when it is computed on request; else null. */
    private extra(): Extra | null {
      return isExtraMethod(this.method) ? {method: this.method, count: this.counts[this.method]} : null;
    }

    /**
     * Polls the background job for this selection until it ends: extra null is
     * the gradient matrices, else that method's per-token matrix at its count.
     */
    private async pollDetail(d: IndexedInputLike, gen: number, extra: Extra | null) {
      while (gen === this.generation && this.input === d && this.salienceModel !== null) {
        await new Promise((r) => setTimeout(r, POLL_MS));
        if (gen !== this.generation) return;
        let res: Array<Record<string, unknown>>;
        try {
          res = await this.apiService.getPreds(
              [pollInput(d, extra, ++this.pollCount)], this.salienceModel, this.appState.currentDataset, [],
              [SALIENCE_FIELD], 'Per-token salience…');
        } catch (e) {
          if (gen !== this.generation) return;
          const failed: DetailStatus = {kind: jobKind(extra), state: 'error', done: 0, total: 0,
                                        elapsed_s: 0, eta_s: null, error: errorMessage(e)};
          this.setDetail(extra, failed);
          return;
        }
        if (gen !== this.generation || this.payload === null) return;
        const raw = res[0]?.[SALIENCE_FIELD] as Record<string, unknown> | undefined;
        const status = parseDetail(raw);
        if (raw != null && typeof raw['text'] === 'string') {
          const full = parsePayload(raw);
          if (full.tokens.length !== this.payload.tokens.length) return;
          if (extra !== null) {
            const m = full.methods[extra.method];
            if (m?.matrix != null) this.extraPayloads.set(extraKey(extra), m);
          } else {
            this.payload = {...this.payload, methods: {...this.payload.methods, ...withoutExtras(full.methods)}};
          }
          this.setDetail(extra, status);
          this.version++;
          this.ensureData();
          return;
        }
        this.setDetail(extra, status);
        if (isFinal(status)) return;
      }
    }

    /** Records a job's progress; a job for a count the user has since changed (cancelled by the server) is ignored. */
    private setDetail(extra: Extra | null, status: DetailStatus | null) {
      if (extra === null) this.detail = status;
      else if (extra.count === this.counts[extra.method]) this.extraDetail = {...this.extraDetail, [extra.method]: status};
    }

    /** Starts whatever server request the current view needs (a span not computable here, an extra method's matrix). */
    private ensureData() {
      const p = this.payload;
      if (p === null || this.input === null) return;
      const extra = this.extra();
      if (extra !== null && this.perToken[extra.method] && !this.extraPayloads.has(extraKey(extra))) {
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
      const info = EXTRA_METHODS[extra.method];
      try {
        const res = await this.apiService.getPreds(
            [matrixInput(d, extra)], this.salienceModel, this.appState.currentDataset, [],
            [SALIENCE_FIELD], `${info.short} for every token (${extra.count} ${info.unit})…`);
        if (gen !== this.generation) return;
        this.setDetail(extra, parseDetail(res[0]?.[SALIENCE_FIELD]));
        await this.pollDetail(d, gen, extra);
      } catch (e) {
        if (gen === this.generation) this.side = {kind: 'error', text: errorMessage(e)};
      } finally {
        this.pendingSpans.delete(key);
      }
    }

    /** The exact salience of one span, computed by the server (one forward + backward; IG, SmoothGrad: one batch). */
    private async fetchSpan(d: IndexedInputLike, span: TargetSpan) {
      const method = this.method;
      const extra = this.extra();
      const name = extra === null ? method : extraKey(extra);
      const key = spanKey(name, span);
      if (this.pendingSpans.has(key) || this.salienceModel === null) return;
      this.pendingSpans.add(key);
      const gen = this.generation;
      const what = describeSpan(span, numTargets(this.payload!));
      this.side = {kind: 'loading', text: extra === null ? `Computing ${what}…`
          : `${METHODS.find((m) => m.id === method)?.label ?? method} (${extra.count} ${EXTRA_METHODS[extra.method].unit}) for ${what}…`};
      try {
        const res = await this.apiService.getPreds(
            [spanInput(d, span.t0, span.t1, extra)], this.salienceModel, this.appState.currentDataset, [],
            [SPAN_SALIENCE_FIELD, SALIENCE_FIELD], 'Computing span salience…');
        if (gen !== this.generation) return;
        const all = (res[0]?.[SPAN_SALIENCE_FIELD] ?? {}) as Record<string, number[]>;
        const n = this.payload?.tokens.length;
        for (const [m, values] of Object.entries(all)) {
          const k = valuesName(m, extra);
          if (!Array.isArray(values) || values.length !== n || k === null) continue;
          this.serverSpans.set(spanKey(k, span), Float64Array.from(values));
        }
        const light = res[0]?.[SALIENCE_FIELD] as {span_ig_errors?: Record<string, number>} | undefined;
        if (extra?.method === 'integrated_gradients') {
          for (const [k, err] of Object.entries(light?.span_ig_errors ?? {})) this.spanIgErrors.set(`${extra.count}|${k}`, err);
        }
        if (!this.serverSpans.has(key)) {
          throw new Error(`The server returned no "${SPAN_SALIENCE_FIELD}.${method}" of the right length.`);
        }
        this.settleLoading(key);
        this.version++;
      } catch (e) {
        // A span the user has moved away from may be cancelled by the server: not an error to show.
        const current = this.span.t0 === span.t0 && this.span.t1 === span.t1;
        if (gen === this.generation && current) this.side = {kind: 'error', text: errorMessage(e)};
        else if (gen === this.generation) this.settleLoading(key);
      } finally {
        this.pendingSpans.delete(key);
        // The user moved on while this ran: fetch what is on screen now (never a retry loop on errors).
        const moved = this.span.t0 !== span.t0 || this.span.t1 !== span.t1 || this.method !== method;
        if (gen === this.generation && this.payload !== null && moved) this.ensureData();
      }
    }

    /**
     * Ends the loading state when the span request `done` finishes, unless the request for
     * what is on screen now is another one still running (an older span or method finished
     * first): the status keeps saying "computing" until the values shown are there.
     */
    private settleLoading(done: string) {
      if (this.side?.kind !== 'loading') return;
      const extra = this.extra();
      const current = spanKey(extra === null ? this.method : extraKey(extra), this.span);
      if (current !== done && this.pendingSpans.has(current)) return;
      this.side = null;
    }

    private retry() {
      if (this.input !== null) void this.onSelection(this.input);
    }

    // ------------------------------------------------------------- derived

    /** The current method's payload; an extra method without its per-token matrix is {matrix: null}. */
    private methodPayload(): MethodPayload | null {
      const p = this.payload;
      if (p === null) return null;
      const extra = this.extra();
      if (extra !== null) {
        return this.extraPayloads.get(extraKey(extra)) ??
            {signed: true, matrix: null, [EXTRA_METHODS[extra.method].unit]: extra.count};
      }
      return p.methods[this.method] ?? null;
    }

    /** Token salience for the current method and span, or null while it is being fetched. */
    private tokenValues(): Float64Array | null {
      const p = this.payload;
      const m = this.methodPayload();
      if (p === null || m === null) return null;
      const extra = this.extra();
      const name = extra === null ? this.method : extraKey(extra);
      return spanSalience(m, this.span, p.tokens.length) ?? this.serverSpans.get(spanKey(name, this.span)) ?? null;
    }

    /** Where the values on screen come from, for the status line. */
    private precision(): string {
      const m = this.methodPayload();
      if (m?.matrix != null) return 'per-token detail ready: retargeting is instant';
      const extra = this.extra();
      if (extra !== null && !this.perToken[extra.method]) {
        return `exact for this span; per-token ${EXTRA_METHODS[extra.method].short} off (each span is computed on request)`;
      }
      return `exact for this span; ${describeDetail(extra === null ? this.detail : this.extraDetail[extra.method])}`;
    }

    /** Segment salience for the current method and span (memoised: the same array while nothing changed). */
    private segmentValues(seg: Segmentation): Float64Array | null {
      const extra = this.extra();
      const key = `${extra === null ? this.method : extraKey(extra)}|${this.span.t0}:${this.span.t1}|${this.version}|${this.serverSpans.size}`;
      const memo = this.valuesMemo;
      if (memo !== null && memo.key === key && memo.seg === seg && memo.payload === this.payload) return memo.values;
      const tokVals = this.tokenValues();
      const values = tokVals === null ? null : aggregate(tokVals, seg, 'sum');
      this.valuesMemo = {key, seg, payload: this.payload, values};
      return values;
    }

    private segmentation(): Segmentation {
      const p = this.payload!;
      const key = this.granularity === 'regex' ? `regex:${this.regex}` : this.granularity;
      let seg = this.segCache.get(key);
      if (seg === undefined) {
        seg = segment(p.text, p.offsets, this.granularity, {pattern: this.regex, roleSpans: p.role_spans});
        this.segCache.set(key, seg);
      }
      return seg;
    }

    private pieces(seg: Segmentation): Piece[] {
      const key = seg.granularity === 'regex' ? `regex:${this.regex}` : seg.granularity;
      let pieces = this.piecesCache.get(key);
      if (pieces === undefined) {
        pieces = buildPieces(this.payload!.text, seg, this.payload!.prompt_end);
        this.piecesCache.set(key, pieces);
      }
      return pieces;
    }

    // ------------------------------------------------------------- actions

    private setSpan(span: TargetSpan) {
      if (span.t0 === this.span.t0 && span.t1 === this.span.t1) return;
      this.markAction('retarget');
      this.span = span;
      this.ensureData();
    }

    private setMethod(method: MethodName) {
      this.markAction('method');
      this.method = method;
      this.ensureData();
    }

    private setGranularity(g: Granularity) {
      this.markAction('granularity');
      this.granularity = g;
      this.cursor = null;
      this.snapToSegments();
    }

    /** Widens the target to the segments it touches at the current granularity. */
    private snapToSegments() {
      const p = this.payload;
      if (p === null || isWhole(this.span, numTargets(p))) return;
      let seg: Segmentation;
      try {
        seg = this.segmentation();
      } catch {
        return;  // bad regex: shown by renderBody
      }
      const snapped = snapSpan(targetSegments(seg, p.n_prompt_tokens), this.span);
      if (snapped.t0 !== this.span.t0 || snapped.t1 !== this.span.t1) {
        this.span = snapped;
        this.ensureData();
      }
    }

    private onTargetDown(e: MouseEvent) {
      const ti = targetIndexOf(e);
      if (ti === null || e.button !== 0) return;
      e.preventDefault();
      this.dragAnchor = ti;
      this.dragTo = ti;
      this.cursor = ti;
      (e.target as HTMLElement).focus({preventScroll: true});
    }

    private onTargetOver(e: MouseEvent) {
      if (this.dragAnchor === null) return;
      const ti = targetIndexOf(e);
      if (ti !== null && ti !== this.dragTo) this.dragTo = ti;
    }

    private finishDrag() {
      if (this.dragAnchor === null || this.dragTo === null || this.payload === null) return;
      const list = targetSegments(this.segmentation(), this.payload.n_prompt_tokens);
      const a = list[this.dragAnchor];
      const b = list[this.dragTo];
      this.dragAnchor = null;
      this.dragTo = null;
      if (a !== undefined && b !== undefined) this.setSpan(dragSpan(a, b));
    }

    private onTargetKey(e: KeyboardEvent, list: TargetSegment[]) {
      const p = this.payload;
      if (p === null) return;
      const extendFrom = e.shiftKey ? firstIndexOfSpan(list, this.span) : null;
      const r = spanForKey(list, this.cursor, e.key, numTargets(p), extendFrom);
      if (r === null) return;
      e.preventDefault();
      this.cursor = r.cursor;
      this.setSpan(r.span);
      if (r.cursor !== null) {
        void this.updateComplete.then(() => {
          this.renderRoot.querySelector<HTMLElement>(`.tgt[data-ti="${r.cursor}"]`)?.focus();
        });
      }
    }

    private showTooltip(e: MouseEvent) {
      const tip = this.renderRoot.querySelector<HTMLElement>('.tooltip');
      const el = (e.target as HTMLElement).closest?.('[data-s]') as HTMLElement | null;
      if (tip === null) return;
      if (el === null || this.shown === null || this.payload === null) {
        tip.hidden = true;
        return;
      }
      const s = Number(el.dataset['s']);
      const v = this.shown.values[s];
      const text = segmentText(this.payload.text, this.shown.seg, s, this.u16 ?? undefined);
      const rank = this.shown.rank.get(s);
      const label = this.shown.seg.excluded[s] ? 'template markup (not scored)'
          : Number.isFinite(v) ? `salience ${v.toPrecision(6)}${rank !== undefined ? ` · rank ${rank + 1}` : ''}`
          : 'no value';
      tip.textContent = `${JSON.stringify(text.length > 60 ? text.slice(0, 57) + '…' : text)} — ${label}`;
      tip.hidden = false;
      const host = this.getBoundingClientRect();
      tip.style.left = `${Math.min(e.clientX - host.left + 12, host.width - 260)}px`;
      tip.style.top = `${e.clientY - host.top + 16}px`;
    }

    private hideTooltip() {
      const tip = this.renderRoot.querySelector<HTMLElement>('.tooltip');
      if (tip) tip.hidden = true;
    }

    private scrollToSegment(s: number) {
      const el = this.renderRoot.querySelector<HTMLElement>(`.prompt [data-s="${s}"], .response [data-s="${s}"]`);
      if (el == null) return;
      el.scrollIntoView({block: 'center', behavior: 'smooth'});
      el.classList.add('flash');
      setTimeout(() => el.classList.remove('flash'), 1200);
    }

    // -------------------------------------------------------------- render

    renderImpl(): TemplateResult {
      return html`
        <div class="module">
          ${this.renderControls()}
          ${this.renderStatus()}
          ${this.payload !== null ? this.renderBody(this.payload)
            : this.streaming !== null && this.input !== null ? this.renderStreaming(this.input, this.streaming)
            : this.renderEmpty()}
          <div class="tooltip" role="tooltip" hidden></div>
        </div>`;
    }

    private renderControls() {
      return html`
        <div class="controls">
          <label>Method
            <select class="method" @change=${(e: Event) => this.setMethod((e.target as HTMLSelectElement).value as MethodName)}>
              ${METHODS.map((m) => html`<option value=${m.id} ?selected=${m.id === this.method}>${m.label}</option>`)}
            </select>
          </label>
          ${EXTRA_METHOD_NAMES.map((name) => this.renderCountControls(name))}
          <label>Granularity
            <select class="granularity" @change=${(e: Event) => this.setGranularity((e.target as HTMLSelectElement).value as Granularity)}>
              ${GRANULARITIES.map((g) => html`<option value=${g} ?selected=${g === this.granularity}>${GRANULARITY_LABELS[g]}</option>`)}
            </select>
          </label>
          ${this.granularity === 'regex' ? html`<label>Regex
            <input class="regex" type="text" .value=${this.regex} spellcheck="false"
                @change=${(e: Event) => {
                  this.markAction('granularity');
                  this.regex = (e.target as HTMLInputElement).value;
                  this.snapToSegments();
                }}></label>`
            : nothing}
          <label>Intensity
            <input class="intensity" type="range" min="0.25" max="4" step="0.05" .value=${String(this.intensity)}
                @input=${(e: Event) => { this.intensity = Number((e.target as HTMLInputElement).value); }}>
          </label>
        </div>`;
    }

    /** The step / sample count of a method computed on request, and its per-token switch when it is selected. */
    private renderCountControls(name: ExtraMethodName) {
      const info = EXTRA_METHODS[name];
      const label = METHODS.find((m) => m.id === name)?.label ?? name;
      const selected = this.method === name;
      return html`
          <label title="${label}: number of ${info.unit} (used when the method is ${label})">${info.short} ${info.unit}
            <input class="${info.tag}-${info.unit}" type="number" min="1" max=${info.maxCount}
                .value=${String(this.counts[name])}
                @change=${(e: Event) => {
                  const v = parseCount((e.target as HTMLInputElement).value, name);
                  if (v === null) return;
                  if (selected) this.markAction('method');
                  this.counts = {...this.counts, [name]: v};
                  this.ensureData();
                }}></label>
          ${selected ? html`<label title="Compute ${label} for every response token (slow: minutes on a CPU); otherwise only the span on screen">
            <input class="${info.tag}-per-token" type="checkbox" .checked=${this.perToken[name]}
                @change=${(e: Event) => {
                  this.perToken = {...this.perToken, [name]: (e.target as HTMLInputElement).checked};
                  this.ensureData();
                }}>
            per-token ${info.short}</label>` : nothing}`;
    }

    private renderStatus() {
      if (this.status === 'loading') {
        return html`<div class="status loading" role="status">
          <div class="bar"><div></div></div>
          <span>${this.message} ${this.elapsed > 0 ? html`(${this.elapsed} s)` : nothing}</span></div>`;
      }
      if (this.status === 'error') {
        return html`<div class="status error" role="alert">
          <span class="material-icon">error_outline</span>
          <span class="error-text">${this.message}</span>
          <button @click=${() => this.retry()}>Retry</button></div>`;
      }
      return nothing;
    }

    private renderEmpty() {
      if (this.status !== 'idle') return nothing;
      return html`<div class="empty">Select a prompt in the data table, or write one in the datapoint editor and click “Add”.</div>`;
    }

    /** Before the first highlight: the prompt as typed and the response as far as it is generated. */
    private renderStreaming(d: IndexedInputLike, s: StreamStatus) {
      const system = typeof d.data['system'] === 'string' ? d.data['system'] : '';
      const prompt = typeof d.data['prompt'] === 'string' ? d.data['prompt'] : '';
      return html`
        <div class="body">
          <div class="texts">
            <div class="section-label">Prompt</div>
            <div class="text prompt pending">${system ? html`<span class="markup">${system}\n\n</span>` : nothing}${prompt}</div>
            <div class="section-label">Response
              <span class="hint">— ${s.state === 'done' ? `${s.tokens} tokens; computing the salience of the whole response`
                  : s.state === 'running' ? `${s.tokens} of at most ${s.max_new_tokens} tokens so far` : 'waiting for the model'}</span>
            </div>
            <div class="text response streaming" data-tokens=${s.tokens} data-stream-state=${s.state}>${s.text}</div>
          </div>
        </div>`;
    }

    private renderBody(p: SaliencePayload) {
      const T = numTargets(p);
      let seg: Segmentation;
      let segError = '';
      try {
        if (this.granularity === 'regex') checkPattern(this.regex);
        seg = this.segmentation();
      } catch (e) {
        segError = e instanceof Error ? e.message : String(e);
        seg = segment(p.text, p.offsets, 'token');
      }
      const m = this.methodPayload();
      const values = this.segmentValues(seg);
      const signed = m?.signed ?? this.method !== 'grad_norm';
      const list = targetSegments(seg, p.n_prompt_tokens);
      const tiOf = new Map<number, number>(list.map((ts, i) => [ts.seg, i]));
      // Segments that are (part of) the target do not set the colour scale.
      const targetSegs = new Set(list.filter((ts) => overlaps(ts, this.span)).map((ts) => ts.seg));
      const preview = this.dragAnchor !== null && this.dragTo !== null && list[this.dragAnchor] && list[this.dragTo]
          ? dragSpan(list[this.dragAnchor], list[this.dragTo]) : null;
      let scaleVals: number[] = [];
      if (values !== null) {
        scaleVals = Array.from(values).filter((v, s) => Number.isFinite(v) && !targetSegs.has(s));
      }
      const cs: ColorScale = {signed, scale: maxAbs(scaleVals), intensity: this.intensity};
      const ranked = values === null ? [] : topSegments(values, TOP_K, signed, targetSegs);
      const rank = new Map(ranked.map((r, i) => [r.seg, i]));
      this.shown = values === null ? null : {values, seg, rank};

      const pieces = this.pieces(seg);
      // The prompt (thousands of spans) is rebuilt only when its colours change,
      // not on drag previews, cursor moves or tooltip-free re-renders.
      const memo = this.promptMemo;
      let promptPieces: TemplateResult[];
      if (memo !== null && memo.pieces === pieces && memo.values === values && memo.scale === cs.scale &&
          memo.intensity === cs.intensity && memo.signed === cs.signed) {
        promptPieces = memo.templates;
      } else {
        promptPieces = [];
        for (const pc of pieces) {
          if (pc.response) break;
          promptPieces.push(this.renderPromptPiece(pc, seg, values, cs));
        }
        this.promptMemo = {pieces, values, scale: cs.scale, intensity: cs.intensity, signed: cs.signed,
                           templates: promptPieces};
      }
      const responsePieces: TemplateResult[] = [];
      for (const pc of pieces) {
        if (!pc.response) continue;
        if (pc.seg < 0) {
          responsePieces.push(html`<span class="gap">${pc.text}</span>`);
          continue;
        }
        const excluded = seg.excluded[pc.seg] === 1;
        const ti = tiOf.get(pc.seg);
        if (ti === undefined) {
          responsePieces.push(html`<span class="seg${excluded ? ' markup' : ''}" data-s=${pc.seg}>${pc.text}</span>`);
          continue;
        }
        const v = values?.[pc.seg] ?? NaN;
        const c = !excluded && Number.isFinite(v) ? colorFor(v, cs) : null;
        const style = c ? `background:${c.bg};color:${c.fg}` : '';
        const ts = list[ti];
        const selected = overlaps(ts, this.span) && !isWhole(this.span, T);
        const inPreview = preview !== null && overlaps(ts, preview);
        responsePieces.push(html`<span class="tgt${selected ? ' sel' : ''}${inPreview ? ' preview' : ''}"
            data-s=${pc.seg} data-ti=${ti} tabindex=${(this.cursor ?? 0) === ti ? '0' : '-1'}
            role="button" aria-pressed=${selected ? 'true' : 'false'} style=${selected ? '' : style}>${pc.text}</span>`);
      }

      const spanLogprob = p.target_logprobs.slice(this.span.t0, this.span.t1).reduce((a, b) => a + b, 0);
      let completeness: number | null = null;
      if (this.method === 'integrated_gradients') {
        completeness = m?.completeness_error
            ? m.completeness_error.slice(this.span.t0, this.span.t1).reduce((a, b) => a + b, 0)
            : this.spanIgErrors.get(`${this.counts.integrated_gradients}|${this.span.t0}:${this.span.t1}`) ?? null;
      }
      const extra = this.extra();
      const detailState = extra !== null ? (this.extraDetail[extra.method]?.state ?? 'off') : (this.detail?.state ?? 'done');

      return html`
        <div class="body">
          <div class="texts" @mouseover=${(e: MouseEvent) => this.showTooltip(e)} @mouseleave=${() => this.hideTooltip()}>
            ${segError ? html`<div class="status error inline">${segError}</div>` : nothing}
            ${this.side ? html`<div class="status ${this.side.kind} inline" role=${this.side.kind === 'error' ? 'alert' : 'status'}>
                ${this.side.kind === 'loading' ? html`<div class="bar"><div></div></div>` : nothing}
                <span>${this.side.text}</span></div>` : nothing}
            <div class="section-label">Prompt</div>
            <div class="text prompt ${values === null ? 'pending' : ''}">${promptPieces}</div>
            <div class="section-label">Response
              <span class="hint">— target: <b class="target-desc">${describeSpan(this.span, T)}</b>
                ${isWhole(this.span, T) ? html`(click or drag over the response to choose)` :
                  html`<button class="reset" @click=${() => { this.cursor = null; this.setSpan(wholeResponse(T)); }}>Whole response</button>`}
              </span>
            </div>
            <div class="text response" @mousedown=${(e: MouseEvent) => this.onTargetDown(e)}
                @mouseover=${(e: MouseEvent) => this.onTargetOver(e)}
                @keydown=${(e: KeyboardEvent) => this.onTargetKey(e, list)}>${responsePieces}</div>
          </div>
          <div class="side">
            ${this.renderLegend(cs, m)}
            <div class="facts">
              <div>log p(target) = ${spanLogprob.toFixed(3)}</div>
              <div class="precision" data-detail=${detailState}
                  data-exact=${m?.matrix != null ? 'matrix' : 'span'}>${this.precision()}</div>
              ${p.dtype ? html`<div class="dtype">computed in ${p.dtype}</div>` : nothing}
              ${completeness !== null ? html`<div title="Sum of attributions minus the log-prob difference to the baseline, over the target">IG completeness error: ${formatValue(completeness)}</div>` : nothing}
            </div>
            <div class="section-label">Top ${GRANULARITY_LABELS[seg.granularity].toLowerCase()}</div>
            <ol class="top">
              ${ranked.map((r) => {
                const c = colorFor(r.value, cs);
                const text = segmentText(p.text, seg, r.seg, this.u16 ?? undefined).trim();
                return html`<li><button class="top-item" @click=${() => this.scrollToSegment(r.seg)} title=${text}>
                  <span class="swatch" style="background:${c.bg}"></span>
                  <span class="top-text">${text.length > 40 ? text.slice(0, 39) + '…' : text}</span>
                  ${seg.starts[r.seg] >= p.prompt_end ? html`<span class="where" title="in the response">resp.</span>` : nothing}
                  <span class="top-value">${formatValue(r.value)}</span></button></li>`;
              })}
            </ol>
          </div>
        </div>`;
    }

    private renderPromptPiece(pc: Piece, seg: Segmentation, values: Float64Array | null, cs: ColorScale) {
      if (pc.seg < 0) return html`<span class="gap">${pc.text}</span>`;
      const excluded = seg.excluded[pc.seg] === 1;
      const v = values?.[pc.seg] ?? NaN;
      const c = !excluded && Number.isFinite(v) ? colorFor(v, cs) : null;
      const style = c ? `background:${c.bg};color:${c.fg}` : '';
      return html`<span class="seg${excluded ? ' markup' : ''}" data-s=${pc.seg} style=${style}>${pc.text}</span>`;
    }

    private renderLegend(cs: ColorScale, m: MethodPayload | null) {
      const stops = legendStops(cs, 3);
      return html`<div class="legend" aria-label="colour legend">
        <div class="legend-title">${cs.signed ? 'Signed (diverging)' : 'Magnitude (sequential)'}
          ${m?.steps ? html`· ${m.steps} steps` : m?.samples ? html`· ${m.samples} samples` : nothing}</div>
        <div class="legend-bar" style="background:${legendGradient(cs)}"></div>
        <div class="legend-labels">${stops.map((s) => html`<span>${formatValue(s.value)}</span>`)}</div>
      </div>`;
    }
  }

  return PromptSalienceModule as unknown as CustomElementConstructor;
}

function targetIndexOf(e: Event): number | null {
  const el = (e.target as HTMLElement).closest?.('[data-ti]') as HTMLElement | null;
  return el === null ? null : Number(el.dataset['ti']);
}

function firstIndexOfSpan(list: readonly TargetSegment[], span: TargetSpan): number | null {
  const i = list.findIndex((ts) => overlaps(ts, span));
  return i < 0 ? null : i;
}

const STYLES = css`
  :host { display: block; height: 100%; position: relative; }
  .module { display: flex; flex-direction: column; height: 100%; font-family: Roboto, sans-serif; font-size: 13px; }
  .controls { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; padding: 6px 8px;
              border-bottom: 1px solid #dadce0; }
  .controls label { display: flex; gap: 4px; align-items: center; color: #3c4043; }
  .controls input[type=number] { width: 56px; }
  .controls input.regex { width: 200px; font-family: 'Roboto Mono', monospace; }
  .status { display: flex; gap: 8px; align-items: center; padding: 6px 8px; }
  .status.inline { padding: 4px 0; }
  .status.error { background: #fce8e6; color: #a50e0e; border-radius: 4px; }
  /* Static on purpose: an endless animation repaints every frame and takes CPU from the model the
     page is waiting for (docs/benchmarks.md, "First highlight in the browser"). */
  .status .bar { width: 120px; height: 4px; background: #e8eaed; overflow: hidden; border-radius: 2px; flex: none; }
  .status .bar > div { width: 100%; height: 100%;
                       background: repeating-linear-gradient(90deg, #1a73e8 0 8px, #e8eaed 8px 12px); }
  .empty { padding: 16px; color: #5f6368; }
  .body { flex: 1; display: flex; gap: 12px; min-height: 0; padding: 4px 8px; }
  .texts { flex: 1; min-width: 0; display: flex; flex-direction: column; min-height: 0; }
  .side { width: 250px; flex: none; overflow-y: auto; }
  .section-label { font-weight: 500; color: #5f6368; margin: 6px 0 2px; }
  .hint { font-weight: normal; }
  .text { white-space: pre-wrap; overflow-wrap: anywhere; font-family: 'Roboto Mono', monospace; font-size: 12.5px;
          line-height: 1.7; border: 1px solid #e8eaed; border-radius: 4px; padding: 6px; }
  .prompt { flex: 1 1 auto; overflow-y: auto; min-height: 60px; contain: content; }
  .response { flex: 0 0 auto; max-height: 30%; overflow-y: auto; user-select: none; }
  .pending { opacity: 0.6; }
  .seg, .tgt { border-radius: 2px; transition: none; }
  .markup { color: #9aa0a6; }
  .tgt { cursor: pointer; outline: 1px dashed #bdc1c6; outline-offset: -1px; }
  .tgt:hover { outline: 1px solid #1a73e8; }
  .tgt:focus-visible { outline: 2px solid #1a73e8; }
  .tgt.sel { background: #fde293; color: #202124; outline: 2px solid #f29900; }
  .tgt.preview { outline: 2px solid #1a73e8; }
  .flash { outline: 2px solid #f29900; }
  .tooltip { position: absolute; z-index: 10; max-width: 250px; padding: 4px 8px; background: #3c4043; color: #fff;
             border-radius: 4px; font-size: 12px; pointer-events: none; white-space: pre-wrap; }
  .legend-bar { height: 10px; border: 1px solid #dadce0; border-radius: 2px; }
  .legend-labels { display: flex; justify-content: space-between; font-size: 11px; color: #5f6368; }
  .legend-title { color: #3c4043; margin-bottom: 2px; }
  .facts { margin: 6px 0; color: #3c4043; }
  ol.top { list-style: none; padding: 0; margin: 0; }
  .top-item { display: flex; width: 100%; gap: 6px; align-items: center; border: none; background: none;
              padding: 2px 0; cursor: pointer; text-align: left; font: inherit; }
  .top-item:hover { background: #f1f3f4; }
  .swatch { width: 12px; height: 12px; border-radius: 2px; border: 1px solid #dadce0; flex: none; }
  .top-text { flex: 1; overflow: hidden; white-space: nowrap; text-overflow: ellipsis; font-family: 'Roboto Mono', monospace; }
  .where { color: #9aa0a6; font-size: 11px; }
  .top-value { color: #5f6368; font-variant-numeric: tabular-nums; }
  button.reset { font: inherit; font-size: 12px; }
`;

/**
 * Cache name of a method's values in the answer to a request with `extra`: the extra
 * method's carry its count (the count changes the values); another extra method's
 * values (not asked for) are ignored (null).
 */
function valuesName(method: string, extra: Extra | null): string | null {
  if (!isExtraMethod(method)) return method;
  return extra?.method === method ? extraKey(extra) : null;
}

/** Methods of a full payload without the extra methods (their matrices are kept per count). */
function withoutExtras(methods: SaliencePayload['methods']): SaliencePayload['methods'] {
  return Object.fromEntries(Object.entries(methods).filter(([name]) => !isExtraMethod(name)));
}
