"""What the faithfulness test's upper bound costs, and on which shipped rows it says "not decidable".

    .venv/bin/python benchmarks/bench_upper_bound.py [--granularity sentence word] [--examples 0 1 ...]
                                                      [--modes deletion insertion]

For every shipped example (`lit_app.data.datasets.shipped_rows()`, chat template; an empty target is the
greedy response, 32 tokens at most): the salience of the whole response once (grad_norm,
grad_x_input), then `faithfulness_curves` with the defaults (10 steps, filler removal, 10 random
orders, length) twice from that result: without the upper bound and with it. Prints per row and
granularity: S (segments), the search (exhaustive / greedy), the forward rows of the curves and
the ones the bound adds, the seconds of each run, the bound's AOPC against the baselines and
whether each mode can decide. Prints Markdown. Seconds depend on the machine's load (print
`uptime` beside them); rows do not.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sequence_salience as ss  # noqa: E402
from lit_app.data import datasets  # noqa: E402
from sequence_salience import explain as ex  # noqa: E402

METHODS = ("grad_norm", "grad_x_input")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--granularity", nargs="+", default=["sentence"])
    parser.add_argument("--examples", nargs="*", type=int, default=None)
    parser.add_argument("--modes", nargs="+", default=list(ex.faithfulness.MODES))
    args = parser.parse_args()
    lm = ss.load_model("default")
    rows = datasets.shipped_rows()
    indices = args.examples if args.examples is not None else list(range(len(rows)))
    fa = ex.faithfulness
    for gran in args.granularity:
        print(f"\n### {gran} segments, {' + '.join(args.modes)}, 10 steps, filler removal\n")
        print("| # | case | S | search | curve rows | bound rows | s without | s with | mode | bound AOPC "
              "| random ± sd | length | decidable |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        undecided = {mode: 0 for mode in args.modes}
        for i in indices:
            r = rows[i]
            chat = lm.format_prompt(r["prompt"], system=r.get("system") or None)
            target = r.get("target") or lm.generate(chat, ss.GenerationConfig(max_new_tokens=32))
            result = ss.compute_span_result(lm, chat, target, methods=METHODS)
            base = ex.FaithfulnessConfig(granularity=gran, modes=tuple(args.modes))
            t0 = time.perf_counter()
            plain = ex.faithfulness_curves(lm, ex.CurvesRequest(
                chat, target, METHODS, result=result,
                config=ex.FaithfulnessConfig(**{**base.__dict__, "upper_bound": False})))
            t1 = time.perf_counter()
            rep = ex.faithfulness_curves(lm, ex.CurvesRequest(chat, target, METHODS, result=result, config=base))
            t2 = time.perf_counter()
            S = len(rep.segments)
            for k, mode in enumerate(args.modes):
                bound = rep.curves[mode][fa.UPPER]
                rnd = rep.curves[mode][fa.RANDOM]
                decidable = rep.decidable(mode)
                undecided[mode] += not decidable
                head = (f"| {i} | {r['case'][:40]} | {S} | {bound.ordering} | {plain.n_scored} | {rep.upper_bound_rows} "
                        f"| {t1 - t0:.1f} | {t2 - t1:.1f}" if k == 0 else "| | | | | | | | ")
                print(f"{head} | {mode} | {bound.aopc:.2f} | {rnd.aopc:.2f} ± {rnd.aopc_std:.2f} "
                      f"| {rep.aopc(fa.LENGTH, mode):.2f} | {'yes' if decidable else 'no'} |", flush=True)
        print("\nnot decidable: " + ", ".join(f"{mode} {n} of {len(indices)} rows" for mode, n in undecided.items()))


if __name__ == "__main__":
    main()
