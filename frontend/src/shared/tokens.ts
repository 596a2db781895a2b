/**
 * The one way every view (salience, heatmap, Inside the model, Test this explanation, compare) numbers
 * response tokens: 1-based, "token 6 of 7", "tokens 5–6 of 7", "whole response (7 tokens)". Spans come in
 * as the wire has them, 0-based and end-exclusive [t0, t1) over the response tokens.
 */

/** "1 token", "7 tokens". */
export function tokenCount(n: number): string {
  return `${n} token${n === 1 ? '' : 's'}`;
}

/** The span [t0, t1) of a response of `n` tokens: "token 6 of 7", "tokens 5–6 of 7" or "whole response (7 tokens)". */
export function describeTokens(t0: number, t1: number, n: number): string {
  if (t0 <= 0 && t1 >= n) return `whole response (${tokenCount(n)})`;
  if (t1 - t0 <= 1) return `token ${t0 + 1} of ${n}`;
  return `tokens ${t0 + 1}–${t1} of ${n}`;
}

/** Number of response tokens of a target shared between the modules (shared/target_store.ts). */
export function responseLength(t: {tokens: readonly string[]; nPromptTokens: number}): number {
  return t.tokens.length - t.nPromptTokens;
}
