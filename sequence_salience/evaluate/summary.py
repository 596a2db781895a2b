"""Summary statistics over evaluated rows: per method, mean AOPC gap to each baseline, CI, win rate, verdict.

For every curve mode (deletion, insertion), method and baseline, with g_i = AOPC(method) -
AOPC(baseline) on row i (nats; > 0: the method's ranking is more faithful than the baseline):

* mean_gap = mean_i g_i;
* ci = the percentile bootstrap interval of the mean: `n_boot` resamples of the rows (with
  replacement, seeded; the same resamples for every statistic), the (1-level)/2 and
  (1+level)/2 quantiles of their means (numpy's linear interpolation);
* win_rate = (#{g_i > 0} + #{g_i = 0} / 2) / n;
* verdict: "beats" when the CI is above 0, "worse" when it is below 0, else "within noise".

A method's overall verdict: "beats <every baseline>" when it beats every baseline in every
mode, "worse than <b>" when its CI is below 0 against some baseline b in some mode, else
"within noise". With few rows the CI is wide and "within noise" is the honest answer.

Paired comparisons ("pairs"): every method curve against a reference method (SummaryConfig.reference;
default grad_norm when evaluated, else the first method), per mode, with d_i = AOPC(curve) -
AOPC(reference) on row i: mean_diff = mean_i d_i, the same percentile bootstrap CI (the same
resamples), and the rows where the curve is better (d_i > TIE), worse (d_i < -TIE) or tied.

Undecidable rows ("not_decidable"): per mode, the rows where even the best order the test found
(the library's upper bound) does not beat random and length by the noise, so that no method can
pass there (explain/faithfulness.py); counted when the rows carry it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from sequence_salience.errors import SalienceError
from sequence_salience.evaluate.engine import RowEvaluation, check_rows, row_methods
from sequence_salience.explain.faithfulness import UPPER
from sequence_salience.methods import grad_norm

BEATS, WORSE, NOISE = "beats", "worse", "within noise"
GRID = np.linspace(0.0, 1.0, 11)  # fraction of segments removed / revealed, for the mean curves
DEFAULT_REFERENCE = grad_norm.NAME
TIE = 1e-9  # nats: |AOPC difference| at most this is a tie (the same order gives the same curve)


@dataclasses.dataclass(frozen=True)
class SummaryConfig:
    """n_boot bootstrap resamples, seeded; level: the CI's coverage (0.95); reference: the method the
    paired comparisons are against (None: grad_norm when evaluated, else the first method)."""

    n_boot: int = 2000
    level: float = 0.95
    seed: int = 0
    reference: str | None = None

    def __post_init__(self):
        if self.n_boot < 1 or not 0 < self.level < 1:
            raise SalienceError(f"n_boot={self.n_boot}, level={self.level}. Fix: n_boot >= 1 and 0 < level < 1.")


def win_rate(gaps: np.ndarray) -> float:
    """(#{g > 0} + #{g = 0} / 2) / n."""
    g = np.asarray(gaps, np.float64)
    return float(((g > 0).sum() + 0.5 * (g == 0).sum()) / len(g))


def bootstrap_ci(values: np.ndarray, index: np.ndarray, level: float) -> tuple[float, float]:
    """Percentile interval of the mean of `values` <float64>[n] over resamples `index` <int64>[B, n]."""
    means = np.asarray(values, np.float64)[index].mean(axis=1)  # [B]
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def verdict(ci: tuple[float, float]) -> str:
    if ci[0] > 0:
        return BEATS
    if ci[1] < 0:
        return WORSE
    return NOISE


def overall_verdict(per_mode: dict[str, dict[str, dict[str, Any]]], baselines: Sequence[str]) -> str:
    """per_mode: mode -> baseline -> stats with "verdict"; see the module docstring."""
    worse = [b for b in baselines for mode in per_mode if per_mode[mode][b]["verdict"] == WORSE]
    if worse:
        return "worse than " + " and ".join(dict.fromkeys(worse))
    if all(per_mode[mode][b]["verdict"] == BEATS for mode in per_mode for b in baselines):
        return "beats " + " and ".join(baselines)
    return NOISE


def reference_of(methods: Sequence[str], wanted: str | None) -> str:
    """The reference method of the paired comparisons (see SummaryConfig)."""
    if wanted is None:
        return DEFAULT_REFERENCE if DEFAULT_REFERENCE in methods else methods[0]
    if wanted not in methods:
        raise SalienceError(f"The reference method {wanted!r} was not evaluated (the rows hold "
                            f"{', '.join(methods)}). Fix: pick one of them, or evaluate {wanted!r} too.")
    return wanted


def paired(diffs: np.ndarray, index: np.ndarray, level: float) -> dict[str, Any]:
    """Paired statistics of d_i = AOPC(curve) - AOPC(reference) <float64>[n] (module docstring)."""
    d = np.asarray(diffs, np.float64)
    ci = bootstrap_ci(d, index, level)
    return {"mean_diff": float(d.mean()), "ci": list(ci), "better": int((d > TIE).sum()),
            "worse": int((d < -TIE).sum()), "tied": int((np.abs(d) <= TIE).sum()), "n": int(len(d)),
            "verdict": verdict(ci)}


def mean_curve(rows: Sequence[RowEvaluation], mode: str, name: str) -> list[float]:
    """Mean over rows of the curve relative to its start (deletion: log p - log p(original); insertion:
    log p - log p(all removed)), interpolated at GRID fractions of the segments removed / revealed."""
    ys = []
    for r in rows:
        n = np.asarray(r["n_removed"], np.float64)
        x = n / max(n[-1], 1.0)
        lp = np.asarray(r["curves"][mode][name]["logprobs"], np.float64)
        ref = r["original_logprob"] if mode == "deletion" else r["empty_logprob"]
        ys.append(np.interp(GRID, x, lp - ref))
    return [float(v) for v in np.mean(ys, axis=0)]


def summarize(rows: Sequence[RowEvaluation], config: SummaryConfig = SummaryConfig()) -> dict[str, Any]:
    """The summary of evaluated rows (JSON-able dict).

    Keys: "n_rows", "methods", "baselines", "modes", "config" (n_boot, level, seed), "mean_aopc"
    {mode: {name: mean AOPC}}, "gaps" {mode: {method: {baseline: {"mean_gap", "ci", "win_rate",
    "verdict", "n"}}}}, "verdicts" {method: overall verdict}, "mean_curves" {mode: {name: [11]}},
    "reference" (the method of the paired comparisons) and "pairs" {mode: {curve: {"reference",
    "mean_diff", "ci", "better", "worse", "tied", "n", "verdict"}}} for every method curve but the
    reference, and, when the rows have them, "not_decidable" {mode: rows where no order can pass},
    "mean_upper_bound" {mode: mean AOPC of the best order found}, "reduction" {method: mean kept
    fraction} and "ig_completeness" {"mean_relative_error", "max_relative_error"}; "mean_curves" also holds the upper bound's
    mean curve ("upper_bound") when every row has it.
    """
    rows = list(rows)
    if not rows:
        raise SalienceError("No evaluated rows to summarize. Fix: evaluate at least one row.")
    check_rows(rows)
    methods = row_methods(rows[0])
    baselines = list(rows[0]["baselines"])
    modes = list(rows[0]["gaps"])
    n = len(rows)
    rng = np.random.default_rng(config.seed)
    index = rng.integers(0, n, size=(config.n_boot, n))  # [B, n], shared by every statistic
    gaps: dict[str, dict[str, dict[str, Any]]] = {}
    for mode in modes:
        gaps[mode] = {}
        for m in methods:
            gaps[mode][m] = {}
            for b in baselines:
                g = np.array([r["gaps"][mode][m][b] for r in rows], np.float64)  # [n]
                ci = bootstrap_ci(g, index, config.level)
                gaps[mode][m][b] = {"mean_gap": float(g.mean()), "ci": list(ci), "win_rate": win_rate(g),
                                    "verdict": verdict(ci), "n": n}
    reference = reference_of(methods, config.reference)
    pairs = {mode: {m: {"reference": reference, **paired(
        np.array([r["curves"][mode][m]["aopc"] - r["curves"][mode][reference]["aopc"] for r in rows]),
        index, config.level)} for m in methods if m != reference} for mode in modes}
    names = methods + baselines
    out: dict[str, Any] = {
        "n_rows": n, "methods": methods, "baselines": baselines, "modes": modes,
        "config": dataclasses.asdict(config),
        "mean_aopc": {mode: {k: float(np.mean([r["curves"][mode][k]["aopc"] for r in rows])) for k in names}
                      for mode in modes},
        "gaps": gaps,
        "verdicts": {m: overall_verdict({mode: gaps[mode][m] for mode in modes}, baselines) for m in methods},
        "mean_curves": {mode: {k: mean_curve(rows, mode, k) for k in names} for mode in modes},
        "grid": [float(v) for v in GRID],
        "reference": reference,
        "pairs": pairs,
    }
    if all("decidable" in r for r in rows):
        out["not_decidable"] = {mode: int(sum(not r["decidable"][mode] for r in rows)) for mode in modes}
        out["mean_upper_bound"] = {mode: float(np.mean([r["upper_bound"][mode] for r in rows])) for mode in modes}
    if all(UPPER in r["curves"][mode] for r in rows for mode in modes):
        for mode in modes:
            out["mean_curves"][mode][UPPER] = mean_curve(rows, mode, UPPER)
    if all("reduction" in r for r in rows):
        out["reduction"] = {m: float(np.mean([r["reduction"][m]["kept_fraction"] for r in rows]))
                            for m in rows[0]["reduction"]}
    if all("ig_completeness" in r for r in rows):
        errs = [r["ig_completeness"]["relative_error"] for r in rows]
        out["ig_completeness"] = {"mean_relative_error": float(np.mean(errs)),
                                  "max_relative_error": float(np.max(errs))}
    return out


def table(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per (mode, method, baseline): for printing or a DataFrame."""
    return [{"mode": mode, "method": m, "baseline": b, **{k: v for k, v in s.items() if k != "n"},
             "verdict_overall": summary["verdicts"][m]}
            for mode, by_m in summary["gaps"].items() for m, by_b in by_m.items() for b, s in by_b.items()]


def pairs_table(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per (mode, method curve) of the paired comparisons with the reference."""
    return [{"mode": mode, "method": m, **s} for mode, by_m in summary.get("pairs", {}).items()
            for m, s in by_m.items()]


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The summary as text lines: verdicts, paired comparisons with the reference, undecidable rows."""
    n = summary["n_rows"]
    level = int(round(summary["config"]["level"] * 100))
    lines = [f"{m}: {summary['verdicts'][m]}" for m in summary["methods"]]
    for mode, by_m in summary.get("pairs", {}).items():
        for m, s in by_m.items():
            lines.append(f"{m} vs {s['reference']} ({mode}): AOPC difference {s['mean_diff']:+.3f} nats, "
                         f"{level}% CI [{s['ci'][0]:+.3f}, {s['ci'][1]:+.3f}]; better on {s['better']}, "
                         f"worse on {s['worse']}, tied on {s['tied']} of {s['n']} rows")
    for mode, k in summary.get("not_decidable", {}).items():
        lines.append(f"not decidable on this prompt ({mode}): {k} of {n} rows (even the best order found "
                     "does not beat random and length by the noise)")
    return lines
