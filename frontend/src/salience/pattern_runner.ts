/**
 * Runs custom regex patterns off the page's main thread: a Web Worker (from a Blob URL, so it needs no
 * served file and works offline) matches the pattern; a run that takes longer than PATTERN_TIMEOUT_MS
 * (the server's guard) is stopped by terminating the worker, so a catastrophic pattern never blocks the page.
 */
import {asTyped, checkPattern, compilePattern, MATCH_WORKER_SOURCE, PATTERN_TIMEOUT_MS} from '../shared/aggregate/index.js';

export type PatternRun =
  | {state: 'done'; spans: number[]}
  | {state: 'error'; message: string}
  | {state: 'timeout'; message: string};

/** What a pattern that ran out of time says (the user's pattern, the budget, the fix). */
export function timeoutMessage(pattern: string): string {
  return `regex pattern ${asTyped(pattern)} took longer than ${PATTERN_TIMEOUT_MS / 1000} s on this ` +
    'prompt and was stopped. Fix: simplify it (avoid nested repeats such as (a+)+).';
}

export class PatternRunner {
  private worker: Worker | null = null;
  private url: string | null = null;
  private nextId = 0;
  private pending: {id: number; resolve: (r: PatternRun) => void; timer: ReturnType<typeof setTimeout>} | null = null;

  /**
   * Matches `source` (checkPattern's translation of `pattern`) over `text`; a newer call supersedes an
   * older one (which resolves as null).
   */
  run(pattern: string, source: string, text: string): Promise<PatternRun | null> {
    this.supersede();
    const worker = this.ensureWorker();
    const id = ++this.nextId;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        if (this.pending?.id !== id) return;
        this.pending = null;
        this.kill();  // the only way to stop a running regex
        resolve({state: 'timeout', message: timeoutMessage(pattern)});
      }, PATTERN_TIMEOUT_MS);
      this.pending = {id, resolve: (r) => resolve(r), timer};
      worker.postMessage({id, source, text});
    });
  }

  /** Stops the run in progress (its promise resolves as null). */
  cancel() {
    this.supersede();
  }

  dispose() {
    this.supersede();
    this.kill();
    if (this.url !== null) URL.revokeObjectURL(this.url);
    this.url = null;
  }

  private supersede() {
    if (this.pending === null) return;
    clearTimeout(this.pending.timer);
    this.pending.resolve(null as unknown as PatternRun);
    this.pending = null;
    this.kill();  // it may still be running the superseded pattern
  }

  private kill() {
    this.worker?.terminate();
    this.worker = null;
  }

  private ensureWorker(): Worker {
    if (this.worker !== null) return this.worker;
    if (this.url === null) this.url = URL.createObjectURL(new Blob([MATCH_WORKER_SOURCE], {type: 'text/javascript'}));
    const worker = new Worker(this.url);
    worker.onmessage = (e: MessageEvent<{id: number; spans?: number[]; error?: string}>) => {
      const p = this.pending;
      if (p === null || p.id !== e.data.id) return;
      clearTimeout(p.timer);
      this.pending = null;
      p.resolve(e.data.error !== undefined ? {state: 'error', message: e.data.error} : {state: 'done', spans: e.data.spans!});
    };
    this.worker = worker;
    return worker;
  }
}

/** Thrown by PatternMatcher.matches while the worker runs (the views show single tokens meanwhile). */
export class PatternPending extends Error {}

/** Finished runs kept (by pattern and text). */
const KEPT_RUNS = 32;

/**
 * The matches of custom patterns in texts, found one run at a time by a PatternRunner and kept; what the
 * salience module and its compare view segment with. A new pattern drops the runs queued for older ones.
 */
export class PatternMatcher {
  private readonly runner = new PatternRunner();
  private readonly done = new Map<string, PatternRun>();
  private queue: Array<{key: string; pattern: string; text: string}> = [];
  private running: {key: string; pattern: string} | null = null;

  /** @param onDone called after each finished run (re-render: matches() now answers for it). */
  constructor(private readonly onDone: () => void) {}

  /**
   * Flat UTF-16 [start, end, ...] spans of the non-empty matches of `pattern` in `text`.
   * @throws SalienceError for an invalid pattern (as typed, at once); Error for one that ran out of time;
   *   PatternPending while it runs (onDone follows).
   */
  matches(text: string, pattern: string): number[] {
    const key = `${pattern}\u0000${text}`;
    const run = this.done.get(key);
    if (run !== undefined) {
      if (run.state === 'done') return run.spans;
      throw new Error(run.message);
    }
    compilePattern(pattern);  // syntax only (cheap)
    if (this.running?.key !== key && !this.queue.some((q) => q.key === key)) {
      this.queue = this.queue.filter((q) => q.pattern === pattern);
      this.queue.push({key, pattern, text});
      if (this.running !== null && this.running.pattern !== pattern) this.runner.cancel();
      this.next();
    }
    throw new PatternPending();
  }

  dispose() {
    this.queue = [];
    this.runner.dispose();
  }

  private next() {
    if (this.running !== null) return;
    const item = this.queue.shift();
    if (item === undefined) return;
    this.running = {key: item.key, pattern: item.pattern};
    void this.runner.run(item.pattern, checkPattern(item.pattern), item.text).then((run) => {
      this.running = null;
      if (run !== null) {
        this.done.set(item.key, run);
        if (this.done.size > KEPT_RUNS) this.done.delete(this.done.keys().next().value!);
        this.onDone();
      }
      this.next();
    });
  }
}
