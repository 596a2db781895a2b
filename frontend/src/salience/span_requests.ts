/**
 * The span requests: the exact salience of a target span the payload cannot give (one forward + backward; IG,
 * SmoothGrad: one batch), asked of the server when the view shows it, with its progress on the side line
 * (`span_progress` reads of the job, named by its id) and its cancel once the view moved on.
 */
import {SALIENCE_FIELD, SPAN_SALIENCE_FIELD} from '../shared/fields.js';
import {JobClient} from '../shared/jobs.js';
import {errorMessage, type IndexedInputLike} from '../shared/request.js';
import {PROGRESS_READS, type SaliencePage} from './page.js';
import {describeProgress, isFinal, numTargets, parseDetail, type DetailStatus, type SaliencePayload} from './payload.js';
import {spanCancelInput, spanInput, spanProgressInput, type Extra} from './request.js';
import {spanKey, type TargetSpan} from './spans.js';
import {describeSpan} from './target.js';

/** How many span job ids the module remembers (isOwnSpanStatus): far more than one selection's runs. */
export const MAX_SPAN_JOBS_SEEN = 64;

/**
 * Whether a `span_progress` status is the progress of this run's span job. The server answers the latest span
 * job of the datapoint, an older run's until this run's request gets there: a status naming a job that progress
 * reads named before this run started (`earlier`), another job than the one this run took as its own
 * (`adopted`; '' before), or, before that, a finished job, is not this run's progress, nor the job its cancel
 * names. (The "100 % · finishing…" of issue 35 at the start of a newer IG count was the new job's own gradient
 * pass, which span_progress no longer counts: lit_app/wrappers/salience.py.) A status without an id (an older server) is.
 */
export function isOwnSpanStatus(status: DetailStatus, earlier: ReadonlySet<string>, adopted: string): boolean {
  const id = status.job_id;
  if (id === undefined || id === '') return true;
  if (earlier.has(id)) return false;
  return adopted === '' ? !isFinal(status) : id === adopted;
}

/** A span job followed from the start of its run (`SpanRequests.followJob`). */
export interface SpanJob {
  /** Reads its progress once: percentage and time left, '' before the model reports, null: another job's. */
  read(n: number): Promise<string | null>;
  /** The job's id once a read named it ('' before). */
  readonly jobId: string;
}

export class SpanRequests {
  /** Span requests sent and not answered yet, by spanKey. */
  private readonly pending = new Set<string>();
  /** The span request on screen (its IG / SmoothGrad progress); older ones still fill the caches when they end. */
  private readonly spans: JobClient<Array<Record<string, unknown>>, string>;
  /** Ids of the span jobs that progress reads named, newest last (the last MAX_SPAN_JOBS_SEEN). */
  private readonly jobsSeen: string[] = [];

  constructor(private readonly page: SaliencePage) {
    // No clock on screen. A superseded span job is cancelled by its id (a late cancel cannot stop a newer one).
    this.spans = new JobClient(page.host, {...PROGRESS_READS, tickRenders: () => false, cancelSuperseded: true});
  }

  /** Forgets the previous selection's requests (their answers still end). */
  clear() {
    this.pending.clear();
  }

  dispose() {
    this.spans.dispose();
  }

  /** An error about an earlier span, method or count is not about what the view shows next; nor is the progress
   * line of a span request for another span, method or count: its status reads stop and the server stops it (its
   * cancel names its job id: ../shared/jobs.ts `cancel`, lit_app/wrappers/salience.py `span_cancel`). */
  clearSideError() {
    const page = this.page;
    if (page.side?.kind === 'error') page.side = null;
    if (page.side?.kind === 'loading' && !this.pending.has(spanKey(page.valuesName(), page.span))) {
      this.spans.cancel();
      page.side = null;
    }
  }

  /** The exact salience of one span, computed by the server (one forward + backward; IG, SmoothGrad: one batch). */
  async fetch(d: IndexedInputLike, span: TargetSpan) {
    const page = this.page;
    const method = page.method;
    const extra = page.extra();
    const key = spanKey(page.valuesName(), span);
    if (this.pending.has(key) || page.salienceModel === null) return;
    this.pending.add(key);
    const gen = page.generation;
    const what = describeSpan(span, numTargets(page.payload!));
    const label = extra === null ? `Computing ${what}…`
        : `${page.reg!.label(method)} (${extra.count} ${page.reg!.extra(method)!.count_unit}) for ${what}…`;
    page.side = {kind: 'loading', text: label};
    page.host.changed();
    const onScreen = () => gen === page.generation && page.input === d &&
        spanKey(page.valuesName(), page.span) === key && page.side?.kind === 'loading';
    const job = this.followJob(d);  // the server's id of this span job, from its first progress read
    const settled = await this.spans.run({
      run: () => page.host.getPreds([spanInput(page.reg!, d, span.t0, span.t1, extra)], page.salienceModel!,
                                    [SPAN_SALIENCE_FIELD, SALIENCE_FIELD], 'Computing span salience…'),
      // Its progress (% and time left) while on screen, for any wait over a second: the gradient pass's layers
      // (a long prompt), IG's steps or SmoothGrad's samples.
      status: (n) => job.read(n),
      cancel: () => job.jobId === '' ? Promise.resolve()
          : page.host.getPreds([spanCancelInput(d, job.jobId)], page.salienceModel!, [SALIENCE_FIELD], 'Stopping a span…'),
      wanted: onScreen,
      onProgress: (progress) => { page.side = {kind: 'loading', text: label + progress}; },
    });
    this.pending.delete(key);
    if (gen === page.generation) {
      const error = settled.ok ? this.absorb(settled.value, span, key, method, extra) : settled.error;
      if (error === '') {
        this.settleLoading(key);
        // The values on screen are now this request's: an error left from an earlier one is stale.
        if (page.side?.kind === 'error' && spanKey(page.valuesName(), page.span) === key) page.side = null;
        page.version++;
      } else if (spanKey(page.valuesName(), page.span) === key) {
        page.side = {kind: 'error', text: error};
      } else {
        // A span, method or count the user has moved away from may be cancelled by the server: not an
        // error to show (e.g. "Cancelled: a newer selection replaced this request" above another method's map).
        this.settleLoading(key);
      }
      // The user moved on while this ran: fetch what is on screen now (never a retry loop on errors).
      const moved = page.span.t0 !== span.t0 || page.span.t1 !== span.t1 || page.method !== method;
      if (page.payload !== null && moved) page.ensureData();
    }
    page.host.changed();
  }

  /**
   * Follows the span job of a run that starts now (its request not sent yet; the first highlight's too). `read(n)`
   * reads the progress of the span being computed for `d` once (`detail="span_progress"`, never waits for the
   * model): its percentage and time left, '' before the model reports, null when the server answered another job
   * than this run's (isOwnSpanStatus: nothing new to show).
   */
  followJob(d: IndexedInputLike): SpanJob {
    const earlier = new Set(this.jobsSeen);
    const job = {
      jobId: '',
      read: async (n: number): Promise<string | null> => {
        const status = await this.status(d, n);
        if (status !== null && !isOwnSpanStatus(status, earlier, job.jobId)) return null;
        if (job.jobId === '' && status?.job_id) job.jobId = status.job_id;
        return describeProgress(status);
      },
    };
    return job;
  }

  private async status(d: IndexedInputLike, n: number): Promise<DetailStatus | null> {
    const page = this.page;
    const res = await page.host.getPreds([spanProgressInput(d, n)], page.salienceModel!, [SALIENCE_FIELD], 'Span progress…');
    const status = parseDetail(res[0]?.[SALIENCE_FIELD]);
    const id = status?.job_id;
    if (id && !this.jobsSeen.includes(id)) {
      this.jobsSeen.push(id);
      if (this.jobsSeen.length > MAX_SPAN_JOBS_SEEN) this.jobsSeen.shift();
    }
    return status;
  }

  /** Keeps a span answer's values; returns '' or the error to show (no values for the span asked). */
  private absorb(res: Array<Record<string, unknown>>, span: TargetSpan, key: string, method: string,
                 extra: Extra | null): string {
    const values = this.page.values;
    try {
      const all = (res[0]?.[SPAN_SALIENCE_FIELD] ?? {}) as Record<string, unknown>;
      values.absorbSpan(this.page.reg!, all, span, this.page.payload?.tokens.length, extra);
      const light = res[0]?.[SALIENCE_FIELD] as Pick<SaliencePayload, 'completeness'> | undefined;
      values.absorbChecks(this.page.reg!, light?.completeness, extra);
    } catch (e) {
      return errorMessage(e);
    }
    return values.span(key) === undefined
        ? `The server returned no "${SPAN_SALIENCE_FIELD}.${method}" of the right length.` : '';
  }

  /**
   * Ends the loading state when the span request `done` finishes, unless the request for
   * what is on screen now is another one still running (an older span or method finished
   * first): the status keeps saying "computing" until the values shown are there.
   */
  private settleLoading(done: string) {
    const page = this.page;
    if (page.side?.kind !== 'loading') return;
    const current = spanKey(page.valuesName(), page.span);
    if (current !== done && this.pending.has(current)) return;
    page.side = null;
  }
}
