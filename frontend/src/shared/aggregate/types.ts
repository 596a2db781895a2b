/**
 * The names shared by every part of the aggregation (index.ts has the rules): granularities,
 * reductions, roles, the error type, and the shape of a segmentation.
 */

export const GRANULARITIES = ['token', 'word', 'sentence', 'paragraph', 'line', 'regex', 'role'] as const;
export type Granularity = (typeof GRANULARITIES)[number];
export const REDUCTIONS = ['sum', 'mean', 'max', 'abs_sum'] as const;
export type Reduction = (typeof REDUCTIONS)[number];
export const ROLES = ['system', 'user', 'assistant', 'markup'] as const;

/** Error thrown for bad input; the message names the cause and the fix. */
export class SalienceError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SalienceError';
  }
}

/** Segments of a text and the segment of each token (see sequence_salience/aggregate/segments.py). */
export interface Segmentation {
  granularity: Granularity;
  /** [S] segment starts, code points. */
  starts: Int32Array;
  /** [S] segment ends (exclusive), code points. */
  ends: Int32Array;
  /** [S] "word" | "punct" | "sentence" | ... | "markup" | a role. */
  kinds: string[];
  /** [S] true for template markup. */
  excluded: Uint8Array;
  /** [N] segment of each token (-1 only for an empty text). */
  tokenSegment: Int32Array;
}

export interface SegmentOptions {
  /** The user regex, for granularity "regex". */
  pattern?: string;
  /**
   * The pattern's non-empty matches, already found (flat UTF-16 [start, end, ...], as MATCH_WORKER_SOURCE
   * posts them): the pattern is then not run here, so a slow one can run off the main thread.
   */
  matches?: ArrayLike<number>;
  /** [(start, end, role)], for granularity "role". */
  roleSpans?: ReadonlyArray<readonly [number, number, string]>;
}
