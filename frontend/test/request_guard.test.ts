/**
 * The request guard (src/request_guard.ts, loaded before LIT's main.js): the Content-Type the
 * server's rules need on same-origin POSTs, 503 retries after Retry-After, and the "Details"
 * LIT's status bar needs to show a one-line error. Against a stand-in fetch that records calls.
 */
import {afterEach, beforeEach, describe, expect, it, vi} from 'vitest';

import {CLIENT_HEADER, guardedFetch, MAX_RETRIES, newClientId} from '../src/request_guard.js';

const PAGE = {href: 'http://127.0.0.1:5432/?x=1', origin: 'http://127.0.0.1:5432'};

interface Seen {
  url: string;
  method: string;
  contentType: string | null;
}

/** A fetch answering from `answers` in turn (the last one repeats), recording what it was sent. */
function fakeFetch(...answers: Array<() => Response>) {
  const seen: Seen[] = [];
  const f = (async (input: RequestInfo | URL, init?: RequestInit) => {
    const req = input instanceof Request ? input : null;
    const headers = new Headers(init?.headers ?? req?.headers);
    seen.push({url: req ? req.url : String(input), method: init?.method ?? req?.method ?? 'GET',
               contentType: headers.get('Content-Type')});
    return answers[Math.min(seen.length - 1, answers.length - 1)]();
  }) as typeof fetch;
  return {f, seen};
}

const ok = () => new Response('{}', {status: 200});

beforeEach(() => { vi.useFakeTimers(); });
afterEach(() => { vi.useRealTimers(); });

describe('request guard', () => {
  it('adds the JSON Content-Type to same-origin POSTs only', async () => {
    const {f, seen} = fakeFetch(ok);
    const g = guardedFetch(f, PAGE);
    await g('./get_preds?model=m', {method: 'POST', body: '{}'});
    await g('http://127.0.0.1:5432/get_info', {method: 'post', headers: {'Content-Type': 'text/csv'}});
    await g('./main.js');
    await g('http://example.org/x', {method: 'POST', body: '{}'});
    await g(new Request('http://127.0.0.1:5432/get_info', {method: 'POST'}));  // (a string body would set text/plain)
    expect(seen.map((s) => s.contentType)).toEqual(['application/json', 'text/csv', null, null, 'application/json']);
  });

  it("sends the page's client id with every same-origin POST, and to nobody else", async () => {
    const sent: Array<string | null> = [];
    const f = (async (input: RequestInfo | URL, init?: RequestInit) => {
      sent.push(new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined)).get(CLIENT_HEADER));
      return ok();
    }) as typeof fetch;
    const g = guardedFetch(f, PAGE, 'page-1');
    await g('./get_preds?model=m', {method: 'POST', body: '{}'});
    await g(new Request('http://127.0.0.1:5432/get_info', {method: 'POST'}));
    await g('./main.js');
    await g('http://example.org/x', {method: 'POST', body: '{}'});
    expect(sent).toEqual(['page-1', 'page-1', null, null]);
    const ids = new Set(Array.from({length: 50}, () => newClientId()));
    expect(ids.size).toBe(50);
    expect([...ids].every((id) => /^[0-9a-f]{32}$/.test(id))).toBe(true);  // the server's rule: lit_app/edge/clients.py
  });

  it('retries a 503 after its Retry-After, then answers with what came', async () => {
    const busy = () => new Response('busy', {status: 503, headers: {'Retry-After': '2'}});
    const {f, seen} = fakeFetch(busy, busy, ok);
    const answer = guardedFetch(f, PAGE)('./get_preds', {method: 'POST', body: '{}'});
    await vi.advanceTimersByTimeAsync(1999);
    expect(seen).toHaveLength(1);  // the second try is due 2 s after the first answer
    await vi.advanceTimersByTimeAsync(1);
    expect(seen).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(2000);
    expect((await answer).status).toBe(200);
    expect(seen).toHaveLength(3);
  });

  it(`gives up after ${MAX_RETRIES} retries and never retries a 503 without Retry-After`, async () => {
    const busy = () => new Response('Too many requests.', {status: 503, headers: {'Retry-After': '1'}});
    const {f, seen} = fakeFetch(busy);
    const answer = guardedFetch(f, PAGE)('./get_preds', {method: 'POST', body: '{}'});
    await vi.advanceTimersByTimeAsync((MAX_RETRIES + 5) * 1000);
    const r = await answer;
    expect(seen).toHaveLength(MAX_RETRIES + 1);
    expect(r.status).toBe(503);
    const plain = fakeFetch(() => new Response('down', {status: 503}));
    await guardedFetch(plain.f, PAGE)('./get_info', {method: 'POST'});
    expect(plain.seen).toHaveLength(1);
  });

  it('appends the Details line LIT needs to a one-line error, once', async () => {
    const {f} = fakeFetch(() => new Response("Unknown model 'nope'.", {status: 400, headers: {'Content-Length': '21'}}));
    const r = await guardedFetch(f, PAGE)('./get_preds?model=nope', {method: 'POST', body: '{}'});
    expect(r.status).toBe(400);
    expect(r.headers.get('Content-Length')).toBeNull();
    expect(await r.text()).toBe("Unknown model 'nope'.\n\nDetails: HTTP 400 from ./get_preds?model=nope; the server log has more.");
    const lit = fakeFetch(() => new Response('Uncaught error: x\n\nDetails: Traceback', {status: 500}));
    const r2 = await guardedFetch(lit.f, PAGE)('./get_preds', {method: 'POST'});
    expect(await r2.text()).toBe('Uncaught error: x\n\nDetails: Traceback');
  });
});
