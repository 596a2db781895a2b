/**
 * A page that goes away (its tab closed, reloaded or navigated from) stops its background jobs on the server at
 * once: on `pagehide` it sends one `detail="page_closed"` request (lit_app/wrappers/salience.py `_page_closed`),
 * with `keepalive`, which the browser still delivers after the page is gone (a plain request of a closing page is
 * dropped). Without it the per-token matrices and segment jobs it started ran on until nobody had polled them for
 * the server's heartbeat (`--job_heartbeat_s`, 30 s by default), taking the model from every other page.
 * A page kept for the back button (`persisted`) sends nothing: it may come back and poll its jobs again.
 */
import {SALIENCE_FIELD} from '../shared/fields.js';
import type {IndexedInputLike} from '../shared/request.js';

/** What a page's salience module asks the server as the page goes away: which model, about which datapoint. */
export interface ExitRequest {
  model: string;
  input: IndexedInputLike;
}

/** The request LIT's client would send for `getPreds([input], model, [salience])`, as `keepalive` (the request
 * guard, src/request_guard.ts, adds the Content-Type and the page's client id to it as to LIT's own). */
export function sendExitRequest(send: typeof fetch, {model, input}: ExitRequest): Promise<Response> {
  const query = `model=${encodeURIComponent(model)}&requested_fields=${SALIENCE_FIELD}`;
  return send(`./get_preds?${query}`, {method: 'POST', keepalive: true, body: JSON.stringify({inputs: [input]})});
}

/**
 * Sends `request()` (null: nothing to stop) when `target` (the window) hides the page for good. Returns the
 * function that stops watching (the module's disconnectedCallback).
 */
export function watchPageExit(request: () => ExitRequest | null, target: EventTarget = window,
                              send: () => typeof fetch = () => fetch): () => void {
  const onHide = (e: Event) => {
    if ((e as Event & {persisted?: boolean}).persisted) return;
    const r = request();
    if (r !== null) sendExitRequest(send(), r).catch(() => undefined);  // the heartbeat stops them otherwise
  };
  target.addEventListener('pagehide', onHide);
  return () => target.removeEventListener('pagehide', onHide);
}
