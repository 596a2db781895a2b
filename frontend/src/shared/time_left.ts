/**
 * The time left of a job in words, for every module: the server's range from the recent units' rate
 * (lit_app/model/time_left.py, the one estimator of every job's status: `eta_low_s` / `eta_high_s`, `eta_s` its middle).
 */

/** The time-left fields of a job status (absent from older servers, null without an estimate). */
export interface EtaFields {
  eta_s?: number | null;
  eta_low_s?: number | null;
  eta_high_s?: number | null;
}

/** "40–70 s", "24 s", "2–4 min": a range of seconds in words (minutes once its upper end is 90 s or more). */
export function secondsRange(low: number, high: number): string {
  const [unit, per] = high >= 90 ? ['min', 60] : ['s', 1];
  const a = Math.max(1, Math.round(low / per));
  const b = Math.max(a, Math.round(high / per));
  return a === b ? `${a} ${unit}` : `${a}–${b} ${unit}`;
}

/** "about 40–70 s left" from a status's range (or an older server's one estimate); '' without one. */
export function aboutLeft(s: EtaFields): string {
  const low = s.eta_low_s ?? s.eta_s;
  const high = s.eta_high_s ?? s.eta_s;
  return low == null || high == null ? '' : `about ${secondsRange(low, high)} left`;
}
