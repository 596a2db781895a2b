"""Command-line demo: generate a response with the default model and print word-level salience.

    python -m sequence_salience.demo [--model default] [--prompt "..."] [--method grad_x_input]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import sequence_salience as ss
from sequence_salience import aggregate
from sequence_salience.methods import grad_x_input

EXAMPLE = (
    "Context: The museum opens at 9 am. Tickets cost 12 euros for adults. "
    "The cafe on the ground floor serves soup and sandwiches. Children under six enter free.\n\n"
    "Question: How much is an adult ticket?"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=ss.DEFAULT_MODEL, help="HF id, local folder, .gguf path or 'default'")
    parser.add_argument("--prompt", default=EXAMPLE)
    parser.add_argument("--method", default=grad_x_input.NAME, choices=ss.list_methods())
    parser.add_argument("--granularity", default="word", choices=aggregate.GRANULARITIES)
    parser.add_argument("--max_new_tokens", type=int, default=32)
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args(argv)
    try:
        lm = ss.load_model(args.model, log=lambda m: print(m, file=sys.stderr))
        prompt = lm.format_prompt(args.prompt)
        print("Generating ...", file=sys.stderr)
        gen = lm.generate(prompt, ss.GenerationConfig(max_new_tokens=args.max_new_tokens))
        print(f"Computing {args.method} salience for {len(gen.ids)} response tokens ...", file=sys.stderr)
        start = time.perf_counter()
        result = ss.compute_salience(
            lm, prompt, gen, methods=(args.method,),
            progress=lambda m, done, total: print(f"\r  {m}: {done}/{total}", end="\n" if done == total else "",
                                                  file=sys.stderr, flush=True),
        )
        seconds = time.perf_counter() - start
    except ss.SalienceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    scores = result.span_salience(args.method)  # [N], the whole response as one target
    seg, values = aggregate.aggregate_salience(
        result.text, result.offsets, scores, args.granularity, role_spans=result.role_spans
    )
    print(f"\nPrompt (user part):\n{args.prompt}\n\nResponse: {gen.text!r}  ({seconds:.1f} s)\n")
    print(f"Top {args.granularity}s of the prompt by {args.method} (whole response as target):")
    content = [(a, b) for a, b, role in result.role_spans if role != "markup"]
    in_prompt = np.array([any(a <= s < b for a, b in content) for s in seg.starts])  # prompt content, not markup
    order = [i for i in np.argsort(-np.abs(np.nan_to_num(values))) if in_prompt[i] and not seg.excluded[i]]
    scale = np.nanmax(np.abs(values[in_prompt])) or 1.0
    for i in order[: args.top]:
        text = result.text[seg.starts[i]:seg.ends[i]].strip().replace("\n", " ")
        bar = "#" * int(round(20 * abs(values[i]) / scale))
        print(f"  {values[i]:+9.4f}  {bar:20s}  {text[:60]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
