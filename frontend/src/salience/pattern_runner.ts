/**
 * Runs custom regex patterns off the page's main thread: a Web Worker (from a Blob URL, so it needs no
 * served file and works offline) matches the pattern; a run that takes longer than PATTERN_TIMEOUT_MS
 * (the server's guard) is stopped by terminating the worker, so a catastrophic pattern never blocks the page.
 */
import {asTyped, MATCH_WORKER_SOURCE, PATTERN_TIMEOUT_MS} from '../shared/aggregate/index.js';

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
