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

/** A selection: `method` on screen, a segment method when `segment` (measuring unless on request or failed). */
function src(over: Partial<PreviousMapSource> & {segment?: boolean} = {}): PreviousMapSource {
  const {segment: isSegment = true, ...rest} = over;
  return {method: 'leave_one_out', span: {t0: 0, t1: 1}, generation: 1, segmentError: '',
          segmentsOnRequest: () => false, segmentAsk: () => (isSegment ? {} : null), ...rest};
}

describe('previous map while a segment method measures', () => {
  it('keeps the last map of the selection, cut as the map on screen is (summed per segment)', () => {
    const prev = new PreviousMap();
    prev.remember(src({method: 'grad_norm', segment: false}), tokens, false);
    const shown = prev.during(src(), words)!;
    expect(shown.method).toBe('grad_norm');
    expect(shown.signed).toBe(false);
    expect(Array.from(shown.values)).toEqual(Array.from(aggregate(tokens, words, 'sum')));
    expect(prev.during(src(), words)).toBe(shown);  // memoised: the prompt's templates are not rebuilt
  });

  it('shows none for another selection, another target, when nothing measures, or on a token method', () => {
    const prev = new PreviousMap();
    prev.remember(src({method: 'grad_norm', segment: false}), tokens, false);
    expect(prev.during(src({generation: 2}), words)).toBeNull();
    expect(prev.during(src({span: {t0: 0, t1: 2}}), words)).toBeNull();
    expect(prev.during(src({segmentsOnRequest: () => true}), words)).toBeNull();
    expect(prev.during(src({segmentError: 'refused'}), words)).toBeNull();
    expect(prev.during(src({method: 'grad_x_input', segment: false}), words)).toBeNull();
    expect(prev.during(src({method: 'grad_norm'}), words)).toBeNull();  // its own map is not "previous"
  });

  it('is named from the registry: previous method, then the one measuring', () => {
    const reg = registryOf({spec: {output: {[METHOD_REGISTRY_FIELD]: {default: registry}}}})!;
    const label = (n: string) => registry.find((m) => m.name === n)!.label;  // the published records
    expect(previousMapLabel(reg, 'grad_norm', 'ablation_surrogate'))
        .toBe(`Previous map (${label('grad_norm')}) — measuring ${label('ablation_surrogate')}…`);
    expect(label('grad_norm')).toBe('Gradient norm');
  });
});
