"""The faithfulness table (method x baseline) on the shipped examples (docs/benchmarks.md, "Faithfulness baselines").

    .venv/bin/python benchmarks/bench_faithfulness_baselines.py [--granularity sentence word] [--examples 0 1 ...]

For every shipped example (`lit_app.data.datasets.shipped_rows()`: the case studies, then their variants; chat template, as the app formats it;
an empty target is the greedy response, 32 tokens at most), one deletion run of
`faithfulness_curves` with the defaults (10 steps, filler removal, 10 seeded random orders,
the length baseline, both orderings of grad_x_input) and prints, per granularity:

1. per example and method/ordering: AOPC, gap to random (10 orders, +- their standard deviation),
   gap to length, the verdict, and the gap the previous default reported (3 random orders,
   which are the first 3 of the same seed, so the numbers are comparable);
2. a summary per method/ordering: mean gaps over the examples and the count of each verdict.
Prints Markdown. The figures depend on the load of the machine only in their time.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sequence_salience as ss  # noqa: E402
from lit_app.data import datasets  # noqa: E402
from sequence_salience import explain as ex  # noqa: E402

METHODS = ("grad_norm", "grad_x_input")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--granularity", nargs="+", default=["sentence", "word"])
    parser.add_argument("--examples", nargs="*", type=int, default=None)
    args = parser.parse_args()
    lm = ss.load_model("default")
    rows = datasets.shipped_rows()
    indices = args.examples if args.examples is not None else list(range(len(rows)))
    examples = []
    for i in indices:
        r = rows[i]
        chat = lm.format_prompt(r["prompt"], system=r.get("system") or None)
        target = r.get("target") or lm.generate(chat, ss.GenerationConfig(max_new_tokens=32))
        examples.append((i, r["case"], chat, target))
    for gran in args.granularity:
        print(f"\n### {gran} segments, deletion, 10 steps, filler removal\n")
        print("| # | case | method (ordering) | AOPC | vs random (10) | random sd | vs length | verdict | vs random (3, before) |")
        print("|---|---|---|---|---|---|---|---|---|")
        summary: dict[str, list] = {}
        t_all = time.perf_counter()
        for i, case, chat, target in examples:
            rep = ex.faithfulness_curves(lm, ex.CurvesRequest(
                chat, target, METHODS,
                config=ex.FaithfulnessConfig(granularity=gran, modes=("deletion",))))
            rnd = rep.curves["deletion"][ex.faithfulness.RANDOM]
            old_random = float(np.mean(rnd.all_aopc[:3]))
            for row in rep.table():
                old_gap = row["aopc"] - old_random
                summary.setdefault(row["name"], []).append((row["gap"], row["gap_length"], old_gap, row["verdict"]))
                print(f"| {i} | {case} | {row['name']} ({row['ordering']}) | {row['aopc']:.2f} | {row['gap']:+.2f} | "
                      f"{row['random_std']:.2f} | {row['gap_length']:+.2f} | {row['verdict']} | {old_gap:+.2f} |")
        print(f"\n{len(examples)} examples in {time.perf_counter() - t_all:.0f} s.\n")
        print("| method (ordering) | mean vs random (10) | mean vs length | mean vs random (3, before) | verdicts |")
        print("|---|---|---|---|---|")
        for name, vals in summary.items():
            g, gl, og, v = zip(*vals)
            counts = Counter(v)
            verdicts = ", ".join(f"{counts[k]} {k}" for k in ex.faithfulness.VERDICTS if counts[k])
            print(f"| {name} | {np.mean(g):+.2f} | {np.mean(gl):+.2f} | {np.mean(og):+.2f} | {verdicts} |")


if __name__ == "__main__":
    main()
