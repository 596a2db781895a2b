import {describe, expect, it} from 'vitest';
import fixture from './fixtures/small_payload.json';
import {segment} from '../src/shared/aggregate/index.js';
import {parsePayload, type SaliencePayload} from '../src/salience/payload.js';
import {codePointToUtf16} from '../src/shared/pieces.js';
import {buildHeatmap, cellLabel, heatmapColumns, heatmapRowSpans, heatmapWaitReason, hideRows, matrixScale, MAX_LABEL,
        moveRow, rowScale, selectedRows} from '../src/salience/heatmap/logic.js';

// The fixture: "<|im_start|>user\nThe cat sat. It was red.<|im_end|>\n<|im_start|>assistant\nRed cat."
// tokens 3..10 are the user's "The cat sat. It was red." (token 4 " cat", 5 " sat", 6 "."), 16..18 the
// response "Red", " cat", "."; T = 3.
const payload = (): SaliencePayload => parsePayload(structuredClone(fixture));
const seg = (p: SaliencePayload, g: 'token' | 'word' | 'sentence') => segment(p.text, p.offsets, g, {roleSpans: p.role_spans});

describe('heatmap columns and rows', () => {
  const p = payload();
  const u16 = codePointToUtf16(p.text);
  it('columns are the prompt words, without template markup or white space', () => {
    expect(heatmapColumns(p, seg(p, 'word'), u16).map((c) => c.label))
        .toEqual(['The', 'cat', 'sat', '.', 'It', 'was', 'red', '.']);
  });
  it('columns at sentence granularity are the two sentences', () => {
    expect(heatmapColumns(p, seg(p, 'sentence'), u16).map((c) => c.label)).toEqual(['The cat sat.', 'It was red.']);
  });
  it('token rows are the response tokens; segment rows follow the granularity', () => {
    expect(heatmapRowSpans(p, seg(p, 'word'), 'token', u16).map((r) => [r.t0, r.t1, r.label]))
        .toEqual([[0, 1, 'Red'], [1, 2, 'cat'], [2, 3, '.']]);
    expect(heatmapRowSpans(p, seg(p, 'sentence'), 'segment', u16).map((r) => [r.t0, r.t1, r.label]))
        .toEqual([[0, 3, 'Red cat.']]);
  });
  it('labels show white space and shorten long text', () => {
    expect(cellLabel(' \n')).toBe('⏎');
    expect(cellLabel(' ')).toBe('␣');
    expect(cellLabel('  two\n words ')).toBe('two words');
    const long = cellLabel('x'.repeat(40));
    expect(long.length).toBe(MAX_LABEL);
    expect(long.endsWith('…')).toBe(true);
  });
});

describe('heatmap cells', () => {
  const p = payload();
  const u16 = codePointToUtf16(p.text);
  const gxi = p.methods['grad_x_input']!;
  it('token rows × word columns are the matrix entries of each word\'s token', () => {
    const h = buildHeatmap(gxi, p, seg(p, 'word'), 'token', u16, true)!;
    expect(h.signed).toBe(true);
    expect(h.rows).toHaveLength(3);
    // "cat" is token 4, "red" token 9; each word is one token here.
    expect(h.rows[0].cells[1]).toBeCloseTo(-0.489486, 9);
    expect(h.rows[2].cells[6]).toBeCloseTo(0.099564, 9);
  });
  it('a sentence row sums its token rows; a sentence column sums its tokens', () => {
    const h = buildHeatmap(gxi, p, seg(p, 'sentence'), 'segment', u16, true)!;
    let first = 0;  // "The cat sat." = tokens 3..6, over target tokens 0..2
    let second = 0;  // "It was red." = tokens 7..10
    for (let t = 0; t < 3; t++) {
      for (let i = 3; i <= 6; i++) first += gxi.matrix![t][i];
      for (let i = 7; i <= 10; i++) second += gxi.matrix![t][i];
    }
    expect(h.rows).toHaveLength(1);
    expect(h.rows[0].cells[0]).toBeCloseTo(first, 9);
    expect(h.rows[0].cells[1]).toBeCloseTo(second, 9);
  });
  it('gradient norm of a segment row is the norm of the summed gradients (from the Gram matrix)', () => {
    const gn = p.methods['grad_norm']!;
    const h = buildHeatmap(gn, p, seg(p, 'sentence'), 'segment', u16, false)!;
    // |g0 + g1 + g2|² = G00 + G11 + G22 + 2 (G01 + G02 + G12); packed [G00, G01, G02, G11, G12, G22].
    const norm = (i: number) => {
      const [g00, g01, g02, g11, g12, g22] = gn.gram_packed![i];
      return Math.sqrt(g00 + g11 + g22 + 2 * (g01 + g02 + g12));
    };
    expect(h.signed).toBe(false);
    expect(h.rows[0].cells[0]).toBeCloseTo(norm(3) + norm(4) + norm(5) + norm(6), 9);
  });
  it('is null without a matrix, or for norm segment rows without a Gram matrix', () => {
    expect(buildHeatmap({signed: true, matrix: null}, p, seg(p, 'word'), 'token', u16, true)).toBeNull();
    const gn = {...p.methods['grad_norm']!, gram_packed: null};
    expect(buildHeatmap(gn, p, seg(p, 'sentence'), 'segment', u16, false)).toBeNull();
    // One token per row: the matrix rows themselves, no Gram matrix needed.
    expect(buildHeatmap(gn, p, seg(p, 'sentence'), 'token', u16, false)!.rows[1].cells[0])
        .toBeCloseTo([3, 4, 5, 6].reduce((a, i) => a + gn.matrix![1][i], 0), 9);
  });
});

describe('heatmap scale, selection, keys', () => {
  const p = payload();
  const u16 = codePointToUtf16(p.text);
  const h = buildHeatmap(p.methods['grad_x_input']!, p, seg(p, 'word'), 'token', u16, true)!;
  it('one scale: the largest |cell| of the matrix; per row: the row\'s own', () => {
    let most = 0;
    let row1 = 0;
    h.rows.forEach((r, i) => r.cells.forEach((v) => {
      most = Math.max(most, Math.abs(v));
      if (i === 1) row1 = Math.max(row1, Math.abs(v));
    }));
    expect(matrixScale(h, 2)).toEqual({signed: true, scale: most, intensity: 2});
    expect(rowScale(h, 1, 'all', 1).scale).toBe(most);
    expect(rowScale(h, 1, 'row', 1).scale).toBe(row1);
    expect(row1).toBeLessThan(most);
  });
  it('selects the rows inside the target span', () => {
    expect(selectedRows(h, {t0: 1, t1: 3})).toEqual([1, 2]);
    expect(selectedRows(h, {t0: 0, t1: 3})).toEqual([0, 1, 2]);
  });
  it('moves the focused row with the keys, clamped', () => {
    expect(moveRow(0, 'ArrowDown', 3)).toBe(1);
    expect(moveRow(0, 'ArrowUp', 3)).toBe(0);
    expect(moveRow(1, 'End', 3)).toBe(2);
    expect(moveRow(2, 'Home', 3)).toBe(0);
    expect(moveRow(0, 'PageDown', 3)).toBe(2);
    expect(moveRow(0, 'x', 3)).toBeNull();
    expect(moveRow(0, 'ArrowDown', 0)).toBeNull();
  });
  it('says why there is no heatmap, with what to do', () => {
    expect(heatmapWaitReason({segmentMethod: true, extraWithoutMatrix: null, matrix: false, detail: ''}))
        .toMatch(/once they are measured.*choose a gradient method/);
    expect(heatmapWaitReason({segmentMethod: false, extraWithoutMatrix: 'Integrated gradients', matrix: false, detail: ''}))
        .toMatch(/Integrated gradients for every response token: tick “per-token”/);
    expect(heatmapWaitReason({segmentMethod: false, extraWithoutMatrix: null, matrix: false,
                              detail: 'per-token detail loading 40%'})).toMatch(/loading 40%/);
    expect(heatmapWaitReason({segmentMethod: false, extraWithoutMatrix: null, matrix: true, detail: ''})).toBe('');
  });
});

describe('heatmap toggle key', () => {
  it('is Alt+H and nothing else', async () => {
    const {isHeatmapKey} = await import('../src/salience/heatmap/view.js');
    const k = (code: string, mods: Partial<{altKey: boolean; ctrlKey: boolean; metaKey: boolean; shiftKey: boolean}>) =>
        isHeatmapKey({altKey: false, ctrlKey: false, metaKey: false, shiftKey: false, code, ...mods});
    expect(k('KeyH', {altKey: true})).toBe(true);
    expect(k('KeyH', {})).toBe(false);
    expect(k('KeyH', {altKey: true, ctrlKey: true})).toBe(false);
    expect(k('KeyG', {altKey: true})).toBe(false);
  });
});

describe('rows hidden by the completeness check (issue 45 §6)', () => {
  it('empties exactly the rows the verdict hides: no value to colour, number, scale or export', () => {
    const p = payload();
    const m = p.methods['grad_x_input']!;
    const h = buildHeatmap(m, p, seg(p, 'word'), 'token', codePointToUtf16(p.text), true)!;
    const {map, hidden} = hideRows(h, (r) => r.t0 === 1);
    expect(hidden).toBe(1);
    expect(Array.from(map.rows[1].cells).every((v) => Number.isNaN(v))).toBe(true);
    expect(Array.from(map.rows[0].cells)).toEqual(Array.from(h.rows[0].cells));
    expect(Array.from(map.rows[2].cells)).toEqual(Array.from(h.rows[2].cells));
    expect(Array.from(h.rows[1].cells).some((v) => Number.isFinite(v))).toBe(true);  // the map itself is untouched
    expect(matrixScale(map, 1).scale).toBe(Math.max(...[0, 2].flatMap((r) => Array.from(h.rows[r].cells, Math.abs))));
  });

  it('returns the same map when no row is hidden', () => {
    const p = payload();
    const h = buildHeatmap(p.methods['grad_x_input']!, p, seg(p, 'word'), 'token', codePointToUtf16(p.text), true)!;
    expect(hideRows(h, () => false)).toEqual({map: h, hidden: 0});
  });
});
