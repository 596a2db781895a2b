import {describe, expect, it} from 'vitest';
import fixture from './fixtures/small_payload.json';
import {segment} from '../src/shared/aggregate/index.js';
import {parsePayload, type SaliencePayload} from '../src/salience/payload.js';
import {codePointToUtf16} from '../src/shared/pieces.js';
import {buildHeatmap, columnHeading, heatmapColumns, segmentMethodHeatmap} from '../src/salience/heatmap/logic.js';
import registry from './fixtures/method_registry.json';
import {parseRegistry} from '../src/shared/methods.js';
import {exportName} from '../src/shared/download.js';
import {csvField, heatmapCsv, NUMBER_CELL_PX, numbersFit, ROW_LABEL_PX, showNumbers} from '../src/salience/heatmap/export.js';

// The fixture (as heatmap.test.ts): prompt "The cat sat. It was red." (tokens 3..10), response "Red cat."
// (tokens 16..18, "Red", " cat", "."); T = 3.
const payload = (): SaliencePayload => parsePayload(structuredClone(fixture));
const seg = (p: SaliencePayload, g: 'token' | 'word' | 'sentence') => segment(p.text, p.offsets, g, {roleSpans: p.role_spans});

describe('prefix columns (the answer\'s earlier tokens)', () => {
  const p = payload();
  const u16 = codePointToUtf16(p.text);
  const gxi = p.methods['grad_x_input']!;
  it('add the response words after the prompt words, marked as the response\'s', () => {
    const cols = heatmapColumns(p, seg(p, 'word'), u16, true);
    expect(cols.map(columnHeading)).toEqual(['The', 'cat', 'sat', '.', 'It', 'was', 'red', '.',
                                             'Red (resp.)', 'cat (resp.)', '. (resp.)']);
    expect(cols.slice(8).map((c) => c.first)).toEqual([16, 17, 18]);
    expect(heatmapColumns(p, seg(p, 'word'), u16).every((c) => !c.response)).toBe(true);  // off: prompt only
  });
  it('hold the matrix entry of an earlier response token; blank where the row comes first', () => {
    const h = buildHeatmap(gxi, p, seg(p, 'word'), 'token', u16, true, true)!;
    expect(h.cols).toHaveLength(11);
    // Row 2 (".") explained by "Red" (token 16) and " cat" (token 17): the matrix row 2's entries.
    expect(h.rows[2].cells[8]).toBeCloseTo(gxi.matrix![2][16], 12);
    expect(h.rows[2].cells[9]).toBeCloseTo(gxi.matrix![2][17], 12);
    expect(Number.isNaN(h.rows[2].cells[10])).toBe(true);  // "." itself
    expect(Number.isNaN(h.rows[0].cells[8])).toBe(true);  // "Red" before "Red"
    expect(h.rows[1].cells[8]).toBeCloseTo(gxi.matrix![1][16], 12);
    // The prompt columns are the same as without prefix columns.
    const plain = buildHeatmap(gxi, p, seg(p, 'word'), 'token', u16, true)!;
    expect(Array.from(h.rows[1].cells.slice(0, 8))).toEqual(Array.from(plain.rows[1].cells));
  });
  it('a sentence-granularity matrix sums the token matrix over each sentence (rows and columns)', () => {
    const tok = buildHeatmap(gxi, p, seg(p, 'token'), 'token', u16, true, true)!;
    const sen = buildHeatmap(gxi, p, seg(p, 'sentence'), 'segment', u16, true, true)!;
    // Token columns: "The", " cat", " sat", "." are tokens 3..6 = the first sentence.
    const first = [3, 4, 5, 6].map((k) => tok.cols.findIndex((c) => c.first === k));
    expect(first.every((j) => j >= 0)).toBe(true);
    const want = tok.rows.reduce((a, r) => a + first.reduce((b, j) => b + r.cells[j], 0), 0);
    expect(sen.rows).toHaveLength(1);
    expect(sen.rows[0].cells[0]).toBeCloseTo(want, 9);
    // The one response sentence starts at the row's own first token: blank.
    expect(sen.cols.map((c) => c.response)).toEqual([false, false, true]);
    expect(Number.isNaN(sen.rows[0].cells[2])).toBe(true);
  });
});

describe('a segment method\'s values on screen', () => {
  const p = payload();
  const u16 = codePointToUtf16(p.text);
  it('are one row, the target shown, each column its segment\'s value; later response columns blank', () => {
    const s = seg(p, 'word');
    const values = Float64Array.from(s.starts, (_, i) => i + 0.5);  // a value per segment, its index + 0.5
    const h = segmentMethodHeatmap(values, p, s, {t0: 1, t1: 2}, u16, true, true);
    expect(h.rows).toHaveLength(1);
    expect([h.rows[0].t0, h.rows[0].t1, h.rows[0].label]).toEqual([1, 2, 'cat']);
    h.cols.forEach((c, j) => {
      if (c.response && c.first >= p.n_prompt_tokens + 1) expect(Number.isNaN(h.rows[0].cells[j])).toBe(true);
      else expect(h.rows[0].cells[j]).toBe(c.seg + 0.5);
    });
    expect(h.cols.filter((c) => c.response).map(columnHeading)).toEqual(['Red (resp.)', 'cat (resp.)', '. (resp.)']);
  });
});

describe('numbers in cells', () => {
  it('fit when the label and every number cell fit in the width', () => {
    const w = ROW_LABEL_PX + 10 * NUMBER_CELL_PX;
    expect(numbersFit(10, w)).toBe(true);
    expect(numbersFit(11, w)).toBe(false);
    expect(numbersFit(0, w)).toBe(false);
  });
  it('auto follows the fit; the user\'s choice wins', () => {
    expect(showNumbers('auto', 5, 1250)).toBe(true);
    expect(showNumbers('auto', 40, 1250)).toBe(false);
    expect(showNumbers('on', 40, 1250)).toBe(true);
    expect(showNumbers('off', 5, 1250)).toBe(false);
  });
});

describe('CSV', () => {
  const p = payload();
  const u16 = codePointToUtf16(p.text);
  const h = buildHeatmap(p.methods['grad_x_input']!, p, seg(p, 'word'), 'token', u16, true, true)!;
  it('quotes fields with commas, quotes or line breaks', () => {
    expect(csvField('a')).toBe('a');
    expect(csvField('a,b')).toBe('"a,b"');
    expect(csvField('say "hi"')).toBe('"say ""hi"""');
    expect(csvField('x\ny')).toBe('"x\ny"');
  });
  it('has a header and one line per row, the values at full precision, blanks empty', () => {
    const lines = heatmapCsv(h).trimEnd().split('\r\n');
    expect(lines).toHaveLength(1 + h.rows.length);
    const head = lines[0].split(',');
    expect(head).toHaveLength(1 + h.cols.length);
    expect(head[9]).toBe('Red (resp.)');
    h.rows.forEach((r, i) => {
      const cells = lines[i + 1].split(',').slice(1);
      expect(cells.map((c) => (c === '' ? NaN : Number(c)))).toEqual(Array.from(r.cells));
    });
  });
  it('file names are plain', () => {
    expect(exportName('grad_x_input word Red cat.', 'csv')).toBe('grad-x-input-word-red-cat.csv');
    expect(exportName('…', 'png')).toBe('salience.png');
  });
});

describe('share this view', () => {
  it('asks the model\'s share wrapper with the view\'s method, granularity, span and count', async () => {
    const {shareInput, shareModelName, sharePage} = await import('../src/salience/share.js');
    expect(shareModelName('smollm')).toBe('_smollm_share');
    const reg = parseRegistry(structuredClone(registry));
    const d = {id: 'x', data: {prompt: 'p'}, meta: {}};
    const ask = {method: 'grad_x_input', granularity: 'regex', pattern: 'a+', span: {t0: 1, t1: 3}, extra: null,
                 segment: null, faithfulness: null};
    const input = shareInput(reg, d, ask);
    expect(input.data).toMatchObject({prompt: 'p', share_method: 'grad_x_input', granularity: 'regex', pattern: 'a+',
                                      target_span: '1:3'});
    expect(shareInput(reg, d, {...ask, granularity: 'word'}).data['pattern']).toBe('');
    // The extra method's count goes as its count field (the others 0), as the salience model's requests.
    const ig = reg.extra('integrated_gradients')!;
    expect(shareInput(reg, d, {...ask, method: ig.name, extra: {method: ig.name, count: 16}}).data[ig.count_field]).toBe(16);
    expect(sharePage([{share: {html: '<p>x</p>'}}])).toBe('<p>x</p>');
    expect(() => sharePage([{}])).toThrow(/holds no page/);
    expect(input.data).not.toHaveProperty('faithfulness');
  });
  it('asks for a segment method\'s page with its segment request\'s settings, the method as the one shared', async () => {
    const {shareInput} = await import('../src/salience/share.js');
    const reg = parseRegistry(structuredClone(registry));
    const d = {id: 'x', data: {prompt: 'p'}, meta: {}};
    const surrogate = reg.segment('ablation_surrogate')!;
    const segment = {method: surrogate.name, count: 48, granularity: 'sentence', pattern: '', removal: 'delete',
                     span: {t0: 0, t1: 5}};
    const input = shareInput(reg, d, {method: surrogate.name, granularity: 'sentence', pattern: '', span: {t0: 0, t1: 5},
                                      extra: null, segment, faithfulness: null});
    expect(input.data).toMatchObject({share_method: 'ablation_surrogate', granularity: 'sentence', removal: 'delete',
                                      target_span: '0:5', [surrogate.count_field!]: 48});
    expect(input.data).not.toHaveProperty('segment_method');  // the wrapper takes the name from share_method
  });
  it('sends the faithfulness test of the target on screen, only that one, and only its table', async () => {
    const {shareInput} = await import('../src/salience/share.js');
    const {FaithfulnessStore} = await import('../src/shared/faithfulness_store.js');
    const store = new FaithfulnessStore();
    const payload = {table: [{mode: 'deletion', name: 'grad_norm', aopc: 1.5}], granularity: 'word', removal: 'filler',
                     span: [0, 3], curves: {grad_norm: {deletion: {logprobs: [1, 2]}}}};
    store.publish('_m_salience', {datapointId: 'x', text: 'ab', t0: 0, t1: 3, payload});
    const target = {datapointId: 'x', text: 'ab', t0: 0, t1: 3};
    expect(store.of('_m_salience', target)).toBe(payload);
    expect(store.of('_m_salience', {...target, t1: 2})).toBeNull();  // another span: not this test's
    expect(store.of('_m_salience', {...target, text: 'ac'})).toBeNull();  // the datapoint edited
    expect(store.of('_other_salience', target)).toBeNull();
    const reg = parseRegistry(structuredClone(registry));
    const input = shareInput(reg, {id: 'x', data: {}, meta: {}}, {method: 'grad_norm', granularity: 'word', pattern: '',
                             span: {t0: 0, t1: 3}, extra: null, segment: null, faithfulness: payload});
    expect(input.data['faithfulness']).toEqual({table: payload.table, granularity: 'word', removal: 'filler', span: [0, 3]});
  });
});
