/**
 * Turns a segmentation into the text pieces the module renders: one inline
 * element per segment (split where the response starts), plus plain gaps for
 * text no token covers. Positions are code points (as in the payload), so
 * this converts to JS string (UTF-16) slices.
 */
import type {Segmentation} from './aggregate/index.js';

export interface Piece {
  text: string;
  /** Segment index, or -1 for uncovered text. */
  seg: number;
  /** True for text at or after the prompt end (the response). */
  response: boolean;
}

/** UTF-16 index of every code point index 0..L (inclusive). */
export function codePointToUtf16(text: string): Int32Array {
  const out = new Int32Array(text.length + 1);
  let cp = 0;
  for (let i = 0; i < text.length; cp++) {
    out[cp] = i;
    const c = text.charCodeAt(i);
    i += c >= 0xd800 && c <= 0xdbff && i + 1 < text.length ? 2 : 1;
  }
  out[cp] = text.length;
  return out.subarray(0, cp + 1);
}

/**
 * Pieces in text order covering the whole text. A segment crossing the
 * prompt end is split into a prompt piece and a response piece with the same
 * segment index. `promptEnd` is a code point index.
 */
export function buildPieces(text: string, seg: Segmentation, promptEnd: number): Piece[] {
  const u16 = codePointToUtf16(text);
  const len = u16.length - 1;
  const pe = Math.max(0, Math.min(len, promptEnd));
  const pieces: Piece[] = [];
  const push = (a: number, b: number, s: number) => {
    if (b <= a) return;
    if (a < pe && b > pe) {
      push(a, pe, s);
      push(pe, b, s);
      return;
    }
    pieces.push({text: text.slice(u16[a], u16[b]), seg: s, response: a >= pe});
  };
  const order = Array.from(seg.starts.keys()).sort(
      (x, y) => seg.starts[x] - seg.starts[y] || x - y);
  let pos = 0;
  for (const s of order) {
    const a = Math.max(pos, Math.min(len, seg.starts[s]));
    const b = Math.min(len, seg.ends[s]);
    if (b <= a) continue;
    push(pos, a, -1);
    push(a, b, s);
    pos = b;
  }
  push(pos, len, -1);
  return pieces;
}

/** Text of one segment (code point positions). */
export function segmentText(text: string, seg: Segmentation, s: number, u16?: Int32Array): string {
  const map = u16 ?? codePointToUtf16(text);
  const len = map.length - 1;
  return text.slice(map[Math.min(len, seg.starts[s])], map[Math.min(len, seg.ends[s])]);
}
