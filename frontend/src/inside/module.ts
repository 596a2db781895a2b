/**
 * The "Inside the model" LIT module: follows the Sequence Salience module's
 * target (shared/target_store.ts) and shows, for the first token of the
 * selected span, the model's prediction layer by layer (logit lens before and
 * after each feed-forward block), the largest feed-forward sub-updates with
 * their tokens, an intervention list (click a sub-update or a search hit to
 * add it; off/on; run) with a before/after comparison, and a search of value
 * vectors by token. The state and the three request flows (the trace; the run with its
 * status polls and cancel; the search with its index polls, ./search.ts) live in ./controller.ts, pure logic
 * in ./logic.ts and ./payload.ts, the trace and the run drawn in ./trace_view.ts and
 * ./run_view.ts; this element renders and passes LIT's services to the controller.
 */
import {html, nothing, type TemplateResult} from 'lit';

import {forcedTargetNote, isForcedTarget} from '../shared/forced_target.js';
import type {SharedTarget} from '../shared/target_store.js';
import {modelLabelView, moduleBase, serverHost} from '../shared/lit_module.js';
import {InsideController, type InsideHost} from './controller.js';
import {describeTraced, formatProb, formatRank, interventionKey, removeIntervention, searchStatus, setScope, showToken,
        toggleMode} from './logic.js';
import {type Scope, SCOPES, type SearchRanking} from './payload.js';
import {comparisonView, runProgressView} from './run_view.js';
import {INSIDE_STYLES} from './styles.js';
import {traceView} from './trace_view.js';

export const INSIDE_TAG = 'inside-model-module';

const MODE_TITLE = 'Click to switch: off (coefficient 0) → on (LM-Debugger: the layer\'s largest |m|·‖v‖ at the traced ' +
    'position + 0.01, one constant; GPT-2 before the GELU) → on_layer_max (just above the layer\'s largest ' +
    'coefficient at each position)';


/** Defines the module class on top of LIT's LitModule and returns it. */
export function makeInsideModuleClass(LitModule: unknown): CustomElementConstructor {
  class InsideModelModule extends moduleBase(LitModule, {
    tag: INSIDE_TAG, title: 'Inside the model', numCols: 8, styles: INSIDE_STYLES,
    infoMarkdown:
        'How the model builds its prediction of the selected response token, layer by layer ' +
        '(LM-Debugger: logit lens before/after each feed-forward block, feed-forward sub-updates). ' +
        'Click a sub-update or a search hit to add it to the interventions, switch it off/on, and run.',
    followsTarget: true,
    state: [],
  }) {
    /** LIT's services and this element's visibility, for the controller. */
    private readonly host: InsideHost = {
      ...serverHost(this),
      isShown: () => isShown(this),
      isConnected: () => this.isConnected,
    };
    private readonly ctl = new InsideController(this.host);

    override disconnectedCallback() {
      this.ctl.dispose();
      super.disconnectedCallback();
    }

    override updated(changed: Map<string, unknown>) {
      (super.updated as ((c: Map<string, unknown>) => void) | undefined)?.call(this, changed);
      this.dataset['state'] = this.ctl.status;
      this.dataset['run'] = this.ctl.runState;
    }

    override onTarget(s: SharedTarget | null) {
      this.ctl.onTarget(s);
    }

    // -------------------------------------------------------------- render

    renderImpl(): TemplateResult {
      return html`<div class="module">
        ${this.renderHeader()}
        <div class="scroll">
          ${this.ctl.trace ? traceView(this.ctl.trace, this.ctl.shownResult(), {
            expanded: this.ctl.expanded,
            listed: (key) => this.ctl.interventions.some((iv) => interventionKey(iv) === key),
            add: (layer, index, mode) => this.ctl.add(layer, index, mode),
            toggle: (layer) => this.ctl.toggleLayer(layer),
          }) : nothing}
          ${this.renderInterventions()}
          ${this.renderSearch()}
        </div>
      </div>`;
    }

    private renderHeader() {
      const {target: tt, trace: tr, status: st, message} = this.ctl;
      if (tt === null) {
        return html`<div class="empty">${modelLabelView(this.modelName())} Select a prompt, then click a token of the
          response in the Sequence Salience module to see how the model builds it, layer by layer.</div>`;
      }
      const status = st === 'waiting'
          ? html`<div class="status waiting" role="status"><span>${message}</span></div>`
          : st === 'loading'
          ? html`<div class="status loading" role="status"><div class="bar"><div></div></div><span>${message}</span></div>`
          : st === 'error'
          ? html`<div class="status error" role="alert"><span class="error-text">${message}</span>
              <button @click=${() => void this.ctl.fetchTrace(tt)}>Retry</button></div>`
          : nothing;
      return html`<div class="header">
        <div class="target">${modelLabelView(this.modelName())} Token <b class="target-token">${showToken(tt.token)}</b>
          <span class="hint traced">(${describeTraced(tt)})</span>
          ${forcedTargetNote(isForcedTarget(tt.input))}
          ${tr ? html`<span class="facts">· model: <b class="final-prob">p=${formatProb(tr.output.target_prob)}</b>,
            <span class="final-rank">${formatRank(tr.output.target_rank)}</span>
            · top prediction <b class="final-top">${showToken(tr.output.tokens[0])}</b>
            · ${tr.layers.length} layers, ${tr.seconds.toFixed(2)} s</span>` : nothing}
        </div>
        ${status}
      </div>`;
    }

    private renderInterventions() {
      const ctl = this.ctl;
      if (ctl.target === null) return nothing;
      const r = ctl.shownResult();
      const stale = ctl.resultIsStale();
      const ivs = ctl.interventions;
      return html`<div class="panel interventions">
        <div class="section-label">Interventions <span class="hint">— click a sub-update or a search hit to add it</span></div>
        <div class="iv-list">
          ${ivs.length === 0 ? html`<span class="hint">none yet</span>` : nothing}
          ${ivs.map((iv) => html`<span class="iv-item ${iv.mode}" data-key=${interventionKey(iv)}>
              <span>L${iv.layer}·v${iv.index}</span>
              <button class="iv-mode" title=${MODE_TITLE}
                  @click=${() => ctl.setInterventions(toggleMode(ivs, interventionKey(iv)))}>${iv.mode}</button>
              <select class="iv-scope" aria-label="Scope" title="all: every position (as LM-Debugger); this position: only the traced position"
                  @change=${(e: Event) => ctl.setInterventions(setScope(ivs, interventionKey(iv),
                      (e.target as HTMLSelectElement).value as Scope))}>
                ${SCOPES.map((s) => html`<option value=${s} ?selected=${(iv.scope ?? 'all') === s}>${
                    s === 'all' ? 'all positions' : 'this position'}</option>`)}
              </select>
              <button class="iv-remove" title="Remove" aria-label="Remove"
                  @click=${() => ctl.setInterventions(removeIntervention(ivs, interventionKey(iv)))}>×</button>
            </span>`)}
        </div>
        <div class="iv-actions">
          <button class="run" ?disabled=${ivs.length === 0 || ctl.running || ctl.trace === null}
              @click=${() => void ctl.run()}>${ctl.running ? 'Running…' : 'Run'}</button>
          ${ctl.running ? html`<button class="cancel" @click=${() => ctl.cancelRun()}>Cancel</button>` : nothing}
          <button class="clear" ?disabled=${ivs.length === 0 || ctl.running} @click=${() => ctl.clear()}>Clear</button>
          ${ctl.runNotice ? html`<span class="status notice inline run-notice" role="status">${ctl.runNotice}</span>` : nothing}
          ${ctl.runError ? html`<span class="status error inline run-error" role="alert">${ctl.runError}</span>` : nothing}
        </div>
        ${ctl.running ? runProgressView(ctl.runs.progress, ctl.partial, ctl.runs.elapsed) : nothing}
        ${r ? comparisonView(r, stale, ctl.result !== null && r === ctl.result, ctl.running) : nothing}
      </div>`;
    }

    private renderSearch() {
      const {search: s, query, searchRanking, searchError} = this.ctl;
      return html`<div class="panel search">
        <div class="section-label">Search value vectors by token</div>
        <div class="search-row">
          <input class="search-input" type="search" placeholder="a word, e.g. Paris" .value=${query}
              @input=${(e: Event) => this.ctl.setQuery((e.target as HTMLInputElement).value)}
              @keydown=${(e: KeyboardEvent) => { if (e.key === 'Enter') void this.ctl.runSearch(); }}>
          <button class="search-go" ?disabled=${!query.trim()} @click=${() => void this.ctl.runSearch()}>Search</button>
          <select class="search-ranking" aria-label="Ranking" title="in top-k: values whose 32 top tokens contain the word (the index); projection: every value ranked by its score (E·v)[token], so strong promoters outside their top 32 are found too"
              @change=${(e: Event) => this.ctl.setRanking((e.target as HTMLSelectElement).value as SearchRanking)}>
            <option value="top_k" ?selected=${searchRanking === 'top_k'}>in top-k</option>
            <option value="projection" ?selected=${searchRanking === 'projection'}>projection score</option>
          </select>
        </div>
        ${searchError ? html`<div class="status error inline" role="alert">${searchError}</div>` : nothing}
        ${s ? html`<div class="search-status ${s.index.state}">${searchStatus(s)}
            ${s.tokens.length ? html`<span class="hint">tokens: ${s.tokens.map(([, t]) => showToken(t)).join(', ')}</span>` : nothing}</div>
          <ol class="hits">${s.hits.map((h) => html`<li class="search-hit" data-layer=${h.layer} data-index=${h.index}>
            <button class="hit-add" title="Add to the interventions (off)" @click=${() => this.ctl.add(h.layer, h.index, 'off')}>
              L${h.layer}·v${h.index}</button>
            <span class="hint">rank ${h.rank + 1} of ${showToken(h.token)}${s.ranking === 'projection'
                ? html` · <span class="score">${h.score.toFixed(3)}</span>` : nothing}</span>
            <span class="vtoks">${h.top_tokens.map(showToken).join(' ')}</span>
            <button class="small add-on" title="Add switched on" @click=${() => this.ctl.add(h.layer, h.index, 'on')}>+ on</button>
          </li>`)}</ol>` : nothing}
      </div>`;
    }
  }

  return InsideModelModule as unknown as CustomElementConstructor;
}

/** Whether the element is laid out and not hidden (LIT hides unselected tabs with `visibility: hidden`). */
function isShown(el: HTMLElement): boolean {
  return el.isConnected && el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden';
}
