/**
 * The "Test this explanation" LIT module. It follows the Sequence Salience module's
 * datapoint, target span and granularity (shared/target_store.ts) and asks the
 * `_<model>_explain` model (lit_app/wrappers/explain.py) for:
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
 * the user selects another datapoint or presses Cancel. State and requests live in
 * ./controller.ts, pure logic in ./logic.ts; this element renders.
 */
import {html, nothing, type TemplateResult} from 'lit';

import {modelLabelView, moduleBase, serverHost} from '../shared/lit_module.js';
import {methodNameView} from '../shared/method_help.js';
import type {SharedTarget} from '../shared/target_store.js';
import {forcedTargetNote, isForcedTarget} from '../shared/forced_target.js';
import {describeTokens, responseLength} from '../shared/tokens.js';
import {ExplainController} from './controller.js';
import {curveColor, describeStatus, progressFraction, REDUCE_BUDGET, testedMethods, type Action} from './logic.js';
import {loadIntoEditor} from './editor.js';
import {resultView} from './results.js';
import {EXPLAIN_STYLES} from './styles.js';

export const EXPLAIN_TAG = 'explain-test-module';

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
    state: [],
  }) {
    private readonly ctl = new ExplainController(serverHost(this));

    override disconnectedCallback() {
      this.ctl.dispose();
      super.disconnectedCallback();
    }

    override updated(changed: Map<string, unknown>) {
      (super.updated as ((c: Map<string, unknown>) => void) | undefined)?.call(this, changed);
      this.dataset['run'] = this.ctl.running ?? (this.ctl.error ? 'error' : 'idle');
    }

    override onTarget(t: SharedTarget | null) {
      this.ctl.onTarget(t);
    }

    private load(values: Record<string, string>, what: string) {
      const err = loadIntoEditor(values);
      this.ctl.setNotice(err || `Loaded the ${what} into the datapoint editor: check it, then click “Add” to run it.`);
    }

    // ------------------------------------------------------------------ render

    renderImpl(): TemplateResult {
      const {target: t, tab} = this.ctl;
      return html`<div class="module">
        <div class="tabs" role="tablist">
          ${TABS.map((x) => html`<button role="tab" class="tab-btn ${x.id}${tab === x.id ? ' on' : ''}"
              aria-selected=${tab === x.id ? 'true' : 'false'}
              @click=${() => this.ctl.setTab(x.id)}>${x.label}</button>`)}
          ${modelLabelView(this.modelName())}
          <span class="target-line">
            <span class="for">${t === null ? '' : html`target: ${describeTokens(t.t0, t.t1, responseLength(t))} · ${t.granularity}`}</span>
            ${t === null ? nothing : forcedTargetNote(isForcedTarget(t.input))}
          </span>
        </div>
        ${t === null ? html`<div class="empty">Select a prompt and a target in the Sequence Salience module.</div>`
                     : this.renderTab(t)}
      </div>`;
    }

    private renderTab(t: SharedTarget) {
      const tab = this.ctl.tab;
      const result = this.ctl.result();
      const busy = this.ctl.running !== null;
      const runLabel = {curves: 'Run curves', reduce: 'Reduce prompt', flips: 'Find flips',
                        contrastive: 'Explain contrast', ig_auto: 'Find IG steps'}[tab];
      return html`
        <div class="controls">
          ${this.renderSettings()}
          <button class="run ${tab}" ?disabled=${busy} @click=${() => void this.ctl.run(tab)}>${runLabel}</button>
          ${busy ? html`<button class="cancel" @click=${() => this.ctl.cancel()}>Cancel</button>` : nothing}
        </div>
        ${this.renderStatus()}
        <div class="result">${result === undefined ? this.renderHint() : this.renderResult(tab, result, t)}</div>`;
    }

    private renderHint() {
      if (this.ctl.running !== null) return nothing;
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
      return html`<div class="hint">${hints[this.ctl.tab]}</div>`;
    }

    private renderSettings() {
      const {tab, settings: s} = this.ctl;
      const reg = this.ctl.registry();
      const tested = reg === null ? [] : testedMethods(reg, tab);
      if (tab === 'curves') {
        return html`
          <label>Steps <input class="steps" type="number" min="1" max="50" .value=${String(s.steps)}
              @change=${(e: Event) => { const v = Math.round(Number((e.target as HTMLInputElement).value));
                                        if (v >= 1 && v <= 50) this.ctl.set({steps: v}); }}></label>
          <label title="filler keeps token positions (each removed token becomes a space token); delete removes the text">
            Removal <select class="removal" @change=${(e: Event) => this.ctl.set({removal: (e.target as HTMLSelectElement).value})}>
              <option value="filler" ?selected=${s.removal === 'filler'}>filler (keep positions)</option>
              <option value="delete" ?selected=${s.removal === 'delete'}>delete text</option>
            </select></label>
          ${tested.map((m) => html`
            <label class="method"><input type="checkbox" .checked=${s.methods.includes(m.name)} @change=${(e: Event) => {
              const on = (e.target as HTMLInputElement).checked;
              const next = on ? [...s.methods, m.name] : s.methods.filter((x) => x !== m.name);
              if (next.length) this.ctl.set({methods: tested.map((x) => x.name).filter((x) => next.includes(x))});
            }}><span class="swatch" style="background:${curveColor(m.name)}"></span>${methodNameView(reg, m.name, 'test')}</label>`)}`;
      }
      if (tab === 'reduce') {
        return html`<span class="setting">ordered by ${methodNameView(reg, this.ctl.reductionMethod() ?? '', 'test')}</span>
          <label title="delete removes the text (what pasting the reduced prompt gives); filler keeps token positions (each removed token becomes a space token)">
            Removal <select class="reduce-removal" @change=${(e: Event) => this.ctl.set({reduceRemoval: (e.target as HTMLSelectElement).value})}>
              <option value="delete" ?selected=${s.reduceRemoval === 'delete'}>delete text</option>
              <option value="filler" ?selected=${s.reduceRemoval === 'filler'}>filler (keep positions)</option>
            </select></label>`;
      }
      if (tab === 'ig_auto') {
        const num = (e: Event) => Number((e.target as HTMLInputElement).value);
        return html`
          <label title="Largest completeness error, relative to F(x) − F(baseline) of the span">Tolerance (%)
            <input class="ig-tolerance" type="number" min="0.01" max="100" step="any" .value=${String(s.igTolerance)}
                @change=${(e: Event) => this.ctl.set({igTolerance: num(e)})}></label>
          <label title="The most IG steps to try (the server may allow fewer)">Most steps
            <input class="ig-cap" type="number" min="1" max=${this.ctl.maxIgSteps()} .value=${String(s.igCap)}
                @change=${(e: Event) => this.ctl.set({igCap: num(e)})}></label>`;
      }
      if (tab === 'contrastive') {
        return html`
          <label class="foil-label">Foil <input class="foil" type="text" placeholder="e.g. the answer you expected"
              .value=${s.foil} @input=${(e: Event) => this.ctl.set({foil: (e.target as HTMLInputElement).value})}
              @keydown=${(e: KeyboardEvent) => { if (e.key === 'Enter') void this.ctl.run('contrastive'); }}></label>
          <label>Method <select class="contrast-method"
              @change=${(e: Event) => this.ctl.set({contrastMethod: (e.target as HTMLSelectElement).value})}>
            ${tested.map((m) =>
                html`<option value=${m.name} ?selected=${m.name === s.contrastMethod}>${m.label}</option>`)}
          </select></label>`;
      }
      return nothing;
    }

    private renderStatus() {
      const {jobs, error, notice} = this.ctl;
      if (this.ctl.running !== null) {
        const frac = progressFraction(jobs.progress);
        return html`<div class="status loading" role="status">
          <div class="bar ${frac === null ? 'indeterminate' : ''}" role="progressbar" aria-valuemin="0" aria-valuemax="100"
              aria-valuenow=${frac === null ? nothing : Math.floor(frac * 100)}><div style=${frac === null ? '' : `width:${(frac * 100).toFixed(0)}%`}></div></div>
          <span class="progress-text">${describeStatus(jobs.progress, 'Starting…')} ${jobs.elapsed > 0 ? `(${jobs.elapsed} s)` : ''}</span>
        </div>`;
      }
      if (error) return html`<div class="status error" role="alert">${error}</div>`;
      if (notice) return html`<div class="status notice" role="status">${notice}</div>`;
      return nothing;
    }

    private renderResult(action: Action, r: unknown, t: SharedTarget) {
      return resultView(action, r, {
        granularity: t.granularity, contrastMethod: this.ctl.settings.contrastMethod, nTargets: responseLength(t),
        label: (m) => this.ctl.registry()?.label(m) ?? m, registry: this.ctl.registry(),
        load: (values, what) => this.load(values, what), running: this.ctl.running !== null,
        maxIgSteps: this.ctl.maxIgSteps(),
      });
    }
  }

  return ExplainTestModule as unknown as CustomElementConstructor;
}
