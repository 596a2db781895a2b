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
import {html, nothing, type TemplateResult} from 'lit';

import {moduleBase} from '../shared/lit_module.js';
import {registryOf, type MethodRegistry} from '../shared/methods.js';
import {errorMessage} from '../shared/request.js';
import type {SharedTarget} from '../shared/target_store.js';
import {
  curveColor, describeStatus, EXPLAIN_FIELD, explainInput, explainModelFor, IG_METHOD, igAutoSettings, parseContrastive,
  parseCurves, parseIgAuto, progressFraction, REDUCE_BUDGET, reduceFields, reductionMethod, resultKey, testedMethods, type Action, type JobStatus,
} from './logic.js';
import {loadIntoEditor} from './editor.js';
import {resultView} from './results.js';
import {EXPLAIN_STYLES} from './styles.js';

export const EXPLAIN_TAG = 'explain-test-module';

const POLL_MS = 1000;
const TABS: ReadonlyArray<{id: Action; label: string}> = [
  {id: 'curves', label: 'Faithfulness'}, {id: 'reduce', label: 'Reduce prompt'},
  {id: 'flips', label: 'Flip tokens'}, {id: 'contrastive', label: 'Contrastive'},
  {id: 'ig_auto', label: 'IG steps'},
];


/** Defines the module class on top of LIT's LitModule and returns it. */
export function makeExplainModuleClass(LitModule: unknown): CustomElementConstructor {
  class ExplainTestModule extends moduleBase(LitModule, {
    tag: EXPLAIN_TAG, title: 'Test this explanation', numCols: 12, styles: EXPLAIN_STYLES,
    infoMarkdown:
        'Is the salience map faithful, and what does acting on it change? Deletion/insertion curves with a ' +
        'random reference and AOPC per method; input reduction; gradient-guided token flips; contrastive ' +
        'salience against a foil. Follows the Sequence Salience module\'s target span and granularity.',
    followsTarget: true,
    state: ['target', 'tab', 'running', 'job', 'error', 'notice', 'results', 'steps', 'removal', 'methods', 'foil',
            'contrastMethod', 'elapsed', 'igTolerance', 'igCap', 'reduceRemoval'],
  }) {
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

    private seq = 0;
    private pollTimer: ReturnType<typeof setTimeout> | undefined;
    private clock: ReturnType<typeof setInterval> | undefined;
    private reg: {model: string; reg: MethodRegistry | null} | null = null;

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

    override disconnectedCallback() {
      this.stopTimers();
      super.disconnectedCallback();
    }

    override updated(changed: Map<string, unknown>) {
      (super.updated as ((c: Map<string, unknown>) => void) | undefined)?.call(this, changed);
      this.dataset['run'] = this.running ?? (this.error ? 'error' : 'idle');
    }

    override onTarget(t: SharedTarget | null) {
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
      if (action === 'reduce') return `${reductionMethod(this.registry(), this.methods) ?? ''}|${this.reduceRemoval}`;
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
      if (action === 'reduce') {
        return {...common, ...reduceFields(reductionMethod(this.registry(), this.methods), this.reduceRemoval)};
      }
      if (action === 'contrastive') return {foil: this.foil, methods: this.contrastMethod};
      if (action === 'ig_auto') {
        const settings = igAutoSettings(this.igTolerance, this.igCap, this.maxIgSteps());
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
      const igSettings = igAutoSettings(this.igTolerance, this.igCap, this.maxIgSteps());
      if (action === 'ig_auto' && typeof igSettings === 'string') {
        this.error = igSettings;
        return;
      }
      if (!(explainModelFor(t.salienceModel) in (this.appState.metadata?.models ?? {}))) {
        this.error = `The server has no "${explainModelFor(t.salienceModel)}" model: the tests need Sequence ` +
            "Salience's wrappers (python -m lit_app.server, or lit_app.plugin.make_models).";
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

    /** The server's methods, read once from the salience model's output spec (null before a target). */
    private registry(): MethodRegistry | null {
      const model = this.target?.salienceModel;
      if (model === undefined) return null;
      if (this.reg?.model !== model) {
        let reg: MethodRegistry | null = null;
        try {
          reg = registryOf(this.appState.metadata?.models?.[model]);
        } catch (e) {
          console.error(e);  // the salience module shows the same error
        }
        this.reg = {model, reg};
      }
      return this.reg.reg;
    }

    /** The most IG steps a request may ask for (the registry's; 0 when it is not known). */
    private maxIgSteps(): number {
      return this.registry()?.extra(IG_METHOD)?.max_count ?? 0;
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
        reduce: 'Removes the least salient segments while the model still gives the same response. ' +
                `Budget: ${REDUCE_BUDGET}; when it runs out, the prompt as reduced so far is shown.`,
        flips: 'Single-word substitutions ranked by the gradient, then checked exactly.',
        contrastive: 'Why this response rather than another? Type the alternative (the foil).',
        ig_auto: 'Integrated gradients of the target span with 8, 16, 32, … steps until the attributions sum to ' +
                 'F(x) − F(baseline) within the tolerance (completeness), or the most steps are reached.',
      };
      return html`<div class="hint">${hints[this.tab]}</div>`;
    }

    private renderSettings() {
      const reg = this.registry();
      const tested = reg === null ? [] : testedMethods(reg, this.tab);
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
          ${tested.map((m) => html`
            <label class="method"><input type="checkbox" .checked=${this.methods.includes(m.name)} @change=${(e: Event) => {
              const on = (e.target as HTMLInputElement).checked;
              const next = on ? [...this.methods, m.name] : this.methods.filter((x) => x !== m.name);
              if (next.length) this.methods = tested.map((x) => x.name).filter((x) => next.includes(x));
            }}><span class="swatch" style="background:${curveColor(m.name)}"></span>${m.label}</label>`)}`;
      }
      if (this.tab === 'reduce') {
        return html`<span class="setting">ordered by ${reg?.label(reductionMethod(reg, this.methods) ?? '')}</span>
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
            <input class="ig-cap" type="number" min="1" max=${this.maxIgSteps()} .value=${String(this.igCap)}
                @change=${(e: Event) => { this.igCap = num(e); }}></label>`;
      }
      if (this.tab === 'contrastive') {
        return html`
          <label class="foil-label">Foil <input class="foil" type="text" placeholder="e.g. the answer you expected"
              .value=${this.foil} @input=${(e: Event) => { this.foil = (e.target as HTMLInputElement).value; }}
              @keydown=${(e: KeyboardEvent) => { if (e.key === 'Enter') void this.run('contrastive'); }}></label>
          <label>Method <select class="contrast-method"
              @change=${(e: Event) => { this.contrastMethod = (e.target as HTMLSelectElement).value; }}>
            ${tested.map((m) =>
                html`<option value=${m.name} ?selected=${m.name === this.contrastMethod}>${m.label}</option>`)}
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
      return resultView(action, r, {
        granularity: t.granularity, contrastMethod: this.contrastMethod,
        label: (m) => this.registry()?.label(m) ?? m,
        load: (values, what) => this.load(values, what),
      });
    }
  }

  return ExplainTestModule as unknown as CustomElementConstructor;
}
