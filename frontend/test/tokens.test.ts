import {describe, expect, it} from 'vitest';

import {describeTokens, responseLength, tokenCount} from '../src/shared/tokens.js';

describe('the one token numbering (shared/tokens.ts)', () => {
  it('numbers from 1, an end-exclusive span [t0, t1) as its first and last token, always "of N"', () => {
    // Issue 35: the salience module said "token 6 of 7" where the explanation tab said "tokens 5–6" for the
    // same span {t0: 5, t1: 6} (0-based, end-exclusive, as the wire has it).
    expect(describeTokens(5, 6, 7)).toBe('token 6 of 7');
    expect(describeTokens(4, 6, 7)).toBe('tokens 5–6 of 7');
    expect(describeTokens(0, 1, 7)).toBe('token 1 of 7');
    expect(describeTokens(1, 7, 7)).toBe('tokens 2–7 of 7');
  });
  it('calls the whole response so, with a count that agrees in number', () => {
    expect(describeTokens(0, 7, 7)).toBe('whole response (7 tokens)');
    expect(describeTokens(0, 1, 1)).toBe('whole response (1 token)');
    expect(tokenCount(1)).toBe('1 token');
    expect(tokenCount(0)).toBe('0 tokens');
  });
  it('counts the response tokens of a shared target (all tokens less the prompt)', () => {
    expect(responseLength({tokens: ['a', 'b', 'c', 'd'], nPromptTokens: 3})).toBe(1);
  });
});
