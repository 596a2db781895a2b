/**
 * Colour maps for salience: diverging (blue, white, red) for signed methods,
 * sequential (white to purple) for unsigned ones. Values are divided by a
 * scale (the largest magnitude shown) and multiplied by a user intensity,
 * then clipped, so intensity > 1 brightens faint salience and saturates the
 * strongest values. Mirrored by sequence_salience/display/palette.py (cases shared with pytest:
 * tests/data/colour_cases.json).
 */

export type RGB = readonly [number, number, number];

const WHITE: RGB = [255, 255, 255];
/** Diverging end points (ColorBrewer RdBu ends, slightly lightened). */
export const NEGATIVE: RGB = [33, 102, 172];
export const POSITIVE: RGB = [178, 24, 43];
/** Sequential end point (ColorBrewer Purples, darkest). */
export const SEQUENTIAL: RGB = [84, 39, 143];

export interface ColorScale {
  signed: boolean;
  /** Value mapped to full colour at intensity 1 (> 0). */
  scale: number;
  /** Multiplier, > 0. */
  intensity: number;
}

/** Largest |v| over the values, or 1 when all are zero (avoids dividing by 0). */
export function maxAbs(values: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < values.length; i++) {
    const a = Math.abs(values[i]);
    if (a > m && Number.isFinite(a)) m = a;
  }
  return m > 0 ? m : 1;
}

function mix(a: RGB, b: RGB, t: number): RGB {
  return [
    Math.round(a[0] + (b[0] - a[0]) * t),
    Math.round(a[1] + (b[1] - a[1]) * t),
    Math.round(a[2] + (b[2] - a[2]) * t),
  ];
}

/**
 * Position of a value on the colour map: in [-1, 1] for signed maps and
 * [0, 1] for sequential ones (negative values clip to 0 there).
 */
export function normalize(v: number, cs: ColorScale): number {
  if (!Number.isFinite(v)) return 0;
  const x = (v / cs.scale) * cs.intensity;
  return cs.signed ? Math.max(-1, Math.min(1, x)) : Math.max(0, Math.min(1, x));
}

/** Colour at a normalised position (see normalize). */
export function colorAt(x: number, signed: boolean): RGB {
  if (!signed) return mix(WHITE, SEQUENTIAL, Math.max(0, Math.min(1, x)));
  return x >= 0 ? mix(WHITE, POSITIVE, Math.min(1, x))
                : mix(WHITE, NEGATIVE, Math.min(1, -x));
}

export function toCss(c: RGB): string {
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

/** Relative luminance (WCAG), 0 (black) to 1 (white). */
export function luminance(c: RGB): number {
  const lin = (u: number) => {
    const s = u / 255;
    return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
  };
  return 0.2126 * lin(c[0]) + 0.7152 * lin(c[1]) + 0.0722 * lin(c[2]);
}

/** Text colour readable on the given background. */
export function textColorOn(bg: RGB): string {
  return luminance(bg) > 0.35 ? '#202124' : '#ffffff';
}

/**
 * Colour levels per sign. Colours are quantised to them: invisible
 * differences, and segments whose level does not change on a retarget keep
 * the same style string, so the browser does not restyle them.
 */
export const LEVELS = 64;

/** Background and text colour for one value (quantised to LEVELS steps). */
export function colorFor(v: number, cs: ColorScale): {bg: string; fg: string} {
  const c = colorAt(Math.round(normalize(v, cs) * LEVELS) / LEVELS, cs.signed);
  return {bg: toCss(c), fg: textColorOn(c)};
}

export interface LegendStop {
  /** Value at this stop. */
  value: number;
  color: string;
}

/**
 * Stops for a legend gradient, left to right: signed maps span
 * [-scale/intensity, +scale/intensity], sequential ones [0, scale/intensity].
 */
export function legendStops(cs: ColorScale, n = 5): LegendStop[] {
  const hi = cs.scale / cs.intensity;
  const lo = cs.signed ? -hi : 0;
  const stops: LegendStop[] = [];
  for (let k = 0; k < n; k++) {
    const value = lo + ((hi - lo) * k) / (n - 1);
    stops.push({value, color: toCss(colorAt(normalize(value, cs), cs.signed))});
  }
  return stops;
}

/** CSS linear-gradient for the legend bar. */
export function legendGradient(cs: ColorScale): string {
  const stops = legendStops(cs, 9);
  return `linear-gradient(to right, ${stops.map((s) => s.color).join(', ')})`;
}

/** Compact, exact-enough formatting for values in tooltips and legends. */
export function formatValue(v: number): string {
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1e4 || a < 1e-3) return v.toExponential(3);
  return v.toPrecision(4);
}
