"""The surrogate's held-out R^2: one contiguous 4-fold split against 20 shuffled splits (issue 42 §6).

    .venv/bin/python benchmarks/bench_surrogate_fit.py [--granularity sentence] [--masks 32] [--rows 0 1 2]

For every shipped row (chat template as the app formats it; the row's target or its 32-token greedy
answer), the ContextCite surrogate at one granularity (its default 32 seeded random ablations), then the
fit quality from the same ablations three ways: the single contiguous 4-fold split the product reported
until session 27; 20 seeded shuffled 4-fold splits (mean, smallest and largest: what it reports now);
and leave-one-ablation-out (the deterministic limit). Prints a Markdown table and how many rows the single
split put on the other side of the 0.5 warning line from the repeated mean.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sequence_salience as ss  # noqa: E402
from benchmarks.bench_segment_methods import shipped_examples  # noqa: E402
from sequence_salience.ablation import AblationConfig, segment_salience  # noqa: E402
from sequence_salience.methods import ablation_surrogate, lasso  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--granularity", default="sentence")
    ap.add_argument("--masks", type=int, default=32)
    ap.add_argument("--rows", type=int, nargs="*")
    args = ap.parse_args()
    lm = ss.load_model()
    cfg = AblationConfig(surrogate_masks=args.masks)
    line = cfg.min_r2
    print(f"| row | case | segments | one contiguous split | 20 shuffled splits: mean (min–max) | leave one out |")
    print("|---|---|---|---|---|---|")
    flips = crossing = n = 0
    for i, case, chat, target in shipped_examples(lm, args.rows):
        seg = segment_salience(lm, chat, target, ablation_surrogate.NAME, granularity=args.granularity, config=cfg)
        y = lasso.log_odds(seg.logprobs)
        k = seg.span[1] - seg.span[0]
        if np.ptp(y) == 0:
            continue
        one = lasso.r2_score(y, lasso.held_out_predictions(seg.kept, y, cfg.surrogate_alpha, k,
                                                            lasso.folds(len(y), cfg.surrogate_folds)))
        q = seg.quality
        loo = lasso.r2_score(y, lasso.held_out_predictions(seg.kept, y, cfg.surrogate_alpha, k,
                                                            lasso.folds(len(y), len(y))))
        n += 1
        flips += (one < line) != (q["r2"] < line)
        crossing += q["r2_low"] < line <= q["r2_high"]
        print(f"| {i} | {case} | {len(seg.segments)} | {one:.2f} | {q['r2']:.2f} ({q['r2_low']:.2f}–{q['r2_high']:.2f}) "
              f"| {loo:.2f} |")
    print(f"\n{n} rows; the single split and the repeated mean on different sides of {line}: {flips}; "
          f"rows whose spread crosses {line}: {crossing}")


if __name__ == "__main__":
    main()
