/**
 * The `salience` output field (a LIT JsonDict) as documented in
 * docs/architecture.md, "LIT salience payload", plus a validator that turns a
 * malformed payload into an error that names the broken field.
 */

export type MethodName = 'grad_norm' | 'grad_x_input' | 'integrated_gradients';

/** Method ids in display order, with labels for the method menu. */
export const METHODS: ReadonlyArray<{id: MethodName; label: string}> = [
  {id: 'grad_norm', label: 'Gradient norm'},
  {id: 'grad_x_input', label: 'Gradient × input'},
  {id: 'integrated_gradients', label: 'Integrated gradients'},
];

export interface MethodPayload {
  signed: boolean;
  /** <float>[T][N]: salience of token i for log p(target_t | prefix). */
  matrix: number[][];
  /** grad_norm only: <float>[N][T*(T+1)/2] packed upper-triangular Gram rows, or null. */
  gram_packed?: number[][] | null;
  steps?: number;
  completeness_error?: number[] | null;
}

export type Role = 'system' | 'user' | 'assistant' | 'markup' | string;

export interface SaliencePayload {
  text: string;
  prompt_end: number;
  tokens: string[];
  offsets: Array<[number, number]>;
  special: boolean[];
  n_prompt_tokens: number;
  role_spans: Array<[number, number, Role]>;
  target_logprobs: number[];
  methods: Partial<Record<MethodName, MethodPayload>>;
}

/** Number of target (response) tokens T. */
export function numTargets(p: SaliencePayload): number {
  return p.tokens.length - p.n_prompt_tokens;
}

function fail(msg: string): never {
  throw new Error(`Malformed salience payload: ${msg}`);
}

/**
 * Checks the shape of a payload received from the server.
 * @throws Error naming the first inconsistent field.
 */
export function parsePayload(x: unknown): SaliencePayload {
  if (x == null || typeof x !== 'object') fail('expected an object');
  const p = x as SaliencePayload;
  if (typeof p.text !== 'string') fail('"text" is not a string');
  if (!Array.isArray(p.tokens)) fail('"tokens" is not a list');
  const n = p.tokens.length;
  if (!Array.isArray(p.offsets) || p.offsets.length !== n) {
    fail(`"offsets" has ${p.offsets?.length} entries, "tokens" has ${n}`);
  }
  if (!Array.isArray(p.special)) p.special = new Array(n).fill(false);
  if (!Array.isArray(p.role_spans)) p.role_spans = [];
  if (typeof p.n_prompt_tokens !== 'number' || p.n_prompt_tokens < 0 ||
      p.n_prompt_tokens > n) {
    fail(`"n_prompt_tokens" (${p.n_prompt_tokens}) not in [0, ${n}]`);
  }
  if (typeof p.prompt_end !== 'number') fail('"prompt_end" is not a number');
  const t = n - p.n_prompt_tokens;
  if (p.methods == null || typeof p.methods !== 'object') {
    fail('"methods" is missing');
  }
  for (const [name, m] of Object.entries(p.methods)) {
    if (m == null) continue;
    if (!Array.isArray(m.matrix) || m.matrix.length !== t) {
      fail(`methods.${name}.matrix has ${m.matrix?.length} rows, expected T=${t}`);
    }
    for (const row of m.matrix) {
      if (row.length !== n) {
        fail(`methods.${name}.matrix row has ${row.length} columns, expected N=${n}`);
      }
    }
    if (m.gram_packed != null) {
      const w = (t * (t + 1)) / 2;
      if (m.gram_packed.length !== n || (n > 0 && m.gram_packed[0].length !== w)) {
        fail(`methods.${name}.gram_packed is not [N=${n}][T(T+1)/2=${w}]`);
      }
    }
  }
  return p;
}
