"""Agreement of a segment map with exact leave one out, and its faithfulness by deletion and insertion.

Pure functions over numbers already measured (benchmarks/bench_attention_attribution.py measures them):

* rank agreement: Spearman's rank correlation (ties averaged), top-1 (the same first segment) and top-k
  overlap (shared segments of the two top k, out of k);
* the reference's noise level (`noise_level`: the robust spread of its values outside its top k, i.e. what removing
  a segment that does not matter moves log p by) and top-k overlap up to that noise (`top_overlap_within`: a
  segment of the map's top k counts when its reference value is within the noise of the reference's k-th);
* AOPC (area over the perturbation curve, Samek et al. 2017, https://arxiv.org/abs/1509.06321), on log p of
  the target span, for the first K segments of a method's order:

      deletion  = 1/K * sum_{k=1..K} ( log p(prompt) - log p(prompt without its top k) )
      insertion = 1/K * sum_{k=1..K} ( log p(only its top k kept) - log p(every segment removed) )

  Both in nats; larger is more faithful (removing the segments a map ranks first hurts most; keeping only
  them recovers most).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def order(values: np.ndarray) -> list[int]:
    """Segment positions, largest value first (ties: text order)."""
    return [int(i) for i in np.argsort(-np.asarray(values, dtype=np.float64), kind="stable")]


def ranks(x: np.ndarray) -> np.ndarray:
    """<float64>[S] 0-based ranks, ties averaged."""
    x = np.asarray(x, dtype=np.float64)
    o = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[o] = np.arange(len(x))
    for v in np.unique(x):
        r[x == v] = r[x == v].mean()
    return r


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation; NaN when either side is constant."""
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def top_overlap(a: np.ndarray, b: np.ndarray, k: int) -> float:
    """Shared segments of the two top k (stable order), out of k."""
    return len(set(order(a)[:k]) & set(order(b)[:k])) / k


def noise_level(reference: np.ndarray, k: int = 3) -> float:
    """The spread of `reference` outside its top k: 1.4826 x the median absolute deviation of those values (the
    standard deviation's robust estimate). For exact leave-one-out with filler removal, the segments below its top
    few are mostly ones that do not matter, so this is how far removing one of them moves log p by itself (the
    filler's noise); 0 when fewer than two values are left."""
    rest = np.asarray(reference, dtype=np.float64)[order(reference)[k:]]
    if len(rest) < 2:
        return 0.0
    return float(1.4826 * np.median(np.abs(rest - np.median(rest))))


def top_overlap_within(a: np.ndarray, reference: np.ndarray, k: int, noise: float) -> float:
    """Segments of a's top k whose `reference` value is at least the reference's k-th largest minus `noise`, out
    of k: `top_overlap` where a segment within noise of the reference's top k counts as in it (noise 0: the
    top-k overlap, up to ties)."""
    ref = np.asarray(reference, dtype=np.float64)
    kth = ref[order(ref)[min(k, len(ref)) - 1]]
    return sum(ref[i] >= kth - noise for i in order(a)[:k]) / k


def perturbation_sets(values: np.ndarray, k: int) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """The ablations AOPC needs for the order of `values`, as removed segment sets (sorted tuples): deletion
    (its top 1..K removed) and insertion (all but its top 1..K removed), K = min(k, S - 1)."""
    S = len(values)
    o = order(values)
    K = max(1, min(k, S - 1))
    deletion = [tuple(sorted(o[:j])) for j in range(1, K + 1)]
    insertion = [tuple(sorted(o[j:])) for j in range(1, K + 1)]
    return deletion, insertion


def aopc(values: np.ndarray, logp: Mapping[tuple[int, ...], float], k: int) -> tuple[float, float]:
    """(deletion, insertion) AOPC of the order of `values` from measured log p of removed sets (`logp`: sorted
    tuple of removed segments -> log p(target span); it must hold () and every segment removed, and the sets
    of perturbation_sets)."""
    S = len(values)
    deletion, insertion = perturbation_sets(values, k)
    full, empty = logp[()], logp[tuple(range(S))]
    d = float(np.mean([full - logp[r] for r in deletion]))
    i = float(np.mean([logp[r] - empty for r in insertion]))
    return d, i


def paired_bootstrap(a: Sequence[float], b: Sequence[float], n: int = 2000, seed: int = 0
                     ) -> tuple[float, float, float, int]:
    """(mean of a - b, 2.5th and 97.5th percentile of its bootstrap over the pairs, pairs used): pairs with a
    NaN on either side are dropped; the resampling is seeded."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    d = d[np.isfinite(d)]
    if len(d) == 0:
        return float("nan"), float("nan"), float("nan"), 0
    rng = np.random.default_rng(seed)
    boot = d[rng.integers(0, len(d), size=(n, len(d)))].mean(axis=1)
    return float(d.mean()), float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5)), len(d)
