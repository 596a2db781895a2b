import {describe, expect, it} from 'vitest';
import fixture from './fixtures/small_payload.json';
import registry from './fixtures/method_registry.json';
import {aggregate, segment} from '../src/shared/aggregate/index.js';
import {METHOD_REGISTRY_FIELD, registryOf} from '../src/shared/methods.js';
import {parsePayload} from '../src/salience/payload.js';
import {PreviousMap, previousMapLabel, type PreviousMapSource} from '../src/salience/previous_map.js';

const p = parsePayload(fixture);
const words = segment(p.text, p.offsets, 'word', {roleSpans: p.role_spans});
const N = p.tokens.length;
const tokens = Float64Array.from({length: N}, (_, i) => (i % 5) - 2);

/** A selection: `method` (with `count`, computed on request) on screen, being computed unless `computing` says not. */
function src(over: {method?: string; count?: number; computing?: boolean; generation?: number;
                    span?: PreviousMapSource['span']} = {}): PreviousMapSource {
  const {method = 'leave_one_out', count, computing = true, generation = 1, span = {t0: 0, t1: 1}} = over;
  return {method, span, generation, computing: () => computing,
          valuesName: () => (count === undefined ? method : `${method}#${count}`),
          extra: () => (count === undefined ? null : {count})};
}

describe('previous map while the method on screen is computed', () => {
  it('keeps the last map of the selection, cut as the map on screen is (summed per segment)', () => {
    const prev = new PreviousMap();
    prev.remember(src({method: 'grad_norm', computing: false}), tokens, false);
    const shown = prev.during(src(), words)!;
    expect(shown.method).toBe('grad_norm');
    expect(shown.signed).toBe(false);
    expect(Array.from(shown.values)).toEqual(Array.from(aggregate(tokens, words, 'sum')));
    expect(prev.during(src(), words)).toBe(shown);  // memoised: the prompt's templates are not rebuilt
  });

  it('keeps it while a token method computed on request (IG, SmoothGrad) computes its span', () => {
    const prev = new PreviousMap();
    prev.remember(src({method: 'grad_norm', computing: false}), tokens, false);
    expect(prev.during(src({method: 'integrated_gradients', count: 16}), words)?.method).toBe('grad_norm');
    expect(prev.during(src({method: 'smooth_grad', count: 8}), words)?.method).toBe('grad_norm');
  });

  it("keeps a counted method's map while the same method computes at another count", () => {
    const prev = new PreviousMap();
    prev.remember(src({method: 'smooth_grad', count: 8, computing: false}), tokens, true);
    expect(prev.during(src({method: 'smooth_grad', count: 12}), words)).toMatchObject({method: 'smooth_grad', count: 8});
    expect(prev.during(src({method: 'smooth_grad', count: 8}), words)).toBeNull();  // its own values
  });

  it('shows none for another selection, another target, when nothing computes, or for its own method', () => {
    const prev = new PreviousMap();
    prev.remember(src({method: 'grad_norm', computing: false}), tokens, false);
    expect(prev.during(src({generation: 2}), words)).toBeNull();
    expect(prev.during(src({span: {t0: 0, t1: 2}}), words)).toBeNull();
    expect(prev.during(src({computing: false}), words)).toBeNull();  // on request, failed, or values on screen
    expect(prev.during(src({method: 'grad_norm'}), words)).toBeNull();  // its own map is not "previous"
  });

  it('is named from the registry: previous method, then the one measuring (segment) or computing (token)', () => {
    const reg = registryOf({spec: {output: {[METHOD_REGISTRY_FIELD]: {default: registry}}}})!;
    const label = (n: string) => registry.find((m) => m.name === n)!.label;  // the published records
    expect(previousMapLabel(reg, {method: 'grad_norm', count: null}, 'ablation_surrogate'))
        .toBe(`Previous map (${label('grad_norm')}) — measuring ${label('ablation_surrogate')}…`);
    expect(previousMapLabel(reg, {method: 'grad_norm', count: null}, 'integrated_gradients'))
        .toBe(`Previous map (${label('grad_norm')}) — computing ${label('integrated_gradients')}…`);
    expect(previousMapLabel(reg, {method: 'smooth_grad', count: 8}, 'smooth_grad'))
        .toBe(`Previous map (${label('smooth_grad')}, 8 samples) — computing ${label('smooth_grad')}…`);
    expect(label('grad_norm')).toBe('Gradient norm');
  });
});
