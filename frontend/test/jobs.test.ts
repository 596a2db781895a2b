/**
 * The browser's job client (src/shared/jobs.ts) against a stand-in server: a job whose run, status
 * and cancel requests are answered by hand. What it shows while a job runs (progress, elapsed
 * seconds), that a newer run supersedes the older one (its answer, progress and error never show),
 * cancel (the request sent once, the progress kept) and which status failures stop the polls.
 */
import {afterEach, beforeEach, describe, expect, it, vi} from 'vitest';

import {JobClient, poll, type Job} from '../src/shared/jobs.js';

interface Stage {
  stage: string;
  done: number;
}

/** A job whose run answers when `finish` or `fail` is called; status answers from `statuses` in turn. */
function fakeJob(statuses: Array<Stage | null | Error> = []) {
  let finish!: (v: string) => void;
  let fail!: (e: Error) => void;
  const sent = {status: 0, cancel: 0};
  const job: Job<string, Stage> = {
    run: () => new Promise<string>((resolve, reject) => { finish = resolve; fail = reject; }),
    status: async (n) => {
      sent.status++;
      const s = statuses[Math.min(n, statuses.length) - 1] ?? null;
      if (s instanceof Error) throw s;
      return s;
    },
    cancel: async () => { sent.cancel++; },
  };
  return {job, sent, finish: (v: string) => finish(v), fail: (e: Error) => fail(e)};
}

function client(options: Partial<ConstructorParameters<typeof JobClient>[1]> = {}) {
  let changes = 0;
  const jobs = new JobClient<string, Stage>({changed: () => { changes++; }}, {pollMs: 100, ...options});
  return {jobs, changes: () => changes};
}

beforeEach(() => { vi.useFakeTimers(); });
afterEach(() => { vi.useRealTimers(); });

describe('JobClient', () => {
  it('polls the status while the job runs, counts the seconds and returns the answer', async () => {
    const {jobs, changes} = client();
    const f = fakeJob([{stage: 'a', done: 1}, null, {stage: 'b', done: 2}]);
    const shown: Stage[] = [];
    const done = jobs.run({...f.job, onProgress: (p) => shown.push(p)});
    expect(jobs.running).toBe(true);
    expect(jobs.progress).toBeNull();
    await vi.advanceTimersByTimeAsync(100);
    expect(jobs.progress).toEqual({stage: 'a', done: 1});
    await vi.advanceTimersByTimeAsync(100);  // null: nothing new, the progress shown stays
    expect(jobs.progress).toEqual({stage: 'a', done: 1});
    await vi.advanceTimersByTimeAsync(100);
    expect(jobs.progress).toEqual({stage: 'b', done: 2});
    expect(shown).toEqual([{stage: 'a', done: 1}, {stage: 'b', done: 2}]);
    await vi.advanceTimersByTimeAsync(2700);  // 3 s since the start
    expect(jobs.elapsed).toBe(3);
    const before = changes();
    f.finish('answer');
    expect(await done).toEqual({latest: true, ok: true, value: 'answer'});
    expect(jobs.running).toBe(false);
    expect(changes()).toBeGreaterThan(before);
    const polls = f.sent.status;
    await vi.advanceTimersByTimeAsync(1000);  // no polls and no clock once it ended
    expect(f.sent.status).toBe(polls);
    expect(jobs.elapsed).toBe(3);
    expect(jobs.progress).toEqual({stage: 'b', done: 2});  // kept after the end
  });

  it('shows the failure of the latest run as one line', async () => {
    const {jobs} = client();
    const f = fakeJob();
    const done = jobs.run(f.job);
    f.fail(new Error('Uncaught error: the span is empty. Fix: select a token.\n\nDetails: Traceback ...'));
    expect(await done).toEqual({latest: true, ok: false, error: 'the span is empty. Fix: select a token.'});
    expect(jobs.error).toBe('the span is empty. Fix: select a token.');
    jobs.run(fakeJob().job);  // a new run clears it
    expect(jobs.error).toBe('');
    jobs.dispose();
  });

  it('lets a newer run supersede the older: its progress goes, its answer and error are not shown', async () => {
    const {jobs} = client();
    const old = fakeJob([{stage: 'old', done: 5}]);
    const first = jobs.run(old.job);
    await vi.advanceTimersByTimeAsync(100);
    expect(jobs.progress).toEqual({stage: 'old', done: 5});
    const fresh = fakeJob([{stage: 'new', done: 1}]);
    const second = jobs.run(fresh.job);
    expect(jobs.progress).toBeNull();  // the older run's progress line goes at once
    expect(jobs.elapsed).toBe(0);
    old.fail(new Error('Cancelled: a newer job replaced it'));
    expect(await first).toMatchObject({latest: false, ok: false});
    expect(jobs.error).toBe('');
    expect(jobs.running).toBe(true);
    const oldPolls = old.sent.status;
    await vi.advanceTimersByTimeAsync(100);
    expect(old.sent.status).toBe(oldPolls);  // the older run is no longer polled
    expect(jobs.progress).toEqual({stage: 'new', done: 1});
    expect(old.sent.cancel).toBe(0);  // the server's slot stops it; a cancel could reach the newer job
    fresh.finish('new answer');
    expect(await second).toEqual({latest: true, ok: true, value: 'new answer'});
  });

  it('cancels: the cancel request goes once, the run stops at once, the results so far stay', async () => {
    const {jobs} = client();
    const f = fakeJob([{stage: 'a', done: 1}]);
    const done = jobs.run(f.job);
    await vi.advanceTimersByTimeAsync(100);
    expect(jobs.cancel()).toBe(true);
    expect(f.sent.cancel).toBe(1);
    expect(jobs.running).toBe(false);
    expect(jobs.progress).toEqual({stage: 'a', done: 1});
    expect(jobs.cancel()).toBe(false);  // nothing runs: no second request
    expect(f.sent.cancel).toBe(1);
    f.finish('cancelled payload');
    expect(await done).toMatchObject({latest: false, ok: true});
    expect(jobs.running).toBe(false);
  });

  it('reset forgets the run without a cancel request', async () => {
    const {jobs} = client();
    const f = fakeJob([{stage: 'a', done: 1}]);
    const done = jobs.run(f.job);
    await vi.advanceTimersByTimeAsync(100);
    jobs.reset();
    expect([jobs.running, jobs.progress, jobs.elapsed, f.sent.cancel]).toEqual([false, null, 0, 0]);
    f.fail(new Error('late failure'));
    expect(await done).toMatchObject({latest: false});
    expect(jobs.error).toBe('');
  });

  it('skips a failed status read by default, and stops reading with statusErrors "stop"', async () => {
    for (const [mode, reads] of [['skip', 3], ['stop', 1]] as const) {
      const {jobs} = client({statusErrors: mode});
      const f = fakeJob([new Error('no status'), new Error('no status'), {stage: 'a', done: 1}]);
      void jobs.run(f.job);
      await vi.advanceTimersByTimeAsync(300);
      expect(f.sent.status).toBe(reads);
      expect(jobs.progress).toEqual(mode === 'skip' ? {stage: 'a', done: 1} : null);
      jobs.dispose();
    }
  });

  it('ends the status reads once nobody wants them; the run goes on', async () => {
    const {jobs} = client();
    let wanted = true;
    const f = fakeJob([{stage: 'a', done: 1}, {stage: 'a', done: 2}]);
    const done = jobs.run({...f.job, wanted: () => wanted});
    await vi.advanceTimersByTimeAsync(100);
    wanted = false;
    await vi.advanceTimersByTimeAsync(300);
    expect(f.sent.status).toBe(1);
    expect(jobs.progress).toEqual({stage: 'a', done: 1});
    expect(jobs.running).toBe(true);
    f.finish('x');
    expect(await done).toMatchObject({latest: true, ok: true});
  });

  it('re-renders on each clock tick unless tickRenders says no', async () => {
    let quiet = false;
    const {jobs, changes} = client({tickRenders: () => !quiet});
    void jobs.run({run: () => new Promise<string>(() => {})});
    const start = changes();
    await vi.advanceTimersByTimeAsync(2000);
    expect(changes() - start).toBe(2);
    quiet = true;
    await vi.advanceTimersByTimeAsync(2000);
    expect(changes() - start).toBe(2);
    expect(jobs.elapsed).toBe(4);  // the seconds still count
    jobs.dispose();
  });

  it('sends the superseded job\'s cancel request with cancelSuperseded, and only for a running one', async () => {
    const {jobs} = client({cancelSuperseded: true});
    const old = fakeJob();
    const first = jobs.run(old.job);
    const next = fakeJob();
    void jobs.run(next.job);
    expect(old.sent.cancel).toBe(1);
    old.finish('late');
    expect(await first).toMatchObject({latest: false});
    jobs.cancel();
    expect(next.sent.cancel).toBe(1);
    void jobs.run(fakeJob().job);  // the cancelled run is not followed any more: no second request
    expect(next.sent.cancel).toBe(1);
    jobs.dispose();
  });
});

describe('poll', () => {
  /** A loop over `answers` (read n answers answers[n - 1]); `log` records the reads with the fake clock's time. */
  function loop(answers: Array<string | Error>, over: Partial<Parameters<typeof poll<string>>[0]> = {}) {
    const log: Array<[number, number]> = [];
    const taken: string[] = [];
    const done = poll<string>({
      wait: (n) => n === 1 ? 0 : 100,
      read: async (n) => {
        log.push([n, Date.now() - t0]);
        const a = answers[n - 1];
        if (a instanceof Error) throw a;
        return a;
      },
      take: (v) => { taken.push(v); return v !== 'done'; },
      ...over,
    });
    return {done, log, taken};
  }
  let t0 = 0;
  beforeEach(() => { t0 = Date.now(); });

  it('reads at once, then after each wait, until take ends it', async () => {
    const {done, log, taken} = loop(['a', 'b', 'done', 'never']);
    await vi.advanceTimersByTimeAsync(1000);
    await done;
    expect(log).toEqual([[1, 0], [2, 100], [3, 200]]);
    expect(taken).toEqual(['a', 'b', 'done']);
  });

  it('ends without a read once wanted says no after a wait', async () => {
    let want = true;
    const {done, log} = loop(['a', 'b', 'c'], {wanted: () => want});
    await vi.advanceTimersByTimeAsync(0);
    want = false;
    await vi.advanceTimersByTimeAsync(1000);
    await done;
    expect(log.map(([n]) => n)).toEqual([1]);
  });

  it('sends no read while the page is hidden, and reads once it shows again', async () => {
    const g = globalThis as {document?: unknown};
    const before = g.document;
    g.document = {hidden: true};
    try {
      const {done, log} = loop(['done'], {wait: () => 100, hiddenWaitMs: 1000});
      await vi.advanceTimersByTimeAsync(5000);
      expect(log).toEqual([]);
      g.document = {hidden: false};
      await vi.advanceTimersByTimeAsync(1100);
      await done;
      expect(log).toHaveLength(1);
    } finally {
      g.document = before;
    }
  });

  it('a failed read ends the loop through failed; without failed its error goes to the caller', async () => {
    const errors: string[] = [];
    const handled = loop(['a', new Error('gone')], {failed: (e) => errors.push((e as Error).message)});
    await vi.advanceTimersByTimeAsync(1000);
    await handled.done;
    expect([handled.taken, errors]).toEqual([['a'], ['gone']]);
    const unhandled = loop([new Error('refused')]);
    await expect(unhandled.done).rejects.toThrow('refused');
  });
});
