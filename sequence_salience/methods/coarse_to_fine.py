"""Coarse-to-fine leave one out: measure coarser units first, refine only inside those that matter.

The hierarchical search of AttriBoT (Liu et al., ICLR 2025, https://arxiv.org/abs/2411.15102) on this
project's own segmentations. At a fine granularity (word, say) the segments are grouped by the coarser
granularities that hold them (paragraph, then sentence; `COARSER`). A unit's value is leave one out of the
unit: log p(target) - log p(target | every segment of the unit removed), scored like any ablation (one
scorer: the coarse and the fine rows share the cached prefix of the unedited prompt).

The search, best first:

1. Measure every unit of the coarsest level (a level where the prompt has a single unit is skipped: its
   one unit is the whole prompt; so is a level where a unit holds a single unit of the next).
2. Take the measured, unrefined unit of largest value. Stop when it is not above max(v_k, 0), v_k being the
   k-th largest value measured for a fine segment (minus infinity while fewer than k are measured).
   Otherwise measure its units one level finer (or its segments) and repeat.

Why this stop rule: if removing part of a unit lowers log p(target) no more than removing the whole unit
(a part matters at most as much as its whole), no unit left unrefined holds a segment above v_k, so the
top k segments are final: they and their values are exactly those of full leave one out. A unit whose
removal does not lower p(target) at all (value <= 0) "did not matter" and is not refined. The assumption
can fail (a word whose removal flips the meaning while removing its sentence does not, or a fact stated
twice whose two copies each make the other's removal cheap); docs/benchmarks.md measures how often the
top five differ from full leave one out. Every refined segment's value is measured exactly (the same
ablation as leave_one_out); the others carry their unit's value, marked as not measured.

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
class Unit:
    """A unit of the search: `members` (segment positions, text order) share the unit of `level` (an index
    into SegmentProblem.parents; len(parents) for a single segment)."""

    level: int
    members: tuple[int, ...]


def finer_units(unit: Unit, parents: tuple[np.ndarray, ...]) -> list[Unit]:
    """The units one level finer inside `unit`, in text order; levels where it holds a single unit are skipped
    (that unit is the same removal), down to single segments."""
    level = unit.level
    while level + 1 < len(parents):
        level += 1
        owner = parents[level][list(unit.members)]  # [M]
        if len(np.unique(owner)) > 1:
            groups: dict[int, list[int]] = {}
            for s, o in zip(unit.members, owner):
                groups.setdefault(int(o), []).append(s)
            return [Unit(level, tuple(g)) for g in groups.values()]
    return [Unit(len(parents), (s,)) for s in unit.members]


def stop_threshold(leaf_values: list[float], k: int) -> float:
    """A unit is refined only when its value is above this: max(v_k, 0), v_k the k-th largest segment
    value measured so far (minus infinity while fewer than k are)."""
    kth = sorted(leaf_values, reverse=True)[k - 1] if len(leaf_values) >= k else -np.inf
    return max(kth, 0.0)


def compute(problem: SegmentProblem, config: AblationConfig) -> SegmentOutput:
    S = problem.n_segments
    parents = tuple(np.asarray(p, dtype=np.int64) for p in problem.parents)
    names = tuple(problem.parent_granularities)
    k = max(1, int(config.refine_top_k))
    removed: list[tuple[int, ...]] = []  # the ablations scored, in order
    logps: list[float] = []

    def measure(units: list[Unit], stage: str) -> np.ndarray:
        """<float64>[U] leave one out of each unit (all its segments removed)."""
        problem.frame(stage, len(removed), len(removed) + len(units))
        lp = problem.score([problem.edit(u.members) for u in units])  # [U]
        removed.extend(u.members for u in units)
        logps.extend(float(x) for x in lp)
        return problem.original_logprob - lp

    top = finer_units(Unit(-1, tuple(range(S))), parents)
    open_units = dict(zip(top, measure(top, COARSE_STAGE)))  # measured units not refined yet -> value
    leaves: dict[int, float] = {}
    for unit in [u for u in open_units if u.level == len(parents)]:
        leaves[unit.members[0]] = open_units.pop(unit)
    while open_units:
        best = max(open_units, key=lambda u: (open_units[u], -u.members[0]))
        if open_units[best] <= stop_threshold(list(leaves.values()), k):
            break
        del open_units[best]
        finer = finer_units(best, parents)
        for unit, value in zip(finer, measure(finer, REFINE_STAGE)):
            if unit.level == len(parents):
                leaves[unit.members[0]] = float(value)
            else:
                open_units[unit] = float(value)

    values = np.zeros(S, dtype=np.float64)
    measured = np.zeros(S, dtype=bool)
    coarse = np.full(S, np.nan, dtype=np.float64)
    coarse_granularity = [""] * S
    for s, v in leaves.items():
        values[s], measured[s] = v, True
    for unit, v in open_units.items():
        for s in unit.members:
            values[s], coarse[s], coarse_granularity[s] = v / len(unit.members), v, names[unit.level]
    kept = np.ones((len(removed), S), dtype=bool)  # [R, S]
    for r, members in enumerate(removed):
        kept[r, list(members)] = False
    return SegmentOutput(values=values, kept=kept, logprobs=np.asarray(logps, dtype=np.float64),
                         measured=measured, coarse_values=coarse, coarse_granularity=tuple(coarse_granularity))


NAME = "coarse_to_fine"

METHOD = SegmentMethod(
    name=NAME, label="Coarse-to-fine leave one out", short="Coarse-to-fine", signed=True, compute=compute, rows=rows,
    paper="https://arxiv.org/abs/2411.15102",
    cost_unit="one forward per coarser unit, then per unit or segment inside those that matter",
    coarser=coarser, granularities=tuple(COARSER), settings=Settings,
)
