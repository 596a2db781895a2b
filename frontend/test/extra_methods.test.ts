/**
 * Methods computed on request (integrated gradients, SmoothGrad): the request
 * inputs the module sends, the counts it accepts, and how their values combine.
 */
import {describe, expect, it} from 'vitest';
import fixture from './fixtures/small_payload.json';
import registry from './fixtures/method_registry.json';
import {parseRegistry} from '../src/shared/methods.js';
import {numTargets, parsePayload, type MethodPayload} from '../src/salience/payload.js';
import {extraKey, fullInput, jobKind, matrixInput, parseCount,
        pollInput, quickInput, spanInput, type Extra} from '../src/salience/request.js';
import {spanSalience} from '../src/salience/spans.js';

/** The list the server publishes (the fixture a Python test checks against lit_app's). */
const REG = parseRegistry(registry);
const ex = {id: 'dp', data: {_id: 'dp', prompt: 'Hi'}, meta: {}};
const IG: Extra = {method: 'integrated_gradients', count: 16};
const SG: Extra = {method: 'smooth_grad', count: 8};

describe('the method menu', () => {
  it('offers SmoothGrad after integrated gradients', () => {
    expect(REG.tokens.map((m) => m.name)).toEqual(['grad_norm', 'grad_x_input', 'integrated_gradients', 'smooth_grad']);
    expect(REG.label('smooth_grad')).toBe('SmoothGrad (× input)');
    expect(REG.extras.map((m) => m.name)).toEqual(['integrated_gradients', 'smooth_grad']);
    expect(REG.isExtra('smooth_grad') && REG.isExtra('integrated_gradients')).toBe(true);
    expect(REG.isExtra('grad_x_input') || REG.isExtra('toString')).toBe(false);
  });
});

describe('request inputs for extra methods', () => {
  it('sends every count field, only the chosen one non-zero', () => {
    expect(quickInput(REG, ex, SG).data).toEqual(
        {_id: 'dp~quicksg8', prompt: 'Hi', detail: 'span', ig_steps: 0, smooth_grad_samples: 8});
    expect(quickInput(REG, ex).data).toEqual({_id: 'dp~quick0', prompt: 'Hi', detail: 'span', ig_steps: 0, smooth_grad_samples: 0});
    expect(spanInput(REG, ex, 1, 3, SG).data).toEqual({_id: 'dp~span1-3-sg8', prompt: 'Hi', detail: 'span',
                                                   target_span: '1:3', ig_steps: 0, smooth_grad_samples: 8});
    expect(spanInput(REG, ex, 1, 3, IG).data).toMatchObject({ig_steps: 16, smooth_grad_samples: 0});
    expect(spanInput(REG, ex, 0, 8).id).toBe('dp~span0-8-0');
    expect(fullInput(REG, ex, SG).data).toMatchObject({smooth_grad_samples: 8, ig_steps: 0});
    expect(fullInput(REG, ex).data).not.toHaveProperty('detail');
  });
  it('starts and polls the per-token matrix of the chosen method', () => {
    expect(matrixInput(REG, ex, SG).data).toMatchObject({detail: 'smooth_grad_matrix', smooth_grad_samples: 8, ig_steps: 0});
    expect(matrixInput(REG, ex, IG).data).toMatchObject({detail: 'ig_matrix', ig_steps: 16, smooth_grad_samples: 0});
    expect(pollInput(REG, ex, SG, 3).data).toMatchObject({detail: 'poll', smooth_grad_samples: 8, ig_steps: 0});
    expect(pollInput(REG, ex, null, 3).data).toMatchObject({detail: 'poll', smooth_grad_samples: 0, ig_steps: 0});
    // The job kinds the server reports (lit_app/models.py: kind + count).
    expect([jobKind(REG, null), jobKind(REG, IG), jobKind(REG, SG)]).toEqual(['grad', 'ig16', 'sg8']);
  });
  it('gives every request its own id (LIT caches predictions by id)', () => {
    const ids = [quickInput(REG, ex), quickInput(REG, ex, IG), quickInput(REG, ex, SG), quickInput(REG, ex, {...SG, count: 4}),
                 spanInput(REG, ex, 0, 2, IG), spanInput(REG, ex, 0, 2, SG), matrixInput(REG, ex, IG), matrixInput(REG, ex, SG),
                 pollInput(REG, ex, SG, 1), pollInput(REG, ex, SG, 2), pollInput(REG, ex, IG, 1), fullInput(REG, ex, SG)].map((d) => d.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ex.data._id).toBe('dp');
  });
  it('keys values by method and count', () => {
    expect(extraKey(SG)).toBe('smooth_grad#8');
    expect(extraKey(IG)).not.toBe(extraKey({method: 'smooth_grad', count: 16}));
  });
});

describe('parseCount', () => {
  it.each([
    ['8', 'smooth_grad', 8], ['256', 'smooth_grad', 256], [' 32 ', 'integrated_gradients', 32],
  ] as const)('%s for %s -> %s', (value, method, expected) => {
    expect(parseCount(value, REG.extra(method)!)).toBe(expected);
  });
  // Refused with the allowed range (issue 35: IG steps 0, 300, 100000 were silently ignored; 2.4 was rounded).
  it.each([
    ['0', 'integrated_gradients', 'IG steps must be a whole number from 1 to 256, not 0'],
    ['300', 'integrated_gradients', 'IG steps must be a whole number from 1 to 256, not 300'],
    ['100000', 'integrated_gradients', 'IG steps must be a whole number from 1 to 256, not 100000'],
    ['2.4', 'smooth_grad', 'SmoothGrad samples must be a whole number from 1 to 256, not 2.4'],
    ['-3', 'smooth_grad', 'SmoothGrad samples must be a whole number from 1 to 256, not -3'],
    ['many', 'smooth_grad', 'SmoothGrad samples must be a whole number from 1 to 256, not many'],
    ['', 'smooth_grad', 'SmoothGrad samples must be a whole number from 1 to 256'],
  ] as const)('%j for %s is refused', (value, method, refusal) => {
    expect(parseCount(value, REG.extra(method)!)).toBe(refusal);
  });
  it('defaults follow the server (8 samples, 16 steps)', () => {
    expect(REG.extra('smooth_grad')!.default_count).toBe(8);
    expect(REG.extra('integrated_gradients')!.default_count).toBe(16);
  });
});

describe('SmoothGrad payloads', () => {
  const withSG = (matrix: number[][] | null) => {
    const p = structuredClone(fixture) as any;
    p.methods.smooth_grad = {signed: true, matrix, samples: 8};
    return p;
  };
  it('parses the first highlight (no matrix yet) and checks a matrix shape', () => {
    const first = parsePayload(withSG(null));
    expect(first.methods.smooth_grad).toEqual({signed: true, matrix: null, samples: 8});
    const p = parsePayload(structuredClone(fixture));
    const t = numTargets(p);
    const n = p.tokens.length;
    expect(() => parsePayload(withSG(Array.from({length: t - 1}, () => new Array(n).fill(0)))))
        .toThrow(/methods\.smooth_grad\.matrix has 2 rows, expected T=3/);
  });
  it('a span is the sum of its rows (signed, linear)', () => {
    const p = parsePayload(structuredClone(fixture));
    const n = p.tokens.length;
    const matrix = [0, 1, 2].map((t) => Array.from({length: n}, (_, i) => (i < p.n_prompt_tokens + t ? Math.sin(i + 3 * t) : 0)));
    const m: MethodPayload = {signed: true, matrix, samples: 8};
    const got = spanSalience(m, {t0: 1, t1: 3}, n, true)!;
    for (let i = 0; i < n; i++) expect(got[i]).toBeCloseTo(matrix[1][i] + matrix[2][i], 12);
    expect(Array.from(got).some((v) => v < 0)).toBe(true);  // signed values stay signed
    expect(spanSalience({signed: true, matrix: null, samples: 8}, {t0: 0, t1: 3}, n, true)).toBeNull();  // ask the server
  });
});
