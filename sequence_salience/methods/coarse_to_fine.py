"""Coarse-to-fine leave one out: measure coarser units first, refine only inside those that matter.

The hierarchical search of AttriBoT (Liu et al., ICLR 2025, https://arxiv.org/abs/2411.15102) on this
project's own segmentations. At a fine granularity (word, say) the segments are grouped by the coarser
granularities that hold them (paragraph, then sentence; `COARSER`). A unit's value is leave one out of the
unit: log p(target) - log p(target | every segment of the unit removed), scored like any ablation (one
scorer: the coarse and the fine rows share the cached prefix of the unedited prompt).

The search, best first (`search`, its constants in `RULE`):

1. Measure every unit of the coarsest level (a level where the prompt has a single unit is skipped: its
   one unit is the whole prompt; so is a level where a unit holds a single unit of the next).
2. Take the measured, unrefined unit of largest |value|. Stop when its |value| is not above max(v_k, 0), v_k
   being the k-th largest value measured for a fine segment (minus infinity while fewer than k are measured).
   Otherwise measure its units one level finer and repeat. With RULE.split_above > 0, below the finest coarser
   level (a sentence, for words), a unit of more than that many segments is measured as its two halves (text
   order, the first the larger), recursively, before its segments ("part of a sentence" where left); off by
   default (below).

Why this stop rule: if removing part of a unit changes log p(target) by no more than removing the whole unit
(|value of a part| <= |value of its whole|), no unit left unrefined holds a segment above v_k, so the top k
segments are final: they and their values are exactly those of full leave one out. A unit whose removal
barely changes p(target) (|value| <= max(v_k, 0)) "did not matter" and is not refined. The rule refines on
|value|, not on value: a unit whose removal raises p(target) a lot can hold a word whose removal lowers it
(the few-shot row: an exemplar sentence at -0.73 holds the third word, ': ' at +0.17; the former rule, which
refined only units above max(v_k, 0), never measured it). The assumption still fails where parts cancel (a
unit whose parts move p(target) a lot in opposite directions, a fact stated twice whose two copies each make
the other's removal cheap); docs/benchmarks.md measures how often the top five differ from full leave one
out. Every refined segment's value is measured exactly (the same ablation as leave_one_out); the others carry
their unit's value, marked as not measured.

Its price: refining units whose removal raises p(target) costs forwards where many do (replayed on recorded
values, benchmarks/bench_coarse_to_fine.py --replay, docs/benchmarks.md: the few-shot row 61 forwards of 84
words instead of 18, the long notes + question prompt 82 of 343 instead of 45); both now keep full leave one
out's top five, as do the chain-of-thought (33 of 48) and constitutional (34 of 92) rows. With the final
threshold known from the start the search would score as many forwards on the three shipped rows (62 instead
of 82 on the long prompt): the cost there is the units' and the rule's, not the search order's.

Why no halves by default (RULE.split_above = 0): halves are parts too, so they add places where the
assumption can fail. Halves above 6 words, the best of 4, 6 and 8 on the three shipped rows (4-5 forwards
fewer), lost the fifth word on the long prompt, held out from that choice: the half "The maritime museum
opens" (1.24) hid "opens" (1.97 alone). Halves above 8 keep the top five on all four cases in fewer forwards
(62, 28, 30, 57) but were picked after seeing all four; no case is left to check them. Refining every unit
above the threshold in one batch (RULE.batch) more than doubles the forwards (the threshold is 0 until k
words are measured), so units are refined one at a time.

Why k = 5 (AblationConfig.refine_top_k): the issue's acceptance is the top five words; the salience
module lists the top ten, of which a reader acts on the first few. A larger k refines more units (the
rule waits for v_k, which is smaller), a smaller one stops after the first unit.

Values: a measured segment its own leave one out value; an unmeasured one its unit's value shared
evenly among the unit's segments (so that sums over the unit, as the "sum" aggregation takes them, give
the unit's measured value back); `SegmentOutput.coarse_values` holds the unit's value itself.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sequence_salience.errors import SalienceError
from sequence_salience.methods.base import AblationConfig, SegmentMethod, SegmentOutput, SegmentProblem

# The coarser granularities grouping each granularity's segments, coarsest first (aggregate.GRANULARITIES).
COARSER: dict[str, tuple[str, ...]] = {
    "token": ("paragraph", "sentence", "word"),
    "word": ("paragraph", "sentence"),
    "sentence": ("paragraph",),
    "line": ("paragraph",),
}

COARSE_STAGE = "coarse pass"
REFINE_STAGE = "refining"


@dataclasses.dataclass(frozen=True)
class Settings:
    """Coarse-to-fine's settings (fields of AblationConfig once registered).

    Attributes:
      refine_top_k: refine until no unit left unrefined can hold a segment above the k-th largest measured
        value (the module docstring says why 5).
    """

    refine_top_k: int = 5


def coarser(granularity: str) -> tuple[str, ...]:
    """The coarser granularities whose units group `granularity`'s segments, coarsest first."""
    try:
        return COARSER[granularity]
    except KeyError:
        raise SalienceError(
            f"Coarse-to-fine leave one out refines a granularity that has coarser units ({', '.join(COARSER)}); "
            f"{granularity!r} has none it nests in. Fix: use leave_one_out at {granularity!r}, or a finer "
            "granularity.") from None


def rows(n_segments: int, config: AblationConfig) -> int:
    """An estimate for cost and progress before the values are known: full leave one out's count (it refines
    less when few units matter; the coarse units come on top when all do)."""
    return n_segments


@dataclasses.dataclass(frozen=True)
class Rule:
    """How the search refines (RULE; the module docstring says why its values).

    Attributes:
      magnitude: True: a unit is refined when |value| is above the threshold (a unit whose removal raises
        p(target) a lot can hold a word whose removal lowers it); False: when value is (the former rule).
      split_above: a unit of the finest coarser granularity (a sentence for words) with more segments than this
        is split into two halves, recursively, before its segments are measured; 0: never split.
      batch: False: one unit refined per forward batch, the largest first; True: every unit above the threshold
        in one batch (fewer, fuller batches; it can refine a unit the one-by-one order would have stopped at).
    """

    magnitude: bool = True
    split_above: int = 0
    batch: bool = False


RULE = Rule()


@dataclasses.dataclass(frozen=True)
class Unit:
    """A unit of the search: `members` (segment positions, text order) share the unit of `level` (an index
    into SegmentProblem.parents; len(parents) for a single segment); `part` > 0: a half (of a half…) of that
    unit, `part` halvings down."""

    level: int
    members: tuple[int, ...]
    part: int = 0

    def name(self, names: tuple[str, ...]) -> str:
        """The granularity the browser names it by: "sentence", or "part of a sentence" for a half."""
        return f"part of a {names[self.level]}" if self.part else names[self.level]


def halves(members: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """`members` cut in two in text order, the first half the larger by one when their count is odd."""
    cut = (len(members) + 1) // 2
    return members[:cut], members[cut:]


def finer_units(unit: Unit, parents: tuple[np.ndarray, ...], split_above: int = 0) -> list[Unit]:
    """The units one level finer inside `unit`, in text order: its units of the next coarser granularity that
    splits it (granularities where it holds a single unit are skipped: that unit is the same removal); below the
    finest, its two halves when it has more than `split_above` segments (0: never); else its single segments.
    A group of one segment is that segment (measured once, not again as a unit)."""
    leaf = len(parents)
    level = unit.level
    if not unit.part:
        while level + 1 < len(parents):
            level += 1
            owner = parents[level][list(unit.members)]  # [M]
            if len(np.unique(owner)) > 1:
                groups: dict[int, list[int]] = {}
                for s, o in zip(unit.members, owner):
                    groups.setdefault(int(o), []).append(s)
                return [Unit(level, tuple(g)) if len(g) > 1 else Unit(leaf, tuple(g)) for g in groups.values()]
    if split_above and parents and len(unit.members) > max(split_above, 2):  # `level`: the finest unit holding it
        return [Unit(level, h, unit.part + 1) if len(h) > 1 else Unit(leaf, h) for h in halves(unit.members)]
    return [Unit(leaf, (s,)) for s in unit.members]


def stop_threshold(leaf_values: list[float], k: int) -> float:
    """A unit is refined only when its value (or |value|, Rule.magnitude) is above this: max(v_k, 0), v_k the
    k-th largest segment value measured so far (minus infinity while fewer than k are)."""
    kth = sorted(leaf_values, reverse=True)[k - 1] if len(leaf_values) >= k else -np.inf
    return max(kth, 0.0)


def compute(problem: SegmentProblem, config: AblationConfig) -> SegmentOutput:
    return search(problem, max(1, int(config.refine_top_k)), RULE)


def search(problem: SegmentProblem, k: int, rule: Rule) -> SegmentOutput:
    """The search of the module docstring for the top `k` segments under `rule`."""
    S = problem.n_segments
    parents = tuple(np.asarray(p, dtype=np.int64) for p in problem.parents)
    names = tuple(problem.parent_granularities)
    leaf = len(parents)
    removed: list[tuple[int, ...]] = []  # the ablations scored, in order
    logps: list[float] = []
    size = (lambda v: abs(v)) if rule.magnitude else (lambda v: v)

    def measure(units: list[Unit], stage: str) -> np.ndarray:
        """<float64>[U] leave one out of each unit (all its segments removed)."""
        problem.frame(stage, len(removed), len(removed) + len(units))
        lp = problem.score([problem.edit(u.members) for u in units])  # [U]
        removed.extend(u.members for u in units)
        logps.extend(float(x) for x in lp)
        return problem.original_logprob - lp

    open_units: dict[Unit, float] = {}  # measured units not refined yet -> value
    leaves: dict[int, float] = {}

    def add(units: list[Unit], stage: str) -> None:
        for unit, value in zip(units, measure(units, stage)):
            if unit.level == leaf:
                leaves[unit.members[0]] = float(value)
            else:
                open_units[unit] = float(value)

    add(finer_units(Unit(-1, tuple(range(S))), parents, rule.split_above), COARSE_STAGE)
    while open_units:
        threshold = stop_threshold(list(leaves.values()), k)
        order = sorted(open_units, key=lambda u: (-size(open_units[u]), u.members[0]))  # largest first
        chosen = [u for u in order if size(open_units[u]) > threshold][:None if rule.batch else 1]
        if not chosen:
            break
        for unit in chosen:
            del open_units[unit]
        add([f for unit in chosen for f in finer_units(unit, parents, rule.split_above)], REFINE_STAGE)

    values = np.zeros(S, dtype=np.float64)
    measured = np.zeros(S, dtype=bool)
    coarse = np.full(S, np.nan, dtype=np.float64)
    coarse_granularity = [""] * S
    for s, v in leaves.items():
        values[s], measured[s] = v, True
    for unit, v in open_units.items():
        for s in unit.members:
            values[s], coarse[s], coarse_granularity[s] = v / len(unit.members), v, unit.name(names)
    kept = np.ones((len(removed), S), dtype=bool)  # [R, S]
    for r, members in enumerate(removed):
        kept[r, list(members)] = False
    return SegmentOutput(values=values, kept=kept, logprobs=np.asarray(logps, dtype=np.float64),
                         measured=measured, coarse_values=coarse, coarse_granularity=tuple(coarse_granularity))


NAME = "coarse_to_fine"

METHOD = SegmentMethod(
    name=NAME, label="Coarse-to-fine leave one out", short="Coarse-to-fine", menu="Coarse-to-fine", signed=True,
    compute=compute, rows=rows, paper="https://arxiv.org/abs/2411.15102",
    cost_unit="one forward per coarser unit, then per unit or segment inside those that matter",
    trust="Exact leave-one-out where it refined; segments inside coarser units that did not matter are not measured "
          "one by one (hover says so), so trust their small values only as small together.",
    coarser=coarser, granularities=tuple(COARSER), settings=Settings,
)
