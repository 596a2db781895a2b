/**
 * colormap.ts on the cases shared with pytest (tests/data/colour_cases.json,
 * tests/unit/test_colour_cases.py: sequence_salience/display/palette.py): one colour scale in both languages.
 */
import {describe, expect, test} from 'vitest';

import cases from '../../tests/data/colour_cases.json';
import {colorFor, formatValue, legendStops, maxAbs} from '../src/shared/colormap.js';

const nan = (v: number | null): number => (v === null ? NaN : v);

describe('shared colour cases', () => {
  for (const c of cases.color_for) {
    test(c.id, () => {
      expect(colorFor(nan(c.value), {signed: c.signed, scale: c.scale, intensity: c.intensity}))
          .toEqual({bg: c.background, fg: c.text});
    });
  }
  for (const c of cases.legend_stops) {
    test(c.id, () => {
      expect(legendStops({signed: c.signed, scale: c.scale, intensity: c.intensity}, c.n).map((s) => [s.value, s.color]))
          .toEqual(c.stops);
    });
  }
  test('formatValue', () => {
    for (const [v, text] of cases.format_value) expect(formatValue(nan(v as number | null))).toBe(text);
  });
  test('maxAbs', () => {
    for (const [values, m] of cases.max_abs) expect(maxAbs((values as Array<number | null>).map(nan))).toBe(m);
  });
});
