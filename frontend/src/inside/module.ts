/**
 * The "Inside the model" LIT module: follows the Sequence Salience module's
 * target (shared/target_store.ts) and shows, for the first token of the
 * selected span, the model's prediction layer by layer (logit lens before and
 * after each feed-forward block), the largest feed-forward sub-updates with
 * their tokens, an intervention list (click a sub-update or a search hit to
 * add it; off/on; run) with a before/after comparison, and a search of value
 * vectors by token. Pure logic lives in ./logic.ts and ./payload.ts, the trace and the run
 * drawn in ./trace_view.ts and ./run_view.ts; this file wires them to LIT's services.
 *
 * About 450 lines: three request flows (the trace; the run with its status polls and cancel;
 * the search with its index polls) share the element's state and sequence numbers.
 */
import {html, nothing, type TemplateResult} from 'lit';

import {derivedInput, errorMessage, type IndexedInputLike} from '../shared/request.js';
import type {SharedTarget} from '../shared/target_store.js';
import {moduleBase} from '../shared/lit_module.js';
import {
  addIntervention, describeTraced, formatProb, formatRank, hashString, insideModels, interventionKey, interventionsJson,
  removeIntervention, searchStatus, setScope, shouldPoll, showToken, toggleMode, traceKey, traceTarget,
  type TraceTarget,
} from './logic.js';
import {
  INSIDE_T_FIELD, type Intervention, INTERVENTION_FIELD, type InterventionPayload, INTERVENTIONS_FIELD,
  LIMIT_FIELD, type Mode, parseIntervention, parseRunStatus, parseSearch, parseTrace, type PartialIntervention,
  QUERY_FIELD, RANKING_FIELD, RUN_ACTION_FIELD, type RunJob, type Scope, SCOPES, SEARCH_FIELD, type SearchPayload,
  type SearchRanking, TRACE_FIELD, type TracePayload,
} from './payload.js';
import {comparisonView, runProgressView} from './run_view.js';
import {INSIDE_STYLES} from './styles.js';
import {traceView} from './trace_view.js';

export const INSIDE_TAG = 'inside-model-module';

const SEARCH_LIMIT = 30;
const POLL_MS = 1500;
const RUN_POLL_MS = 400;  // the run's status: probabilities, then the text as it is generated
let nonce = 0;
const MODE_TITLE = 'Click to switch: off (coefficient 0) → on (LM-Debugger: the layer\'s largest |m|·‖v‖ at the traced ' +
    'position + 0.01, one constant; GPT-2 before the GELU) → on_layer_max (just above the layer\'s largest ' +
    'coefficient at each position)';


type Status = 'idle' | 'waiting' | 'loading' | 'ready' | 'error';

/** Defines the module class on top of LIT's LitModule and returns it. */
export function makeInsideModuleClass(LitModule: unknown): CustomElementConstructor {
  class InsideModelModule extends moduleBase(LitModule, {
    tag: INSIDE_TAG, title: 'Inside the model', numCols: 8, styles: INSIDE_STYLES,
    infoMarkdown:
        'How the model builds its prediction of the selected response token, layer by layer ' +
        '(LM-Debugger: logit lens before/after each feed-forward block, feed-forward sub-updates). ' +
        'Click a sub-update or a search hit to add it to the interventions, switch it off/on, and run.',
    followsTarget: true,
    state: ['status', 'message', 'target', 'trace', 'expanded', 'interventions', 'result', 'running', 'runError',
            'query', 'searchRanking', 'search', 'searchError', 'searching', 'job', 'partial', 'runNotice',
            'runElapsed'],
  }) {
    declare status: Status;
    declare message: string;
    declare target: TraceTarget | null;
    declare trace: TracePayload | null;
    declare expanded: ReadonlySet<number>;
    declare interventions: Intervention[];
    declare result: InterventionPayload | null;
    declare running: boolean;
    declare runError: string;
    declare query: string;
    declare searchRanking: SearchRanking;
    declare search: SearchPayload | null;
    declare searchError: string;
    declare searching: boolean;
    /** The running job's status (polled), and the results so far (also of a cancelled run). */
    declare job: RunJob | null;
    declare partial: PartialIntervention | null;
    declare runNotice: string;
    declare runElapsed: number;

    private traceSeq = 0;
    private runSeq = 0;
    private searchSeq = 0;
    private pollTimer: ReturnType<typeof setTimeout> | undefined;
    private shownTimer: ReturnType<typeof setInterval> | undefined;
    private runTimer: ReturnType<typeof setTimeout> | undefined;
    private runClock: ReturnType<typeof setInterval> | undefined;
    /** Key of the trace the result belongs to, and the interventions it ran. */
    private resultFor = '';

    constructor() {
      super();
      this.status = 'idle';
      this.message = '';
      this.target = null;
      this.trace = null;
      this.expanded = new Set();
      this.interventions = [];
      this.result = null;
      this.running = false;
      this.runError = '';
      this.query = '';
      this.searchRanking = 'top_k';
      this.search = null;
      this.searchError = '';
      this.searching = false;
      this.job = null;
      this.partial = null;
      this.runNotice = '';
      this.runElapsed = 0;
    }

    override disconnectedCallback() {
      clearTimeout(this.pollTimer);
      clearInterval(this.shownTimer);
      if (this.running) this.cancelRun();
      super.disconnectedCallback();
    }

    override updated(changed: Map<string, unknown>) {
      (super.updated as ((c: Map<string, unknown>) => void) | undefined)?.call(this, changed);
      this.dataset['state'] = this.status;
      this.dataset['run'] = this.running ? 'running' : this.result ? 'done' : this.runError ? 'error'
          : this.partial ? 'cancelled' : 'idle';
    }

    // ---------------------------------------------------------------- data

    private models() {
      const group = this.target?.group;
      if (!group) return null;
      const names = insideModels(group);
      const known = this.appState.metadata?.models ?? {};
      return names.trace in known ? names : null;
    }

    private baseInput(tt: TraceTarget): IndexedInputLike {
      return {id: tt.datapointId, data: tt.input, meta: {}};
    }

    override onTarget(s: SharedTarget | null) {
      const tt = traceTarget(s);
      const prev = this.target;
      if (tt !== null && prev !== null && traceKey(tt) === traceKey(prev)) {
        this.target = tt;  // same token (e.g. another granularity): keep the trace
        return;
      }
      if (prev === null || tt === null || prev.datapointId !== tt.datapointId) {
        this.interventions = [];  // interventions are per prompt
      }
      if (this.running) this.cancelRun('');  // the run was for the old token
      this.target = tt;
      this.trace = null;
      this.expanded = new Set();
      this.result = null;
      this.partial = null;
      this.runNotice = '';
      this.runError = '';
      if (tt === null) {
        this.status = 'idle';
        return;
      }
      this.traceWhenShown(tt);
    }

    /**
     * Traces `tt` now if the module is on screen, else once its tab is opened: in the default
     * layout this module is a tab beside the salience module (lit_app/layouts.py), and a trace
     * nobody looks at would take the CPU from the salience the user is waiting for. LIT hides
     * an unselected tab with `visibility: hidden`, which no observer reports, so while a trace
     * waits the module checks every 300 ms (a style read; nothing else runs).
     */
    private traceWhenShown(tt: TraceTarget) {
      clearInterval(this.shownTimer);
      if (isShown(this)) {
        void this.fetchTrace(tt);
        return;
      }
      this.status = 'waiting';
      this.message = `Will trace ${showToken(tt.token)} when this tab is open.`;
      this.shownTimer = setInterval(() => {
        // The salience module republishes the same token on every render (a new object, the same key).
        const now = this.target;
        if (now === null || traceKey(now) !== traceKey(tt)) {
          clearInterval(this.shownTimer);
        } else if (isShown(this)) {
          clearInterval(this.shownTimer);
          void this.fetchTrace(now);
        }
      }, 300);
    }

    private async fetchTrace(tt: TraceTarget) {
      const models = this.models();
      if (models === null) {
        this.status = 'error';
        this.message = `The server has no "${insideModels(tt.group).trace}" model. ` +
            'Start it with python -m lit_app.server, or build the models with lit_app.plugin.make_models, ' +
            'to get the Inside-the-model wrappers.';
        return;
      }
      const seq = ++this.traceSeq;
      this.status = 'loading';
      this.message = `Tracing ${showToken(tt.token)} through the layers…`;
      try {
        const input = derivedInput(this.baseInput(tt), {[INSIDE_T_FIELD]: tt.t}, `inside-t${tt.t}`);
        const res = await this.apiService.getPreds([input], models.trace, this.appState.currentDataset, [],
                                                   [TRACE_FIELD], 'Tracing the layers…');
        if (seq !== this.traceSeq) return;
        this.trace = parseTrace(res[0]?.[TRACE_FIELD]);
        this.status = 'ready';
        this.message = '';
      } catch (e) {
        if (seq !== this.traceSeq) return;
        this.status = 'error';
        this.message = errorMessage(e);
      }
    }

    /** A request to the intervene model; a fresh id each time, so LIT never answers from its cache. */
    private runInput(tt: TraceTarget, action: string, json = ''): IndexedInputLike {
      const extra: Record<string, unknown> = {[RUN_ACTION_FIELD]: action, [INSIDE_T_FIELD]: tt.t};
      if (action === 'run') extra[INTERVENTIONS_FIELD] = json;
      return derivedInput(this.baseInput(tt), extra, `iv-${action}-t${tt.t}-${hashString(json)}-${Date.now()}-${nonce++}`);
    }

    /**
     * Runs the interventions as a job on the server: the request answers when the run ends, while
     * the status, polled, brings the probabilities first, then the regenerated text, then salience.
     */
    private async run() {
      const tt = this.target;
      const models = this.models();
      if (tt === null || models === null || this.interventions.length === 0) return;
      const json = interventionsJson(this.interventions);
      const seq = ++this.runSeq;
      this.running = true;
      this.runError = '';
      this.runNotice = '';
      this.result = null;
      this.partial = null;
      this.job = null;
      this.resultFor = `${traceKey(tt)}|${json}`;
      this.startRunTimers(seq, tt, models.intervene);
      try {
        const res = await this.apiService.getPreds([this.runInput(tt, 'run', json)], models.intervene,
                                                   this.appState.currentDataset, [], [INTERVENTION_FIELD]);
        if (seq !== this.runSeq) return;
        const payload = res[0]?.[INTERVENTION_FIELD] as Record<string, unknown> | undefined;
        if (payload?.['cancelled']) {
          this.partial = (payload['partial'] as PartialIntervention | null) ?? this.partial;
          this.runNotice = 'Cancelled.';
        } else {
          this.result = parseIntervention(payload);
        }
      } catch (e) {
        if (seq === this.runSeq) this.runError = errorMessage(e);
      } finally {
        if (seq === this.runSeq) {
          this.running = false;
          this.stopRunTimers();
        }
      }
    }

    private startRunTimers(seq: number, tt: TraceTarget, model: string) {
      this.stopRunTimers();
      const start = performance.now();
      this.runElapsed = 0;
      this.runClock = setInterval(() => { this.runElapsed = Math.round((performance.now() - start) / 1000); }, 1000);
      const poll = async () => {
        if (seq !== this.runSeq || !this.running) return;
        try {
          const res = await this.apiService.getPreds([this.runInput(tt, 'status')], model,
                                                     this.appState.currentDataset, [], [INTERVENTION_FIELD]);
          const job = parseRunStatus(res[0]?.[INTERVENTION_FIELD]);
          if (seq === this.runSeq && this.running && job !== null && job.action === 'run') {
            this.job = job;
            if (job.partial) this.partial = job.partial;
          }
        } catch {
          // progress is best effort: the run's own answer brings the result
        }
        if (seq === this.runSeq && this.running) this.runTimer = setTimeout(poll, RUN_POLL_MS);
      };
      this.runTimer = setTimeout(poll, RUN_POLL_MS);
    }

    private stopRunTimers() {
      clearTimeout(this.runTimer);
      clearInterval(this.runClock);
    }

    /** Stops the run here at once and on the server (between steps or generated tokens). */
    private cancelRun(notice = 'Cancelled.') {
      const tt = this.target;
      const models = this.models();
      this.runSeq++;  // whatever comes back now is stale
      this.running = false;
      this.job = null;
      this.runNotice = notice;
      this.stopRunTimers();
      if (tt !== null && models !== null) {
        this.apiService.getPreds([this.runInput(tt, 'cancel')], models.intervene, this.appState.currentDataset, [],
                                 [INTERVENTION_FIELD]).catch(() => {});
      }
    }

    private async runSearch(poll = 0) {
      clearTimeout(this.pollTimer);
      const query = this.query.trim();
      const group = this.target?.group ?? this.groupFromModels();
      if (!query || group === null) return;
      const seq = poll === 0 ? ++this.searchSeq : this.searchSeq;
      this.searching = true;
      if (poll === 0) this.searchError = '';
      const id = `inside-search-${hashString(query)}-${this.searchRanking}-${poll}-${seq}`;
      const input: IndexedInputLike = {id, data: {[QUERY_FIELD]: query, [LIMIT_FIELD]: SEARCH_LIMIT,
                                                  [RANKING_FIELD]: this.searchRanking, _id: id},
                                       meta: {added: true}};
      try {
        const res = await this.apiService.getPreds([input], insideModels(group).search,
                                                   this.appState.currentDataset, [], [SEARCH_FIELD],
                                                   'Searching value vectors…');
        if (seq !== this.searchSeq) return;
        this.search = parseSearch(res[0]?.[SEARCH_FIELD]);
        this.searching = false;
        if (shouldPoll(this.search) && this.isConnected) {
          this.pollTimer = setTimeout(() => void this.runSearch(poll + 1), POLL_MS);
        }
      } catch (e) {
        if (seq !== this.searchSeq) return;
        this.searching = false;
        this.searchError = errorMessage(e);
      }
    }

    /** A model group for searching before any target is selected. */
    private groupFromModels(): string | null {
      const names = Object.keys(this.appState.metadata?.models ?? {});
      const m = names.map((n) => /^_(.+)_inside_search$/.exec(n)).find((x) => x !== null);
      return m ? m[1] : null;
    }

    // ------------------------------------------------------------- actions

    private add(layer: number, index: number, mode: Mode = 'off') {
      this.interventions = addIntervention(this.interventions, layer, index, mode);
    }

    private toggleLayer(layer: number) {
      const next = new Set(this.expanded);
      if (next.has(layer)) next.delete(layer); else next.add(layer);
      this.expanded = next;
    }

    /** The finished result, else what a running (or cancelled) run has brought so far. */
    private shownResult(): InterventionPayload | PartialIntervention | null {
      const tt = this.target;
      if (tt === null || !this.resultFor.startsWith(`${traceKey(tt)}|`)) return null;
      return this.result ?? this.partial;
    }

    // -------------------------------------------------------------- render

    renderImpl(): TemplateResult {
      return html`<div class="module">
        ${this.renderHeader()}
        <div class="scroll">
          ${this.trace ? traceView(this.trace, this.shownResult(), {
            expanded: this.expanded,
            listed: (key) => this.interventions.some((iv) => interventionKey(iv) === key),
            add: (layer, index, mode) => this.add(layer, index, mode),
            toggle: (layer) => this.toggleLayer(layer),
          }) : nothing}
          ${this.renderInterventions()}
          ${this.renderSearch()}
        </div>
      </div>`;
    }

    private renderHeader() {
      const tt = this.target;
      if (tt === null) {
        return html`<div class="empty">Select a prompt, then click a token of the response in the Sequence
          Salience module to see how the model builds it, layer by layer.</div>`;
      }
      const tr = this.trace;
      const status = this.status === 'waiting'
          ? html`<div class="status waiting" role="status"><span>${this.message}</span></div>`
          : this.status === 'loading'
          ? html`<div class="status loading" role="status"><div class="bar"><div></div></div><span>${this.message}</span></div>`
          : this.status === 'error'
          ? html`<div class="status error" role="alert"><span class="error-text">${this.message}</span>
              <button @click=${() => void this.fetchTrace(tt)}>Retry</button></div>`
          : nothing;
      return html`<div class="header">
        <div class="target">Token <b class="target-token">${showToken(tt.token)}</b>
          <span class="hint traced">(${describeTraced(tt)})</span>
          ${tr ? html`<span class="facts">· model: <b class="final-prob">p=${formatProb(tr.output.target_prob)}</b>,
            <span class="final-rank">${formatRank(tr.output.target_rank)}</span>
            · top prediction <b class="final-top">${showToken(tr.output.tokens[0])}</b>
            · ${tr.layers.length} layers, ${tr.seconds.toFixed(2)} s</span>` : nothing}
        </div>
        ${status}
      </div>`;
    }

    private renderInterventions() {
      if (this.target === null) return nothing;
      const r = this.shownResult();
      const stale = r !== null && !this.running &&
          `${traceKey(this.target)}|${interventionsJson(this.interventions)}` !== this.resultFor;
      return html`<div class="panel interventions">
        <div class="section-label">Interventions <span class="hint">— click a sub-update or a search hit to add it</span></div>
        <div class="iv-list">
          ${this.interventions.length === 0 ? html`<span class="hint">none yet</span>` : nothing}
          ${this.interventions.map((iv) => html`<span class="iv-item ${iv.mode}" data-key=${interventionKey(iv)}>
              <span>L${iv.layer}·v${iv.index}</span>
              <button class="iv-mode" title=${MODE_TITLE}
                  @click=${() => { this.interventions = toggleMode(this.interventions, interventionKey(iv)); }}>${iv.mode}</button>
              <select class="iv-scope" aria-label="Scope" title="all: every position (as LM-Debugger); this position: only the traced position"
                  @change=${(e: Event) => { this.interventions = setScope(this.interventions, interventionKey(iv),
                      (e.target as HTMLSelectElement).value as Scope); }}>
                ${SCOPES.map((s) => html`<option value=${s} ?selected=${(iv.scope ?? 'all') === s}>${
                    s === 'all' ? 'all positions' : 'this position'}</option>`)}
              </select>
              <button class="iv-remove" title="Remove" aria-label="Remove"
                  @click=${() => { this.interventions = removeIntervention(this.interventions, interventionKey(iv)); }}>×</button>
            </span>`)}
        </div>
        <div class="iv-actions">
          <button class="run" ?disabled=${this.interventions.length === 0 || this.running || this.trace === null}
              @click=${() => void this.run()}>${this.running ? 'Running…' : 'Run'}</button>
          ${this.running ? html`<button class="cancel" @click=${() => this.cancelRun()}>Cancel</button>` : nothing}
          <button class="clear" ?disabled=${this.interventions.length === 0 || this.running}
              @click=${() => { this.interventions = []; this.result = null; this.partial = null; this.resultFor = ''; this.runNotice = ''; }}>Clear</button>
          ${this.runNotice ? html`<span class="status notice inline run-notice" role="status">${this.runNotice}</span>` : nothing}
          ${this.runError ? html`<span class="status error inline run-error" role="alert">${this.runError}</span>` : nothing}
        </div>
        ${this.running ? runProgressView(this.job, this.partial, this.runElapsed) : nothing}
        ${r ? comparisonView(r, stale, this.result !== null && r === this.result, this.running) : nothing}
      </div>`;
    }

    private renderSearch() {
      const s = this.search;
      return html`<div class="panel search">
        <div class="section-label">Search value vectors by token</div>
        <div class="search-row">
          <input class="search-input" type="search" placeholder="a word, e.g. Paris" .value=${this.query}
              @input=${(e: Event) => { this.query = (e.target as HTMLInputElement).value; }}
              @keydown=${(e: KeyboardEvent) => { if (e.key === 'Enter') void this.runSearch(); }}>
          <button class="search-go" ?disabled=${!this.query.trim()} @click=${() => void this.runSearch()}>Search</button>
          <select class="search-ranking" aria-label="Ranking" title="in top-k: values whose 32 top tokens contain the word (the index); projection: every value ranked by its score (E·v)[token], so strong promoters outside their top 32 are found too"
              @change=${(e: Event) => { this.searchRanking = (e.target as HTMLSelectElement).value as SearchRanking;
                                        if (this.query.trim()) void this.runSearch(); }}>
            <option value="top_k" ?selected=${this.searchRanking === 'top_k'}>in top-k</option>
            <option value="projection" ?selected=${this.searchRanking === 'projection'}>projection score</option>
          </select>
        </div>
        ${this.searchError ? html`<div class="status error inline" role="alert">${this.searchError}</div>` : nothing}
        ${s ? html`<div class="search-status ${s.index.state}">${searchStatus(s)}
            ${s.tokens.length ? html`<span class="hint">tokens: ${s.tokens.map(([, t]) => showToken(t)).join(', ')}</span>` : nothing}</div>
          <ol class="hits">${s.hits.map((h) => html`<li class="search-hit" data-layer=${h.layer} data-index=${h.index}>
            <button class="hit-add" title="Add to the interventions (off)" @click=${() => this.add(h.layer, h.index, 'off')}>
              L${h.layer}·v${h.index}</button>
            <span class="hint">rank ${h.rank + 1} of ${showToken(h.token)}${s.ranking === 'projection'
                ? html` · <span class="score">${h.score.toFixed(3)}</span>` : nothing}</span>
            <span class="vtoks">${h.top_tokens.map(showToken).join(' ')}</span>
            <button class="small add-on" title="Add switched on" @click=${() => this.add(h.layer, h.index, 'on')}>+ on</button>
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
