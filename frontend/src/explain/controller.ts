/**
 * The "Test this explanation" module's state and requests, without LIT or a DOM: the target it
 * follows, each test's settings, one test at a time as a job on `_<model>_explain`
 * (../shared/jobs.ts: run, progress polls, cancel) and the results per key. The element
 * (module.ts) renders and passes LIT's services as a `ServerHost`.
 */
import {faithfulnessStore} from '../shared/faithfulness_store.js';
import {JobClient, type ServerHost} from '../shared/jobs.js';
import {registryOf, type MethodRegistry} from '../shared/methods.js';
import type {SharedTarget} from '../shared/target_store.js';
import {partialMatches} from './curves.js';
import {
  EXPLAIN_FIELD, explainInput, explainModelFor, IG_METHOD, igAutoSettings, reduceFields, reductionMethod, resultKey,
  type Action,
} from './logic.js';
import {parseContrastive, parseCurves, parseIgAuto, type CurvesPayload, type JobStatus} from './payload.js';

/** How often a running test's status is read. */
export const POLL_MS = 1000;

/** What the user sets for the tests. */
export interface ExplainSettings {
  /** Faithfulness curves: points per curve, removal ("filler" | "delete"), the methods compared. */
  steps: number;
  removal: string;
  methods: string[];
  /** Reduce prompt: its removal. */
  reduceRemoval: string;
  /** Contrastive: the foil and the method. */
  foil: string;
  contrastMethod: string;
  /** IG steps: tolerance in percent of F(x) − F(baseline), and the most steps to try. */
  igTolerance: number;
  igCap: number;
}

export const DEFAULT_SETTINGS: Readonly<ExplainSettings> = {
  steps: 10, removal: 'filler', methods: ['grad_norm', 'grad_x_input'], reduceRemoval: 'delete', foil: '',
  contrastMethod: 'grad_x_input', igTolerance: 5, igCap: 64,
};

export class ExplainController {
  target: SharedTarget | null = null;
  /** The test whose tab is open. */
  tab: Action = 'curves';
  settings: ExplainSettings = {...DEFAULT_SETTINGS, methods: [...DEFAULT_SETTINGS.methods]};
  /** A refused run or the failure of the latest test ('' when none). */
  error = '';
  /** What the user should know: cancelled, loaded into the editor ('' when none). */
  notice = '';
  /** resultKey -> payload of finished tests. */
  results: ReadonlyMap<string, unknown> = new Map();
  /**
   * The curves' coarse result (`preliminary` payload from the job's status) of the latest run, shown
   * until the full result replaces it; kept, marked stopped, when that run is cancelled; dropped by
   * a newer run, another prompt, or a failure.
   */
  preliminary: {key: string; value: CurvesPayload} | null = null;
  /** The test running now (polled progress, elapsed time); one at a time. */
  readonly jobs: JobClient<Record<string, unknown>, JobStatus>;

  private action: Action = 'curves';
  private reg: {model: string; reg: MethodRegistry | null} | null = null;

  constructor(private readonly host: ServerHost) {
    this.jobs = new JobClient(host, {pollMs: POLL_MS});
  }

  /** The test running now, or null. */
  get running(): Action | null {
    return this.jobs.running ? this.action : null;
  }

  /** Stops following the test (the server stops it when nobody waits for its answer). */
  dispose() {
    this.jobs.dispose();
  }

  /** The salience module's target changed: another prompt forgets the results and stops the test. */
  onTarget(t: SharedTarget | null) {
    const prev = this.target;
    this.target = t;
    const otherPrompt = prev !== null && (t === null || t.datapointId !== prev.datapointId || t.text !== prev.text);
    if (otherPrompt) {
      this.results = new Map();
      this.preliminary = null;
      this.settings = {...this.settings, foil: ''};
      if (this.running !== null) this.cancel('Stopped: another datapoint was selected.');
      this.error = '';
      this.notice = '';
    }
    this.host.changed();
  }

  setTab(tab: Action) {
    this.tab = tab;
    this.error = '';
    this.host.changed();
  }

  /** Changes settings (the element checked their values). */
  set(patch: Partial<ExplainSettings>) {
    this.settings = {...this.settings, ...patch};
    this.host.changed();
  }

  setNotice(notice: string) {
    this.notice = notice;
    this.host.changed();
  }

  /** The finished result of the open tab for the target and settings shown, else its coarse result, if any. */
  result(): unknown {
    const key = resultKey(this.target, this.tab, this.settingsKey(this.tab));
    return this.results.get(key) ?? (this.preliminary?.key === key ? this.preliminary.value : undefined);
  }

  /** The server's methods, read once from the salience model's output spec (null before a target). */
  registry(): MethodRegistry | null {
    const model = this.target?.salienceModel;
    if (model === undefined) return null;
    if (this.reg?.model !== model) {
      let reg: MethodRegistry | null = null;
      try {
        reg = registryOf(this.host.models()[model], this.host.countLimits?.());
      } catch (e) {
        console.error(e);  // the salience module shows the same error
      }
      this.reg = {model, reg};
    }
    return this.reg.reg;
  }

  /** The most IG steps a request may ask for (the registry's; 0 when it is not known). */
  maxIgSteps(): number {
    return this.registry()?.extra(IG_METHOD)?.max_count ?? 0;
  }

  /** The method input reduction follows (the first token method ticked). */
  reductionMethod(): string | undefined {
    return reductionMethod(this.registry(), this.settings.methods);
  }

  /** Runs a test for the target, unless its settings are refused (then `error` says why). */
  async run(action: Action) {
    const t = this.target;
    if (t === null) return;
    const refused = this.refusal(action, t);
    if (refused !== '') {
      this.error = refused;
      this.host.changed();
      return;
    }
    const key = resultKey(t, action, this.settingsKey(action));
    const model = explainModelFor(t.salienceModel);
    const fields = this.request(action, t);
    this.action = action;
    this.error = '';
    this.notice = '';
    this.preliminary = null;
    const ask = (input: ReturnType<typeof explainInput>, message?: string) =>
        this.host.getPreds([input], model, [EXPLAIN_FIELD], message)
            .then((res) => res[0]?.[EXPLAIN_FIELD] as Record<string, unknown> | undefined);
    const settled = await this.jobs.run({
      run: async () => {
        const payload = await ask(explainInput(t, action, fields), `Testing the explanation (${action})…`);
        if (payload == null) throw new Error(`The server returned no "${EXPLAIN_FIELD}" field.`);
        if (!payload['cancelled']) {
          if (action === 'curves') parseCurves(payload);
          if (action === 'contrastive') parseContrastive(payload);
          if (action === 'ig_auto') parseIgAuto(payload);
        }
        return payload;
      },
      status: async () => {
        const job = ((await ask(explainInput(t, 'status'))) as {job?: JobStatus | null} | undefined)?.job ?? null;
        // A cancelled test of another kind may still be stopping: show only this one's progress.
        return job?.action === action ? job : null;
      },
      onProgress: (job) => {  // the curves' coarse pass, shown until the full result replaces it
        if (action !== 'curves' || job.partial == null) return;
        try {
          const p = parseCurves(job.partial);
          if (p.preliminary === true && partialMatches(p, fields, [t.t0, t.t1])) this.preliminary = {key, value: p};
        } catch (e) {
          console.error(e);  // a malformed coarse result is not shown; the full one still comes
        }
      },
      cancel: () => ask(explainInput(t, 'cancel')),
    });
    if (!settled.latest) return;  // cancelled or superseded
    if (!settled.ok) this.error = settled.error;
    else if (settled.value['cancelled']) this.notice = 'Cancelled.';
    else {
      this.results = new Map(this.results).set(key, settled.value);
      if (action === 'curves') {  // "Share this view" puts it into the page of this target
        faithfulnessStore.publish(t.salienceModel, {datapointId: t.datapointId, text: t.text, t0: t.t0, t1: t.t1,
                                                    payload: settled.value});
      }
    }
    if (!settled.ok || !settled.value['cancelled']) this.preliminary = null;  // the full result (or the error) replaces it
    this.host.changed();
  }

  /** Stops the test here at once and on the server. */
  cancel(notice = 'Cancelled.') {
    this.jobs.cancel();
    this.notice = notice;
    this.host.changed();
  }

  /** Why `action` cannot run with these settings ('' when it can). */
  private refusal(action: Action, t: SharedTarget): string {
    if (action === 'contrastive' && !this.settings.foil.trim()) {
      return 'Type a foil: the alternative response to contrast with.';
    }
    const ig = igAutoSettings(this.settings.igTolerance, this.settings.igCap, this.maxIgSteps());
    if (action === 'ig_auto' && typeof ig === 'string') return ig;
    const model = explainModelFor(t.salienceModel);
    if (!(model in this.host.models())) {
      return `The server has no "${model}" model: the tests need Sequence ` +
          "Salience's wrappers (python -m lit_app.server, or lit_app.plugin.make_models).";
    }
    return '';
  }

  /** The settings a result of `action` depends on (part of its key). */
  private settingsKey(action: Action): string {
    const s = this.settings;
    if (action === 'curves') return `${s.steps}|${s.removal}|${s.methods.join(',')}`;
    if (action === 'reduce') return `${this.reductionMethod() ?? ''}|${s.reduceRemoval}`;
    if (action === 'contrastive') return `${s.foil}|${s.contrastMethod}`;
    if (action === 'ig_auto') return `${s.igTolerance}|${s.igCap}`;
    return '';
  }

  /** The request fields of `action`. */
  private request(action: Action, t: SharedTarget): Record<string, unknown> {
    const s = this.settings;
    const common = {granularity: t.granularity === 'regex' ? 'word' : t.granularity};
    if (action === 'curves') return {...common, steps: s.steps, removal: s.removal, methods: s.methods.join(',')};
    if (action === 'reduce') return {...common, ...reduceFields(this.reductionMethod(), s.reduceRemoval)};
    if (action === 'contrastive') return {foil: s.foil, methods: s.contrastMethod};
    if (action === 'ig_auto') {
      const ig = igAutoSettings(s.igTolerance, s.igCap, this.maxIgSteps());
      return typeof ig === 'string' ? {} : ig;
    }
    return {};
  }
}
