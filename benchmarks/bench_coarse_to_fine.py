"""Coarse-to-fine leave one word out against full leave one word out: forwards, seconds, top five (issue 42 §2).

    .venv/bin/python benchmarks/bench_coarse_to_fine.py [--cases constitutional long] [--k 5]

For each case (the constitutional-principles shipped row with its own target, as the app formats it; and a
long notes + question prompt of ten paragraphs built here, one of which holds the asked fact, with a forced
answer), both methods run at word granularity, filler removal, in the same process one after the other
(coarse-to-fine first): the ablated prompts scored (forwards; the unedited prompt apart), the seconds, the
share of full leave one out's forwards, whether the top five words (by value; coarse-to-fine: measured words
only) are the same set and in the same order, and the largest difference between a measured word's value and
full leave one out's. The machine's load average is printed before and after: on a shared CPU the seconds are
noisy, the forwards are not.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sequence_salience as ss  # noqa: E402
from lit_app import datasets  # noqa: E402
from sequence_salience.ablation import AblationConfig, segment_salience  # noqa: E402
from sequence_salience.methods import coarse_to_fine, leave_one_out  # noqa: E402

PARAGRAPHS = [
    "Harbourview is a small coastal town with a population of about four thousand people. Most residents work "
    "in fishing, tourism or at the regional hospital on the hill.",
    "The town library was renovated last spring. It now has a reading room facing the sea, a children's corner "
    "and twelve public computers that anyone may book for an hour.",
    "Every Saturday a farmers' market fills the square in front of the old customs house. Stalls sell cheese, "
    "smoked fish, apples from the valley and bread baked the same morning.",
    "The ferry to the island leaves from the north pier. In summer it runs every two hours; in winter only "
    "three times a day, and it does not run at all when the wind is strong.",
    "The maritime museum opens at 9:30 in the morning and closes at five. Entry is free for children under "
    "twelve, and the lighthouse exhibit on the top floor is the most visited room.",
    "Two schools serve the town: a primary school near the harbour and a secondary school on the ring road. "
    "Both have a rowing club that trains in the bay on weekday evenings.",
    "The old railway line was closed decades ago and turned into a cycling path. It follows the coast for "
    "eleven kilometres and passes three beaches and a nature reserve for seabirds.",
    "The town council meets on the first Monday of each month in the town hall. Its meetings are public, and "
    "minutes are posted on the notice board outside the post office.",
    "A festival of sea shanties takes place every August. Choirs come from neighbouring towns, and the "
    "evening concert on the beach usually ends with fireworks over the water.",
    "Question: at what time does the maritime museum open in the morning? Answer with the time only.",
]
LONG_TARGET = " The maritime museum opens at 9:30."


def cases(lm, names):
    if "constitutional" in names:
        row = next(r for r in datasets.shipped_rows() if r["case"].startswith("constitutional") and r.get("target"))
        yield "constitutional row", lm.format_prompt(row["prompt"], system=row.get("system") or None), row["target"]
    if "long" in names:
        yield "long notes + question", lm.format_prompt("\n\n".join(PARAGRAPHS)), LONG_TARGET


def top(values, measured=None, n=5):
    v = np.where(measured, values, -np.inf) if measured is not None else values
    return [int(i) for i in np.argsort(-v, kind="stable")[:n]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="+", default=["constitutional", "long"])
    p.add_argument("--k", type=int, default=AblationConfig().refine_top_k)
    args = p.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)", flush=True)
    lm = ss.load_model("default")
    print("| case | prompt tokens | words | method | forwards | seconds | share of full LOO's forwards | measured words |"
          " top five same set / order | largest difference on measured words |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, prompt, target in cases(lm, args.cases):
        t = time.perf_counter()
        c2f = segment_salience(lm, prompt, target, coarse_to_fine.NAME, granularity="word",
                               config=AblationConfig(refine_top_k=args.k))
        t_c2f = time.perf_counter() - t
        t = time.perf_counter()
        full = segment_salience(lm, prompt, target, leave_one_out.NAME, granularity="word")
        t_full = time.perf_counter() - t
        m = c2f.measured_mask()
        same_set = set(top(c2f.values, m)) == set(top(full.values))
        same_order = top(c2f.values, m) == top(full.values)
        diff = float(np.abs(c2f.values[m] - full.values[m]).max())
        words = len(full.segments)
        tokens = c2f.result.n_prompt_tokens
        f_c2f, f_full = c2f.stats.rows - 1, full.stats.rows - 1
        print(f"| {name} | {tokens} | {words} | coarse-to-fine (k={args.k}) | {f_c2f} | {t_c2f:.1f} | "
              f"{100 * f_c2f / f_full:.0f} % ({100 * t_c2f / t_full:.0f} % of the seconds) | {int(m.sum())} | "
              f"{'yes' if same_set else 'no'} / {'yes' if same_order else 'no'} | {diff:.1e} |")
        print(f"| {name} | {tokens} | {words} | full leave one word out | {f_full} | {t_full:.1f} | 100 % | {words} |"
              " | |", flush=True)
        texts = full.segment_texts()
        print(f"<!-- {name}: full top five {[texts[i] for i in top(full.values)]}, coarse-to-fine "
              f"{[texts[i] for i in top(c2f.values, m)]} -->", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
