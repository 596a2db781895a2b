/**
 * Running a custom pattern: compiled in the page from checkPattern's translation (pattern.ts), or in a Web
 * Worker under the server's time budget (compile_pattern and PATTERN_TIMEOUT_S in
 * sequence_salience/aggregate/patterns.py, whose check is pattern.ts).
 */
import {asTyped, checkPattern} from './pattern.js';
import {SalienceError} from './types.js';

/**
 * Checks `pattern` against the shared subset and compiles its translation with
 * the 'gu' flags, so that it matches exactly where Python's
 * re.compile(pattern, re.MULTILINE | re.ASCII) does.
 * @throws SalienceError for a construct outside the subset or invalid syntax.
 */
export function compilePattern(pattern: string): RegExp {
  const translated = checkPattern(pattern);
  try {
    return new RegExp(translated, 'gu');
  } catch (e) {
    // The engine's message quotes the internal translation (/.../gu: reason); keep only the reason.
    const reason = (e as Error).message.replace(/^Invalid regular expression: \/[\s\S]*\/[a-z]*: /, '');
    throw new SalienceError(
      `regex pattern ${asTyped(pattern)} is invalid: ${reason}. Fix the pattern syntax.`);
  }
}

/** How long a custom pattern may run on one text, as the server's guard (PATTERN_TIMEOUT_S in patterns.py). */
export const PATTERN_TIMEOUT_MS = 1000;

/**
 * Source of a Web Worker that runs a translated pattern (checkPattern's output) over a text and posts
 * back {id, spans} (flat UTF-16 [start, end, ...] of the non-empty matches) or {id, error}. Self-contained
 * (no imports), so that it can run from a Blob URL, offline and from any page.
 */
export const MATCH_WORKER_SOURCE = `onmessage = (e) => {
  const {id, source, text} = e.data;
  try {
    const spans = [];
    for (const m of text.matchAll(new RegExp(source, 'gu'))) {
      if (m[0].length > 0) spans.push(m.index, m.index + m[0].length);
    }
    postMessage({id, spans});
  } catch (err) {
    postMessage({id, error: String((err && err.message) || err)});
  }
};`;
