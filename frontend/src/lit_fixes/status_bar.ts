import {isCancellation} from '../shared/request.js';
import {addStyleOnce, patchEachUpdate, type UpdatingElementLike} from './patch.js';

/**
 * LIT's status bar (`lit-app-statusbar`) shows a pending request as a line whose light part
 * slides by animating `margin-left`/`margin-right` forever: a layout and a repaint every frame
 * for as long as any request is pending. On a 2-core machine with a software-rendered page
 * that took 0.2 of a core from the model computing the very answer the page waits for (our
 * own sliding bar took another 0.1; docs/benchmarks.md, "First highlight in the browser").
 * This keeps the line's colour as the busy signal and stops the slide.
 */
export const QUIET_STATUS_CSS = '.progress-line:before { animation: none !important; display: none !important; }';

const QUIETED = Symbol.for('sequence-salience.statusbar-quieted');

/** Adds QUIET_STATUS_CSS to the element's shadow root once (idempotent). */
export function quietStatusBarElement(el: UpdatingElementLike): boolean {
  return addStyleOnce(el, 'quietStatus', QUIET_STATUS_CSS);
}

/**
 * LIT's ApiService reports every failed request to its status service, `addError(message, fullMessage,
 * key)` (key: the request's URL; fullMessage: the error's `toString()`, "Error: <the answer>"), and the
 * status bar shows it in red until a request of the same URL succeeds. Our server answers a request that a
 * newer one superseded, or that the user stopped, with "Cancelled: ..." (409; lit_app/errors.py): expected,
 * not a fault, and our modules do not show it. Issue 35: after IG's steps changed while IG ran, "Cancelled:
 * a newer selection replaced this request" stayed red in the status bar for the whole newer run. This keeps
 * those answers out of the status service's errors; every other error goes in as before.
 */
interface StatusServiceLike {
  addError(message: string, fullMessage?: string, key?: string): void;
}

/** Whether LIT's `addError(message, fullMessage)` reports our server's answer to a cancelled request. */
export function reportsCancellation(message: unknown, fullMessage?: unknown): boolean {
  const text = String(fullMessage ?? message ?? '').replace(/^Error:\s*/, '');
  return isCancellation(text);
}

const CANCELLATIONS_DROPPED = Symbol.for('sequence-salience.status-cancellations-dropped');

/** Wraps a status service's `addError` so that it drops cancellation answers (above); false when it is
 * not one or was wrapped. */
export function dropCancellations(service: unknown): boolean {
  const s = service as (StatusServiceLike & Record<symbol, boolean>) | null | undefined;
  if (s == null || typeof s.addError !== 'function' || s[CANCELLATIONS_DROPPED]) return false;
  const original = s.addError;
  s.addError = function (this: StatusServiceLike, ...args: Parameters<StatusServiceLike['addError']>) {
    if (!reportsCancellation(args[0], args[1])) original.apply(this, args);
  };
  s[CANCELLATIONS_DROPPED] = true;
  return true;
}

/**
 * Patches LIT's status bar class so that every instance gets QUIET_STATUS_CSS after each update
 * (before the frame is painted), and its status service (LIT's one, which every request reports to)
 * drops cancellation answers from its first update on; returns false when there is nothing to patch or
 * it was patched.
 */
export function patchStatusBar(cls: unknown): boolean {
  return patchEachUpdate(cls, QUIETED, (el: UpdatingElementLike & {statusService?: unknown}) => {
    quietStatusBarElement(el);
    dropCancellations(el.statusService);
  });
}
