import {describe, expect, it} from 'vitest';
import fixture from './fixtures/small_payload.json';
import {aggregate, segment} from '../src/shared/aggregate/index.js';
import {colorAt, colorFor, legendStops, maxAbs, normalize, textColorOn, formatValue} from '../src/shared/colormap.js';
import {numTargets, parsePayload, type SaliencePayload} from '../src/salience/payload.js';
import {buildPieces, codePointToUtf16} from '../src/shared/pieces.js';
import {packedIndex, spanSalience} from '../src/salience/spans.js';
import {describeSpan, dragSpan, isWhole, moveCursor, snapSpan, spanForKey, targetSegments, wholeResponse} from '../src/salience/target.js';

const payload = (): SaliencePayload => parsePayload(structuredClone(fixture));

describe('parsePayload', () => {
  it('accepts the fixture', () => {
    const p = payload();
    expect(numTargets(p)).toBe(3);
  });
  it('names the broken field', () => {
    const bad = structuredClone(fixture) as any;
    bad.methods.grad_x_input.matrix.pop();
    expect(() => parsePayload(bad)).toThrow(/grad_x_input\.matrix has 2 rows, expected T=3/);
    expect(() => parsePayload(null)).toThrow(/Malformed salience payload/);
    const bad2 = structuredClone(fixture) as any;
    bad2.offsets.pop();
    expect(() => parsePayload(bad2)).toThrow(/"offsets"/);
  });
});

describe('spanSalience', () => {
  const p = payload();
  const n = p.tokens.length;
  it('packs the upper triangle row-major', () => {
    // T = 3: (0,0)=0 (0,1)=1 (0,2)=2 (1,1)=3 (1,2)=4 (2,2)=5
    expect([packedIndex(0, 0, 3), packedIndex(0, 2, 3), packedIndex(1, 1, 3),
            packedIndex(2, 1, 3), packedIndex(2, 2, 3)]).toEqual([0, 2, 3, 4, 5]);
  });
  it('sums rows for linear methods', () => {
    const m = p.methods.grad_x_input!;
    const s = spanSalience(m, {t0: 1, t1: 3}, n, true)!;
    for (let i = 0; i < n; i++) expect(s[i]).toBeCloseTo(m.matrix![1][i] + m.matrix![2][i], 9);
  });
  it('single-token grad_norm span is the matrix row', () => {
    const m = p.methods.grad_norm!;
    expect(Array.from(spanSalience(m, {t0: 2, t1: 3}, n, false)!)).toEqual(m.matrix![2]);
  });
  it('grad_norm span from the Gram matrix is the norm of summed gradients', () => {
    // The fixture's gradients are g(t, i) = (sin(1 + 0.7 i + t), 0.5 cos(2 + 0.3 i - t)).
    const m = p.methods.grad_norm!;
    const s = spanSalience(m, {t0: 0, t1: 3}, n, false)!;
    for (let i = 0; i < n; i++) {
      let x = 0, y = 0;
      for (let t = 0; t < 3; t++) {
        if (i >= p.n_prompt_tokens + t) continue;
        x += Math.sin(1 + i * 0.7 + t);
        y += Math.cos(2 + i * 0.3 - t) * 0.5;
      }
      expect(s[i]).toBeCloseTo(Math.hypot(x, y), 4);
    }
  });
  it('returns null when grad_norm has no Gram matrix and the span is longer than one token', () => {
    const m = {...p.methods.grad_norm!, gram_packed: null};
    expect(spanSalience(m, {t0: 0, t1: 2}, n, false)).toBeNull();
    expect(spanSalience(m, {t0: 1, t1: 2}, n, false)).not.toBeNull();
  });
  it('clips the span to the targets; an empty span is all zero', () => {
    const m = p.methods.grad_x_input!;
    expect(Array.from(spanSalience(m, {t0: 5, t1: 9}, n, true)!).every((v) => v === 0)).toBe(true);
  });
});

describe('colormap', () => {
  const signed = {signed: true, scale: 2, intensity: 1};
  const seq = {signed: false, scale: 2, intensity: 1};
  it('maps zero to white and the extremes to the end colours', () => {
    expect(colorAt(0, true)).toEqual([255, 255, 255]);
    expect(colorAt(0, false)).toEqual([255, 255, 255]);
    expect(colorFor(2, signed).bg).toBe('rgb(178, 24, 43)');
    expect(colorFor(-2, signed).bg).toBe('rgb(33, 102, 172)');
    expect(colorFor(2, seq).bg).toBe('rgb(84, 39, 143)');
  });
  it('intensity scales and clips', () => {
    expect(normalize(1, signed)).toBe(0.5);
    expect(normalize(1, {...signed, intensity: 4})).toBe(1);
    expect(normalize(-5, signed)).toBe(-1);
    expect(normalize(-1, seq)).toBe(0);
    expect(normalize(NaN, seq)).toBe(0);
  });
  it('quantises colours to LEVELS steps', () => {
    expect(colorFor(1, signed).bg).toBe(colorFor(1 + 1e-4, signed).bg);
    expect(colorFor(1, signed).bg).not.toBe(colorFor(1.2, signed).bg);
  });
  it('picks readable text colours', () => {
    expect(textColorOn([255, 255, 255])).toBe('#202124');
    expect(textColorOn([33, 102, 172])).toBe('#ffffff');
  });
  it('legend spans ±scale/intensity for signed maps and 0..scale for sequential ones', () => {
    const l = legendStops({...signed, intensity: 2}, 3);
    expect(l.map((s) => s.value)).toEqual([-1, 0, 1]);
    expect(l[1].color).toBe('rgb(255, 255, 255)');
    expect(legendStops(seq, 2).map((s) => s.value)).toEqual([0, 2]);
  });
  it('maxAbs ignores NaN and never returns 0', () => {
    expect(maxAbs([NaN, -3, 2])).toBe(3);
    expect(maxAbs([0, 0])).toBe(1);
  });
  it('formats values', () => {
    expect(formatValue(0)).toBe('0');
    expect(formatValue(0.123456)).toBe('0.1235');
    expect(formatValue(-1.5e-5)).toBe('-1.500e-5');
  });
});

describe('target selection', () => {
  const p = payload();
  const T = numTargets(p);
  const words = segment(p.text, p.offsets, 'word');
  const list = targetSegments(words, p.n_prompt_tokens);
  it('lists the response segments with their target tokens', () => {
    // "Red cat." -> "Red ", "cat", "." (word segmentation keeps punctuation apart)
    expect(list.map((t) => [t.t0, t.t1])).toEqual([[0, 1], [1, 2], [2, 3]]);
  });
  it('a sentence covers all target tokens', () => {
    const sentences = segment(p.text, p.offsets, 'sentence');
    const l = targetSegments(sentences, p.n_prompt_tokens);
    expect(l[0].t0).toBe(0);
    expect(l[l.length - 1].t1).toBe(T);
  });
  it('snaps a span to whole segments when the granularity changes', () => {
    const sentences = targetSegments(segment(p.text, p.offsets, 'sentence'), p.n_prompt_tokens);
    expect(snapSpan(sentences, {t0: 1, t1: 2})).toEqual({t0: 0, t1: 3});
    expect(snapSpan(list, {t0: 1, t1: 2})).toEqual({t0: 1, t1: 2});
  });
  it('drags in either direction', () => {
    expect(dragSpan(list[2], list[0])).toEqual({t0: 0, t1: 3});
    expect(dragSpan(list[1], list[1])).toEqual({t0: 1, t1: 2});
  });
  it('whole response', () => {
    expect(isWhole(wholeResponse(T), T)).toBe(true);
    expect(isWhole({t0: 0, t1: 1}, T)).toBe(false);
    expect(describeSpan({t0: 1, t1: 2}, T)).toBe('token 2 of 3');
    expect(describeSpan({t0: 0, t1: 2}, T)).toBe('tokens 1–2 of 3');
  });
  it('keyboard: arrows move, shift extends, Enter selects, Escape resets', () => {
    expect(moveCursor(null, 'ArrowRight', 3)).toBe(0);
    expect(moveCursor(null, 'ArrowLeft', 3)).toBe(2);
    expect(moveCursor(2, 'ArrowRight', 3)).toBe(2);
    expect(moveCursor(1, 'Home', 3)).toBe(0);
    expect(moveCursor(1, 'x', 3)).toBeNull();
    expect(spanForKey(list, 0, 'ArrowRight', T)).toEqual({span: {t0: 1, t1: 2}, cursor: 1});
    expect(spanForKey(list, 1, 'ArrowRight', T, 0)).toEqual({span: {t0: 0, t1: 3}, cursor: 2});
    expect(spanForKey(list, 2, 'Enter', T)).toEqual({span: {t0: 2, t1: 3}, cursor: 2});
    expect(spanForKey(list, null, 'Enter', T)).toBeNull();
    expect(spanForKey(list, 1, 'Escape', T)).toEqual({span: {t0: 0, t1: 3}, cursor: null});
  });
});

describe('pieces and ranking', () => {
  const p = payload();
  it('pieces cover the text exactly, split at the prompt end', () => {
    for (const g of ['token', 'word', 'sentence', 'line', 'role'] as const) {
      const seg = segment(p.text, p.offsets, g, {roleSpans: p.role_spans});
      const pieces = buildPieces(p.text, seg, p.prompt_end);
      expect(pieces.map((x) => x.text).join('')).toBe(p.text);
      expect(pieces.filter((x) => x.response).map((x) => x.text).join('')).toBe('Red cat.');
    }
  });
  it('handles astral characters (code point offsets)', () => {
    const text = 'a😀b';
    expect(Array.from(codePointToUtf16(text))).toEqual([0, 1, 3, 4]);
    const seg = segment(text, [[0, 1], [1, 2], [2, 3]], 'token');
    expect(buildPieces(text, seg, 2).map((x) => x.text)).toEqual(['a', '😀', 'b']);
  });
  // topSegments: ranking_cases.test.ts (the cases pytest reads too).
  it('aggregates the selected span to words', () => {
    const seg = segment(p.text, p.offsets, 'word');
    const s = spanSalience(p.methods.grad_x_input!, {t0: 0, t1: 3}, p.tokens.length, true)!;
    const v = aggregate(s, seg, 'sum');
    const total = Array.from(v).filter(Number.isFinite).reduce((a, b) => a + b, 0);
    const markup = p.offsets.map((_, k) => k).filter((k) => seg.excluded[seg.tokenSegment[k]]);
    const expected = Array.from(s).reduce((a, b, k) => (markup.includes(k) ? a : a + b), 0);
    expect(total).toBeCloseTo(expected, 9);
  });
});

import {derivedInput, errorMessage, hasSalienceField, salienceModelFor, shouldDisplay} from '../src/shared/request.js';
import {fullInput, spanInput} from '../src/salience/request.js';
import registry from './fixtures/method_registry.json';
import {parseRegistry} from '../src/shared/methods.js';

describe('request helpers', () => {
  const models = {
    gen: {spec: {output: {response: {__name__: 'GeneratedText'}}}},
    _gen_salience: {spec: {output: {salience: {__name__: 'LitType'}, response: {}}}},
    other: {spec: {output: {score: {__name__: 'Scalar'}}}},
  };
  it('finds the salience model', () => {
    expect(salienceModelFor('gen', models)).toBe('_gen_salience');
    expect(salienceModelFor('_gen_salience', models)).toBe('_gen_salience');
    expect(salienceModelFor('other', models)).toBeNull();
    expect(hasSalienceField({salience: {__name__: 'Scalar'}})).toBe(false);
    expect(shouldDisplay({gen: models.gen})).toBe(true);
    expect(shouldDisplay({other: models.other})).toBe(false);
  });
  it('derives inputs with their own ids, sent in full', () => {
    const ex = {id: 'abc', data: {_id: 'abc', prompt: 'Hi'}, meta: {}};
    expect(fullInput(parseRegistry(registry), ex, {method: 'integrated_gradients', count: 8})).toEqual(
        {id: 'abc~fullig8', data: {_id: 'abc~fullig8', prompt: 'Hi', ig_steps: 8, smooth_grad_samples: 0},
         meta: {added: true}});
    expect(spanInput(parseRegistry(registry), ex, 1, 3).data.target_span).toBe('1:3');
    expect(derivedInput(ex, {}, 'x').data._id).toBe('abc~x');
    expect(ex.data._id).toBe('abc');
  });
  it('turns server failures into messages', () => {
    expect(errorMessage(new Error('Uncaught error: Prompt is too long (9 tokens).\n\nDetails: Traceback...')))
        .toBe('Prompt is too long (9 tokens).');
    expect(errorMessage(new TypeError('Failed to fetch'))).toMatch(/Could not reach the LIT server/);
    expect(errorMessage(new Error('<html><body>502 Bad Gateway</body></html>'))).toMatch(/502 Bad Gateway/);
    expect(errorMessage(new Error(''))).toMatch(/empty error/);
  });
});
