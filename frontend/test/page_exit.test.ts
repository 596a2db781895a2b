/**
 * A page going away stops its background jobs (src/salience/page_exit.ts): on `pagehide` one keepalive
 * `detail="page_closed"` request to the salience model, as LIT's client would address it; nothing for a page kept
 * for the back button, nothing before a datapoint was asked about, nothing once the module stopped watching.
 */
import {describe, expect, it} from 'vitest';

import {watchPageExit, type ExitRequest} from '../src/salience/page_exit.js';
import {pageClosedInput} from '../src/salience/request.js';

function recorder() {
  const sent: Array<{url: string; init: RequestInit}> = [];
  const send = (async (url: RequestInfo | URL, init?: RequestInit) => {
    sent.push({url: String(url), init: init ?? {}});
    return new Response('[]', {status: 200});
  }) as typeof fetch;
  return {sent, send: () => send};
}

function hide(target: EventTarget, persisted: boolean) {
  const e = new Event('pagehide');
  Object.defineProperty(e, 'persisted', {value: persisted});
  target.dispatchEvent(e);
}

describe('page exit', () => {
  it('sends one keepalive page_closed request to the salience model when the page goes away', () => {
    const target = new EventTarget();
    const {sent, send} = recorder();
    const request: ExitRequest = {model: '_default_salience', input: pageClosedInput()};
    watchPageExit(() => request, target, send);
    hide(target, false);
    expect(sent).toHaveLength(1);
    expect(sent[0].url).toBe('./get_preds?model=_default_salience&requested_fields=salience');
    expect(sent[0].init.method).toBe('POST');
    expect(sent[0].init.keepalive).toBe(true);
    const body = JSON.parse(String(sent[0].init.body));
    expect(body.inputs).toHaveLength(1);
    expect(body.inputs[0].data.detail).toBe('page_closed');
    expect(body.inputs[0].data.prompt).toBeUndefined();  // about no datapoint: no text in a keepalive body
    expect(body.inputs[0].meta.added).toBe(true);
    expect(body.inputs[0].id).toBe(body.inputs[0].data._id);
  });

  it('sends nothing for a page kept for the back button, before any request, or once unwatched', () => {
    const target = new EventTarget();
    const {sent, send} = recorder();
    let request: ExitRequest | null = null;
    const stop = watchPageExit(() => request, target, send);
    hide(target, false);  // nothing was asked of the server yet
    request = {model: 'm', input: pageClosedInput()};
    hide(target, true);  // kept in the back-forward cache: it may come back and poll again
    expect(sent).toHaveLength(0);
    stop();
    hide(target, false);
    expect(sent).toHaveLength(0);
  });
});
