/**
 * Custom regexes: the subset common to Python `re` and JavaScript `RegExp`, checked and
 * translated so that both match identically, and the server's size bounds (see check_pattern in
 * sequence_salience/aggregate/patterns.py; compiling and running the translation: pattern_run.ts).
 */
import {SalienceError} from './types.js';

const HEX = /^[0-9a-fA-F]+$/;
const QUANTIFIER_BRACE_RE = /\{[0-9]+(?:,[0-9]*)?\}/y;
const LETTER_ESCAPES: Record<string, [string, string]> = {
  A: ['string anchor \\A', 'use ^ (it matches at every line start)'],
  Z: ['string anchor \\Z', 'use $ (it matches at every line end)'],
  z: ['string anchor \\z', 'use $ (it matches at every line end)'],
  G: ['anchor \\G', 'remove it'],
  p: ['Unicode property class \\p{...}', 'list the characters in a class, e.g. [A-Za-zÀ-ÿ]'],
  P: ['Unicode property class \\P{...}', 'list the characters in a negated class'],
  k: ['named backreference \\k<...>', 'remove the backreference'],
  N: ['named character \\N{...}', 'write the character itself'],
  U: ['escape \\U', 'write the character itself'],
  c: ['control escape \\c', 'use \\xHH'],
};
const ASCII_SPACE = '\\t\\n\\v\\f\\r ';

/** The pattern quoted as the user typed it (no JSON escaping: \d stays \d). */
export function asTyped(pattern: string): string {
  return `"${pattern}"`;
}

/**
 * How large a pattern may be: the server's PATTERN_BOUNDS (sequence_salience/aggregate/patterns.py
 * `PatternBounds`, the one declaration), published in /get_info "requestLimits"."pattern". The `regex`
 * package writes counted repeats out when it compiles (`a{99999999}` grew a server to 9.6 GB) and recurses
 * once per nested group, so the page refuses what the server would, before it sends it.
 * - max_chars: the pattern's length in code points.
 * - max_repeat: each bound of a counted repeat {m}, {m,}, {m,n}.
 * - max_expanded: the length once every repeat is written out (a repeated piece counted its upper bound
 *   times: {n} and {m,n} n, {m,} m + 1, {0} 1, * + ? once; quantifier characters count nothing; nested
 *   counts multiply).
 * - max_depth: groups open at once.
 */
export interface PatternBounds {
  max_chars: number;
  max_repeat: number;
  max_expanded: number;
  max_depth: number;
}

function quoted(pattern: string): string {
  const p = Array.from(pattern);
  return p.length <= 60 ? asTyped(pattern) : asTyped(p.slice(0, 60).join('')) + '…';
}

function boundError(pattern: string, what: string, fix: string): SalienceError {
  return new SalienceError(`regex pattern ${quoted(pattern)}: ${what}. Fix: ${fix}.`);
}

const count = (n: number) => n.toLocaleString('en-US');

/**
 * The written-out length after p[start:end], one piece of checkPattern's scan (an atom, a whole class, a
 * group's opening or closing, `|`, or a quantifier): `frames` holds [size so far, size of the last piece]
 * per open group (the pattern itself first); returns the new total; throws past a bound. The same rule as
 * `_grow` in sequence_salience/aggregate/patterns.py.
 */
function grow(pattern: string, p: string[], start: number, end: number, quantifier: boolean, frames: number[][],
              total: number, b: PatternBounds): number {
  const text = p.slice(start, end).join('');
  const top = frames[frames.length - 1];
  if (quantifier) {
    if (text === '*' || text === '+' || text === '?') return total;
    const inner = text.slice(1, -1);
    const comma = inner.indexOf(',');
    const low = comma < 0 ? inner : inner.slice(0, comma);
    const high = comma < 0 ? '' : inner.slice(comma + 1);
    for (const c of [low, high]) {
      if (c.replace(/^0+/, '').length > String(b.max_repeat).length || (c !== '' && Number(c) > b.max_repeat)) {
        const shown = c.length <= 12 ? c : c.slice(0, 12) + '…';
        throw boundError(pattern, `the repeat count ${shown} at position ${start} is above ${count(b.max_repeat)},` +
                         ' the largest allowed (the compiler writes counted repeats out)',
                         `use a count up to ${count(b.max_repeat)}, or + or * for any number`);
      }
    }
    const times = Math.max(1, high !== '' ? Number(high) : comma >= 0 ? Number(low) + 1 : Number(low));
    const grown = top[1] * (times - 1);
    top[0] += grown;
    top[1] *= times;
    total += grown;
  } else if (p[start] === '(') {
    if (frames.length > b.max_depth) {
      throw boundError(pattern, `groups nest deeper than ${b.max_depth} at position ${start}`,
                       'remove parentheses that group nothing');
    }
    frames.push([end - start, 0]);
    total += end - start;
  } else if (text === ')' && frames.length > 1) {
    const size = frames.pop()![0] + 1;
    frames[frames.length - 1][0] += size;
    frames[frames.length - 1][1] = size;
    total += 1;
  } else if (text === '|') {
    top[0] += 1;
    top[1] = 0;
    total += 1;
  } else {
    top[0] += end - start;
    top[1] = end - start;
    total += end - start;
  }
  if (total > b.max_expanded) {
    throw boundError(pattern, `written out, its repeats make it longer than ${count(b.max_expanded)} characters at` +
                     ` position ${start} (nested repeat counts multiply)`, 'use smaller counts, or + or * instead');
  }
  return total;
}

function patternError(pattern: string, pos: number, construct: string, fix: string): SalienceError {
  return new SalienceError(
    `regex pattern ${asTyped(pattern)}: ${construct} at position ${pos} is not supported ` +
    `(Python re and JavaScript RegExp treat it differently or only one has it). Fix: ${fix}.`);
}

/**
 * Checks `pattern` against the subset shared with Python (see check_pattern in
 * sequence_salience/aggregate/patterns.py) and returns its translation to an equivalent JS pattern for the
 * 'gu' flags: `.` -> `[^\n]`, `^` -> `(?<![^\n])`, `$` -> `(?![^\n])`,
 * `\s`/`\S` -> ASCII whitespace classes, escaped literals -> `\u{..}`.
 * Positions in messages count code points, as in Python.
 * @param bounds the server's (/get_info "requestLimits"."pattern", see PatternBounds): the length, each
 *   repeat count, the written-out length and the group depth, checked while scanning as the server does;
 *   null (no server's bounds known): the subset only.
 * @throws SalienceError naming the construct (or the bound), its position and the fix.
 */
export function checkPattern(pattern: string, bounds: PatternBounds | null = null): string {
  if (!pattern) {
    throw new SalienceError('regex pattern is empty. Fix: give a pattern, e.g. [^,;]+ for clauses.');
  }
  const p = Array.from(pattern);  // code points, so positions match Python
  const n = p.length;
  if (bounds !== null && n > bounds.max_chars) {
    throw boundError(pattern, `it is ${count(n)} characters long; at most ${count(bounds.max_chars)} are allowed`,
                     'shorten the pattern');
  }
  const frames: number[][] = [[0, 0]];
  let total = 0;
  let pieceStart = 0;
  const out: string[] = [];
  let i = 0;
  let inClass = false;
  let classFirst = 0;
  let afterQuantifier: false | 'greedy' | 'lazy' = false;
  while (i < n) {
    const c = p[i];
    let quantifier = false;
    if (!inClass) pieceStart = i;
    if (c === '\\') {
      if (i + 1 >= n) throw patternError(pattern, i, 'trailing backslash', 'escape it as \\\\');
      const d = p[i + 1];
      if ('dDwWbBntrfv'.includes(d)) {
        out.push('\\' + d);
        i += 2;
      } else if (d === 's') {
        out.push(inClass ? ASCII_SPACE : `[${ASCII_SPACE}]`);
        i += 2;
      } else if (d === 'S') {
        if (inClass) {
          throw patternError(pattern, i, '\\S inside a class',
                             'use a negated class [^...], or (?:.|\\n) for any character');
        }
        out.push(`[^${ASCII_SPACE}]`);
        i += 2;
      } else if (d === 'x') {
        const h = p.slice(i + 2, i + 4).join('');
        if (h.length !== 2 || !HEX.test(h)) throw patternError(pattern, i, '\\x without two hex digits', 'write \\xHH');
        out.push('\\x' + h);
        i += 4;
      } else if (d === 'u') {
        const h = p.slice(i + 2, i + 6).join('');
        if (h.length !== 4 || !HEX.test(h)) throw patternError(pattern, i, '\\u without four hex digits', 'write \\uHHHH');
        out.push('\\u' + h);
        i += 6;
      } else if (d >= '0' && d <= '9') {
        throw patternError(pattern, i, `backreference or octal escape \\${d}`, 'remove it (use \\xHH for a character)');
      } else if (/^[A-Za-z]$/.test(d)) {
        const [construct, fix] = LETTER_ESCAPES[d] ?? [`escape \\${d}`, 'remove the backslash or use a class'];
        throw patternError(pattern, i, construct, fix);
      } else {
        out.push(`\\u{${d.codePointAt(0)!.toString(16)}}`);  // escaped punctuation: a literal
        i += 2;
      }
    } else if (inClass) {
      if (c === ']' && i > classFirst) {
        inClass = false;
      } else if (c === '[') {
        throw patternError(pattern, i, 'unescaped [ inside a class', 'escape it as \\[');
      }
      // Literal class members other than syntax are escaped for the u flag.
      out.push(c === ']' || c === '^' || c === '-' ? c : `\\u{${c.codePointAt(0)!.toString(16)}}`);
      i += 1;
    } else if (c === '[') {
      let j = i + 1;
      if (j < n && p[j] === '^') j++;
      if (j < n && p[j] === ']') throw patternError(pattern, i, 'class starting with ] ([] or [^])', 'escape it as \\]');
      out.push(p.slice(i, j).join(''));
      inClass = true;
      classFirst = j;
      i = j;
    } else if (c === '(') {
      if (p[i + 1] === '?') {
        const a = p[i + 2] ?? '';
        const b = p[i + 3] ?? '';
        if (a === ':' || a === '=' || a === '!') {
          out.push('(?' + a);
          i += 3;
        } else if (a === '<' && (b === '=' || b === '!')) {
          throw patternError(pattern, i, 'lookbehind (?<=...) / (?<!...)', 'match the context and use a group');
        } else if (a === '<' || a === 'P') {
          throw patternError(pattern, i, 'named group', 'use a plain group (...)');
        } else if (a === '>') {
          throw patternError(pattern, i, 'atomic group (?>...)', 'use a non-capturing group (?:...)');
        } else if (a === '#') {
          throw patternError(pattern, i, 'comment group (?#...)', 'remove the comment');
        } else if (a === '(') {
          throw patternError(pattern, i, 'conditional group (?(...)...)', 'use alternation a|b');
        } else {
          throw patternError(pattern, i, 'inline flags (?...)', 'remove the flags; write both cases, e.g. [Tt]he');
        }
      } else {
        out.push('(');
        i += 1;
      }
    } else if (c === '*' || c === '+' || c === '?') {
      if (c === '+' && afterQuantifier === 'greedy') {
        throw patternError(pattern, i, 'possessive quantifier', 'drop the trailing +');
      }
      out.push(c);
      i += 1;
      if (c === '?' && afterQuantifier === 'greedy') {
        afterQuantifier = 'lazy';
        continue;
      }
      quantifier = true;
    } else if (c === '{') {
      const rest = p.slice(i).join('');
      QUANTIFIER_BRACE_RE.lastIndex = 0;
      const m = QUANTIFIER_BRACE_RE.exec(rest);
      if (m === null) throw patternError(pattern, i, 'lone { or {,n} quantifier', 'escape it as \\{ or write {0,n}');
      out.push(m[0]);
      quantifier = true;
      i += m[0].length;
    } else if (c === '}') {
      throw patternError(pattern, i, 'lone }', 'escape it as \\}');
    } else if (c === ']') {
      throw patternError(pattern, i, 'lone ]', 'escape it as \\]');
    } else if (c === '.') {
      out.push('[^\\n]');
      i += 1;
    } else if (c === '^') {
      out.push('(?<![^\\n])');
      i += 1;
    } else if (c === '$') {
      out.push('(?![^\\n])');
      i += 1;
    } else {
      out.push(c === ')' || c === '|' ? c : `\\u{${c.codePointAt(0)!.toString(16)}}`);
      i += 1;
    }
    if (bounds !== null && !inClass) total = grow(pattern, p, pieceStart, i, quantifier, frames, total, bounds);
    afterQuantifier = quantifier ? 'greedy' : false;
  }
  if (inClass) throw patternError(pattern, n, 'unterminated class [', 'close it with ]');
  return out.join('');
}
