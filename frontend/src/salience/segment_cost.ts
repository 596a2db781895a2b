/**
 * What a segment method costs before it runs, for its button: its count, its budget's share of the segments, or one
 * forward per segment that another exact method has not measured already, on this page (segments.ts's values) or on
 * the server (another tab, a reload: the registry's `known_detail`, asked once per selection).
 */
import {SALIENCE_FIELD} from '../shared/fields.js';
import type {SegmentMethodInfo} from '../shared/methods.js';
import type {IndexedInputLike} from '../shared/request.js';
import {segmentCacheKey} from './auto_steps.js';
import type {SaliencePage} from './page.js';
import {segmentInput, type SegmentAsk} from './request.js';
import {KNOWN_EXACT_FIELD, type SegmentPayload} from './segment_payload.js';

export class SegmentCost {
  /** What the server answered, by segmentCacheKey of an exact method's ask not measured here, to how many of its
   * segments another exact method measured on the server already (another page's word button): null, none. */
  private readonly serverKnown = new Map<string, {method: string; measured: number} | null>();

  /** `measuredHere(key)`: the values this page measured, by segmentCacheKey (undefined: none). */
  constructor(private readonly page: SaliencePage,
              private readonly measuredHere: (key: string) => SegmentPayload | undefined) {}

  /** A new selection: the server is asked again. */
  clear() {
    this.serverKnown.clear();
  }

  /** About how many forwards `method` costs: its count, its budget's share of the `count` removable segments, or one
   * per segment (+ the unedited prompt). */
  cost(method: string, count: number): number {
    const info = this.page.reg?.segment(method);
    if (info === undefined) return 0;
    if (info.count_field !== null) return info.default_count + 1;
    const b = info.budget ?? null;
    if (b !== null) return Math.min(count, Math.max(b.at_least, Math.floor(b.share * count))) + 1;
    // An exact method takes the values another exact method measured here already (the word button's quarter).
    const ask = this.page.segmentAsk(method);
    const known = info.exact_measured && ask !== null ? this.knownFrom(ask)?.measured ?? 0 : 0;
    // Every segment known (its own result, measured by another page): the answer comes from the server's cache.
    return known >= count ? 0 : count - known + 1;
  }

  /**
   * The values of `ask` another exact method measured already, as the server finds them for leave one out
   * (lit_app/model/salience_runs.py `exact_values_of`: the first such method in the registry's order whose values it
   * has for the same segmentation, span and removal): that method and how many segments it measured; null: none here.
   */
  knownFrom(ask: SegmentAsk): {info: SegmentMethodInfo; measured: number} | null {
    const reg = this.page.reg;
    if (!reg?.segment(ask.method)?.exact_measured) return null;
    for (const info of reg.segments) {
      if (info.name === ask.method || !info.exact_measured) continue;
      const v = this.measuredHere(segmentCacheKey({...ask, method: info.name, count: 0}));
      if (v !== undefined) return {info, measured: v.measured?.filter((m) => m).length ?? v.values.length};
    }
    // Not measured on this page: what the server said it holds (another page's, another client's; askKnown).
    const known = this.serverKnown.get(segmentCacheKey(ask)) ?? null;
    const info = known === null ? undefined : reg.segment(known.method);
    return known === null || info === undefined ? null : {info, measured: known.measured};
  }

  /**
   * Asks the server once per selection how many segments of `ask` (an exact method's, waiting for its button) another
   * exact method measured there already (the registry's `known_detail`: no job, no wait for the model), so that the
   * button's cost counts the forwards that run on a page that did not measure them (a second tab, a reload).
   */
  async askKnown(d: IndexedInputLike, ask: SegmentAsk) {
    const page = this.page;
    const detail = page.reg?.segment(ask.method)?.known_detail ?? null;
    const key = segmentCacheKey(ask);
    if (detail === null || this.serverKnown.has(key) || page.salienceModel === null) return;
    this.serverKnown.set(key, null);  // asked: not again for this selection
    const gen = page.generation;
    try {
      const res = await page.host.getPreds([segmentInput(page.reg!, d, ask, 0, detail)], page.salienceModel,
                                           [SALIENCE_FIELD]);
      const known = (res[0]?.[SALIENCE_FIELD] as Record<string, unknown> | undefined)?.[KNOWN_EXACT_FIELD];
      if (gen !== page.generation || known === null || typeof known !== 'object') return;
      const {method, measured} = known as {method?: unknown; measured?: unknown};
      if (typeof method !== 'string' || typeof measured !== 'number') return;
      this.serverKnown.set(key, {method, measured});
      page.host.changed();
    } catch {
      // an older server, or a failed read: the button states every segment's forward, as before
    }
  }
}
