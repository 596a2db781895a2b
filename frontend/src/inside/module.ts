/**
 * The "Inside the model" LIT module: follows the Sequence Salience module's
 * target (shared/target_store.ts) and shows, for the first token of the
 * selected span, the model's prediction layer by layer (logit lens before and
 * after each feed-forward block), the largest feed-forward sub-updates with
 * their tokens, an intervention list (click a sub-update or a search hit to
 * add it; off/on; run) with a before/after comparison, and a search of value
 * vectors by token. All logic lives in ./logic.ts; this file wires it to
 * LIT's services and renders.
 */
import {css, html, nothing, svg, type TemplateResult} from 'lit';

import {derivedInput, errorMessage, shouldDisplay, type IndexedInputLike, type ModelInfoLike} from '../request.js';
import {targetStore, type SharedTarget} from '../shared/target_store.js';
import {litModuleBase} from '../shared/lit_services.js';
import {renderRunSteps} from './steps.js';
import {
  addIntervention, comparisonRows, describeIntervention, describeRun, formatProb, parseRunStatus, RUN_ACTION_FIELD,
  runFraction, stepViews, type PartialIntervention, type RunJob, formatRank, hashString, insideModels,
  INSIDE_T_FIELD, INTERVENTION_FIELD, interventionKey, interventionsJson, INTERVENTIONS_FIELD, layerDeltas,
  LIMIT_FIELD, RANKING_FIELD, type SearchRanking, parseIntervention, parseSearch, parseTrace, probPolyline, QUERY_FIELD, removeIntervention,
  SCOPES, type Scope, SEARCH_FIELD, searchStatus, setScope, settlesAt, shouldPoll, showToken, toggleMode, TRACE_FIELD, traceKey, traceTarget,
  type Intervention, type InterventionPayload, type LayerTrace, type Mode, type SearchPayload, type SubUpdate,
  type TracePayload, type TraceTarget,
} from './logic.js';

export const INSIDE_TAG = 'inside-model-module';

const SEARCH_LIMIT = 30;
const POLL_MS = 1500;
const RUN_POLL_MS = 400;  // the run's status: probabilities, then the text as it is generated
let nonce = 0;
const INLINE_SUBS = 3;
const MODE_TITLE = 'Click to switch: off (coefficient 0) → on (LM-Debugger: the layer\'s largest |m|·‖v‖ at the traced ' +
    'position + 0.01, one constant; GPT-2 before the GELU) → on_layer_max (just above the layer\'s largest ' +
    'coefficient at each position)';
const INLINE_PREDS = 3;


type Status = 'idle' | 'loading' | 'ready' | 'error';

/** Defines the module class on top of LIT's LitModule and returns it. */
export function makeInsideModuleClass(LitModule: unknown): CustomElementConstructor {
  const {Base, baseStyles} = litModuleBase(LitModule);

  class InsideModelModule extends Base {
    static title = 'Inside the model';
    static numCols = 8;
    static duplicateForModelComparison = false;
    static duplicateForExampleComparison = false;
    static infoMarkdown =
        'How the model builds its prediction of the selected response token, layer by layer ' +
        '(LM-Debugger: logit lens before/after each feed-forward block, feed-forward sub-updates). ' +
        'Click a sub-update or a search hit to add it to the interventions, switch it off/on, and run.';

    static template(model: string, selectionServiceIndex: number, shouldReact: number): TemplateResult {
      return html`<inside-model-module model=${model} .shouldReact=${shouldReact}
          selectionServiceIndex=${selectionServiceIndex}></inside-model-module>`;
    }

    static shouldDisplayModule(modelSpecs: Record<string, ModelInfoLike>): boolean {
      return shouldDisplay(modelSpecs);
    }

    static get properties() {
      return {
        status: {state: true}, message: {state: true}, target: {state: true}, trace: {state: true},
        expanded: {state: true}, interventions: {state: true}, result: {state: true}, running: {state: true},
        runError: {state: true}, query: {state: true}, searchRanking: {state: true}, search: {state: true}, searchError: {state: true},
        searching: {state: true}, job: {state: true}, partial: {state: true}, runNotice: {state: true},
        runElapsed: {state: true},
      };
    }

    static get styles() {
      const base = baseStyles == null ? [] : Array.isArray(baseStyles) ? baseStyles : [baseStyles];
      return [...base, STYLES];
    }

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

    private unsubscribe: (() => void) | null = null;
    private traceSeq = 0;
    private runSeq = 0;
    private searchSeq = 0;
    private pollTimer: ReturnType<typeof setTimeout> | undefined;
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

    override connectedCallback() {
      super.connectedCallback();
      this.unsubscribe = targetStore.subscribe((t) => this.onTarget(t));
    }

    override disconnectedCallback() {
      this.unsubscribe?.();
      this.unsubscribe = null;
      clearTimeout(this.pollTimer);
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

    private onTarget(s: SharedTarget | null) {
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
      void this.fetchTrace(tt);
    }

    private async fetchTrace(tt: TraceTarget) {
      const models = this.models();
      if (models === null) {
        this.status = 'error';
        this.message = `The server has no "${insideModels(tt.group).trace}" model. ` +
            'Start it with python -m lit_app.server to get the Inside-the-model wrappers.';
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
          ${this.trace ? this.renderTrace(this.trace) : nothing}
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
      const status = this.status === 'loading'
          ? html`<div class="status loading" role="status"><div class="bar"><div></div></div><span>${this.message}</span></div>`
          : this.status === 'error'
          ? html`<div class="status error" role="alert"><span class="error-text">${this.message}</span>
              <button @click=${() => void this.fetchTrace(tt)}>Retry</button></div>`
          : nothing;
      return html`<div class="header">
        <div class="target">Token <b class="target-token">${showToken(tt.token)}</b>
          (response token ${tt.t + 1} of ${tt.nTargets})${tt.whole ? html`<span class="hint"> — whole response
          selected: tracing its first token; click a token to trace it</span>` : nothing}
          ${tr ? html`<span class="facts">· model: <b class="final-prob">p=${formatProb(tr.output.target_prob)}</b>,
            <span class="final-rank">${formatRank(tr.output.target_rank)}</span>
            · top prediction <b class="final-top">${showToken(tr.output.tokens[0])}</b>
            · ${tr.layers.length} layers, ${tr.seconds.toFixed(2)} s</span>` : nothing}
        </div>
        ${status}
      </div>`;
    }

    private renderChart(tr: TracePayload, r: InterventionPayload | PartialIntervention | null) {
      const w = 300, h = 60;
      const after = tr.layers.map((l) => l.after.target_prob);
      const before = tr.layers.map((l) => l.before.target_prob);
      const deltas = r ? layerDeltas(r) : [];
      const iv = deltas.length ? deltas.map((d) => d.after) : null;
      return html`<div class="chart" title="p(target) after each layer: solid after the FFN, dashed before it${iv ? '; orange under the interventions' : ''}">
        <svg viewBox="0 0 ${w} ${h}" preserveAspectRatio="none" width="100%" height="${h}">
          ${svg`<polyline class="line-before" points=${probPolyline(before, w, h)}></polyline>
                <polyline class="line-after" points=${probPolyline(after, w, h)}></polyline>
                ${iv ? svg`<polyline class="line-iv" points=${probPolyline(iv, w, h)}></polyline>` : nothing}`}
        </svg>
        <div class="axis"><span>layer 0</span><span>p(${showToken(tr.target_token)}) by layer</span><span>layer ${tr.layers.length - 1}</span></div>
      </div>`;
    }

    private renderTrace(tr: TracePayload) {
      const r = this.shownResult();
      const after = r?.after.trace ? r.after.trace.layers : null;
      const settle = settlesAt(tr.layers);
      return html`
        ${this.renderChart(tr, r)}
        <div class="section-label">Layer by layer${settle >= 0 ? html` <span class="hint">— the top prediction from layer ${settle} on</span>` : nothing}</div>
        <table class="layers">
          <thead><tr><th>Layer</th><th title="Rank of the target before → after the feed-forward block">Rank</th>
            <th title="${after ? 'before → under the interventions' : 'after the feed-forward block'}">p(${showToken(tr.target_token)})${after ? ' → with interventions' : ''}</th>
            <th>Top predictions (after FFN)</th><th title="Largest |coefficient| × ‖value‖; click to add to the interventions">Top sub-updates</th></tr></thead>
          <tbody>${tr.layers.map((l) => this.renderLayer(l, after?.[l.layer] ?? null))}</tbody>
        </table>`;
    }

    private renderLayer(l: LayerTrace, iv: LayerTrace | null) {
      const open = this.expanded.has(l.layer);
      const p = l.after.target_prob;
      const top = l.after.target_rank === 0;
      return html`
        <tr class="layer-row ${open ? 'open' : ''} ${top ? 'is-top' : ''}" data-layer=${l.layer} tabindex="0"
            @click=${() => this.toggleLayer(l.layer)}
            @keydown=${(e: KeyboardEvent) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); this.toggleLayer(l.layer); } }}>
          <td class="num">${l.layer}</td>
          <td class="rank">${formatRank(l.before.target_rank)} → <b>${formatRank(l.after.target_rank)}</b></td>
          <td class="prob"><div class="pbar"><div style="width:${(p * 100).toFixed(1)}%"></div></div>
            <span class="pval">${formatProb(p)}</span>
            ${iv ? html`<span class="ival ${iv.after.target_prob > p ? 'up' : iv.after.target_prob < p ? 'down' : ''}">→ ${formatProb(iv.after.target_prob)}</span>` : nothing}</td>
          <td class="preds"><div class="chips">${l.after.tokens.slice(0, INLINE_PREDS).map((t, i) =>
              html`<span class="tok" title="p=${formatProb(l.after.probs[i])}">${showToken(t)}</span>`)}</div></td>
          <td class="subs"><div class="chips">${l.sub_updates.slice(0, INLINE_SUBS).map((s) => this.renderSub(s))}</div></td>
        </tr>
        ${open ? this.renderDetails(l) : nothing}`;
    }

    private renderSub(s: SubUpdate, withButtons = false) {
      const key = interventionKey(s);
      const listed = this.interventions.some((iv) => interventionKey(iv) === key);
      const title = `layer ${s.layer}, value ${s.index}: coefficient ${s.coef.toFixed(3)}, ‖v‖ ${s.norm.toFixed(3)}` +
          `, score ${s.score.toFixed(3)}${s.coef < 0 ? ' (negative: pushes these tokens down)' : ''}` +
          `\ntop tokens: ${s.top_tokens.map(showToken).join(' ')}\nclick: add to the interventions (off)`;
      const chip = html`<button class="sub-update ${listed ? 'listed' : ''} ${s.coef < 0 ? 'neg' : 'pos'}"
          data-layer=${s.layer} data-index=${s.index} title=${title}
          @click=${(e: Event) => { e.stopPropagation(); this.add(s.layer, s.index, 'off'); }}>
          <span class="vid">v${s.index}</span><span class="coef">${s.coef >= 0 ? '+' : '−'}${Math.abs(s.coef).toFixed(2)}</span>
          <span class="vtoks">${s.top_tokens.slice(0, withButtons ? 8 : 2).map(showToken).join(' ')}</span></button>`;
      if (!withButtons) return chip;
      return html`<div class="sub-line">
        <button class="small add-on" title="Add switched on" @click=${(e: Event) => { e.stopPropagation(); this.add(s.layer, s.index, 'on'); }}>+ on</button>${chip}</div>`;
    }

    private renderDetails(l: LayerTrace) {
      const list = (title: string, p: LayerTrace['after']) => html`<div class="plist"><div class="sub-title">${title}</div>
        <ol>${p.tokens.map((t, i) => html`<li><span class="tok">${showToken(t)}</span> <span class="pv">${formatProb(p.probs[i])}</span></li>`)}</ol></div>`;
      return html`<tr class="details" data-layer=${l.layer}><td colspan="5"><div class="details-grid">
        ${list('Before FFN', l.before)}
        ${list('After FFN', l.after)}
        <div class="slist"><div class="sub-title">Sub-updates (|coef| × ‖v‖) · max coef ${l.max_coef.toFixed(2)} · ‖FFN out‖ ${l.ffn_norm.toFixed(2)}</div>
          ${l.sub_updates.map((s) => this.renderSub(s, true))}</div>
      </div></td></tr>`;
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
        ${this.running ? this.renderRunProgress() : nothing}
        ${r ? this.renderComparison(r, stale) : nothing}
      </div>`;
    }

    private renderRunProgress() {
      const job = this.job;
      const frac = runFraction(job);
      return html`<div class="run-progress" role="status">
        <div class="status loading"><div class="pbar-run" role="progressbar" aria-valuemin="0" aria-valuemax="100"
            aria-valuenow=${Math.floor(frac * 100)}><div style="width:${(frac * 100).toFixed(1)}%"></div></div>
          <span class="progress-text">${describeRun(job)}${this.runElapsed > 0 ? ` (${this.runElapsed} s)` : ''}</span></div>
        ${renderRunSteps(stepViews(job?.partial?.steps ?? this.partial?.steps, job))}
      </div>`;
    }

    private renderComparison(r: InterventionPayload | PartialIntervention, stale: boolean) {
      const rows = comparisonRows(r);
      const done = this.result !== null && r === this.result;
      return html`<div class="compare ${stale ? 'stale' : ''} ${done ? 'done' : 'partial'}">
        <div class="sub-title">Before vs. with ${r.interventions.map((iv) => describeIntervention(iv)).join(', ')}
          ${stale ? html`<span class="hint">(the list changed: run again)</span>` : nothing}
          ${!done && !this.running ? html`<span class="hint">(stopped before the end: run again for the rest)</span>` : nothing}</div>
        ${rows.length ? html`<table>
          <thead><tr><th></th><th>Before</th><th>After</th></tr></thead>
          <tbody>${rows.map((row) => html`<tr class="${row.changed ? 'changed' : ''}" data-row=${row.label.split(/[ (]/)[0]}>
            <th>${row.label}</th><td class="before">${row.before}</td><td class="after">${row.after}</td></tr>`)}</tbody>
        </table>` : nothing}
        ${done && r.steps ? renderRunSteps(stepViews(r.steps)) : nothing}
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

const STYLES = css`
  :host { display: block; height: 100%; }
  .module { display: flex; flex-direction: column; height: 100%; font-family: Roboto, sans-serif; font-size: 13px; }
  .scroll { flex: 1; overflow-y: auto; padding: 4px 8px; min-height: 0; }
  .header { padding: 6px 8px; border-bottom: 1px solid #dadce0; }
  .empty { padding: 16px; color: #5f6368; }
  .hint { color: #5f6368; font-weight: normal; }
  .facts { color: #3c4043; margin-left: 4px; }
  .status { display: flex; gap: 8px; align-items: center; padding: 4px 0; }
  .status.inline { display: inline-flex; padding: 0 6px; }
  .status.error { background: #fce8e6; color: #a50e0e; border-radius: 4px; padding: 4px 8px; }
  .status.notice { color: #137333; }
  .run-progress { margin: 2px 0 6px; }
  .pbar-run { width: 140px; height: 6px; background: #e8eaed; border-radius: 3px; overflow: hidden; flex: none; }
  .pbar-run > div { height: 100%; background: #1a73e8; transition: width 0.3s; }
  .run-steps { list-style: none; margin: 2px 0; padding: 0; display: flex; gap: 14px; flex-wrap: wrap; font-size: 12px; }
  .run-step { color: #5f6368; } .run-step.running { color: #1a73e8; font-weight: 500; } .run-step.done { color: #137333; }
  .run-step .mark { margin-right: 4px; } .step-detail { margin-left: 4px; color: #5f6368; font-weight: normal; }
  .status .bar { width: 100px; height: 4px; background: #e8eaed; overflow: hidden; border-radius: 2px; flex: none; display: inline-block; }
  .status .bar > * { display: block; width: 40%; height: 100%; background: #1a73e8; animation: slide 1.2s ease-in-out infinite; }
  @keyframes slide { from { transform: translateX(-100%); } to { transform: translateX(250%); } }
  .section-label { font-weight: 500; color: #5f6368; margin: 8px 0 4px; }
  .sub-title { font-weight: 500; color: #3c4043; margin: 4px 0; }
  .chart svg { display: block; border: 1px solid #e8eaed; border-radius: 4px; background: #fafafa; }
  .chart polyline { fill: none; stroke-width: 1.5; vector-effect: non-scaling-stroke; }
  .line-after { stroke: #1a73e8; }
  .line-before { stroke: #8ab4f8; stroke-dasharray: 3 2; }
  .line-iv { stroke: #f29900; }
  .axis { display: flex; justify-content: space-between; font-size: 11px; color: #5f6368; }
  table.layers { width: 100%; border-collapse: collapse; font-size: 12px; }
  table.layers th { text-align: left; color: #5f6368; font-weight: 500; border-bottom: 1px solid #dadce0; padding: 2px 4px; position: sticky; top: 0; background: #fff; }
  .layer-row td { padding: 1px 4px; border-bottom: 1px solid #f1f3f4; vertical-align: middle; }
  table.layers { table-layout: fixed; }
  table.layers th:nth-child(1) { width: 36px; } table.layers th:nth-child(2) { width: 118px; }
  table.layers th:nth-child(3) { width: 150px; } table.layers th:nth-child(4) { width: 20%; }
  .chips { display: flex; flex-wrap: nowrap; overflow: hidden; align-items: center; }
  .chips > * { flex: none; }
  .layer-row { cursor: pointer; }
  .layer-row:hover { background: #f8f9fa; }
  .layer-row:focus-visible { outline: 2px solid #1a73e8; }
  .layer-row.is-top .num { color: #137333; font-weight: 500; }
  .num { width: 36px; font-variant-numeric: tabular-nums; }
  .rank { white-space: nowrap; font-variant-numeric: tabular-nums; }
  .prob { white-space: nowrap; min-width: 110px; }
  .pbar { display: inline-block; width: 32px; height: 8px; background: #e8eaed; border-radius: 2px; vertical-align: middle; }
  .pbar > div { height: 100%; background: #1a73e8; border-radius: 2px; }
  .pval, .ival { font-variant-numeric: tabular-nums; margin-left: 3px; font-size: 11.5px; }
  .ival.up { color: #137333; } .ival.down { color: #a50e0e; }
  .tok { font-family: 'Roboto Mono', monospace; background: #f1f3f4; border-radius: 2px; padding: 0 3px; margin-right: 3px; white-space: pre; }
  .sub-update { font: inherit; font-size: 11.5px; border: 1px solid #dadce0; border-radius: 10px; background: #fff;
                padding: 0 6px; margin: 1px 2px; cursor: pointer; white-space: nowrap; }
  .sub-update:hover { border-color: #1a73e8; }
  .sub-update.listed { background: #fde293; border-color: #f29900; }
  .sub-update .vid { color: #5f6368; margin-right: 3px; }
  .sub-update.pos .coef { color: #137333; } .sub-update.neg .coef { color: #a50e0e; }
  .vtoks { font-family: 'Roboto Mono', monospace; margin-left: 4px; white-space: pre; }
  .details td { background: #f8f9fa; padding: 4px 8px; }
  .details-grid { display: grid; grid-template-columns: 150px 150px minmax(0, 1fr); gap: 8px; }
  .plist li { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
  .slist { overflow: hidden; }
  .plist ol { margin: 0; padding-left: 18px; } .pv { color: #5f6368; font-variant-numeric: tabular-nums; }
  .sub-line { display: flex; align-items: center; gap: 4px; min-width: 0; }
  .sub-line .sub-update { flex: 0 1 auto; min-width: 0; overflow: hidden; text-overflow: ellipsis; }
  .sub-line .add-on { flex: none; }
  button.small { font: inherit; font-size: 11px; padding: 0 4px; }
  .panel { border-top: 1px solid #dadce0; margin-top: 8px; padding-top: 2px; }
  .iv-list { display: flex; flex-wrap: wrap; gap: 6px; align-items: center; min-height: 24px; }
  .iv-item { display: inline-flex; gap: 4px; align-items: center; border: 1px solid #dadce0; border-radius: 12px; padding: 1px 4px 1px 8px; }
  .iv-item.off { background: #fce8e6; } .iv-item.on { background: #e6f4ea; }
  .iv-item button { font: inherit; font-size: 11px; border: none; background: none; cursor: pointer; padding: 0 3px; }
  .iv-mode { font-weight: 500; text-decoration: underline dotted; }
  .iv-actions { display: flex; gap: 8px; align-items: center; margin: 6px 0; }
  .compare table { border-collapse: collapse; width: 100%; }
  .compare th, .compare td { text-align: left; padding: 2px 6px; border-bottom: 1px solid #f1f3f4; vertical-align: top; }
  .compare td { white-space: pre-wrap; font-family: 'Roboto Mono', monospace; font-size: 12px; }
  .compare tr.changed td.after { background: #fef7e0; }
  .compare.stale { opacity: 0.6; }
  .search-row { display: flex; gap: 6px; }
  .search-input { flex: 1; max-width: 260px; }
  .search-status { margin: 4px 0; color: #3c4043; }
  ol.hits { list-style: none; padding: 0; margin: 0; }
  .search-hit { display: flex; gap: 6px; align-items: center; padding: 1px 0; }
  .hit-add { font: inherit; font-size: 12px; cursor: pointer; }
`;
