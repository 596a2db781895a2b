/**
 * The text the salience module shows, cut as the user chose: the segmentation at the granularity (or regex) on
 * screen, its pieces and code points, and the method's values per segment, each kept until what it is made of
 * changes, so that a drag or a cursor move does not rebuild thousands of prompt spans. No DOM: the element
 * (../salience_module.ts) asks, the views draw.
 */
import {aggregate, asTyped, checkPattern, matchesOnly, segment, type Granularity, type PatternBounds,
        type Segmentation} from '../shared/aggregate/index.js';
import {buildPieces, codePointToUtf16, type Piece} from '../shared/pieces.js';
import {unmeasuredNotes} from './coarse.js';
import type {SalienceController} from './controller.js';
import {PatternPending, type PatternMatcher} from './pattern_runner.js';
import type {SaliencePayload} from './payload.js';
import type {SegmentPayload} from './segment_payload.js';

/** The segmentation the user chose: a granularity, and the pattern of granularity "regex". */
export interface Cut {
  granularity: Granularity;
  regex: string;
}

/** The segmentation shown, and why it is single tokens instead (`note`: waiting or no match; `error`: refused). */
export interface ShownSegmentation {
  seg: Segmentation;
  note: string;
  error: string;
}

export class ShownText {
  private readonly segCache = new Map<string, Segmentation>();
  private readonly piecesCache = new Map<string, Piece[]>();
  /** UTF-16 index of each code point of the payload's text. */
  private u16: {text: string; map: Int32Array} | null = null;
  private valuesMemo: {key: string; seg: Segmentation; payload: SaliencePayload | null;
                       values: Float64Array | null} | null = null;
  private notesMemo: {payload: SegmentPayload | null; notes: ReadonlyMap<number, string>} =
      {payload: null, notes: new Map()};

  /**
   * `cut`: the element's choice now; `patterns` runs custom regexes off the main thread; `bounds`: the server's
   * pattern bounds (its /get_info), null when unknown.
   */
  constructor(private readonly ctl: SalienceController, private readonly patterns: PatternMatcher,
              private readonly cut: () => Cut, private readonly bounds: () => PatternBounds | null) {}

  /** A new selection: its text is cut again. */
  clear() {
    this.segCache.clear();
    this.piecesCache.clear();
  }

  /** A pattern run finished: segmentations with a pattern are made again (the compare view's too). */
  dropPatterns() {
    for (const cache of [this.segCache, this.piecesCache]) {
      for (const key of Array.from(cache.keys())) if (key.startsWith('regex:')) cache.delete(key);
    }
  }

  codePoints(p: SaliencePayload): Int32Array {
    if (this.u16?.text !== p.text) this.u16 = {text: p.text, map: codePointToUtf16(p.text)};
    return this.u16.map;
  }

  /** The notes of segments coarse-to-fine did not measure (by segment index), the same map while its values stay. */
  unmeasured(): ReadonlyMap<number, string> {
    const s = this.ctl.segmentValues();
    if (this.notesMemo.payload !== s) this.notesMemo = {payload: s, notes: unmeasuredNotes(s)};
    return this.notesMemo.notes;
  }

  /** Segment salience for the current method and span (memoised: the same array while nothing changed). */
  segmentValues(seg: Segmentation): Float64Array | null {
    const key = this.ctl.valuesKey();
    const memo = this.valuesMemo;
    if (memo !== null && memo.key === key && memo.seg === seg && memo.payload === this.ctl.payload) return memo.values;
    const tokVals = this.ctl.tokenValues();
    // Regex: the matches are what is scored; the text between them is context (uncoloured, unranked).
    const values = tokVals === null ? null : matchesOnly(aggregate(tokVals, seg, 'sum'), seg);
    this.valuesMemo = {key, seg, payload: this.ctl.payload, values};
    return values;
  }

  /** The chosen segmentation of the payload's text (throws while a pattern runs, or for a bad one). */
  segmentation(): Segmentation {
    const p = this.ctl.payload!;
    const {granularity, regex} = this.cut();
    const key = granularity === 'regex' ? `regex:${regex}` : granularity;
    let seg = this.segCache.get(key);
    if (seg === undefined) {
      const matches = granularity === 'regex' ? this.patterns.matches(p.text, regex) : undefined;
      seg = segment(p.text, p.offsets, granularity, {pattern: regex, matches, roleSpans: p.role_spans});
      this.segCache.set(key, seg);
    }
    return seg;
  }

  /**
   * The segmentation shown: the chosen one, or single tokens (with a note saying why) while a pattern
   * runs, when it is invalid (the server's bounds too), ran out of time or matches nothing.
   */
  shown(p: SaliencePayload): ShownSegmentation {
    const {granularity, regex} = this.cut();
    try {
      // The server's bounds too: a pattern it would refuse says why here, before anything is sent.
      if (granularity === 'regex') checkPattern(regex, this.bounds());
      const seg = this.segmentation();
      if (granularity === 'regex' && !seg.kinds.includes('match')) {
        return {seg: this.tokenSegmentation(p), error: '',
                note: `No match: the pattern ${asTyped(regex)} matches nothing in this text. ` +
                      'Showing single tokens; change the pattern to group them.'};
      }
      return {seg, note: '', error: ''};
    } catch (e) {
      const pending = e instanceof PatternPending;
      return {seg: this.tokenSegmentation(p), note: pending ? 'Matching the pattern…' : '',
              error: pending ? '' : e instanceof Error ? e.message : String(e)};
    }
  }

  private tokenSegmentation(p: SaliencePayload): Segmentation {
    let seg = this.segCache.get('token');
    if (seg === undefined) {
      seg = segment(p.text, p.offsets, 'token');
      this.segCache.set('token', seg);
    }
    return seg;
  }

  pieces(seg: Segmentation): Piece[] {
    const key = seg.granularity === 'regex' ? `regex:${this.cut().regex}` : seg.granularity;
    let pieces = this.piecesCache.get(key);
    if (pieces === undefined) {
      pieces = buildPieces(this.ctl.payload!.text, seg, this.ctl.payload!.prompt_end);
      this.piecesCache.set(key, pieces);
    }
    return pieces;
  }

  /** Removable prompt segments at the granularity shown (not template markup, not between regex matches). */
  removableSegments(): number {
    const p = this.ctl.payload;
    if (p === null) return 0;
    let seg: Segmentation;
    try {
      seg = this.segmentation();
    } catch {
      return 0;
    }
    let n = 0;
    for (let s = 0; s < seg.starts.length; s++) {
      if (seg.starts[s] < p.prompt_end && seg.excluded[s] !== 1 && seg.kinds[s] !== 'gap') n++;
    }
    return n;
  }
}
