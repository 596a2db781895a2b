/**
 * The page's check of a pattern's size (checkPattern with the server's PatternBounds) against the cases
 * shared with pytest (tests/data/pattern_bounds_cases.json, tests/unit/test_pattern_bounds.py). The file's
 * `bounds` are the server's declaration (PATTERN_BOUNDS; pytest checks they are equal); the page reads
 * the same from /get_info "requestLimits"."pattern".
 */
import {describe, expect, test} from 'vitest';

import cases from '../../tests/data/pattern_bounds_cases.json';

import {checkPattern, compilePattern, SalienceError, type PatternBounds} from '../src/shared/aggregate/index.js';

interface Case {id: string; pattern?: string; repeat?: Array<[string, number]>; message?: string;
  expanded?: number; depth?: number}

const DATA = cases as unknown as {bounds: PatternBounds; sizes: Case[]; refused: Case[]; accepted: Case[]};
const LOOSE: PatternBounds = {max_chars: 1e6, max_repeat: 1e6, max_expanded: 1e9, max_depth: 1e6};

function patternOf(c: Case): string {
  return c.pattern ?? c.repeat!.map(([text, times]) => text.repeat(times)).join('');
}

function refusal(pattern: string, bounds: PatternBounds): string {
  try {
    checkPattern(pattern, bounds);
  } catch (e) {
    expect(e).toBeInstanceOf(SalienceError);
    return (e as Error).message;
  }
  return '';
}

describe('written-out length and depth are the hand-derived ones', () => {
  for (const c of DATA.sizes) {
    test(c.id, () => {
      const pattern = patternOf(c);
      expect(refusal(pattern, {...LOOSE, max_expanded: c.expanded!, max_depth: Math.max(c.depth!, 1)})).toBe('');
      expect(refusal(pattern, {...LOOSE, max_expanded: c.expanded! - 1})).toContain('longer than');
      if (c.depth! > 0) expect(refusal(pattern, {...LOOSE, max_depth: c.depth! - 1})).toContain('nest deeper');
    });
  }
});

describe('refused with the server bounds, before compiling', () => {
  for (const c of DATA.refused) {
    test(c.id, () => {
      const start = performance.now();
      const message = refusal(patternOf(c), DATA.bounds);
      expect(performance.now() - start).toBeLessThan(100);
      expect(message).toContain(c.message!);
      expect(message).toContain('Fix');
      expect(message.length).toBeLessThan(400);  // a long pattern is quoted shortened
    });
  }
});

describe('accepted within the server bounds', () => {
  for (const c of DATA.accepted) {
    test(c.id, () => {
      expect(refusal(patternOf(c), DATA.bounds)).toBe('');
      expect(() => compilePattern(patternOf(c))).not.toThrow();
    });
  }
});

test('without the server bounds only the subset is checked', () => {
  expect(() => checkPattern('a{5000}')).not.toThrow();
  expect(() => checkPattern('a{3}+')).toThrow('possessive quantifier');
});

test('the messages are the server\'s, quoted as typed', () => {
  expect(refusal('a{99999999}', DATA.bounds)).toBe(
    'regex pattern "a{99999999}": the repeat count 99999999 at position 1 is above 1,000, the largest allowed' +
    ' (the compiler writes counted repeats out). Fix: use a count up to 1,000, or + or * for any number.');
});
