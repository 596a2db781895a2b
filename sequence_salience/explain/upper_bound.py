"""The best ordering the faithfulness test can find: an upper bound on its own metric.

The faithfulness test (faithfulness.py) asks whether a method's order of the S removable
segments beats random orders and the length baseline by the noise margin. On a prompt with
few segments no order at all may get there; then "within noise" says nothing about the
method. This module searches the order that maximizes the test's own AOPC, so the test can
say "not decidable on this prompt" when even that order stays within the noise.

The AOPC of an order depends only on the segment sets at the curve points: deletion removes
the set R_k (|R_k| = n_k, R_0 = {} and R_K = every segment, R_{k-1} within R_k) and scores
-log p(target | R_k removed); insertion reveals V_k and scores log p(target | only V_k kept).
An order is a chain of such sets, so

* exhaustive (S <= `exhaustive_max_segments`, default 6): every subset of the segments is
  scored once (2^S edited prompts, shared by deletion and insertion: deletion removes the
  subset, insertion removes its complement), then a dynamic programme over the chains finds
  the best one: best(A) = value(A) + max over B within A with |B| = n_{k-1} of best(B). This
  is the exact optimum over all S! orders.
  Cost: 2^S forward rows in all when every size is a curve point's (S <= steps; fewer when the
  points skip sizes), minus those the curves already scored (the original, all-removed and every
  method's and random order's points): S = 4: 16, S = 6: 64, S = 8: 256.
* greedy (larger S): at each curve point k, each candidate segment c is added alone to the
  current set (deletion: removed, insertion: revealed) and scored; the d_k = n_k - n_{k-1}
  candidates with the largest effect (lowest log p for deletion, highest for insertion) are
  added. The candidates are the remaining segments, or, when more than `greedy_candidates`
  (default 16) remain, the first `greedy_candidates` of them in the order of the best tested
  curve of that mode (a beam seeded by the best method order). Cost per mode:
  sum over k = 1..K-1 of min(greedy_candidates, S - n_{k-1}) forward rows (the last point is
  forced), plus one row per point where d_k > 1 (the chosen set itself); e.g. S = 20, K = 10:
  about 110 rows per mode. Greedy is not exact, so the bound reported is the best of the greedy
  order and every order the test scored (methods, length, each random order).

Everything is scored through `scoring.score` (deduplicated, in batches, time-sliced with
`slice_s`, progress under the stage "upper_bound", `cancel` checked between batches), with a
memo of the prompts the curves already scored.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from sequence_salience import scoring
from sequence_salience.scoring import Cancel, Progress
from sequence_salience.slices import make_sizer

EXHAUSTIVE = "exhaustive"
GREEDY = "greedy"
STAGE = "upper_bound"
DEFAULT_EXHAUSTIVE_MAX_SEGMENTS = 6  # 64 rows at most; greedy at S = 8 costs ~70 instead of 256
DEFAULT_GREEDY_CANDIDATES = 16

Prompt = tuple[int, ...]
Editor = Callable[[Sequence[int]], Prompt]  # removed segment positions -> prompt token ids


@dataclasses.dataclass(frozen=True)
class SearchResult:
    """The best chain the search found in one mode.

    order: <int64>[S] segment positions in removal (deletion) / reveal (insertion) order.
    logprobs: <float64>[K+1] log p(target span) at each curve point of that order.
    search: EXHAUSTIVE or GREEDY.
    """

    order: np.ndarray
    logprobs: np.ndarray
    search: str


class MemoScorer:
    """scoring.score with a memo of prompts already scored, one slice sizer across calls, and
    progress counted over a planned total of rows (`planned`) under one stage, each call's rows found in the memo
    first (then its rows to score)."""

    def __init__(self, lm, target: Sequence[int], span: tuple[int, int], known: Mapping[Prompt, float], *,
                 batch_size: int, slice_s, progress: Progress | None, cancel: Cancel | None, planned: int):
        self.lm, self.target, self.span = lm, tuple(target), span
        self.memo: dict[Prompt, float] = dict(known)
        self.batch_size, self.progress, self.cancel = batch_size, progress, cancel
        self.sizer = make_sizer(slice_s)
        self.planned = max(1, planned)
        self.done = 0  # planned rows accounted for (scored or found in the memo)
        self.rows = 0  # rows actually scored (forward rows)

    def __call__(self, prompts: Sequence[Prompt], planned_here: int | None = None) -> np.ndarray:
        """log p(span | prompt) <float64>[M]; `planned_here`: how many planned rows this call stands for."""
        new = [p for p in dict.fromkeys(prompts) if p not in self.memo]
        accounted = len(prompts) if planned_here is None else planned_here
        # The planned rows this call finds in the memo (or twice in `prompts`) are done before any is scored, so
        # this call's units left are its rows to score. Was: counted at the call's end, they were the last units of
        # each call, estimated at the measured rate: the simple question's greedy search (6 calls, 54 planned rows,
        # 45 in the memo) read "45 / 54 · about 3–87 s left" 1 s before its end, with 1 row left to score. A later
        # call's memo rows stay units to go until it is made (which candidates it scores depends on this one).
        base = min(self.planned, self.done + max(0, min(len(prompts), accounted) - len(new)))
        if new:
            if self.progress is not None and base > self.done:
                self.progress(STAGE, base, self.planned)

            def report(_stage: str, done: int, _total: int) -> None:
                if self.progress is not None:
                    self.progress(STAGE, min(self.planned, base + done), self.planned)

            lp = scoring.score(self.lm, new, self.target, self.span, self.batch_size, report, self.cancel,
                               stage=STAGE, slice_s=self.sizer)
            self.memo.update(zip(new, (float(v) for v in lp)))
            self.rows += len(new)
        else:
            scoring.check_cancel(self.cancel, STAGE)
        self.done = min(self.planned, self.done + accounted)
        if self.progress is not None:
            self.progress(STAGE, self.done, self.planned)
        return np.array([self.memo[p] for p in prompts], dtype=np.float64)


def subset_sizes(n_segments: int, counts: Sequence[int]) -> set[int]:
    """Sizes of the removed sets the exhaustive search scores: n_k (deletion) and S - n_k (insertion)."""
    return {int(n) for n in counts} | {n_segments - int(n) for n in counts}


def exhaustive_rows(n_segments: int, counts: Sequence[int] | None = None) -> int:
    """Forward rows of the exhaustive search before the memo: every subset whose size is a curve
    point's (2^S when every size is one, e.g. S <= steps)."""
    if counts is None:
        return 2 ** n_segments
    return sum(math.comb(n_segments, n) for n in subset_sizes(n_segments, counts))


def greedy_rows(n_segments: int, counts: Sequence[int], candidates: int | None) -> int:
    """Forward rows of the greedy search in one mode before the memo (module docstring)."""
    rows = 0
    for k in range(1, len(counts) - 1):  # the last point (every segment) is forced
        remaining = n_segments - int(counts[k - 1])
        d = int(counts[k]) - int(counts[k - 1])
        rows += remaining if candidates is None else min(candidates, remaining)
        rows += 1 if d > 1 else 0
    return rows


def _popcount(x: int) -> int:
    return bin(x).count("1")


def _bits(mask: int) -> list[int]:
    return [s for s in range(mask.bit_length()) if mask >> s & 1]


def best_chain(values: np.ndarray, counts: Sequence[int]) -> list[int]:
    """The chain of subsets (bitmasks over S segments) maximizing the summed values.

    values: <float64>[2^S] the value of each subset (bitmask); counts: n_0 = 0 < ... < n_K = S.
    Returns [mask_0, ..., mask_K] with popcount(mask_k) = n_k, each within the next, maximizing
    sum_k values[mask_k] (ties: the first found, smallest masks first). Exact dynamic programme.
    """
    n_masks = len(values)
    by_size: dict[int, list[int]] = {}
    for mask in range(n_masks):
        by_size.setdefault(_popcount(mask), []).append(mask)
    best = {0: float(values[0])}
    back: dict[int, int] = {}
    for k in range(1, len(counts)):
        prev_size = int(counts[k - 1])
        for mask in by_size.get(int(counts[k]), []):
            top, arg = -np.inf, -1
            sub = mask
            while True:  # every submask of `mask` (descending), of the previous size
                if _popcount(sub) == prev_size and sub in best and best[sub] > top:
                    top, arg = best[sub], sub
                if sub == 0:
                    break
                sub = (sub - 1) & mask
            if arg >= 0:
                best[mask] = float(values[mask]) + top
                back[mask] = arg
    chain = [n_masks - 1]
    while chain[-1] != 0:
        chain.append(back[chain[-1]])
    return chain[::-1]


def chain_order(chain: Sequence[int]) -> np.ndarray:
    """The segment order of a chain of bitmasks: each step's new segments, in position order."""
    order: list[int] = []
    for a, b in zip(chain, chain[1:]):
        order += _bits(b & ~a)
    return np.array(order, dtype=np.int64)


def exhaustive(n_segments: int, counts: Sequence[int], modes: Sequence[str], edit: Editor,
               scorer: MemoScorer) -> dict[str, SearchResult]:
    """The exact best order per mode: every subset scored once, then best_chain (module docstring)."""
    S = n_segments
    full = (1 << S) - 1
    sizes = subset_sizes(S, counts)
    masks = [m for m in range(1 << S) if _popcount(m) in sizes]  # the removed segments
    scored = scorer([edit(_bits(mask)) for mask in masks])
    removed_lp = np.full(1 << S, np.nan)  # [2^S]; sizes no curve point has stay NaN (never read)
    removed_lp[masks] = scored
    out = {}
    for mode in modes:
        if mode == "deletion":  # maximize sum_k log p(x) - log p(R_k removed)
            values = -removed_lp
            lp_of = removed_lp
        else:  # insertion, V revealed = its complement removed
            values = np.array([removed_lp[full ^ m] for m in range(1 << S)])
            lp_of = values
        chain = best_chain(values, counts)
        out[mode] = SearchResult(chain_order(chain), np.array([lp_of[m] for m in chain]), EXHAUSTIVE)
    return out


def greedy(n_segments: int, counts: Sequence[int], modes: Sequence[str], edit: Editor, scorer: MemoScorer,
           seed_orders: Mapping[str, Sequence[int]], candidates: int | None) -> dict[str, SearchResult]:
    """Greedy order per mode (module docstring); `seed_orders[mode]` picks the candidates when capped.
    The modes advance point by point together: one scoring call per point holds both modes' candidates
    (fuller batches)."""
    S = n_segments
    everything = set(range(S))
    chosen: dict[str, list[int]] = {mode: [] for mode in modes}  # in the order added (removed / revealed)

    def prompt(mode: str, current: set[int]) -> Prompt:
        return edit(sorted(current if mode == "deletion" else everything - current))

    for k in range(1, len(counts)):
        d = int(counts[k]) - int(counts[k - 1])
        pools: dict[str, list[int]] = {}
        for mode in modes:
            taken = set(chosen[mode])
            remaining = [s for s in seed_orders[mode] if s not in taken]
            if d >= len(remaining):  # forced: the rest
                chosen[mode] += sorted(remaining)
            else:
                pools[mode] = remaining if candidates is None else remaining[:candidates]
        if not pools:
            continue
        batch = [prompt(mode, set(chosen[mode]) | {c}) for mode, pool in pools.items() for c in pool]
        lp = scorer(batch, planned_here=len(batch) + (len(pools) if d > 1 else 0))  # [sum of pool sizes]
        pos = 0
        for mode, pool in pools.items():
            part = lp[pos:pos + len(pool)]
            pos += len(pool)
            effect = -part if mode == "deletion" else part  # larger = better for the test's metric
            rank = np.argsort(-effect, kind="stable")
            chosen[mode] += [pool[i] for i in rank[:d]]
    # The log-probs at the curve points (a point that added several segments is one more row each).
    points = {mode: [prompt(mode, set(chosen[mode][:int(n)])) for n in counts] for mode in modes}
    lps = scorer([p for mode in modes for p in points[mode]], planned_here=0)  # [modes * (K+1)]
    K1 = len(counts)
    return {mode: SearchResult(np.array(chosen[mode], dtype=np.int64), lps[j * K1:(j + 1) * K1], GREEDY)
            for j, mode in enumerate(modes)}
