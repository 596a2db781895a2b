/**
 * Ranking of segments by salience for the "top segments" list: the rule of
 * sequence_salience/display/view.py `top_segments` (cases shared with pytest: tests/data/ranking_cases.json).
 */

export interface Ranked {
  seg: number;
  value: number;
}

/**
 * The k segments with the largest salience: by |value| for signed methods,
 * by value for unsigned ones. NaN (excluded markup), zero values and the
 * segments in `skip` are left out. Ties keep text order.
 */
export function topSegments(
    values: ArrayLike<number>, k: number, signed: boolean,
    skip: ReadonlySet<number> = new Set()): Ranked[] {
  const items: Ranked[] = [];
  for (let s = 0; s < values.length; s++) {
    const v = values[s];
    if (!Number.isFinite(v) || v === 0 || skip.has(s)) continue;
    if (!signed && v < 0) continue;
    items.push({seg: s, value: v});
  }
  const key = (r: Ranked) => (signed ? Math.abs(r.value) : r.value);
  items.sort((a, b) => key(b) - key(a) || a.seg - b.seg);
  return items.slice(0, Math.max(0, k));
}
