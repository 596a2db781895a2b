/**
 * The "Test this explanation" LIT module. It follows the Sequence Salience module's
 * datapoint, target span and granularity (shared/target_store.ts) and asks the
 * `_<model>_explain` model (lit_app/explain.py) for:
 *
 * - Faithfulness: deletion / insertion curves per method with the seeded random
 *   reference (SVG chart) and AOPC per method;
 * - Reduce prompt: the smallest prompt that keeps the response, removed segments
 *   struck through (deleted, or replaced by filler tokens that keep positions),
 *   loadable into LIT's datapoint editor;
 * - Flip tokens: single-word substitutions ranked by their effect, each loadable;
 * - Contrastive: the salience of "target rather than foil", coloured like the
 *   salience module (same aggregation and colour map);
 * - IG steps: how many integrated-gradients steps the span needs for its completeness
 *   error to fall under a tolerance (or the cap), with every count tried.
 *
 * One test runs at a time; it shows the server's progress (polled) and stops when
 * the user selects another datapoint or presses Cancel. Logic lives in ./logic.ts.
 */
import {css, html, nothing, svg, unsafeCSS, type TemplateResult} from 'lit';

import {colorFor, formatValue, legendGradient, legendStops, maxAbs} from '../colormap.js';
import {buildPieces} from '../pieces.js';
import {errorMessage, shouldDisplay, type ModelInfoLike} from '../request.js';
import {targetStore, type SharedTarget} from '../shared/target_store.js';
import {litModuleBase} from '../shared/lit_services.js';
import {
  aopcRows, bandPath, chartValues, contrastiveSegments, CURVE_METHODS, describeStatus, EXPLAIN_FIELD,
  explainInput, explainModelFor, fractions, IG_AUTO_MAX_STEPS, igAutoSettings, igAutoSummary, linearScale, linePath,
  mergePieces, MODES, paddedExtent, parseContrastive, parseCurves, parseIgAuto, percent, progressFraction,
  LENGTH_COLOR, RANDOM_COLOR, reduceFields, resultKey, strongestSegments, type Action, type ContrastivePayload, type CurvesPayload, type IgAutoPayload,
  type JobStatus, type Mode,
} from './logic.js';

export const EXPLAIN_TAG = 'explain-test-module';

const POLL_MS = 1000;
const TABS: ReadonlyArray<{id: Action; label: string}> = [
  {id: 'curves', label: 'Faithfulness'}, {id: 'reduce', label: 'Reduce prompt'},
  {id: 'flips', label: 'Flip tokens'}, {id: 'contrastive', label: 'Contrastive'},
  {id: 'ig_auto', label: 'IG steps'},
];
const EDITOR_TAGS = ['single-datapoint-editor-module', 'simple-datapoint-editor-module'];


interface ReducePayload {
  fields: Record<string, {reduced: string; pieces: Array<[string, boolean]>}>;
  criterion: string;
  removal: string;
  filler: string;
  n_segments: number;
  n_removed: number;
  stopped_by: string;
  n_checks: number;
  original_logprob: number;
  reduced_logprob: number;
  granularity: string;
  seconds: number;
  cancelled?: boolean;
}

interface FlipEntry {
  field: string;
  value: string;
  old: string;
  new: string;
  before: string;
  after: string;
  delta: number;
  estimated_delta: number;
  keeps_greedy: boolean;
  retokenized?: boolean;  // the loaded text re-tokenizes to other ids than the one-token edit
  word_end?: number;
}

interface FlipsPayload {
  flips: FlipEntry[];
  original_logprob: number;
  original_keeps_greedy: boolean;
  seconds: number;
  cancelled?: boolean;
}

/** Deep querySelectorAll through open shadow roots (LIT nests modules in several). */
function deepQuery(root: Document | ShadowRoot | Element, selector: string, out: Element[] = []): Element[] {
  for (const el of Array.from(root.querySelectorAll('*'))) {
    if (el.matches(selector)) out.push(el);
    if (el.shadowRoot) deepQuery(el.shadowRoot, selector, out);
  }
  return out;
}

/**
 * Puts field values into LIT's datapoint editor as edits (as if typed), so the user can
 * check them and click "Add". Also brings the editor's tab to the front.
 * @returns an error message, or '' on success.
 */
export function loadIntoEditor(values: Record<string, string>): string {
  const editor = deepQuery(document, EDITOR_TAGS.join(','))[0] as
      (HTMLElement & {dataEdits?: Record<string, unknown>; baseData?: {data: Record<string, unknown>};
        requestUpdate?: () => void}) | undefined;
  if (editor === undefined || editor.dataEdits == null) {
    return 'No datapoint editor in this layout. Copy the text instead.';
  }
  for (const [k, v] of Object.entries(values)) {
    if (editor.baseData?.data?.[k] === v) delete editor.dataEdits[k];
    else editor.dataEdits[k] = v;
  }
  editor.requestUpdate?.();
  for (const tab of deepQuery(document, '.tab')) {
    if (tab.textContent?.trim() === 'Editor') (tab as HTMLElement).click();
  }
  return '';
}

/** Defines the module class on top of LIT's LitModule and returns it. */
export function makeExplainModuleClass(LitModule: unknown): CustomElementConstructor {
  const {Base, baseStyles} = litModuleBase(LitModule);

  class ExplainTestModule extends Base {
    static title = 'Test this explanation';
    static numCols = 12;
    static duplicateForModelComparison = false;
    static duplicateForExampleComparison = false;
    static infoMarkdown =
        'Is the salience map faithful, and what does acting on it change? Deletion/insertion curves with a ' +
        'random reference and AOPC per method; input reduction; gradient-guided token flips; contrastive ' +
        'salience against a foil. Follows the Sequence Salience module\'s target span and granularity.';

    static template(model: string, selectionServiceIndex: number, shouldReact: number): TemplateResult {
      return html`<explain-test-module model=${model} .shouldReact=${shouldReact}
          selectionServiceIndex=${selectionServiceIndex}></explain-test-module>`;
    }

    static shouldDisplayModule(modelSpecs: Record<string, ModelInfoLike>): boolean {
      return shouldDisplay(modelSpecs);
    }

    static get properties() {
      return {
        target: {state: true}, tab: {state: true}, running: {state: true}, job: {state: true},
        error: {state: true}, notice: {state: true}, results: {state: true}, steps: {state: true},
        removal: {state: true}, methods: {state: true}, foil: {state: true}, contrastMethod: {state: true},
        elapsed: {state: true}, igTolerance: {state: true}, igCap: {state: true}, reduceRemoval: {state: true},
      };
    }

    static get styles() {
      const base = baseStyles == null ? [] : Array.isArray(baseStyles) ? baseStyles : [baseStyles];
      return [...base, STYLES];
    }

    declare target: SharedTarget | null;
    declare tab: Action;
    /** The action running now, or null. */
    declare running: Action | null;
    declare job: JobStatus | null;
    declare error: string;
    declare notice: string;
    /** key -> payload of finished tests (resultKey). */
    declare results: Map<string, unknown>;
    declare steps: number;
    /** Removal of the faithfulness curves ("filler" | "delete") and of input reduction. */
    declare removal: string;
    declare reduceRemoval: string;
    declare methods: string[];
    declare foil: string;
    declare contrastMethod: string;
    declare elapsed: number;
    /** "IG steps": tolerance in percent of F(x) − F(baseline), and the most steps to try. */
    declare igTolerance: number;
    declare igCap: number;

    private unsubscribe: (() => void) | null = null;
    private seq = 0;
    private pollTimer: ReturnType<typeof setTimeout> | undefined;
    private clock: ReturnType<typeof setInterval> | undefined;

    constructor() {
      super();
      this.target = null;
      this.tab = 'curves';
      this.running = null;
      this.job = null;
      this.error = '';
      this.notice = '';
      this.results = new Map();
      this.steps = 10;
      this.removal = 'filler';
      this.reduceRemoval = 'delete';
      this.methods = ['grad_norm', 'grad_x_input'];
      this.foil = '';
      this.contrastMethod = 'grad_x_input';
      this.elapsed = 0;
      this.igTolerance = 5;
      this.igCap = 64;
    }

    override connectedCallback() {
      super.connectedCallback();
      this.unsubscribe = targetStore.subscribe((t) => this.onTarget(t));
    }

    override disconnectedCallback() {
      this.unsubscribe?.();
      this.unsubscribe = null;
      this.stopTimers();
      super.disconnectedCallback();
    }

    override updated(changed: Map<string, unknown>) {
      (super.updated as ((c: Map<string, unknown>) => void) | undefined)?.call(this, changed);
      this.dataset['run'] = this.running ?? (this.error ? 'error' : 'idle');
    }

    private onTarget(t: SharedTarget | null) {
      const prev = this.target;
      this.target = t;
      const otherPrompt = prev !== null && (t === null || t.datapointId !== prev.datapointId || t.text !== prev.text);
      if (otherPrompt) {
        this.results = new Map();
        this.foil = '';
        if (this.running !== null) this.cancel('Stopped: another datapoint was selected.');
        this.error = '';
        this.notice = '';
      }
    }

    // ---------------------------------------------------------------- requests

    private settings(action: Action): string {
      if (action === 'curves') return `${this.steps}|${this.removal}|${this.methods.join(',')}`;
      if (action === 'reduce') return `${this.methods[0] ?? ''}|${this.reduceRemoval}`;
      if (action === 'contrastive') return `${this.foil}|${this.contrastMethod}`;
      if (action === 'ig_auto') return `${this.igTolerance}|${this.igCap}`;
      return '';
    }

    private extra(action: Action): Record<string, unknown> {
      const t = this.target!;
      const common = {granularity: t.granularity === 'regex' ? 'word' : t.granularity};
      if (action === 'curves') {
        return {...common, steps: this.steps, removal: this.removal, methods: this.methods.join(',')};
      }
      if (action === 'reduce') return {...common, ...reduceFields(this.methods[0], this.reduceRemoval)};
      if (action === 'contrastive') return {foil: this.foil, methods: this.contrastMethod};
      if (action === 'ig_auto') {
        const settings = igAutoSettings(this.igTolerance, this.igCap);
        return typeof settings === 'string' ? {} : settings;
      }
      return {};
    }

    private async run(action: Action) {
      const t = this.target;
      if (t === null) return;
      if (action === 'contrastive' && !this.foil.trim()) {
        this.error = 'Type a foil: the alternative response to contrast with.';
        return;
      }
      const igSettings = igAutoSettings(this.igTolerance, this.igCap);
      if (action === 'ig_auto' && typeof igSettings === 'string') {
        this.error = igSettings;
        return;
      }
      const seq = ++this.seq;
      const key = resultKey(t, action, this.settings(action));
      this.running = action;
      this.job = null;
      this.error = '';
      this.notice = '';
      this.startTimers(t);
      const model = explainModelFor(t.salienceModel);
      try {
        const res = await this.apiService.getPreds(
            [explainInput(t, action, this.extra(action))], model, this.appState.currentDataset, [],
            [EXPLAIN_FIELD], `Testing the explanation (${action})…`);
        if (seq !== this.seq) return;  // cancelled or superseded
        const payload = res[0]?.[EXPLAIN_FIELD] as Record<string, unknown> | undefined;
        if (payload == null) throw new Error(`The server returned no "${EXPLAIN_FIELD}" field.`);
        if (payload['cancelled']) {
          this.notice = 'Cancelled.';
        } else {
          if (action === 'curves') parseCurves(payload);
          if (action === 'contrastive') parseContrastive(payload);
          if (action === 'ig_auto') parseIgAuto(payload);
          this.results = new Map(this.results).set(key, payload);
        }
      } catch (e) {
        if (seq === this.seq) this.error = errorMessage(e);
      } finally {
        if (seq === this.seq) {
          this.running = null;
          this.stopTimers();
        }
      }
    }

    private cancel(notice = 'Cancelled.') {
      const t = this.target;
      this.seq++;  // whatever comes back now is stale
      this.running = null;
      this.job = null;
      this.notice = notice;
      this.stopTimers();
      const model = t === null ? null : explainModelFor(t.salienceModel);
      if (t !== null && model !== null) {
        this.apiService.getPreds([explainInput(t, 'cancel')], model, this.appState.currentDataset, [], [EXPLAIN_FIELD])
            .catch(() => {});
      }
    }

    private startTimers(t: SharedTarget) {
      this.stopTimers();
      const start = performance.now();
      this.elapsed = 0;
      this.clock = setInterval(() => { this.elapsed = Math.round((performance.now() - start) / 1000); }, 1000);
      const seq = this.seq;
      const poll = async () => {
        if (seq !== this.seq || this.running === null) return;
        try {
          const res = await this.apiService.getPreds(
              [explainInput(t, 'status')], explainModelFor(t.salienceModel), this.appState.currentDataset, [],
              [EXPLAIN_FIELD]);
          const job = (res[0]?.[EXPLAIN_FIELD] as {job?: JobStatus | null} | undefined)?.job ?? null;
          // A cancelled test of another kind may still be stopping: show only this one's progress.
          if (seq === this.seq && this.running !== null) this.job = job?.action === this.running ? job : null;
        } catch {
          // progress is best effort
        }
        if (seq === this.seq && this.running !== null) this.pollTimer = setTimeout(poll, POLL_MS);
      };
      this.pollTimer = setTimeout(poll, POLL_MS);
    }

    private stopTimers() {
      clearTimeout(this.pollTimer);
      clearInterval(this.clock);
    }

    private load(values: Record<string, string>, what: string) {
      const err = loadIntoEditor(values);
      this.notice = err || `Loaded the ${what} into the datapoint editor: check it, then click “Add” to run it.`;
    }

    // ------------------------------------------------------------------ render

    renderImpl(): TemplateResult {
      const t = this.target;
      return html`<div class="module">
        <div class="tabs" role="tablist">
          ${TABS.map((x) => html`<button role="tab" class="tab-btn ${x.id}${this.tab === x.id ? ' on' : ''}"
              aria-selected=${this.tab === x.id ? 'true' : 'false'}
              @click=${() => { this.tab = x.id; this.error = ''; }}>${x.label}</button>`)}
          <span class="for">${t === null ? '' : html`target: tokens ${t.t0}–${t.t1} · ${t.granularity}`}</span>
        </div>
        ${t === null ? html`<div class="empty">Select a prompt and a target in the Sequence Salience module.</div>`
                     : this.renderTab(t)}
      </div>`;
    }

    private renderTab(t: SharedTarget) {
      const key = resultKey(t, this.tab, this.settings(this.tab));
      const result = this.results.get(key);
      const busy = this.running !== null;
      const runLabel = {curves: 'Run curves', reduce: 'Reduce prompt', flips: 'Find flips',
                        contrastive: 'Explain contrast', ig_auto: 'Find IG steps'}[this.tab];
      return html`
        <div class="controls">
          ${this.renderSettings()}
          <button class="run ${this.tab}" ?disabled=${busy} @click=${() => void this.run(this.tab)}>${runLabel}</button>
          ${busy ? html`<button class="cancel" @click=${() => this.cancel()}>Cancel</button>` : nothing}
        </div>
        ${this.renderStatus()}
        <div class="result">${result === undefined ? this.renderHint() : this.renderResult(this.tab, result, t)}</div>`;
    }

    private renderHint() {
      if (this.running !== null) return nothing;
      const hints: Record<Action, string> = {
        curves: 'Removes the most salient segments first (deletion) or reveals them first (insertion) and ' +
                'tracks log p(target); a faithful map beats the random orders.',
        reduce: 'Removes the least salient segments while the model still gives the same response.',
        flips: 'Single-word substitutions ranked by the gradient, then checked exactly.',
        contrastive: 'Why this response rather than another? Type the alternative (the foil).',
        ig_auto: 'Integrated gradients of the target span with 8, 16, 32, … steps until the attributions sum to ' +
                 'F(x) − F(baseline) within the tolerance (completeness), or the most steps are reached.',
      };
      return html`<div class="hint">${hints[this.tab]}</div>`;
    }

    private renderSettings() {
      if (this.tab === 'curves') {
        return html`
          <label>Steps <input class="steps" type="number" min="1" max="50" .value=${String(this.steps)}
              @change=${(e: Event) => { const v = Math.round(Number((e.target as HTMLInputElement).value));
                                        if (v >= 1 && v <= 50) this.steps = v; }}></label>
          <label title="filler keeps token positions (each removed token becomes a space token); delete removes the text">
            Removal <select class="removal" @change=${(e: Event) => { this.removal = (e.target as HTMLSelectElement).value; }}>
              <option value="filler" ?selected=${this.removal === 'filler'}>filler (keep positions)</option>
              <option value="delete" ?selected=${this.removal === 'delete'}>delete text</option>
            </select></label>
          ${CURVE_METHODS.filter((m) => m.id !== 'integrated_gradients').map((m) => html`
            <label class="method"><input type="checkbox" .checked=${this.methods.includes(m.id)} @change=${(e: Event) => {
              const on = (e.target as HTMLInputElement).checked;
              const next = on ? [...this.methods, m.id] : this.methods.filter((x) => x !== m.id);
              if (next.length) this.methods = CURVE_METHODS.map((x) => x.id).filter((x) => next.includes(x));
            }}><span class="swatch" style="background:${m.color}"></span>${m.label}</label>`)}`;
      }
      if (this.tab === 'reduce') {
        return html`<span class="setting">ordered by ${CURVE_METHODS.find((m) => m.id === this.methods[0])?.label}</span>
          <label title="delete removes the text (what pasting the reduced prompt gives); filler keeps token positions (each removed token becomes a space token)">
            Removal <select class="reduce-removal" @change=${(e: Event) => { this.reduceRemoval = (e.target as HTMLSelectElement).value; }}>
              <option value="delete" ?selected=${this.reduceRemoval === 'delete'}>delete text</option>
              <option value="filler" ?selected=${this.reduceRemoval === 'filler'}>filler (keep positions)</option>
            </select></label>`;
      }
      if (this.tab === 'ig_auto') {
        const num = (e: Event) => Number((e.target as HTMLInputElement).value);
        return html`
          <label title="Largest completeness error, relative to F(x) − F(baseline) of the span">Tolerance (%)
            <input class="ig-tolerance" type="number" min="0.01" max="100" step="any" .value=${String(this.igTolerance)}
                @change=${(e: Event) => { this.igTolerance = num(e); }}></label>
          <label title="The most IG steps to try (the server may allow fewer)">Most steps
            <input class="ig-cap" type="number" min="1" max=${IG_AUTO_MAX_STEPS} .value=${String(this.igCap)}
                @change=${(e: Event) => { this.igCap = num(e); }}></label>`;
      }
      if (this.tab === 'contrastive') {
        return html`
          <label class="foil-label">Foil <input class="foil" type="text" placeholder="e.g. the answer you expected"
              .value=${this.foil} @input=${(e: Event) => { this.foil = (e.target as HTMLInputElement).value; }}
              @keydown=${(e: KeyboardEvent) => { if (e.key === 'Enter') void this.run('contrastive'); }}></label>
          <label>Method <select class="contrast-method"
              @change=${(e: Event) => { this.contrastMethod = (e.target as HTMLSelectElement).value; }}>
            ${CURVE_METHODS.filter((m) => m.id !== 'integrated_gradients').map((m) =>
                html`<option value=${m.id} ?selected=${m.id === this.contrastMethod}>${m.label}</option>`)}
          </select></label>`;
      }
      return nothing;
    }

    private renderStatus() {
      if (this.running !== null) {
        const frac = progressFraction(this.job);
        return html`<div class="status loading" role="status">
          <div class="bar ${frac === null ? 'indeterminate' : ''}" role="progressbar" aria-valuemin="0" aria-valuemax="100"
              aria-valuenow=${frac === null ? nothing : Math.floor(frac * 100)}><div style=${frac === null ? '' : `width:${(frac * 100).toFixed(0)}%`}></div></div>
          <span class="progress-text">${describeStatus(this.job, 'Starting…')} ${this.elapsed > 0 ? `(${this.elapsed} s)` : ''}</span>
        </div>`;
      }
      if (this.error) return html`<div class="status error" role="alert">${this.error}</div>`;
      if (this.notice) return html`<div class="status notice" role="status">${this.notice}</div>`;
      return nothing;
    }

    private renderResult(action: Action, r: unknown, t: SharedTarget) {
      if (action === 'curves') return this.renderCurves(r as CurvesPayload);
      if (action === 'reduce') return this.renderReduce(r as ReducePayload);
      if (action === 'flips') return this.renderFlips(r as FlipsPayload);
      if (action === 'ig_auto') return this.renderIgAuto(r as IgAutoPayload);
      return this.renderContrastive(r as ContrastivePayload, t);
    }

    private renderCurves(p: CurvesPayload) {
      return html`<div class="curves">
        ${MODES.map((mode) => html`<div class="chart-box">${this.renderChart(p, mode)}${this.renderAopc(p, mode)}</div>`)}
        <div class="facts">${p.n_segments} ${p.granularity} segments · removal: ${p.removal === 'filler'
            ? html`filler token “${p.filler}” (positions kept)` : 'text deleted'} ·
          log p(target) ${p.original_logprob.toFixed(2)} → ${p.empty_logprob.toFixed(2)} with all removed ·
          random: mean of ${p.n_random} seeded orders (band: range; ± their standard deviation of AOPC) ·
          length: longest segments first · verdict: beats both by more than ${p.noise_sigmas ?? 2}× the random
          spread, “worse” when a baseline does better by that much · ${p.seconds.toFixed(1)} s</div>
      </div>`;
    }

    private renderChart(p: CurvesPayload, mode: Mode) {
      const W = 320, H = 160, L = 44, R = 18, T = 18, B = 30;
      const xs = fractions(p);
      const sx = linearScale(0, 1, L, W - R);
      const [y0, y1] = paddedExtent(chartValues(p, mode));
      const sy = linearScale(y0, y1, H - B, T);
      const random = p.curves['random']?.[mode];
      const length = p.curves['length']?.[mode];
      const ticks = [y0, (y0 + y1) / 2, y1];
      return html`<svg class="chart ${mode}" viewBox="0 0 ${W} ${H}" width=${W} height=${H} role="img"
          aria-label="${mode} curve: log p(target) against the fraction of segments ${mode === 'deletion' ? 'removed' : 'revealed'}">
        <text x=${L} y="12" class="title">${mode === 'deletion' ? 'Deletion (most salient removed first)' : 'Insertion (most salient revealed first)'}</text>
        ${ticks.map((v) => svg`<line x1=${L} x2=${W - R} y1=${sy(v)} y2=${sy(v)} class="grid"></line>
          <text x=${L - 4} y=${sy(v) + 3} class="tick" text-anchor="end">${v.toFixed(1)}</text>`)}
        ${[0, 0.5, 1].map((f) => svg`<text x=${sx(f)} y=${H - B + 12} class="tick" text-anchor="middle">${Math.round(f * 100)}%</text>`)}
        <text x=${(L + W - R) / 2} y=${H - 4} class="axis" text-anchor="middle">segments ${mode === 'deletion' ? 'removed' : 'revealed'}</text>
        ${random?.low && random.high ? svg`<path class="band" d=${bandPath(xs, random.low, random.high, sx, sy)}></path>` : nothing}
        ${random ? svg`<path class="line random" d=${linePath(xs, random.logprobs, sx, sy)} stroke=${RANDOM_COLOR}></path>` : nothing}
        ${length ? svg`<path class="line length" d=${linePath(xs, length.logprobs, sx, sy)} stroke=${LENGTH_COLOR}></path>` : nothing}
        ${(p.ranked ?? p.methods).map((name) => {
          const c = p.curves[name]?.[mode];
          const m = name.replace(/:abs$/, '');
          const color = CURVE_METHODS.find((x) => x.id === m)?.color ?? '#000';
          return c ? svg`<path class="line method ${name.endsWith(':abs') ? 'abs' : ''}" data-method=${name}
              d=${linePath(xs, c.logprobs, sx, sy)} stroke=${color}></path>` : nothing;
        })}
      </svg>`;
    }

    private renderAopc(p: CurvesPayload, mode: Mode) {
      const rows = aopcRows(p, mode);
      const signedGap = (g: number) => Number.isFinite(g) ? `${g >= 0 ? '+' : ''}${g.toFixed(3)}` : '–';
      const r0 = rows[0];
      return html`<table class="aopc ${mode}">
        <tr><th>${mode}</th><th title="Area over the perturbation curve (nats; higher = more faithful)">AOPC</th>
          <th>vs random</th><th>vs length</th><th>verdict</th></tr>
        ${rows.map((r) => html`<tr data-method=${r.name} data-verdict=${r.verdict ?? ''}>
          <td><span class="swatch ${r.ordering === 'abs' ? 'hollow' : ''}" style="background:${r.color};border-color:${r.color}"></span>${r.label}</td>
          <td>${r.aopc.toFixed(3)}</td><td class=${r.gap > 0 ? 'better' : 'worse'}>${signedGap(r.gap)}</td>
          <td class=${r.gapLength > 0 ? 'better' : 'worse'}>${signedGap(r.gapLength)}</td>
          <td class="verdict ${r.verdict === 'worse' ? 'worse' : r.verdict?.startsWith('beats') ? 'better' : ''}">${r.verdict ?? ''}</td></tr>`)}
        <tr class="random-row"><td><span class="swatch dashed"></span>random (${p.n_random})</td>
          <td>${r0?.random.toFixed(3) ?? ''}${r0 && Number.isFinite(r0.randomStd) ? ` ± ${r0.randomStd.toFixed(3)}` : ''}</td><td></td><td></td><td></td></tr>
        ${r0 && Number.isFinite(r0.length) ? html`<tr class="length-row"><td><span class="swatch" style="background:${LENGTH_COLOR}"></span>length</td>
          <td>${r0.length.toFixed(3)}</td><td></td><td></td><td></td></tr>` : nothing}
      </table>`;
    }

    private renderReduce(p: ReducePayload) {
      const names = Object.keys(p.fields);
      const values: Record<string, string> = {};
      for (const n of names) values[n] = p.fields[n].reduced;
      return html`<div class="reduce" data-removal=${p.removal ?? 'delete'}>
        <div class="facts">Removed ${p.n_removed} of ${p.n_segments} ${p.granularity} segments
          (${p.criterion === 'greedy' ? 'same greedy response' : 'log p(target) within tolerance'};
          ${p.n_checks} checks, ${p.stopped_by === 'done' ? 'search finished' : `stopped by the ${p.stopped_by} budget`});
          log p(target) ${p.original_logprob.toFixed(2)} → ${p.reduced_logprob.toFixed(2)}.
          ${p.removal === 'filler' ? html`<span class="filler-note">Removed tokens were replaced by the filler token
            “${p.filler}” (positions kept); the loaded text spells the fillers out and is re-tokenized, so its
            response may differ.</span>` : nothing}</div>
        ${names.map((n) => html`<div class="section-label">${n}</div>
          <div class="text reduced-text" data-field=${n}>${mergePieces(p.fields[n].pieces).map(([text, removed]) =>
              removed ? html`<s class="removed">${text}</s>` : html`<span>${text}</span>`)}</div>`)}
        <button class="load-reduced" @click=${() => this.load(values, 'reduced prompt')}>Load into editor</button>
      </div>`;
    }

    private renderFlips(p: FlipsPayload) {
      if (p.flips.length === 0) return html`<div class="hint">No word substitutions found in the editable text.</div>`;
      return html`<div class="flips">
        <div class="facts">log p(target) = ${p.original_logprob.toFixed(2)}; the target is
          ${p.original_keeps_greedy ? '' : 'not '}the greedy response. Ranked by the first-order estimate; Δ and
          the response check are measured on the text “Load” gives (re-tokenized). Strongest drops first.</div>
        <ol class="flip-list">${p.flips.map((f, i) => html`<li class="flip" data-i=${i}>
          <span class="ctx">…${f.before}<s>${f.old}</s><b>${f.new}</b>${f.after}…</span>
          <span class="delta" title="exact change of log p(target) for the loaded (re-tokenized) text; first-order estimate ${formatValue(f.estimated_delta)}${f.retokenized ? '; the text re-tokenizes differently from the one-token edit' : ''}">Δ ${formatValue(f.delta)}${f.retokenized ? '*' : ''}</span>
          <span class="greedy ${f.keeps_greedy ? 'same' : 'changed'}">${f.keeps_greedy ? 'same response' : 'response changes'}</span>
          <button class="load-flip" @click=${() => this.load({[f.field]: f.value}, 'flipped prompt')}>Load</button></li>`)}
        </ol></div>`;
    }

    private renderIgAuto(p: IgAutoPayload) {
      return html`<div class="ig-auto" data-stopped-by=${p.stopped_by}>
        <div class="ig-summary ${p.stopped_by}">${igAutoSummary(p)}</div>
        <table class="ig-runs">
          <tr><th>steps</th><th title="sum of attributions − (F(x) − F(baseline)), nats">error</th>
            <th>relative</th><th>time</th></tr>
          ${p.tried.map((r) => html`<tr class=${r.steps === p.steps ? 'chosen' : ''} data-steps=${r.steps}>
            <td>${r.steps}</td><td>${formatValue(r.error)}</td>
            <td class=${r.relative_error <= p.tolerance ? 'better' : 'worse'}>${percent(r.relative_error)}</td>
            <td>${r.seconds.toFixed(1)} s</td></tr>`)}
        </table>
        <div class="facts">Target tokens ${p.span[0]}–${p.span[1]}; counts tried: ${p.schedule.join(', ')} (up to
          ${p.max_steps}). ${p.stopped_by === 'tolerance' ? `Use ${p.steps} IG steps in the salience module for this span.`
                                                     : 'More steps (or another baseline) are needed for this tolerance.'}</div>
      </div>`;
    }

    private renderContrastive(p: ContrastivePayload, t: SharedTarget) {
      const method = p.methods[this.contrastMethod] ? this.contrastMethod : Object.keys(p.methods)[0];
      const signed = p.methods[method].signed;
      let seg;
      let values: Float64Array;
      try {
        ({seg, values} = contrastiveSegments(p, method, t.granularity === 'regex' ? 'word' : t.granularity));
      } catch (e) {
        return html`<div class="status error">${errorMessage(e)}</div>`;
      }
      const shown = Array.from(values).filter((v, s) => Number.isFinite(v) && !seg.excluded[s]);
      // The salience module's colour scale: the same colormap, scaled to the largest |value| shown.
      const cs = {signed, scale: maxAbs(shown), intensity: 1};
      const nChars = Array.from(p.text).length;  // code points, as Python counts prompt_end
      const promptEnd = p.prompt_end ?? nChars;
      const pieces = buildPieces(p.text, seg, promptEnd);  // piece.response: the answer before the span
      const stops = legendStops(cs, 3);
      const top = strongestSegments(p.text, seg, values);
      const span = p.span ? `target tokens ${p.span[0]}–${p.span[1]}` : 'the whole response';
      return html`<div class="contrastive" data-span=${p.span ? p.span.join(':') : ''}>
        <div class="facts">Why “${p.target.trim().slice(0, 60)}” (${span}) rather than “${p.foil.trim().slice(0, 60)}”
          at the same position: log p(target) − log p(foil) = ${p.target_logprob.toFixed(2)} − (${p.foil_logprob.toFixed(2)})
          = <b class="difference">${(p.target_logprob - p.foil_logprob).toFixed(2)}</b> nats.
          ${signed ? 'Red: favours the target; blue: favours the foil.' : 'Magnitude of the gradient of the difference.'}
          ${promptEnd < nChars ? html`<span class="hint">The underlined text is the response before the span
            (shared by both continuations).</span>` : nothing}</div>
        <div class="legend contrast-legend" aria-label="colour legend">
          <div class="legend-bar" style="background:${legendGradient(cs)}"></div>
          <div class="legend-labels">${stops.map((s) => html`<span>${formatValue(s.value)}</span>`)}</div>
        </div>
        <div class="text contrast-map">${pieces.map((pc) => {
          const prefix = pc.response;
          if (pc.seg < 0 || seg.excluded[pc.seg]) return html`<span class="gap ${prefix ? 'answer' : ''}">${pc.text}</span>`;
          const v = values[pc.seg];
          const c = Number.isFinite(v) ? colorFor(v, cs) : null;
          return html`<span class="seg ${prefix ? 'answer' : ''}" data-s=${pc.seg} data-v=${formatValue(v)} title=${formatValue(v)}
              style=${c ? `background:${c.bg};color:${c.fg}` : ''}>${pc.text}</span>`;
        })}</div>
        <table class="contrast-top"><tr><th>strongest segments</th><th>${method}</th></tr>
          ${top.map((r) => {
            const c = colorFor(r.value, cs);
            return html`<tr data-s=${r.seg}><td>${r.text.slice(0, 50)}</td>
              <td class="num" style="background:${c.bg};color:${c.fg}">${formatValue(r.value)}</td></tr>`;
          })}</table></div>`;
    }
  }

  return ExplainTestModule as unknown as CustomElementConstructor;
}

const STYLES = css`
  :host { display: block; height: 100%; }
  .module { display: flex; flex-direction: column; height: 100%; font-family: Roboto, sans-serif; font-size: 13px; }
  .tabs { display: flex; gap: 4px; align-items: center; border-bottom: 1px solid #dadce0; padding: 4px 8px 0; }
  .tab-btn { border: none; background: none; padding: 4px 10px; border-bottom: 2px solid transparent; cursor: pointer;
             font: inherit; color: #3c4043; }
  .tab-btn.on { border-bottom-color: #1a73e8; color: #1a73e8; font-weight: 500; }
  .for { margin-left: auto; color: #5f6368; font-size: 12px; }
  .controls { display: flex; flex-wrap: wrap; gap: 10px; align-items: center; padding: 6px 8px; }
  .controls label { display: flex; gap: 4px; align-items: center; color: #3c4043; }
  .controls input.steps { width: 48px; }
  .controls input.foil { width: 260px; }
  .contrast-legend { width: 220px; margin: 4px 0; }
  .contrast-legend .legend-bar { height: 10px; border: 1px solid #dadce0; border-radius: 2px; }
  .contrast-legend .legend-labels { display: flex; justify-content: space-between; font-size: 11px; color: #5f6368; }
  .contrast-map .answer { text-decoration: underline dotted #5f6368; }
  table.contrast-top { border-collapse: collapse; font-size: 12px; margin-top: 6px; }
  table.contrast-top td, table.contrast-top th { padding: 1px 8px; text-align: left; }
  table.contrast-top td.num { text-align: right; font-variant-numeric: tabular-nums; }
  .controls input.ig-tolerance, .controls input.ig-cap { width: 56px; }
  .ig-summary { margin: 4px 0; } .ig-summary.cap { color: #a50e0e; } .ig-summary.tolerance { color: #137333; }
  table.ig-runs { border-collapse: collapse; font-size: 12px; }
  table.ig-runs th, table.ig-runs td { padding: 2px 8px; text-align: right; }
  table.ig-runs tr.chosen { font-weight: 500; background: #e8f0fe; }
  .swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px; }
  .swatch.dashed { border-top: 2px dashed ${unsafeCSS(RANDOM_COLOR)}; height: 0; border-radius: 0; vertical-align: middle; }
  .status { display: flex; gap: 8px; align-items: center; padding: 4px 8px; }
  .status.error { background: #fce8e6; color: #a50e0e; border-radius: 4px; margin: 0 8px; }
  .status.notice { color: #137333; }
  .bar { width: 160px; height: 4px; background: #e8eaed; overflow: hidden; border-radius: 2px; flex: none; }
  .bar > div { height: 100%; background: #1a73e8; }
  .bar.indeterminate > div { width: 40%; animation: slide 1.2s ease-in-out infinite; }
  @keyframes slide { from { transform: translateX(-100%); } to { transform: translateX(250%); } }
  .result { flex: 1; overflow: auto; padding: 4px 8px; min-height: 0; }
  .empty, .hint { padding: 8px; color: #5f6368; }
  .curves { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
  .chart-box { display: flex; gap: 8px; align-items: flex-start; }
  svg.chart .title { font-size: 11px; fill: #3c4043; font-weight: 500; }
  svg.chart .tick, svg.chart .axis { font-size: 10px; fill: #5f6368; }
  svg.chart .grid { stroke: #e8eaed; }
  svg.chart .line { fill: none; stroke-width: 2; }
  svg.chart .line.random { stroke-dasharray: 4 3; stroke-width: 1.5; }
  svg.chart .line.length { stroke-dasharray: 1 3; stroke-width: 1.5; }
  svg.chart .line.method.abs { stroke-dasharray: 6 2; stroke-width: 1.5; }
  .swatch.hollow { background: none !important; border: 2px solid; width: 6px; height: 6px; }
  svg.chart .band { fill: ${unsafeCSS(RANDOM_COLOR)}; opacity: 0.15; }
  table.aopc { border-collapse: collapse; font-size: 12px; }
  table.aopc th, table.aopc td { padding: 2px 6px; text-align: right; }
  table.aopc th:first-child, table.aopc td:first-child { text-align: left; white-space: nowrap; }
  td.better { color: #137333; } td.worse { color: #a50e0e; }
  .facts { color: #5f6368; margin: 4px 0; flex-basis: 100%; }
  .section-label { font-weight: 500; color: #5f6368; margin: 6px 0 2px; }
  .text { white-space: pre-wrap; overflow-wrap: anywhere; font-family: 'Roboto Mono', monospace; font-size: 12.5px;
          line-height: 1.7; border: 1px solid #e8eaed; border-radius: 4px; padding: 6px; }
  s.removed { color: #a50e0e; background: #fce8e6; }
  ol.flip-list { padding-left: 20px; margin: 4px 0; }
  li.flip { display: flex; gap: 10px; align-items: center; padding: 2px 0; }
  li.flip .ctx { flex: 1; font-family: 'Roboto Mono', monospace; font-size: 12px; white-space: pre; overflow: hidden; text-overflow: ellipsis; }
  li.flip .ctx s { color: #a50e0e; } li.flip .ctx b { color: #137333; }
  .delta { font-variant-numeric: tabular-nums; color: #3c4043; width: 80px; }
  .greedy.changed { color: #a50e0e; } .greedy.same { color: #5f6368; }
  button { font: inherit; font-size: 12px; }
`;
