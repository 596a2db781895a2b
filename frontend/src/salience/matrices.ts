/**
 * The background matrices: the per-token gradient matrices the server computes after the first highlight,
 * and an extra method's (IG, SmoothGrad) per-token matrix at its count when the user asks for it; each a
 * server job whose progress is polled (../shared/jobs.ts `poll`) until its values come.
 */
import {SALIENCE_FIELD} from '../shared/fields.js';
import {poll} from '../shared/jobs.js';
import {errorMessage, type IndexedInputLike} from '../shared/request.js';
import {POLL_MS, type SaliencePage} from './page.js';
import {isFinal, parseDetail, parsePayload, type DetailStatus} from './payload.js';
import {extraKey, jobKind, matrixCancelInput, matrixInput, pollInput, type Extra} from './request.js';
import {withoutExtras} from './values.js';

export class BackgroundMatrices {
  /** Progress of the per-token gradient matrices (computed in the background). */
  detail: DetailStatus | null = null;
  /** Progress of each extra method's per-token matrix, when asked for. */
  extraDetail: Record<string, DetailStatus | null | undefined> = {};
  private pollCount = 0;
  /** Extra matrices asked for and not answered yet, by extraKey. */
  private readonly pending = new Set<string>();

  constructor(private readonly page: SaliencePage) {}

  /** Forgets the previous selection's progress. */
  clear() {
    this.detail = null;
    this.extraDetail = {};
    this.pending.clear();
  }

  /** Whether the view still wants `extra`'s per-token matrix: its method and count selected, per-token on. */
  wanted(extra: Extra): boolean {
    const shown = this.page.extra();
    return shown !== null && extraKey(shown) === extraKey(extra) && this.page.perToken[extra.method] === true;
  }

  /** Asks for an extra method's per-token matrix (a background job on the server) and polls it. */
  async fetch(d: IndexedInputLike, extra: Extra) {
    const page = this.page;
    const key = extraKey(extra);
    if (this.pending.has(key) || page.salienceModel === null) return;
    this.pending.add(key);
    const gen = page.generation;
    const info = page.reg!.extra(extra.method)!;
    try {
      const res = await page.host.getPreds([matrixInput(page.reg!, d, extra)], page.salienceModel, [SALIENCE_FIELD],
                                           `${info.short} for every token (${extra.count} ${info.count_unit})…`);
      if (gen !== page.generation) return;
      const started = parseDetail(res[0]?.[SALIENCE_FIELD]);
      this.setDetail(extra, started);
      if (page.side?.kind === 'error') page.side = null;  // the request went through: an older error is stale
      await this.poll(d, gen, extra, started?.job_id ?? '');
    } catch (e) {
      if (gen === page.generation) {
        page.side = {kind: 'error', text: errorMessage(e)};
        page.host.changed();
      }
    } finally {
      this.pending.delete(key);
    }
  }

  /**
   * Polls the background job for this selection until it ends: extra null is
   * the gradient matrices, else that method's per-token matrix at its count. An extra method's job the
   * view no longer wants (the user switched method or count, or turned per-token off) is cancelled by its
   * id (`jobId`, from its statuses), so it stops taking the model from what the view shows next.
   */
  async poll(d: IndexedInputLike, gen: number, extra: Extra | null, jobId = '') {
    const page = this.page;
    await poll<Array<Record<string, unknown>>>({
      wait: () => POLL_MS,
      wanted: () => {
        if (gen !== page.generation || page.input !== d || page.salienceModel === null) return false;
        if (extra === null || this.wanted(extra)) return true;
        this.setDetail(extra, null);
        if (jobId !== '') {
          // Its answer is the job's status; a failure leaves it to the heartbeat (lit_app/model/progressive.py).
          page.host.getPreds([matrixCancelInput(d, jobId)], page.salienceModel, [SALIENCE_FIELD],
                             'Stopping a per-token job…').catch(() => undefined);
        }
        return false;
      },
      read: () => page.host.getPreds([pollInput(page.reg!, d, extra, ++this.pollCount)], page.salienceModel!,
                                     [SALIENCE_FIELD], 'Per-token salience…'),
      failed: (e) => {
        if (gen !== page.generation) return;
        this.setDetail(extra, {kind: jobKind(page.reg!, extra), state: 'error', done: 0, total: 0,
                               elapsed_s: 0, eta_s: null, error: errorMessage(e)});
      },
      take: (res) => {
        if (gen !== page.generation || page.payload === null) return false;
        const raw = res[0]?.[SALIENCE_FIELD] as Record<string, unknown> | undefined;
        const status = parseDetail(raw);
        if (status?.job_id) jobId = status.job_id;
        if (raw != null && typeof raw['text'] === 'string') {
          const full = parsePayload(raw);
          if (full.tokens.length !== page.payload.tokens.length) return false;
          if (extra !== null) {
            const m = full.methods[extra.method];
            if (m?.matrix != null) page.values.setMatrix(extra, m);
            page.values.absorbChecks(page.reg!, full.completeness, extra);
          } else {
            page.payload = {...page.payload, methods: {...page.payload.methods, ...withoutExtras(page.reg!, full.methods)}};
          }
          this.setDetail(extra, status);
          page.version++;
          page.ensureData();
          page.host.changed();
          return false;
        }
        this.setDetail(extra, status);
        return !isFinal(status);
      },
    });
  }

  /** Records a job's progress; a job for a count the user has since changed (cancelled by the server) is ignored. */
  private setDetail(extra: Extra | null, status: DetailStatus | null) {
    if (extra === null) this.detail = status;
    else if (extra.count === this.page.counts[extra.method]) this.extraDetail = {...this.extraDetail, [extra.method]: status};
    this.page.host.changed();
  }
}
