/** The geometry of the faithfulness charts: scales, extents and SVG paths of the curves and bands. No DOM. */
import type {CurvesPayload, Mode} from './payload.js';

export interface Scale {
  /** Maps a data value to pixels. */
  (v: number): number;
  domain: [number, number];
}

export function linearScale(d0: number, d1: number, r0: number, r1: number): Scale {
  const span = d1 - d0 || 1;
  const f = ((v: number) => r0 + ((v - d0) / span) * (r1 - r0)) as Scale;
  f.domain = [d0, d1];
  return f;
}

/** [min, max] of finite values, padded by 5 % (a flat line gets +-0.5). */
export function paddedExtent(values: number[]): [number, number] {
  const finite = values.filter(Number.isFinite);
  if (finite.length === 0) return [0, 1];
  let lo = Math.min(...finite);
  let hi = Math.max(...finite);
  if (hi - lo < 1e-9) return [lo - 0.5, hi + 0.5];
  const pad = (hi - lo) * 0.05;
  return [lo - pad, hi + pad];
}

/** SVG path "M x y L x y ..." through the points (non-finite points are skipped). */
export function linePath(xs: number[], ys: number[], sx: Scale, sy: Scale): string {
  const parts: string[] = [];
  for (let i = 0; i < xs.length; i++) {
    if (!Number.isFinite(ys[i])) continue;
    parts.push(`${parts.length ? 'L' : 'M'}${sx(xs[i]).toFixed(1)} ${sy(ys[i]).toFixed(1)}`);
  }
  return parts.join(' ');
}

/** Closed SVG path of the band between low and high (the random orders' range). */
export function bandPath(xs: number[], low: number[], high: number[], sx: Scale, sy: Scale): string {
  if (xs.length === 0) return '';
  const top = xs.map((x, i) => `${i ? 'L' : 'M'}${sx(x).toFixed(1)} ${sy(high[i]).toFixed(1)}`);
  const bottom = xs.map((_, j) => {
    const i = xs.length - 1 - j;
    return `L${sx(xs[i]).toFixed(1)} ${sy(low[i]).toFixed(1)}`;
  });
  return [...top, ...bottom, 'Z'].join(' ');
}

/** x positions of a curve's points: the fraction of segments removed (or revealed). */
export function fractions(p: CurvesPayload): number[] {
  const n = Math.max(1, p.n_segments);
  return p.n_removed.map((k) => k / n);
}

/** Every log-prob drawn in one mode's chart (for a shared y range). */
export function chartValues(p: CurvesPayload, mode: Mode): number[] {
  const out: number[] = [];
  for (const byMode of Object.values(p.curves)) {
    const c = byMode[mode];
    if (c == null) continue;
    out.push(...c.logprobs, ...(c.low ?? []), ...(c.high ?? []));
  }
  return out;
}
