"""Prefix reuse: the shared, uncopied prefix against a DynamicCache copy per row and against full forwards.

    .venv/bin/python benchmarks/bench_prefix_reuse.py [--tokens 2000 4000] [--rows 8] [--repeats 2]

A prompt of ~N tokens of paragraphs (bench_segment_methods.PARAGRAPH, its long-prompt question), `--rows`
leave-one-paragraph-out ablations spread evenly over the prompt (filler removal), scored three ways,
interleaved `--repeats` times (the machine is noisy: ratios are taken within a repeat):
  shared  PrefixScorer as it runs now: each batch's prefix part of attention once against the one cached
          prefix (sequence_salience/ablation/shared_prefix.py), no copy;
  copied  the former path: a DynamicCache of the prefix per batch (every row concatenates its own copy);
  full    one full forward per row (reuse off).
Also one full forward + backward of the unedited prompt (compute_span_result, grad_norm), the first
highlight's cost, as the unit. The three paths' values must agree (printed: largest difference).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sequence_salience as ss  # noqa: E402
from benchmarks.bench_segment_methods import PARAGRAPH  # noqa: E402
from benchmarks.timing import timed  # noqa: E402
from sequence_salience import scoring  # noqa: E402
from sequence_salience.ablation import PrefixScorer  # noqa: E402
from sequence_salience.salience import tokenized_result  # noqa: E402

TARGET = " Station 7 lists 31 crates."


def prompt_of(lm, tokens: int) -> str:
    parts, i = [], 0
    while True:
        parts.append(PARAGRAPH.format(i=i, n=10 + 3 * i, h=chr(65 + i % 26)))
        i += 1
        text = "\n\n".join(parts) + "\n\nQuestion: how many crates does station 7 list?"
        if len(lm.tokenize(text).ids) >= tokens:
            return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[2000, 4000])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    lm = ss.load_model()
    print(f"torch threads {torch.get_num_threads()}")
    for n in args.tokens:
        text = prompt_of(lm, n)
        result = tokenized_result(lm, text, TARGET)
        segs = scoring.prompt_segments(result, "paragraph").matches_only()
        edit = scoring.PromptEditor(lm, text, result, segs, "filler", scoring.filler_id(lm, " "))
        picks = np.linspace(0, len(segs) - 1, args.rows).round().astype(int)
        rows = [edit((int(s),)) for s in picks]
        prompt_ids = [int(i) for i in result.ids[:result.n_prompt_tokens]]
        target_ids = [int(i) for i in result.ids[result.n_prompt_tokens:]]
        span = (0, len(target_ids))
        print(f"\n{len(result.ids):,} tokens, {len(segs)} paragraphs, {args.rows} ablations "
              f"(paragraphs {picks.tolist()})")
        print("| repeat | forward + backward (s) | shared (s) | copied (s) | full (s) | shared / copied | "
              "shared / full | tokens not recomputed | largest difference |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for rep in range(args.repeats):
            _, fb = timed(lambda: ss.compute_span_result(lm, text, TARGET, methods=("grad_norm",)))
            secs, values = {}, {}
            for name, kw in (("shared", {}), ("copied", {"shared_attention": False}), ("full", {"reuse": False})):
                scorer = PrefixScorer(lm, prompt_ids, target_ids, span, **kw)  # its unedited forward: not timed
                values[name], secs[name] = timed(lambda: scorer(rows))
                if name == "shared":
                    saved = 1 - (scorer.stats.computed - len(result.ids)) / (scorer.stats.tokens - len(result.ids))
            diff = max(float(np.abs(values["shared"] - values[k]).max()) for k in ("copied", "full"))
            print(f"| {rep + 1} | {fb:.1f} | {secs['shared']:.1f} | {secs['copied']:.1f} | {secs['full']:.1f} | "
                  f"{secs['shared'] / secs['copied']:.2f} | {secs['shared'] / secs['full']:.2f} | {saved:.0%} | "
                  f"{diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
