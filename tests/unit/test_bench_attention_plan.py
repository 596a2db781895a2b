"""The held-out collector's candidate list (benchmarks/bench_attention_attribution.py `plan`): --indices restricts it
to given held-out indices (to re-collect prompts already in the set) without changing which prompt an index is or
the order by estimated cost."""

from __future__ import annotations

import argparse
import types

from benchmarks.bench_attention_attribution import plan

# a whitespace "tokenizer": the plan needs only token counts
LM = types.SimpleNamespace(tokenize=lambda text: types.SimpleNamespace(ids=text.split()))


def args(**kw) -> argparse.Namespace:
    base = dict(start=0, pool=8, seed=0, min_tokens=60, max_tokens=200, sentence_max_tokens=120, long_from=10**9,
                mix=5, granularities=None, length=(0, 10**9), indices=None)
    return argparse.Namespace(**{**base, **kw})


def test_indices_restrict_the_candidates_and_keep_prompts_and_order():
    full = plan(LM, args())
    assert sorted(i for i, *_ in full) == list(range(8))
    picked = plan(LM, args(indices=[6, 1, 3], start=5, pool=6))  # --start / --pool ignored
    # the same prompts, granularities and counts as in the full pool, in the full pool's relative order
    assert [(i, item.id, g, n) for i, item, g, n in picked] == [(i, item.id, g, n) for i, item, g, n in full
                                                                if i in (6, 1, 3)]


def test_indices_with_the_length_filter():
    full = {i: n for i, _, _, n in plan(LM, args())}
    low = sorted(full.values())[3]  # drops the three shortest
    picked = plan(LM, args(indices=list(range(8)), length=(low, 10**9)))
    assert {i for i, *_ in picked} == {i for i, n in full.items() if n >= low}
