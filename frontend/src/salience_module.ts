/**
 * The Sequence Salience LIT module: a custom element on top of LIT's own LitModule (found at run time; see
 * index.ts and shared/lit_module.ts). It keeps the view state (granularity, regex, intensity, keyboard cursor,
 * drag, the head's fold, the heatmap's settings), wires LIT's services and selections to its parts, and tells the
 * other modules what is selected (salience/published_target.ts). Its parts: requests and their caches are the
 * controller's (salience/controller.ts); the text cut as chosen, salience/shown_text.ts; the body, text and top
 * list, salience/text_pane.ts, or the heatmap, salience/heatmap/pane.ts; choosing the target with pointer and
 * keys, salience/target_input.ts; the controls and status lines, salience/view.ts. It mounts the two comparisons
 * (salience_comparisons.ts: salience/compare/, salience/compare_models/), which build on the salience folder; so
 * it stands beside index.ts, above those folders, not inside one.
 */
import {html, type PropertyValues, type TemplateResult} from 'lit';

import type {Granularity, Segmentation} from './shared/aggregate/index.js';
import {modelLabelView, moduleBase, serverHost} from './shared/lit_module.js';
import type {IndexedInputLike} from './shared/request.js';
import {SalienceComparisons} from './salience_comparisons.js';
import {COMPARE_STYLES} from './salience/compare/styles.js';
import {COMPARE_MODELS_STYLES} from './salience/compare_models/view.js';
import {SalienceController} from './salience/controller.js';
import {SALIENCE_HELP} from './salience/help.js';
import type {HeatmapRows, HeatmapScale} from './salience/heatmap/logic.js';
import {HeatmapPane, type HeatmapState} from './salience/heatmap/pane.js';
import {HEATMAP_STYLES, isHeatmapKey, shareButtonView, viewToggleView} from './salience/heatmap/view.js';
import {shareView} from './salience/share.js';
import {litConventionHost} from './salience/lit_convention.js';
import type {SalienceHost} from './salience/page.js';
import {watchPageExit} from './salience/page_exit.js';
import {reportWhenPainted} from './salience/painted.js';
import {PatternMatcher} from './salience/pattern_runner.js';
import {TargetPublisher} from './salience/published_target.js';
import {numTargets, type SaliencePayload} from './salience/payload.js';
import {ShownText} from './salience/shown_text.js';
import {SALIENCE_STYLES} from './salience/styles.js';
import {TargetInput} from './salience/target_input.js';
import {wholeResponse, type TargetSegment} from './salience/target.js';
import {TextPane} from './salience/text_pane.js';
import {explainsGeneration} from './salience/request.js';
import {fixedTargetView, streamingView} from './salience/text_view.js';
import {controlsView, emptyView, segmentStatusView, statusView} from './salience/view.js';

/** Custom-element tag. LIT 1.3.1 already defines "sequence-salience-module" (its own module). */
export const TAG = 'prompt-salience-module';

/** Pause in typing after which a regex typed into the box applies. */
export const REGEX_DEBOUNCE_MS = 400;

/** Defines the module class on top of LIT's LitModule and returns it. */
export function makeModuleClass(LitModule: unknown): CustomElementConstructor {
  class PromptSalienceModule extends moduleBase(LitModule, {
    tag: TAG, title: 'Sequence Salience', numCols: 12, styles: [SALIENCE_STYLES, HEATMAP_STYLES, COMPARE_STYLES, COMPARE_MODELS_STYLES],
    infoMarkdown: SALIENCE_HELP,
    state: ['granularity', 'regex', 'intensity', 'cursor', 'dragAnchor', 'dragTo', 'showHead', 'showRejected', 'heatmap',
            'heatmapRows', 'heatmapScale', 'heatmapFocus', 'sharing'],
  }) {
    declare granularity: Granularity;
    declare regex: string;
    declare intensity: number;
    declare cursor: number | null;
    declare dragAnchor: number | null;
    declare dragTo: number | null;
    /** Whether the text before the user's turn (chat template, system prompt) is expanded. */
    declare showHead: boolean;
    /** Whether values that fail their completeness check (IG's) are coloured anyway. */
    declare showRejected: boolean;
    /** Whether the answer × prompt heatmap is shown instead of the text (heatmap/). */
    declare heatmap: boolean;
    declare heatmapRows: HeatmapRows;
    declare heatmapScale: HeatmapScale;
    /** The heatmap row that takes the keyboard focus. */
    declare heatmapFocus: number;
    declare sharing: boolean;  // a "Share this view" page being written

    /** What the controller and the two comparison rooms need from LIT: this element's services. */
    private readonly host: SalienceHost = {
      ...serverHost(this),
      modelName: () => this.modelName(),
      loadLatest: (key, promise) => this.loadLatest(key, promise),
    };
    // LIT's own prompt-debugging models are answered through lit_convention.ts.
    readonly ctl = new SalienceController(litConventionHost(this.host));
    /** "Compare an edit" (LIT's pin) and "Compare models" (a second selected model), above the map. */
    private readonly comparisons = new SalienceComparisons(this.host);
    private regexTimer: ReturnType<typeof setTimeout> | undefined;
    /** Stops watching for the page going away (page_exit.ts; set while connected). */
    private stopExitWatch: (() => void) | undefined;
    /** Custom patterns run in a worker with the server's time budget (never on the page's main thread). */
    private readonly patterns = new PatternMatcher(() => this.patternDone());
    readonly text = new ShownText(this.ctl, this.patterns, () => ({granularity: this.granularity, regex: this.regex}),
                                  () => this.appState.metadata?.requestLimits?.pattern ?? null);
    private readonly pane = new TextPane(this);
    private readonly heatmapPaneRoom = new HeatmapPane();
    private readonly target = new TargetInput(this);
    private readonly onWindowMouseUp = () => this.target.finishDrag();
    /** Alt+H anywhere on the page toggles the heatmap of this module while it is on screen. */
    private readonly onWindowKey = (e: KeyboardEvent) => {
      if (this.getClientRects().length === 0) return;
      this.target.pageKey(e, document);
      if (!isHeatmapKey(e)) return;
      e.preventDefault();
      this.heatmap = !this.heatmap;
    };
    /** The model the current selection was explained with (a model switch re-explains). */
    private shownModel = '';
    /** What this instance tells the other modules of its model (shared/target_store.ts). */
    private readonly published = new TargetPublisher();

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
      this.showRejected = false;
      this.heatmap = false;
      this.heatmapRows = 'token';
      this.heatmapScale = 'row';  // each row as the text view colours that target (its own largest value)
      this.heatmapFocus = 0;
      this.sharing = false;
    }

    override connectedCallback() {
      super.connectedCallback();
      window.addEventListener('mouseup', this.onWindowMouseUp);
      window.addEventListener('keydown', this.onWindowKey);
      this.stopExitWatch = watchPageExit(() => this.ctl.exitRequest());
    }

    override disconnectedCallback() {
      clearTimeout(this.regexTimer);
      this.patterns.dispose();
      window.removeEventListener('mouseup', this.onWindowMouseUp);
      window.removeEventListener('keydown', this.onWindowKey);
      this.stopExitWatch?.();
      this.ctl.dispose();
      this.comparisons.dispose();
      this.published.clear();
      super.disconnectedCallback();
    }

    override firstUpdated(changed: PropertyValues) {
      (super.firstUpdated as ((c: PropertyValues) => void) | undefined)?.call(this, changed);
      this.reactImmediately(() => this.selectionService.primarySelectedInputData,
                            (d) => void this.onSelection(d));
      this.comparisons.follow(this);
      // LIT's model selector: another model for this instance (e.g. --models a,b and a switched off) explains again.
      this.reactImmediately(() => this.modelName(), (m) => {
        if (m !== this.shownModel) void this.onSelection(this.selectionService.primarySelectedInputData);
      });
    }

    override updated(changed: PropertyValues) {
      (super.updated as ((c: PropertyValues) => void) | undefined)?.call(this, changed);
      this.dataset['state'] = this.ctl.status;
      this.pane.updated();
      this.published.publish(this.modelName(), this.ctl, this.granularity);
      this.comparisons.sync(this.ctl, this, this.renderRoot, this.dataset);
      const action = this.ctl.finishedAction();
      if (action !== null) reportWhenPainted(this, action);  // the time to the first frame painted with its result
    }

    private async onSelection(d: IndexedInputLike | null) {
      this.shownModel = this.modelName();
      this.text.clear();
      this.cursor = null;
      this.showHead = false;
      this.showRejected = false;
      this.pane.clear();
      await this.ctl.select(d);
    }

    /** A pattern run finished: segmentations with a pattern are made again (the compare view's too). */
    private patternDone() {
      this.text.dropPatterns();
      if (this.granularity === 'regex') {
        this.target.snapToSegments();
        this.ctl.setSegmentation(this.granularity, this.regex, this.text.removableSegments());
      }
      this.requestUpdate();
    }

    // ------------------------------------------------------------- actions

    private setGranularity(g: Granularity) {
      this.ctl.markAction('granularity');
      this.granularity = g;
      this.cursor = null;
      this.target.snapToSegments();
      this.ctl.setSegmentation(g, this.regex, this.text.removableSegments());
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
      this.target.snapToSegments();
      this.ctl.setSegmentation(this.granularity, pattern, this.text.removableSegments());
    }

    // The text pane's and the target input's calls (text_pane.ts TextPaneHost).
    targetDown(e: MouseEvent) { this.target.down(e); }
    targetOver(e: MouseEvent) { this.target.over(e); }
    targetKey(e: KeyboardEvent, list: TargetSegment[]) { this.target.key(e, list); }
    wholeTarget() {
      this.cursor = null;
      this.ctl.setSpan(wholeResponse(numTargets(this.ctl.payload!)));
    }
    comparedScale(): number | null {  // drawn before the map (renderImpl): this render's comparisons
      return this.comparisons.scaleFor(this.ctl, this.granularity);
    }
    scaleNote(shared: boolean): string {
      return this.comparisons.scaleNote(shared, this.ctl, this.granularity);
    }
    heatmapPane(p: SaliencePayload, seg: Segmentation, segError: string): TemplateResult {
      const state: HeatmapState = {rows: this.heatmapRows, scale: this.heatmapScale, focus: this.heatmapFocus,
                                   intensity: this.intensity, width: this.comparisons.mapWidth(this),
                                   showRejected: this.showRejected};
      const segValues = this.ctl.registry()?.isSegment(this.ctl.method) ? this.text.segmentValues(seg) : null;
      return this.heatmapPaneRoom.render(this.ctl, p, seg, segError, this.text.codePoints(p), segValues, state, (c) => {
        if (c.rows !== undefined) this.heatmapRows = c.rows;
        if (c.scale !== undefined) this.heatmapScale = c.scale;
        if (c.focus !== undefined) this.heatmapFocus = c.focus;
        if (c.showRejected !== undefined) this.showRejected = c.showRejected;
        this.requestUpdate();  // the pane's own choices (prefix columns, numbers)
      });
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
          }, html`${viewToggleView(this.heatmap, () => { this.heatmap = !this.heatmap; })}${shareButtonView(this.sharing,
            payload === null, () => void shareView(this.ctl, this.granularity, this.regex, (on) => { this.sharing = on; }))}${modelLabelView(this.modelName())}`)}
          ${statusView(this.ctl)}
          ${this.renderSegmentStatus()}
          ${this.comparisons.render(this.ctl, this, this.patterns, () => payload !== null ? this.pane.render(payload)
            : streaming !== null && input !== null ? streamingView(input, streaming)
            : input !== null && this.ctl.status === 'loading' && !explainsGeneration(input) ? fixedTargetView(input)
            : emptyView(this.ctl))}
          <div class="tooltip" role="tooltip" hidden></div>
        </div>`;
    }

    private renderSegmentStatus() {
      if (this.ctl.payload !== null && this.ctl.registry()?.segments.length) this.ctl.segmentCount = this.text.removableSegments();
      return segmentStatusView(this.ctl, {
        showGradient: () => this.ctl.showGradient(),
        measure: () => this.ctl.measureSegments(),
        measureWith: (method: string) => this.ctl.measureWith(method),
      });
    }
  }

  return PromptSalienceModule as unknown as CustomElementConstructor;
}
