/**
 * Segmentation: word, sentence, paragraph, line, regex and role segments of a text, markup
 * units kept atomic, and the segment of each token (the rules: index.ts and sequence_salience/aggregate/segments.py,
 * ported here in three files: this one, segment_units.ts, the base segmenters, and segment_markup.ts, the markup units).
 */
import {GRANULARITIES, SalienceError, type Granularity, type Segmentation, type SegmentOptions} from './types.js';
import {Chars} from './unicode.js';
import {cutMarkup, markupReach, reachAt} from './segment_markup.js';
import {segmentLine, segmentParagraph, segmentRegex, segmentRole, segmentSentence, segmentWord} from './segment_units.js';

function checkOffsets(chars: Chars, offsets: ArrayLike<ArrayLike<number>>): void {
  for (let k = 0; k < offsets.length; k++) {
    const o = offsets[k];
    if (o.length !== 2) {
      throw new SalienceError(
        `offsets[${k}] has ${o.length} entries; expected [N, 2] (start, end) character spans. ` +
        'Fix: pass one (start, end) pair per token.');
    }
    if (!(o[0] >= 0 && o[1] >= o[0] && o[1] <= chars.length)) {
      throw new SalienceError(
        `token ${k} has offsets [${o[0]}, ${o[1]}] outside the text (length ${chars.length}) or reversed. ` +
        'Fix: pass offsets into this exact text (code point indices, 0 <= start <= end <= len).');
    }
  }
}

/**
 * Splits `text` into segments and assigns each token to one of them.
 *
 * @param text the full text the offsets index into.
 * @param offsets [N][2] token spans in code points; empty spans allowed.
 * @param granularity one of GRANULARITIES.
 * @param opts pattern (granularity "regex"), roleSpans (granularity "role").
 * @throws SalienceError on unknown granularity, bad offsets, pattern or role spans.
 */
export function segment(text: string, offsets: ArrayLike<ArrayLike<number>>,
                        granularity: Granularity | string = 'word', opts: SegmentOptions = {}): Segmentation {
  const chars = new Chars(text);
  checkOffsets(chars, offsets);
  const nTok = offsets.length;
  const n = chars.length;
  // Token anchors: first non-space character inside the span, else the start (clamped into the text).
  const anchors = new Int32Array(nTok);
  for (let k = 0; k < nTok; k++) {
    const [s, e] = [offsets[k][0], offsets[k][1]];
    const first = chars.nonspaceFrom(s);
    anchors[k] = Math.max(0, Math.min(first < e ? first : s, n - 1));
  }
  if (granularity === 'token') {
    const starts = new Int32Array(nTok);
    const ends = new Int32Array(nTok);
    const tokenSegment = new Int32Array(nTok);
    const kinds: string[] = new Array(nTok).fill('token');
    const reach = n > 0 ? markupReach(chars) : [[], []] as [number[], number[]];
    for (let k = 0; k < nTok; k++) {
      starts[k] = offsets[k][0];
      ends[k] = offsets[k][1];
      tokenSegment[k] = k;
      if (reachAt(reach, anchors[k]) >= 0) kinds[k] = 'markup';
    }
    const excluded = Uint8Array.from(kinds, (k) => (k === 'markup' ? 1 : 0));
    return {granularity, starts, ends, kinds, excluded, tokenSegment};
  }
  let result: [number[], string[]];
  switch (granularity) {
    case 'word': result = segmentWord(chars); break;
    case 'sentence': result = segmentSentence(chars); break;
    case 'paragraph': result = segmentParagraph(chars); break;
    case 'line': result = segmentLine(chars); break;
    case 'regex': result = segmentRegex(chars, opts.pattern, opts.matches); break;
    case 'role': result = segmentRole(chars, opts.roleSpans); break;
    default:
      throw new SalienceError(
        `unknown granularity "${granularity}". Fix: use one of ${GRANULARITIES.join(', ')}.`);
  }
  // Word units already keep markup units atomic (the cut would change nothing there).
  const [startList, kinds] = granularity === 'word' ? result : cutMarkup(chars, result[0], result[1], markupReach(chars));
  const nSeg = startList.length;
  const starts = Int32Array.from(startList);
  const ends = new Int32Array(nSeg);
  for (let s = 0; s < nSeg; s++) ends[s] = s + 1 < nSeg ? starts[s + 1] : n;
  const tokenSegment = new Int32Array(nTok).fill(-1);
  if (n > 0 && nSeg > 0) {
    for (let k = 0; k < nTok; k++) {
      const anchor = anchors[k];
      // Last segment whose start <= anchor (binary search).
      let lo = 0;
      let hi = nSeg - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (starts[mid] <= anchor) lo = mid; else hi = mid - 1;
      }
      tokenSegment[k] = lo;
    }
  }
  const excluded = Uint8Array.from(kinds, (k) => (k === 'markup' ? 1 : 0));
  return {granularity: granularity as Granularity, starts, ends, kinds, excluded, tokenSegment};
}
