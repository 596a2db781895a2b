"""The first highlight's gradient pass with 2 torch threads vs 1, under load (issue 43 §4).

    python benchmarks/bench_gradient_threads.py [--burn 1] [--rounds 4] [--long_tokens 2000]

The first highlight is one forward + backward (`compute_span_result` with grad_norm and grad_x_input, the
span request's pass); it took 25 s at load 8. Leave one word out's forwards were slowed by torch's intra-op
barrier under load (sequence_salience/threads.py: 1 thread beat 2 there). This times the gradient
pass in one process (one model) on a short prompt and on a ~`--long_tokens`-token one, each with 2 threads,
with 1, and with one `ThreadChooser` kept across all the passes (as a server-wide chooser would be), the
settings alternating within each round (their order reversed every other round) so that a load that drifts
touches each alike. `--burn N`: N busy processes load the CPU meanwhile. Prints every pass and the medians;
asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.timing import burners, long_prompt, timed  # noqa: E402

SHORT_PROMPT = "Name two rivers of Europe and say which sea each flows into."
TARGET = " The Rhine flows into the North Sea and the Danube into the Black Sea."


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--long_tokens", type=int, default=2000)
    ap.add_argument("--burn", type=int, default=1, help="busy processes loading the CPU meanwhile")
    args = ap.parse_args()

    import torch

    import sequence_salience as ss
    from sequence_salience.threads import ThreadChooser

    lm = ss.load_model("default")
    texts = {"short": SHORT_PROMPT, f"{args.long_tokens} tokens": long_prompt(args.long_tokens, lm.tokenizer)}
    prompts = {name: lm.format_prompt(text) for name, text in texts.items()}
    sizes = {name: len(lm.tokenizer(text + TARGET)["input_ids"]) for name, text in texts.items()}  # the chooser's units
    chooser = ThreadChooser(most=2)
    settings = {"2 threads": ThreadChooser(most=2, measure=False), "1 thread": ThreadChooser(most=1),
                "measured": chooser}
    seconds: dict[tuple[str, str], list[float]] = {(p, s): [] for p in prompts for s in settings}
    burning = burners(args.burn)
    try:
        print(f"torch {torch.__version__}, {os.cpu_count()} cores, {args.burn} busy process(es),"
              f" load {os.getloadavg()[0]:.1f}; prompts: {sizes}", flush=True)
        ss.compute_span_result(lm, prompts["short"], TARGET)  # warm-up (first-call allocations)
        for r in range(args.rounds):
            order = list(settings) if r % 2 == 0 else list(reversed(settings))
            for pname, chat in prompts.items():
                for sname in order:
                    with settings[sname].batch(sizes[pname]) as threads:
                        _, s = timed(lambda: ss.compute_span_result(lm, chat, TARGET))
                    seconds[(pname, sname)].append(s)
                    print(f"  round {r}: {pname:>12s} {sname:>9s} ({threads} thread{'s' * (threads > 1)}):"
                          f" {s:6.2f} s, load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        for p in burning:
            p.kill()
            p.wait()
    print("\nmedian seconds per gradient pass:")
    for (pname, sname), values in seconds.items():
        print(f"  {pname:>12s} {sname:>9s}: {statistics.median(values):6.2f} s"
              f"  (min {min(values):.2f}, max {max(values):.2f}, n={len(values)})")
    print(f"the measured chooser's counts: {chooser.used}")


if __name__ == "__main__":
    main()
