/**
 * The browser's side of a job on the server, written once for every module: one request runs the
 * job and answers when it ends; meanwhile status reads, which never wait for the model, show its
 * progress; a cancel request stops it (lit_app/model/user_jobs.py is the server's side for the
 * explanation tests and the intervention run; the salience module's first highlight and spans
 * follow the same pattern with `detail="span_progress"` as their status).
 *
 * A `JobClient` follows one job at a time, the latest:
 *
 *     const jobs = new JobClient<Answer, Status>(host, {pollMs: 1000});
 *     const settled = await jobs.run({run: () => ask('run'), status: () => ask('status'), cancel: () => ask('cancel')});
 *     if (settled.latest && settled.ok) show(settled.value);
 *
 * - `run(job)` supersedes the run it follows: the older one's status reads stop, its progress line
 *   goes, and its answer or error comes back with `latest: false` (never shown by the client).
 *   Its cancel request goes only with `cancelSuperseded`: the server's job slot stops an older job
 *   itself when a newer one starts (`JobSlot.start`), and a cancel sent then could reach the newer
 *   one; a job whose cancel names what it stops (a key of its own) can ask for it.
 * - `cancel()` stops following at once and sends the job's cancel request (not awaited).
 * - `progress` is the last status read, `elapsed` the whole seconds since the run started.
 * - `error` is the message of the latest run's failure only.
 *
 * A job with no request that waits for its end (it is started, then read until a read brings its
 * values: the salience module's background matrices and segment methods, its response stream, the
 * inside module's search index) is followed by `poll`, the one loop of reads with waits between them.
 *
 * No LIT, no DOM: the host re-renders when `changed()` is called.
 */
import type {PatternBounds} from './aggregate/index.js';
import {errorMessage, type IndexedInputLike, type ModelInfoLike} from './request.js';

/** What the client needs from its owner. */
export interface JobHost {
  /** Called after the client's state changed (the element re-renders). */
  changed(): void;
}

/** What a module's DOM-free controller needs from LIT (the element passes its services). */
export interface ServerHost extends JobHost {
  /** LIT's model metadata (appState.metadata.models). */
  models(): Record<string, ModelInfoLike>;
  /** The server's maximum per count field (/get_info "requestLimits".max_counts); absent: the registry's. */
  countLimits?(): Record<string, number> | undefined;
  /** The server's bounds of a regex pattern (/get_info "requestLimits".pattern); absent: the subset only. */
  patternBounds?(): PatternBounds | undefined;
  /** LIT's apiService.getPreds on the current dataset. */
  getPreds(inputs: IndexedInputLike[], model: string, fields: string[],
           loadMessage?: string): Promise<Array<Record<string, unknown>>>;
}

/** One job: the requests that run it, read its status and stop it. */
export interface Job<R, P> {
  /** The request that runs the job; it answers when the job ends (done, cancelled or failed). */
  run(): Promise<R>;
  /**
   * Reads the job's progress once (a request that never waits for the model); `n` counts the reads
   * from 1. Null: nothing new to show (the progress shown stays). Absent: no status reads.
   */
  status?(n: number): Promise<P | null>;
  /**
   * Whether anybody still looks at the job's progress (checked before and after each status read;
   * false ends the reads, the run goes on). Absent: always.
   */
  wanted?(): boolean;
  /** Shows a status read (called after `progress` is set, while the run is the latest, runs and is wanted). */
  onProgress?(p: P): void;
  /** Asks the server to stop the job (sent by `cancel()`; its answer is not awaited). */
  cancel?(): Promise<unknown>;
}

export interface JobClientOptions {
  /** The wait before each status read, ms (default 1000; only jobs with a `status` read it). */
  pollMs?: number;
  /**
   * A failed status read: 'skip' (default) waits for the next one, progress being best effort;
   * 'stop' ends the reads (a server that has no status for this job: its answer still comes).
   */
  statusErrors?: 'skip' | 'stop';
  /** No status read while the page is hidden (a tab nobody looks at): the next one follows. */
  pauseWhenHidden?: boolean;
  /** Whether the clock's tick each second re-renders (default: always). */
  tickRenders?: () => boolean;
  /** Whether `run` sends the superseded job's cancel request (default: no; see the module docstring). */
  cancelSuperseded?: boolean;
}

/** How a run ended: its value or error message, and whether it is still the client's latest run. */
export type Settled<R> = {latest: boolean} & ({ok: true; value: R} | {ok: false; error: string});

/** Whether the page is in a hidden tab (no document outside a browser: never). */
export const pageHidden = () => (globalThis as {document?: {hidden?: boolean}}).document?.hidden === true;

const CLOCK_MS = 1000;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A job followed by its reads alone (`poll`): when to read, whether to go on, what each answer means. */
export interface Poll<T> {
  /** The wait before read `n` (counted from 1), ms; 0: the read goes at once (no timer). */
  wait(n: number): number;
  /** Whether read `n` still goes, asked after its wait; false ends the loop. Absent: always. */
  wanted?(n: number): boolean;
  /** While the page is hidden no read goes: this wait (ms), then read `n`'s wait and `wanted` again. Absent: reads go on. */
  hiddenWaitMs?: number;
  /** Reads the job once. */
  read(n: number): Promise<T>;
  /** Takes read `n`'s answer: true reads again, false ends the loop. */
  take(value: T, n: number): boolean;
  /** A read failed and the loop ends; absent: the error goes to `poll`'s caller. (An error `take` throws always does.) */
  failed?(error: unknown): void;
}

/** Reads a job (`Poll`) until an answer, `wanted` or a failure ends it; resolves then. */
export async function poll<T>(p: Poll<T>): Promise<void> {
  for (let n = 1; ; n++) {
    for (;;) {
      const ms = p.wait(n);
      if (ms > 0) await sleep(ms);
      if (!(p.wanted?.(n) ?? true)) return;
      if (p.hiddenWaitMs === undefined || !pageHidden()) break;
      await sleep(p.hiddenWaitMs);  // nobody sees it: no request until the tab shows again
    }
    let value: T;
    try {
      value = await p.read(n);
    } catch (e) {
      if (p.failed === undefined) throw e;
      p.failed(e);
      return;
    }
    if (!p.take(value, n)) return;
  }
}

/** Follows the latest of the jobs it runs (see the module docstring). */
export class JobClient<R, P = never> {
  /** Whether the latest run is running. */
  running = false;
  /** Its last status read (null before the first): kept when it ends or is cancelled, cleared by the next run. */
  progress: P | null = null;
  /** Whole seconds since the latest run started; ticks each second while it runs. */
  elapsed = 0;
  /** The message of the latest run's failure ('' when none). */
  error = '';

  /** Bumped by every run, cancel and reset: a run whose ticket is older is not the latest. */
  private ticket = 0;
  private job: Job<R, P> | null = null;
  private clock: ReturnType<typeof setInterval> | undefined;
  private pollTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(private readonly host: JobHost, private readonly options: JobClientOptions = {}) {}

  /**
   * Runs `job`, superseding the run followed until now (module docstring). Resolves when the job's
   * request answers, with `latest` false if another run, `cancel()` or `reset()` came meanwhile.
   */
  async run(job: Job<R, P>): Promise<Settled<R>> {
    const superseded = this.running ? this.job : null;
    this.stop();
    if (this.options.cancelSuperseded) superseded?.cancel?.().catch(() => {});
    const ticket = ++this.ticket;
    this.job = job;
    this.running = true;
    this.progress = null;
    this.error = '';
    this.elapsed = 0;
    const start = performance.now();
    this.clock = setInterval(() => {
      this.elapsed = Math.round((performance.now() - start) / 1000);
      if (this.options.tickRenders?.() ?? true) this.host.changed();
    }, CLOCK_MS);
    if (job.status !== undefined) this.schedulePoll(ticket, job, 1);
    this.host.changed();
    let settled: Settled<R>;
    try {
      settled = {latest: true, ok: true, value: await job.run()};
    } catch (e) {
      settled = {latest: true, ok: false, error: errorMessage(e)};
    }
    settled.latest = ticket === this.ticket;
    if (settled.latest) {
      this.stop();
      if (!settled.ok) this.error = settled.error;
      this.host.changed();
    }
    return settled;
  }

  /** Whether a run is followed and `ticket` (from `latestTicket`) is still the latest. */
  isLatest(ticket: number): boolean {
    return this.running && ticket === this.ticket;
  }

  /** The ticket of the latest run (for loops of the owner's own that follow it). */
  get latestTicket(): number {
    return this.ticket;
  }

  /**
   * Stops the run here at once (its answer comes back with `latest: false`) and on the server (the
   * job's cancel request). The progress read so far stays. False when nothing ran.
   */
  cancel(): boolean {
    const job = this.running ? this.job : null;
    this.stop();
    this.ticket++;
    if (job === null) return false;
    job.cancel?.().catch(() => {});  // the run's own answer says whether it stopped
    this.host.changed();
    return true;
  }

  /** Forgets the run (no cancel request): its answer, progress and error no longer show. */
  reset() {
    this.stop();
    this.ticket++;
    this.progress = null;
    this.error = '';
    this.elapsed = 0;
  }

  /** Stops the clock and the status reads (the owner is going away). */
  dispose() {
    this.reset();
  }

  private stop() {
    this.running = false;
    this.job = null;
    clearInterval(this.clock);
    clearTimeout(this.pollTimer);
  }

  private schedulePoll(ticket: number, job: Job<R, P>, n: number) {
    this.pollTimer = setTimeout(() => void this.poll(ticket, job, n), this.options.pollMs ?? 1000);
  }

  private async poll(ticket: number, job: Job<R, P>, n: number) {
    const still = () => this.isLatest(ticket) && (job.wanted?.() ?? true);
    if (!still()) return;
    if (!(this.options.pauseWhenHidden && pageHidden())) {
      let p: P | null;
      try {
        p = await job.status!(n);
      } catch {
        if (this.options.statusErrors === 'stop') return;
        p = null;
      }
      if (!still()) return;
      if (p !== null) {
        this.progress = p;
        job.onProgress?.(p);
        this.host.changed();
      }
    }
    this.schedulePoll(ticket, job, n + 1);
  }
}
