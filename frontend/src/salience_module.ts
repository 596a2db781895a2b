/**
 * The Sequence Salience LIT module: a custom element on top of LIT's own LitModule (found
 * at run time; see index.ts and shared/lit_module.ts). Requests, polling and their
 * caches are the controller's (salience/controller.ts); templates are salience/view.ts's. It mounts
 * the two comparisons (salience/compare/room.ts, salience/compare_models/room.ts), which build on the salience
 * folder; so it stands beside index.ts, above those folders, not inside one. This element keeps
 * the view state (granularity, regex, intensity, keyboard cursor, drag), derives what is
 * drawn (segments, their values and colours, the top list) with memos so that a drag or a
 * cursor move does not rebuild thousands of prompt spans, handles pointer and keyboard
 * input, and tells the other modules what is selected (shared/target_store.ts).
 */
import {html, nothing, type PropertyValues, type TemplateResult} from 'lit';

import {aggregate, asTyped, checkPattern, matchesOnly, segment, type Granularity,
        type Segmentation} from './shared/aggregate/index.js';
import {maxAbs, type ColorScale} from './shared/colormap.js';
import {CompareRoom} from './salience/compare/room.js';
import {COMPARE_STYLES} from './salience/compare/styles.js';
import {compareView} from './salience/compare/view.js';
import {CompareModelsRoom} from './salience/compare_models/room.js';
import {COMPARE_MODELS_STYLES, compareModelsView} from './salience/compare_models/view.js';
import {forcedTargetNote, isForcedTarget} from './shared/forced_target.js';
import {modelLabelView, moduleBase, pinnedSelection, serverHost} from './shared/lit_module.js';
import {buildPieces, codePointToUtf16, segmentText, type Piece} from './shared/pieces.js';
import type {IndexedInputLike} from './shared/request.js';
import {targetStore} from './shared/target_store.js';
import {SalienceController} from './salience/controller.js';
import type {SalienceHost} from './salience/page.js';
import {buildHeatmap, heatmapWaitReason, matrixScale, moveRow, selectedRows, type Heatmap, type HeatmapRows,
        type HeatmapScale} from './salience/heatmap/logic.js';
import {HEATMAP_STYLES, heatmapControlsView, heatmapTableView, heatmapWaitView, isHeatmapKey,
        viewToggleView} from './salience/heatmap/view.js';
import {PatternMatcher, PatternPending} from './salience/pattern_runner.js';
import {litConventionHost} from './salience/lit_convention.js';
import {unmeasuredNotes} from './salience/coarse.js';
import {describeDetail, numTargets, type SaliencePayload, type SegmentPayload} from './salience/payload.js';
import {topSegments} from './salience/rank.js';
import {SALIENCE_STYLES} from './salience/styles.js';
import {describeSpan, dragSpan, firstIndexIn, isWhole, overlaps, snapSpan, spanForKey, targetSegments, wholeResponse,
        type TargetSegment} from './salience/target.js';
import {controlsView, emptyView, headView, promptPieceView, responsePiecesView, segmentStatusView, sidePanelView,
        statusView, streamingView} from './salience/view.js';

/** Custom-element tag. LIT 1.3.1 already defines "sequence-salience-module" (its own module). */
export const TAG = 'prompt-salience-module';

const TOP_K = 10;
/**
 * The system prompt and chat template start folded, unless at least this many of the first highlight's top list
 * lie in them (the constitutional case's principles): then they start open, as what matters is there.
 */
export const HEAD_OPEN_RANKED = 3;
/** Pause in typing after which a regex typed into the box applies. */
export const REGEX_DEBOUNCE_MS = 400;

/** The module's (i) text: how to use it, each method, the colours, signed vs unsigned (two sentences each). */
export const SALIENCE_HELP = [
  'Which parts of the prompt drove the response. Click or drag over the response to choose the target ' +
  '(Escape: whole response); arrows move it, Shift+arrows extend it.',
  '**Gradient norm**: the length of the gradient of log p(target) at each prompt token\'s embedding. One ' +
  'backward pass; it says how strongly a token matters, not in which direction.',
  '**Gradient × input**: the gradient dotted with the token\'s embedding, a first-order estimate of what the ' +
  'token adds to log p(target). One backward pass; signed, but only a local (linear) estimate.',
  '**Integrated gradients**: gradient × input averaged along a path from a baseline (zero embedding) to the ' +
  'prompt, with *IG steps* points. Its values should sum to the log-prob change from the baseline; the ' +
  'completeness error says how far they are, and a warning shows when it is over 5 %.',
  '**SmoothGrad**: gradient × input averaged over *SmoothGrad samples* noisy copies of the embeddings. It ' +
  'is less noisy than one gradient; more samples are smoother and slower.',
  '**Colours**: darker means a larger value, scaled to the largest value outside the target (the legend ' +
  'shows the range; *Intensity* stretches it). Hover a segment for its exact value and rank.',
  '**Signed vs unsigned**: signed methods colour tokens that raise log p(target) red and those that lower ' +
  'it blue (white near zero). Gradient norm is unsigned, one purple scale: magnitude only.',
].join('\n\n');

/** Defines the module class on top of LIT's LitModule and returns it. */
export function makeModuleClass(LitModule: unknown): CustomElementConstructor {
  class PromptSalienceModule extends moduleBase(LitModule, {
    tag: TAG, title: 'Sequence Salience', numCols: 12, styles: [SALIENCE_STYLES, HEATMAP_STYLES, COMPARE_STYLES, COMPARE_MODELS_STYLES],
    infoMarkdown: SALIENCE_HELP,
    state: ['granularity', 'regex', 'intensity', 'cursor', 'dragAnchor', 'dragTo', 'showHead', 'heatmap', 'heatmapRows',
            'heatmapScale', 'heatmapFocus'],
  }) {
    declare granularity: Granularity;
    declare regex: string;
    declare intensity: number;
    declare cursor: number | null;
    declare dragAnchor: number | null;
    declare dragTo: number | null;
    /** Whether the text before the user's turn (chat template, system prompt) is expanded. */
    declare showHead: boolean;
    /** Whether the answer × prompt heatmap is shown instead of the text (heatmap/). */
    declare heatmap: boolean;
    declare heatmapRows: HeatmapRows;
    declare heatmapScale: HeatmapScale;
    /** The heatmap row that takes the keyboard focus. */
    declare heatmapFocus: number;

    /** What the controller and the two comparison rooms need from LIT: this element's services. */
    private readonly host: SalienceHost = {
      ...serverHost(this),
      modelName: () => this.modelName(),
      loadLatest: (key, promise) => this.loadLatest(key, promise),
    };
    // LIT's own prompt-debugging models are answered through lit_convention.ts.
    private readonly ctl = new SalienceController(litConventionHost(this.host));
    // LIT's pin: the comparison with the pinned datapoint (salience/compare/room.ts).
    private readonly compare = new CompareRoom(this.host);
    // Two models selected in LIT's model selector: the "Compare models" section (salience/compare_models/room.ts).
    private readonly compareModels = new CompareModelsRoom(this.host);
    private segCache = new Map<string, Segmentation>();
    private piecesCache = new Map<string, Piece[]>();
    /** UTF-16 index of each code point of the payload's text. */
    private u16: {text: string; map: Int32Array} | null = null;
    /** Values shown now, for the tooltip (segment values and their segmentation). */
    private shown: {values: Float64Array; seg: Segmentation; rank: Map<number, number>} | null = null;
    private valuesMemo: {key: string; seg: Segmentation; payload: SaliencePayload | null;
                         values: Float64Array | null} | null = null;
    private promptMemo: {pieces: Piece[]; values: Float64Array | null; scale: number; intensity: number;
                         signed: boolean; notes: ReadonlyMap<number, string>; head: TemplateResult[];
                         templates: TemplateResult[]} | null = null;
    private notesMemo: {payload: SegmentPayload | null; notes: ReadonlyMap<number, string>} =
        {payload: null, notes: new Map()};
    /** The values the tooltip's text was read from (a re-render with others hides it: no stale value). */
    private tipValues: Float64Array | null = null;
    /** The heatmap of a method payload on a segmentation (rebuilt when either or the row mode changes). */
    private heatmapMemo: {m: unknown; seg: Segmentation; mode: HeatmapRows; map: Heatmap | null} | null = null;
    /** Whether the head's fold is decided for this selection (by the first highlight's top list, or by the user). */
    private headDecided = false;
    private regexTimer: ReturnType<typeof setTimeout> | undefined;
    /** Custom patterns run in a worker with the server's time budget (never on the page's main thread). */
    private readonly patterns = new PatternMatcher(() => this.patternDone());
    private readonly onWindowMouseUp = () => this.finishDrag();
    /** Alt+H anywhere on the page toggles the heatmap of this module while it is on screen. */
    private readonly onWindowKey = (e: KeyboardEvent) => {
      if (!isHeatmapKey(e) || this.getClientRects().length === 0) return;
      e.preventDefault();
      this.heatmap = !this.heatmap;
    };
    /** The model the current selection was explained with (a model switch re-explains). */
    private shownModel = '';
    /** The model whose target this instance published last (shared/target_store.ts). */
    private publishedModel: string | null = null;

    /** The payload shown (null: none yet); read-only, for tests and the console. */
    get payload(): SaliencePayload | null {
      return this.ctl.payload;
    }

    constructor() {
      super();
      this.granularity = 'word';
      this.regex = String.raw`[^,;:.!?\n]+[,;:.!?]*\s*`;
      this.intensity = 1;
      this.cursor = null;
      this.dragAnchor = null;
      this.dragTo = null;
      this.showHead = false;
      this.heatmap = false;
      this.heatmapRows = 'token';
      this.heatmapScale = 'row';  // each row as the text view colours that target (its own largest value)
      this.heatmapFocus = 0;
    }

    override connectedCallback() {
      super.connectedCallback();
      window.addEventListener('mouseup', this.onWindowMouseUp);
      window.addEventListener('keydown', this.onWindowKey);
    }

    override disconnectedCallback() {
      clearTimeout(this.regexTimer);
      this.patterns.dispose();
      window.removeEventListener('mouseup', this.onWindowMouseUp);
      window.removeEventListener('keydown', this.onWindowKey);
      this.ctl.dispose();
      this.compare.dispose();
      this.compareModels.dispose();
      if (this.publishedModel !== null) targetStore.publish(this.publishedModel, null);
      this.publishedModel = null;
      super.disconnectedCallback();
    }

    override firstUpdated(changed: PropertyValues) {
      (super.firstUpdated as ((c: PropertyValues) => void) | undefined)?.call(this, changed);
      this.reactImmediately(() => this.selectionService.primarySelectedInputData,
                            (d) => void this.onSelection(d));
      const pinned = pinnedSelection(this);
      this.reactImmediately(() => [this.appState.compareExamplesEnabled ?? false, pinned?.primarySelectedInputData ?? null,
                                   this.selectionService.primarySelectedInputData] as const,
                            ([on, p, d]) => void this.compare.update(on, p, d));
      this.reactImmediately(() => [this.selectionService.primarySelectedInputData,
                                   (this.appState.currentModels ?? []).join(','), this.modelName()] as const,
                            ([d, models, m]) => this.compareModels.update(d, models === '' ? [] : models.split(','), m));
      // LIT's model selector: another model for this instance (e.g. --models a,b and a switched off) explains again.
      this.reactImmediately(() => this.modelName(), (m) => {
        if (m !== this.shownModel) void this.onSelection(this.selectionService.primarySelectedInputData);
      });
    }

    override updated(changed: PropertyValues) {
      (super.updated as ((c: PropertyValues) => void) | undefined)?.call(this, changed);
      this.dataset['state'] = this.ctl.status;
      if (this.tipValues !== null && this.tipValues !== (this.shown?.values ?? null)) this.hideTooltip();
      this.publishTarget();
      this.compare.sync(this.ctl);
      this.compareModels.sync(this.granularity, {method: this.ctl.method, gradient: this.ctl.gradientMethod,
                                                 counts: this.ctl.counts, segment: this.ctl.segmentAsk()});
      this.dataset['compareModels'] = this.compareModels.state;
      const action = this.ctl.finishedAction();
      if (action !== null) {
        const {name, t} = action;
        // Time to the first frame painted with the result.
        requestAnimationFrame(() => setTimeout(() => {
          const ms = performance.now() - t;
          this.dataset['lastAction'] = name;
          this.dataset['lastActionMs'] = ms.toFixed(1);
          this.dispatchEvent(new CustomEvent('salience-rendered', {detail: {name, ms}, bubbles: true, composed: true}));
        }, 0));
      }
    }

    /** Tells the other modules of this model what is selected (shared/target_store.ts). */
    private publishTarget() {
      const model = this.modelName();
      if (this.publishedModel !== null && this.publishedModel !== model) targetStore.publish(this.publishedModel, null);
      this.publishedModel = model;
      const {payload: p, input: d, salienceModel} = this.ctl;
      if (p === null || d === null || salienceModel === null) {
        targetStore.publish(model, null);
        return;
      }
      targetStore.publish(model, {
        datapointId: d.id, input: d.data, salienceModel, text: p.text,
        promptEnd: p.prompt_end, tokens: p.tokens, offsets: p.offsets, nPromptTokens: p.n_prompt_tokens,
        t0: this.ctl.span.t0, t1: this.ctl.span.t1, method: this.ctl.method, granularity: this.granularity,
      });
    }

    private async onSelection(d: IndexedInputLike | null) {
      this.shownModel = this.modelName();
      this.segCache.clear();
      this.piecesCache.clear();
      this.cursor = null;
      this.showHead = false;
      this.headDecided = false;
      await this.ctl.select(d);
    }

    // ------------------------------------------------------------- derived

    private codePoints(p: SaliencePayload): Int32Array {
      if (this.u16?.text !== p.text) this.u16 = {text: p.text, map: codePointToUtf16(p.text)};
      return this.u16.map;
    }

    /** Segment salience for the current method and span (memoised: the same array while nothing changed). */
    /** The notes of segments coarse-to-fine did not measure (by segment index), the same map while its values stay. */
    private unmeasured(): ReadonlyMap<number, string> {
      const s = this.ctl.segmentValues();
      if (this.notesMemo.payload !== s) this.notesMemo = {payload: s, notes: unmeasuredNotes(s)};
      return this.notesMemo.notes;
    }

    private segmentValues(seg: Segmentation): Float64Array | null {
      const key = this.ctl.valuesKey();
      const memo = this.valuesMemo;
      if (memo !== null && memo.key === key && memo.seg === seg && memo.payload === this.ctl.payload) return memo.values;
      const tokVals = this.ctl.tokenValues();
      // Regex: the matches are what is scored; the text between them is context (uncoloured, unranked).
      const values = tokVals === null ? null : matchesOnly(aggregate(tokVals, seg, 'sum'), seg);
      this.valuesMemo = {key, seg, payload: this.ctl.payload, values};
      return values;
    }

    private segmentation(): Segmentation {
      const p = this.ctl.payload!;
      const key = this.granularity === 'regex' ? `regex:${this.regex}` : this.granularity;
      let seg = this.segCache.get(key);
      if (seg === undefined) {
        const matches = this.granularity === 'regex' ? this.patterns.matches(p.text, this.regex) : undefined;
        seg = segment(p.text, p.offsets, this.granularity, {pattern: this.regex, matches, roleSpans: p.role_spans});
        this.segCache.set(key, seg);
      }
      return seg;
    }

    /** A pattern run finished: segmentations with a pattern are made again (the compare view's too). */
    private patternDone() {
      for (const cache of [this.segCache, this.piecesCache]) {
        for (const key of Array.from(cache.keys())) if (key.startsWith('regex:')) cache.delete(key);
      }
      if (this.granularity === 'regex') {
        this.snapToSegments();
        this.ctl.setSegmentation(this.granularity, this.regex, this.removableSegments());
      }
      this.requestUpdate();
    }

    /**
     * The segmentation shown: the chosen one, or single tokens (with a note saying why) while a pattern
     * runs, when it is invalid, ran out of time or matches nothing.
     */
    private shownSegmentation(p: SaliencePayload): {seg: Segmentation; note: string; error: string} {
      try {
        // The server's bounds (its /get_info) too: a pattern it would refuse says why here, before anything is sent.
        if (this.granularity === 'regex') checkPattern(this.regex, this.appState.metadata?.requestLimits?.pattern ?? null);
        const seg = this.segmentation();
        if (this.granularity === 'regex' && !seg.kinds.includes('match')) {
          return {seg: this.tokenSegmentation(p), error: '',
                  note: `No match: the pattern ${asTyped(this.regex)} matches nothing in this text. ` +
                        'Showing single tokens; change the pattern to group them.'};
        }
        return {seg, note: '', error: ''};
      } catch (e) {
        const pending = e instanceof PatternPending;
        return {seg: this.tokenSegmentation(p), note: pending ? 'Matching the pattern…' : '',
                error: pending ? '' : e instanceof Error ? e.message : String(e)};
      }
    }

    private tokenSegmentation(p: SaliencePayload): Segmentation {
      let seg = this.segCache.get('token');
      if (seg === undefined) {
        seg = segment(p.text, p.offsets, 'token');
        this.segCache.set('token', seg);
      }
      return seg;
    }

    private pieces(seg: Segmentation): Piece[] {
      const key = seg.granularity === 'regex' ? `regex:${this.regex}` : seg.granularity;
      let pieces = this.piecesCache.get(key);
      if (pieces === undefined) {
        pieces = buildPieces(this.ctl.payload!.text, seg, this.ctl.payload!.prompt_end);
        this.piecesCache.set(key, pieces);
      }
      return pieces;
    }

    // ------------------------------------------------------------- actions

    private setGranularity(g: Granularity) {
      this.ctl.markAction('granularity');
      this.granularity = g;
      this.cursor = null;
      this.snapToSegments();
      this.ctl.setSegmentation(g, this.regex, this.removableSegments());
    }

    /** Removable prompt segments at the granularity shown (not template markup, not between regex matches). */
    private removableSegments(): number {
      const p = this.ctl.payload;
      if (p === null) return 0;
      let seg: Segmentation;
      try {
        seg = this.segmentation();
      } catch {
        return 0;
      }
      let n = 0;
      for (let s = 0; s < seg.starts.length; s++) {
        if (seg.starts[s] < p.prompt_end && seg.excluded[s] !== 1 && seg.kinds[s] !== 'gap') n++;
      }
      return n;
    }

    /** Applies a regex typed into the box after a short pause in typing (Enter or leaving the box: at once). */
    private typeRegex(pattern: string, now: boolean) {
      clearTimeout(this.regexTimer);
      if (now) {
        if (pattern !== this.regex) this.setRegex(pattern);
        return;
      }
      this.regexTimer = setTimeout(() => { if (pattern !== this.regex) this.setRegex(pattern); }, REGEX_DEBOUNCE_MS);
    }

    private setRegex(pattern: string) {
      this.ctl.markAction('granularity');
      this.regex = pattern;
      this.snapToSegments();
      this.ctl.setSegmentation(this.granularity, pattern, this.removableSegments());
    }

    /** Widens the target to the segments it touches at the current granularity. */
    private snapToSegments() {
      const p = this.ctl.payload;
      if (p === null || isWhole(this.ctl.span, numTargets(p))) return;
      let seg: Segmentation;
      try {
        seg = this.segmentation();
      } catch {
        return;  // bad regex: shown by renderBody
      }
      this.ctl.setSpan(snapSpan(targetSegments(seg, p.n_prompt_tokens), this.ctl.span), null);
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
      const p = this.ctl.payload;
      if (this.dragAnchor === null || this.dragTo === null || p === null) return;
      const list = targetSegments(this.shownSegmentation(p).seg, p.n_prompt_tokens);
      const a = list[this.dragAnchor];
      const b = list[this.dragTo];
      this.dragAnchor = null;
      this.dragTo = null;
      if (a !== undefined && b !== undefined) this.ctl.setSpan(dragSpan(a, b));
    }

    private onTargetKey(e: KeyboardEvent, list: TargetSegment[]) {
      const p = this.ctl.payload;
      if (p === null) return;
      const first = firstIndexIn(list, this.ctl.span);
      const extendFrom = e.shiftKey && first >= 0 ? first : null;
      const r = spanForKey(list, this.cursor, e.key, numTargets(p), extendFrom);
      if (r === null) return;
      e.preventDefault();
      this.cursor = r.cursor;
      this.ctl.setSpan(r.span);
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
      const p = this.ctl.payload;
      if (el === null || this.shown === null || p === null) {
        tip.hidden = true;
        return;
      }
      const s = Number(el.dataset['s']);
      const v = this.shown.values[s];
      const text = segmentText(p.text, this.shown.seg, s, this.codePoints(p));
      const rank = this.shown.rank.get(s);
      const label = this.shown.seg.excluded[s] ? 'template markup (not scored)'
          : this.shown.seg.kinds[s] === 'gap' ? 'between matches (context, not scored)'
          : Number.isFinite(v) ? `salience ${v.toPrecision(6)}${rank !== undefined ? ` · rank ${rank + 1}` : ''}`
          : 'no value';
      tip.textContent = `${JSON.stringify(text.length > 60 ? text.slice(0, 57) + '…' : text)} — ${label}`;
      tip.hidden = false;
      this.tipValues = this.shown.values;
      const host = this.getBoundingClientRect();
      tip.style.left = `${Math.min(e.clientX - host.left + 12, host.width - 260)}px`;
      tip.style.top = `${e.clientY - host.top + 16}px`;
    }

    private hideTooltip() {
      const tip = this.renderRoot.querySelector<HTMLElement>('.tooltip');
      if (tip) tip.hidden = true;
      this.tipValues = null;
    }

    private scrollToSegment(s: number) {
      const el = this.renderRoot.querySelector<HTMLElement>(`.prompt [data-s="${s}"], .response [data-s="${s}"]`);
      if (el == null) return;
      const head = el.closest('details');
      if (head !== null && !head.open) this.showHead = head.open = true;
      el.scrollIntoView({block: 'center', behavior: 'smooth'});
      el.classList.add('flash');
      setTimeout(() => el.classList.remove('flash'), 1200);
    }

    // -------------------------------------------------------------- render

    renderImpl(): TemplateResult {
      const {payload, streaming, input} = this.ctl;
      return html`
        <div class="module">
          ${controlsView(this.ctl, this, {
            granularity: (g) => this.setGranularity(g),
            regex: (pattern, now) => this.typeRegex(pattern, now),
            intensity: (x) => { this.intensity = x; },
          }, html`${viewToggleView(this.heatmap, () => { this.heatmap = !this.heatmap; })}${modelLabelView(this.modelName())}`)}
          ${statusView(this.ctl)}
          ${this.renderSegmentStatus()}
          ${this.renderCompare()}
          ${compareModelsView(this.compareModels, () => this.compareModels.toggle())}
          ${payload !== null ? this.renderBody(payload)
            : streaming !== null && input !== null ? streamingView(input, streaming)
            : emptyView(this.ctl)}
          <div class="tooltip" role="tooltip" hidden></div>
        </div>`;
    }

    private renderSegmentStatus() {
      if (this.ctl.payload !== null && this.ctl.registry()?.segments.length) this.ctl.segmentCount = this.removableSegments();
      return segmentStatusView(this.ctl, {
        showGradient: () => this.ctl.showGradient(),
        measure: () => this.ctl.measureSegments(),
        measureWith: (method: string) => this.ctl.measureWith(method),
      });
    }

    private renderCompare() {
      const m = this.compare.model(this.ctl, this.granularity, this.regex, this.intensity, this.patterns);
      return m === null ? nothing : compareView(m, {
        setMode: (mode) => this.compare.setMode(mode),
        explainOldAnswer: () => this.compare.explainOldAnswer(),
        setUseOld: (on) => this.compare.setUseOld(on),
      });
    }

    private renderBody(p: SaliencePayload) {
      const T = numTargets(p);
      const span = this.ctl.span;
      const {seg, note: segNote, error: segError} = this.shownSegmentation(p);
      const m = this.ctl.methodPayload();
      const values = this.segmentValues(seg);
      const signed = m?.signed ?? this.ctl.registry()?.get(this.ctl.method)?.signed ?? true;
      const list = targetSegments(seg, p.n_prompt_tokens);
      const tiOf = new Map<number, number>(list.map((ts, i) => [ts.seg, i]));
      // Segments that are (part of) the target do not set the colour scale.
      const targetSegs = new Set(list.filter((ts) => overlaps(ts, span)).map((ts) => ts.seg));
      const preview = this.dragAnchor !== null && this.dragTo !== null && list[this.dragAnchor] && list[this.dragTo]
          ? dragSpan(list[this.dragAnchor], list[this.dragTo]) : null;
      let scaleVals: number[] = [];
      if (values !== null) {
        scaleVals = Array.from(values).filter((v, s) => Number.isFinite(v) && !targetSegs.has(s));
      }
      const cs: ColorScale = {signed, scale: maxAbs(scaleVals), intensity: this.intensity};
      const ranked = values === null ? [] : topSegments(values, TOP_K, signed, targetSegs);
      this.shown = values === null ? null : {values, seg, rank: new Map(ranked.map((r, i) => [r.seg, i]))};

      const pieces = this.pieces(seg);
      // The prompt (thousands of spans) is rebuilt only when its colours change,
      // not on drag previews, cursor moves or tooltip-free re-renders.
      const memo = this.promptMemo;
      const notes = this.unmeasured();
      let promptPieces: TemplateResult[];
      let headPieces: TemplateResult[];
      if (memo !== null && memo.pieces === pieces && memo.values === values && memo.scale === cs.scale &&
          memo.intensity === cs.intensity && memo.signed === cs.signed && memo.notes === notes) {
        headPieces = memo.head;
        promptPieces = memo.templates;
      } else {
        // Pieces before the user's turn (template markup, system prompt) go to the collapsible head.
        const headEnd = this.codePoints(p)[userTurnStart(p)] ?? 0;
        headPieces = [];
        promptPieces = [];
        let pos = 0;
        for (const pc of pieces) {
          if (pc.response) break;
          (pos < headEnd ? headPieces : promptPieces).push(promptPieceView(pc, seg, values, cs, notes));
          pos += pc.text.length;
        }
        this.promptMemo = {pieces, values, scale: cs.scale, intensity: cs.intensity, signed: cs.signed, notes,
                           head: headPieces, templates: promptPieces};
      }
      const responsePieces = responsePiecesView(pieces, {seg, values, cs, list, tiOf, span, numTargets: T, preview,
                                                         cursor: this.cursor});
      const headRanked = ranked.filter((r) => seg.starts[r.seg] < userTurnStart(p)).length;
      const side = this.ctl.side;
      if (this.heatmap) {
        // The side panel keeps the text view's scale: its top list is the target's, as in the text view.
        return html`<div class="body">${this.renderHeatmap(p, seg, segError)}
          ${sidePanelView(this.ctl, p, seg, cs, ranked, this.codePoints(p), (s) => this.scrollToSegment(s))}</div>`;
      }
      return html`
        <div class="body">
          <div class="texts" @mouseover=${(e: MouseEvent) => this.showTooltip(e)} @mouseleave=${() => this.hideTooltip()}>
            ${segError ? html`<div class="status error inline">${segError}</div>` : nothing}
            ${segNote ? html`<div class="status inline pattern-note" role="status">${segNote}</div>` : nothing}
            ${side ? html`<div class="status ${side.kind} inline" role=${side.kind === 'error' ? 'alert' : 'status'}>
                ${side.kind === 'loading' ? html`<div class="bar"><div></div></div>` : nothing}
                <span>${side.text}</span></div>` : nothing}
            <div class="section-label">Prompt</div>
            <div class="text prompt ${values === null ? 'pending' : ''}">${headPieces.length === 0 ? nothing
              : headView(headPieces, this.headOpen(headRanked, values !== null && isWhole(span, T)), headRanked,
                         (open) => {
                           if (open !== this.showHead) this.headDecided = true;  // the user's (not our own ?open)
                           this.showHead = open;
                         })}${promptPieces}</div>
            <div class="section-label">Response ${forcedTargetNote(isForcedTarget(this.ctl.input?.data))}
              <span class="hint">— target: <b class="target-desc">${describeSpan(span, T)}</b>
                ${isWhole(span, T) ? html`(click or drag over the response to choose)` :
                  html`<button class="reset" @click=${() => { this.cursor = null; this.ctl.setSpan(wholeResponse(T)); }}>Whole response</button>`}
              </span>
            </div>
            <div class="text response" @mousedown=${(e: MouseEvent) => this.onTargetDown(e)}
                @mouseover=${(e: MouseEvent) => this.onTargetOver(e)}
                @keydown=${(e: KeyboardEvent) => this.onTargetKey(e, list)}>${responsePieces}</div>
          </div>
          ${sidePanelView(this.ctl, p, seg, cs, ranked, this.codePoints(p), (s) => this.scrollToSegment(s))}
        </div>`;
    }

    /**
     * Whether the head is open: once the first highlight (whole response) has values, it opens when
     * HEAD_OPEN_RANKED of its top list lie in it; after that (or after the user's toggle) it stays as it is.
     */
    private headOpen(nRanked: number, firstHighlight: boolean): boolean {
      if (!this.headDecided && firstHighlight) {
        this.headDecided = true;
        if (nRanked >= HEAD_OPEN_RANKED) this.showHead = true;
        return this.showHead || nRanked >= HEAD_OPEN_RANKED;
      }
      return this.showHead;
    }

    /** The heatmap view (heatmap/): its controls, the matrix or why there is none yet, and its colour scale. */
    private renderHeatmap(p: SaliencePayload, seg: Segmentation, segError: string): TemplateResult {
      const m = this.ctl.methodPayload();
      const reg = this.ctl.registry();
      const extra = this.ctl.extra();
      let map: Heatmap | null = null;
      if (m?.matrix != null) {
        const memo = this.heatmapMemo;
        if (memo !== null && memo.m === m && memo.seg === seg && memo.mode === this.heatmapRows) {
          map = memo.map;
        } else {
          const linear = reg?.get(this.ctl.method)?.linear ?? false;  // unknown: not a sum of rows
          map = buildHeatmap(m, p, seg, this.heatmapRows, this.codePoints(p), linear);
          this.heatmapMemo = {m, seg, mode: this.heatmapRows, map};
        }
      }
      let reason = heatmapWaitReason({
        segmentMethod: reg?.isSegment(this.ctl.method) ?? false,
        extraWithoutMatrix: extra !== null && m?.matrix == null ? reg?.label(extra.method) ?? extra.method : null,
        matrix: m?.matrix != null,
        detail: describeDetail(this.ctl.detail),
      });
      if (reason === '' && map === null) {
        reason = 'The gradient norm of a segment of several tokens is not a sum of token rows, and this server ' +
            'sent no Gram matrix to combine them: choose rows “Response tokens”.';
      }
      const selected = map === null ? new Set<number>() : new Set(selectedRows(map, this.ctl.span));
      const focus = map === null ? 0 : Math.min(this.heatmapFocus, Math.max(0, map.rows.length - 1));
      const look = {mode: this.heatmapRows, scale: this.heatmapScale, intensity: this.intensity, selected, focus};
      const on = {
        rows: (mode: HeatmapRows) => { this.heatmapRows = mode; this.heatmapFocus = 0; },
        scale: (scale: HeatmapScale) => { this.heatmapScale = scale; },
        pick: (row: number) => {
          const r = map?.rows[row];
          if (r === undefined) return;
          this.heatmapFocus = row;
          this.ctl.setSpan({t0: r.t0, t1: r.t1});
        },
        whole: () => { this.ctl.setSpan(wholeResponse(numTargets(p))); },
        key: (e: KeyboardEvent, from: number) => moveRow(from, e.key, map?.rows.length ?? 0),
      };
      const T = numTargets(p);
      return html`<div class="texts heatmap-pane">
        ${segError ? html`<div class="status error inline">${segError}</div>` : nothing}
        <div class="section-label">Answer × prompt ${forcedTargetNote(isForcedTarget(this.ctl.input?.data))}
          <span class="hint">— target: <b class="target-desc">${describeSpan(this.ctl.span, T)}</b>
            ${isWhole(this.ctl.span, T) ? nothing : html`<button class="reset" @click=${on.whole}>Whole response</button>`}</span>
        </div>
        ${heatmapControlsView(look, on, map === null ? null : matrixScale(map, this.intensity))}
        ${map === null ? heatmapWaitView(reason) : heatmapTableView(map, look, on)}
      </div>`;
    }
  }

  return PromptSalienceModule as unknown as CustomElementConstructor;
}

function targetIndexOf(e: Event): number | null {
  const el = (e.target as HTMLElement).closest?.('[data-ti]') as HTMLElement | null;
  return el === null ? null : Number(el.dataset['ti']);
}

/** Code point where the user's (last) turn starts: 0 without a chat template or role spans. */
export function userTurnStart(p: Pick<SaliencePayload, 'role_spans'>): number {
  let start = 0;
  for (const [a, , role] of p.role_spans) if (role === 'user') start = a;
  return start;
}
