/**
 * The response stream: while the first highlight is computed, the response generated so far (`detail="stream"`
 * reads, which never wait for the model), shown until the first-highlight request is answered.
 */
import {SALIENCE_FIELD} from '../shared/fields.js';
import {poll} from '../shared/jobs.js';
import type {IndexedInputLike} from '../shared/request.js';
import {tokenCount} from '../shared/tokens.js';
import type {SaliencePage} from './page.js';
import {streamInput} from './request.js';

/** The greedy response generated so far (`detail="stream"`, docs/architecture.md). */
export interface StreamStatus {
  state: 'none' | 'queued' | 'running' | 'done';
  text: string;
  tokens: number;
  max_new_tokens: number;
  stopped_by: string;
}

/** A stream poll answer (`salience.stream`), or null when it is not one. */
export function parseStream(x: unknown): StreamStatus | null {
  if (x == null || typeof x !== 'object') return null;
  const s = (x as {stream?: StreamStatus}).stream;
  if (s == null || typeof s !== 'object' || typeof s.state !== 'string' || typeof s.text !== 'string') return null;
  return s;
}

/** The loading line while the response streams in, e.g. "Generating the response: 12 of at most 64 tokens…". */
export function describeStream(s: StreamStatus | null): string {
  if (s === null || s.state === 'none' || s.state === 'queued') return 'Waiting for the model…';
  if (s.state === 'running') return `Generating the response: ${s.tokens} of at most ${s.max_new_tokens} tokens…`;
  return `Response generated (${tokenCount(s.tokens)}); computing its salience…`;
}

/**
 * How often it asks for the response generated so far while the first highlight is computed. Each ask is
 * a long poll (`stream_after`: the server answers when there are more tokens than shown, or after about a
 * second), so before the first token the next ask follows at once (STREAM_FIRST_MS, a floor against a
 * server that answers at once) and the first token shows the moment it exists; after it, once a second.
 * Each request costs the page about 10 ms of CPU and the server 1-2 ms, taken from the generation on a
 * 2-core machine: one a second rather than two brought the first highlight from 1.06x to 0.99x LIT's
 * generation + span, and the long poll drops the empty polls before the first token (docs/benchmarks.md).
 */
export const STREAM_FIRST_MS = 100;
export const STREAM_MS = 1000;

/** The wait before the next stream request, given what is shown. */
export function streamDelay(shown: StreamStatus | null): number {
  return shown !== null && shown.text !== '' ? STREAM_MS : STREAM_FIRST_MS;
}

/** Whether a stream answer shows something new: longer text or another state (a poll answered out
 * of order must not take text away, and an unchanged one need not re-render the page). */
export function streamAdvanced(shown: StreamStatus | null, s: StreamStatus): boolean {
  if (shown === null) return true;
  if (s.text.length < shown.text.length) return false;
  return s.text !== shown.text || s.state !== shown.state || s.tokens !== shown.tokens;
}

/** The response of one selection as it is generated; the page's `message` says it. */
export class ResponseStream {
  /** The response generated so far (null: none to show). */
  shown: StreamStatus | null = null;

  constructor(private readonly page: SaliencePage) {}

  /** Whether the response is being generated and its tokens are on screen. */
  tokensStreaming(): boolean {
    return this.shown !== null && this.shown.state === 'running' && this.shown.text !== '';
  }

  /**
   * Reads the response of `d` until `current()` (the first-highlight run of this selection still the latest)
   * says no or the stream ends; the first read goes at once, with the first-highlight request.
   */
  async follow(d: IndexedInputLike, current: () => boolean) {
    const page = this.page;
    const following = () => current() && page.salienceModel !== null;
    await poll<StreamStatus | null>({
      wait: (n) => n === 1 ? 0 : streamDelay(this.shown),
      wanted: following,
      hiddenWaitMs: STREAM_MS,
      read: async (n) => {
        const res = await page.host.getPreds([streamInput(d, n, this.shown?.tokens ?? 0)], page.salienceModel!,
                                             [SALIENCE_FIELD], 'Generating the response…');
        return parseStream(res[0]?.[SALIENCE_FIELD]);
      },
      failed: () => undefined,  // an older server without streaming: the first highlight still comes
      take: (s) => {
        if (!following() || s === null) return false;
        if (!streamAdvanced(this.shown, s)) return true;
        this.shown = s;
        page.message = describeStream(s);
        page.host.changed();
        return true;
      },
    });
  }
}
