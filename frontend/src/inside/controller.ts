/**
 * The "Inside the model" module's state and requests, without LIT or a DOM: the token it traces
 * (following the salience module's target, once the module is on screen), the interventions and
 * their run as a job on `_<group>_inside_intervene` (../shared/jobs.ts: run, status polls with
 * the results so far, cancel); the value-vector search with its index polls is search.ts's (the class
 * this one extends). The element (module.ts) renders and passes LIT's services as an `InsideHost`.
 */
import {INSIDE_T_FIELD, INTERVENTIONS_FIELD, INTERVENTION_FIELD, RUN_ACTION_FIELD, TRACE_FIELD} from '../shared/fields.js';
import {JobClient} from '../shared/jobs.js';
import {derivedInput, errorMessage, type IndexedInputLike} from '../shared/request.js';
import type {SharedTarget} from '../shared/target_store.js';
import {
  addIntervention, hashString, insideModels, interventionsJson, showToken, traceKey, traceTarget,
  type InsideModels, type TraceTarget,
} from './logic.js';
import {type Intervention, type InterventionPayload, type Mode, parseIntervention, parseRunStatus,
        parseTrace, type PartialIntervention, type RunJob, type TracePayload} from './payload.js';
import {ValueSearch, type SearchHost} from './search.js';

/** How often the run's status is read: the probabilities, then the text as it is generated. */
export const RUN_POLL_MS = 400;
/** How often a trace that waits for the module's tab checks whether it is shown. */
export const SHOWN_POLL_MS = 300;

export type Status = 'idle' | 'waiting' | 'loading' | 'ready' | 'error';

/** What the controller needs from LIT and the element. */
export interface InsideHost extends SearchHost {
  /** Whether the element is laid out and visible (LIT hides an unselected tab with `visibility: hidden`). */
  isShown(): boolean;
}

/** The outcome of a run request: the result, or what a cancelled run had computed. */
type RunAnswer = {result: InterventionPayload} | {cancelled: PartialIntervention | null};

let nonce = 0;

export class InsideController extends ValueSearch<InsideHost> {
  /** The trace's state and its message (waiting, loading or error). */
  status: Status = 'idle';
  message = '';
  target: TraceTarget | null = null;
  trace: TracePayload | null = null;
  /** Layers whose sub-updates are listed in full. */
  expanded: ReadonlySet<number> = new Set();
  interventions: Intervention[] = [];
  /** The finished run's result; null while none. */
  result: InterventionPayload | null = null;
  /** The results so far of the run (from its status polls, or its answer when cancelled). */
  partial: PartialIntervention | null = null;
  runNotice = '';
  /** The run: polled status (`progress`), elapsed time, its error. */
  readonly runs: JobClient<RunAnswer, RunJob>;

  private traceSeq = 0;
  private shownTimer: ReturnType<typeof setInterval> | undefined;
  /** Key of the trace the result belongs to, and the interventions it ran. */
  private resultFor = '';

  constructor(host: InsideHost) {
    super(host);
    this.runs = new JobClient(host, {pollMs: RUN_POLL_MS});
  }

  get running(): boolean {
    return this.runs.running;
  }

  /** The run's failure ('' when none). */
  get runError(): string {
    return this.runs.error;
  }

  /** Where the run stands (the element's data-run attribute; e2e tests wait on it). */
  get runState(): 'running' | 'done' | 'error' | 'cancelled' | 'idle' {
    return this.running ? 'running' : this.result ? 'done' : this.runError ? 'error' : this.partial ? 'cancelled' : 'idle';
  }

  /** Stops the timers, the search's polls and a running run (here and on the server). */
  dispose() {
    this.stopSearch();
    clearInterval(this.shownTimer);
    if (this.running) this.cancelRun();
  }

  /** The models of the target's group, or null when the server has none for it. */
  models(): InsideModels | null {
    const group = this.target?.group;
    if (!group) return null;
    const names = insideModels(group);
    return names.trace in this.host.models() ? names : null;
  }

  /** The salience module's target changed: another token traces again, another prompt drops the interventions. */
  onTarget(s: SharedTarget | null) {
    const tt = traceTarget(s);
    const prev = this.target;
    if (tt !== null && prev !== null && traceKey(tt) === traceKey(prev)) {
      this.target = tt;  // same token (e.g. another granularity): keep the trace
      this.host.changed();
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
    this.runs.reset();
    if (tt === null) {
      this.status = 'idle';
    } else {
      this.traceWhenShown(tt);
    }
    this.host.changed();
  }

  /**
   * Traces `tt` now if the module is on screen, else once its tab is opened: in the default
   * layout this module is a tab beside the salience module (lit_app/serving/layouts.py), and a trace
   * nobody looks at would take the CPU from the salience the user is waiting for. LIT hides
   * an unselected tab with `visibility: hidden`, which no observer reports, so while a trace
   * waits the module checks every SHOWN_POLL_MS (a style read; nothing else runs).
   */
  private traceWhenShown(tt: TraceTarget) {
    clearInterval(this.shownTimer);
    if (this.host.isShown()) {
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
      } else if (this.host.isShown()) {
        clearInterval(this.shownTimer);
        void this.fetchTrace(now);
      }
    }, SHOWN_POLL_MS);
  }

  /** Traces the token through the layers (the Retry button calls it too). */
  async fetchTrace(tt: TraceTarget) {
    const models = this.models();
    if (models === null) {
      this.status = 'error';
      this.message = `The server has no "${insideModels(tt.group).trace}" model. ` +
          'Start it with python -m lit_app.server, or build the models with lit_app.plugin.make_models, ' +
          'to get the Inside-the-model wrappers.';
      this.host.changed();
      return;
    }
    const seq = ++this.traceSeq;
    this.status = 'loading';
    this.message = `Tracing ${showToken(tt.token)} through the layers…`;
    this.host.changed();
    try {
      const input = derivedInput(baseInput(tt), {[INSIDE_T_FIELD]: tt.t}, `inside-t${tt.t}`);
      const res = await this.host.getPreds([input], models.trace, [TRACE_FIELD], 'Tracing the layers…');
      if (seq !== this.traceSeq) return;
      this.trace = parseTrace(res[0]?.[TRACE_FIELD]);
      this.status = 'ready';
      this.message = '';
    } catch (e) {
      if (seq !== this.traceSeq) return;
      this.status = 'error';
      this.message = errorMessage(e);
    }
    this.host.changed();
  }

  /**
   * Runs the interventions as a job on the server: the request answers when the run ends, while
   * the status, polled, brings the probabilities first, then the regenerated text, then salience.
   */
  async run() {
    const tt = this.target;
    const models = this.models();
    if (tt === null || models === null || this.interventions.length === 0) return;
    const json = interventionsJson(this.interventions);
    this.runNotice = '';
    this.result = null;
    this.partial = null;
    this.resultFor = `${traceKey(tt)}|${json}`;
    const ask = (action: string) => this.host.getPreds([runInput(tt, action, json)], models.intervene,
                                                       [INTERVENTION_FIELD]).then((res) => res[0]?.[INTERVENTION_FIELD]);
    const settled = await this.runs.run({
      run: async (): Promise<RunAnswer> => {
        const payload = (await ask('run')) as Record<string, unknown> | undefined;
        if (payload?.['cancelled']) return {cancelled: (payload['partial'] as PartialIntervention | null) ?? null};
        return {result: parseIntervention(payload)};
      },
      status: async () => {
        const job = parseRunStatus(await ask('status'));
        return job !== null && job.action === 'run' ? job : null;
      },
      onProgress: (job) => {
        if (job.partial) this.partial = job.partial;
      },
      cancel: () => ask('cancel'),
    });
    if (!settled.latest || !settled.ok) return;  // cancelled, superseded, or runs.error says why
    if ('result' in settled.value) {
      this.result = settled.value.result;
    } else {
      this.partial = settled.value.cancelled ?? this.partial;
      this.runNotice = 'Cancelled.';
    }
    this.host.changed();
  }

  /** Stops the run here at once and on the server (between steps or generated tokens). */
  cancelRun(notice = 'Cancelled.') {
    this.runs.cancel();
    this.runNotice = notice;
    this.host.changed();
  }

  /** The finished result, else what a running (or cancelled) run has brought so far, for the token shown. */
  shownResult(): InterventionPayload | PartialIntervention | null {
    const tt = this.target;
    if (tt === null || !this.resultFor.startsWith(`${traceKey(tt)}|`)) return null;
    return this.result ?? this.partial;
  }

  /** Whether the result shown was run with other interventions than those listed now. */
  resultIsStale(): boolean {
    return this.target !== null && this.shownResult() !== null && !this.running &&
        `${traceKey(this.target)}|${interventionsJson(this.interventions)}` !== this.resultFor;
  }

  // ------------------------------------------------------------- interventions

  setInterventions(interventions: Intervention[]) {
    this.interventions = interventions;
    this.host.changed();
  }

  add(layer: number, index: number, mode: Mode = 'off') {
    this.setInterventions(addIntervention(this.interventions, layer, index, mode));
  }

  /** Empties the list and forgets the result. */
  clear() {
    this.interventions = [];
    this.result = null;
    this.partial = null;
    this.resultFor = '';
    this.runNotice = '';
    this.host.changed();
  }

  toggleLayer(layer: number) {
    const next = new Set(this.expanded);
    if (next.has(layer)) next.delete(layer); else next.add(layer);
    this.expanded = next;
    this.host.changed();
  }

  /** The traced token's model group: the one the search asks. */
  protected tracedGroup(): string | undefined {
    return this.target?.group;
  }
}

function baseInput(tt: TraceTarget): IndexedInputLike {
  return {id: tt.datapointId, data: tt.input, meta: {}};
}

/** A request to the intervene model; a fresh id each time, so LIT never answers from its cache. */
function runInput(tt: TraceTarget, action: string, json: string): IndexedInputLike {
  const extra: Record<string, unknown> = {[RUN_ACTION_FIELD]: action, [INSIDE_T_FIELD]: tt.t};
  if (action === 'run') extra[INTERVENTIONS_FIELD] = json;
  const tag = action === 'run' ? json : '';
  return derivedInput(baseInput(tt), extra, `iv-${action}-t${tt.t}-${hashString(tag)}-${Date.now()}-${nonce++}`);
}
