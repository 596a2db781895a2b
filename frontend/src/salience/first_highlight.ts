/**
 * The first highlight a new datapoint starts (controller.ts's `select`): the salience model and the server's
 * methods checked, one request for the whole response (`quickInput`) with its progress line (the gradient pass's
 * layers, then IG's steps or SmoothGrad's samples), the response streaming in meanwhile (stream.ts), and its
 * payload settled into the selection; then the background matrices and `ensureData` take over. With it, the clock
 * of a user action until its result is on screen (`markAction`, `finishedAction`; painted.ts reports it).
 * The class controller.ts's extends; it extends selection.ts's.
 */
import {RESPONSE_FIELD, SALIENCE_FIELD, SPAN_SALIENCE_FIELD} from '../shared/fields.js';
import {JobClient} from '../shared/jobs.js';
import {METHOD_REGISTRY_FIELD} from '../shared/methods.js';
import {salienceModelFor, type IndexedInputLike} from '../shared/request.js';
import {PROGRESS_READS, type SalienceHost} from './page.js';
import {isFinal, numTargets, parsePayload, type SaliencePayload} from './payload.js';
import {explainsGeneration, quickInput} from './request.js';
import {SalienceSelection, type Status} from './selection.js';
import {wholeResponse} from './target.js';

/** A user action being timed until the first frame that shows its result. */
export interface Action {
  name: string;
  t: number;
}

export abstract class SalienceFirstHighlight extends SalienceSelection {
  /** The first highlight of a selection (its clock, its IG / SmoothGrad progress): ../shared/jobs.ts. */
  protected readonly main: JobClient<SaliencePayload | null, string>;
  private action: Action | null = null;

  constructor(host: SalienceHost) {
    super(host);
    // While tokens stream in they are the progress (the line counts them): no re-render for the
    // seconds, whose repaint each second took from the generation on 2 cores (docs/benchmarks.md).
    this.main = new JobClient(host, {...PROGRESS_READS, tickRenders: () => !this.tokensStreaming()});
  }

  /** Seconds since loading started. */
  get elapsed(): number {
    return this.main.elapsed;
  }

  /** Starts timing a user action (`finishedAction` ends it). */
  markAction(name: string) {
    this.action = {name, t: performance.now()};
  }

  /** The timed action, once nothing it waits for is loading (then forgotten); else null. */
  finishedAction(): Action | null {
    const a = this.action;
    if (a === null || this.status === 'loading' || this.side?.kind === 'loading') return null;
    this.action = null;
    return a;
  }

  protected stopLoading(status: Status, message = '') {
    this.main.reset();
    this.status = status;
    this.message = message;
    this.host.changed();
  }

  protected async fetchMain(d: IndexedInputLike) {
    const model = this.host.modelName();
    this.salienceModel = salienceModelFor(model, this.host.models());
    if (this.salienceModel === null) {
      this.stopLoading('error', `Model "${model}" has no "${SALIENCE_FIELD}" output, nor does ` +
          `"_${model}_salience". Start the server with python -m lit_app.server.`);
      return;
    }
    const reg = this.registry();
    if (reg === null) {
      this.stopLoading('error', this.regError || `Model "${this.salienceModel}" publishes no "${METHOD_REGISTRY_FIELD}" ` +
          'in its output spec (a server older than this page). Start the server with python -m lit_app.server.');
      return;
    }
    this.markAction('select');
    this.status = 'loading';
    // A row with its own target generates nothing: say what runs (issue 35).
    this.message = explainsGeneration(d) ? 'Generating the response and computing salience…' : 'Computing salience…';
    const gen = this.generation;
    const current = () => gen === this.generation && this.input === d;
    // First highlight: the whole response from one forward + backward; the per-token matrices
    // follow in the background (matrices.ts).
    const extra = this.extra();
    const info = extra === null ? undefined : reg.extra(extra.method)!;
    const label = extra === null ? 'Computing salience for the whole response…'
        : `${reg.label(extra.method)} (${extra.count} ${info!.count_unit}) for the whole response…`;
    const job = this.spans.followJob(d);
    const settled = await this.main.run({
      run: async () => {
        const req = this.host.getPreds([quickInput(reg, d, extra)], this.salienceModel!,
                                       [SALIENCE_FIELD, RESPONSE_FIELD, SPAN_SALIENCE_FIELD], 'Computing salience…');
        // Meanwhile the response streams in as it is generated.
        if (explainsGeneration(d)) {
          const ticket = this.main.latestTicket;
          void this.stream.follow(d, () => this.main.isLatest(ticket) && current());
        }
        const res = await this.host.loadLatest('salience', req);
        return res === null || !current() ? null : parsePayload(res[0]?.[SALIENCE_FIELD]);
      },
      // Any wait over a second shows its % and time left: the layers of the gradient pass (a long prompt's
      // takes minutes, issue 43), then IG's steps or SmoothGrad's samples.
      status: (n) => job.read(n),
      wanted: current,
      onProgress: (progress) => {
        if (progress !== '') this.message = label + progress;
      },
    });
    if (!settled.ok) {
      if (this.input !== d) return;
      this.action = null;
      this.stopLoading('error', settled.error);
      return;
    }
    const payload = settled.value;
    if (payload === null || !current()) return;  // a newer selection won
    this.stream.shown = null;
    this.values.absorbPayload(reg, payload, extra);
    this.span = wholeResponse(numTargets(payload));
    this.payload = payload;
    this.matrices.detail = payload.detail ?? null;
    this.stopLoading('ready');
    if (!isFinal(this.detail)) void this.matrices.poll(d, gen, null);
    this.ensureData();
  }
}
