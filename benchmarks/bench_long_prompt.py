"""Long prompts in the library: first highlight, full matrices and peak memory.

    python benchmarks/bench_long_prompt.py [--tokens 8000] [--target_tokens 18] [--dtype float32]

Builds a prompt of about --tokens tokens (numbered notes) and a typed target, then
measures on the default model: the whole-response span (`compute_span_result`, one
forward + backward: the first highlight), the full [T, N] matrices of grad_norm and
grad_x_input (`compute_salience`, chunks sized by `chunk_token_budget`), and the
process's peak resident memory after each (ru_maxrss). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import sequence_salience as ss  # noqa: E402
from sequence_salience.methods import grad_norm  # noqa: E402


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def build_prompt(lm, tokens: int) -> str:
    lines, k = [], 0
    while True:
        topic = ["the museum", "the harbour", "the library", "the bakery", "the station"][k % 5]
        lines.append(f"Note {k + 1}: {topic} opens at {7 + k % 5} am on day {k % 28 + 1}; "
                     f"visitors counted {100 + 7 * k} people.")
        k += 1
        if k % 4 == 0 and len(lm.tokenize("\n".join(lines)).ids) >= tokens:
            return "\n".join(lines) + "\nQuestion: when does the library open on day 3?"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=8000)
    p.add_argument("--target_tokens", type=int, default=18)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--skip_full", action="store_true")
    args = p.parse_args()
    lm = ss.load_model("default", dtype=args.dtype)
    prompt = build_prompt(lm, args.tokens - args.target_tokens - 8)
    words = "The library opens at nine on day three, before the market.".split()
    target, k = "", 0
    while len(lm.tokenize(target).ids) < args.target_tokens:
        target += " " + words[k % len(words)]
        k += 1
    row = {"dtype": args.dtype, "peak_rss_gb_after_load": round(peak_gb(), 2)}
    t = time.perf_counter()
    span = ss.compute_span_result(lm, prompt, target)
    row.update(tokens=len(span.ids), target_tokens=span.num_targets,
               first_highlight_s=round(time.perf_counter() - t, 1), peak_rss_gb_after_span=round(peak_gb(), 2))
    print(json.dumps(row), flush=True)
    if not args.skip_full:
        last = [time.perf_counter()]

        def progress(method, done, total):
            now = time.perf_counter()
            print(f"  {method} {done}/{total} (+{now - last[0]:.1f} s, peak RSS {peak_gb():.2f} GB)", flush=True)
            last[0] = now

        t = time.perf_counter()
        result = ss.compute_salience(lm, prompt, target, progress=progress)
        row.update(full_matrices_s=round(time.perf_counter() - t, 1), peak_rss_gb_after_full=round(peak_gb(), 2),
                   gram_kept=grad_norm.GRAM in result.extras)
    print(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
