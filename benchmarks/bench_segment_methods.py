"""Segment methods vs gradients: faithfulness on the shipped rows, and what the ablations cost (issue 32).

    .venv/bin/python benchmarks/bench_segment_methods.py evaluate --out artifacts/segment_eval
    .venv/bin/python benchmarks/bench_segment_methods.py table --out artifacts/segment_eval
    .venv/bin/python benchmarks/bench_segment_methods.py cost [--repeats 3] [--long-tokens 4000]

evaluate: for every shipped row (`lit_app.data.datasets.shipped_rows()`, chat template as the app formats it;
an empty target is the greedy response, 32 tokens at most, as bench_faithfulness_baselines.py), the
salience of the whole response for every token method once (compute_span_result), then for each
granularity one `faithfulness_curves` run over every method, token and segment (leave_one_out,
ablation_surrogate measured with the curves' own segments and removal): deletion and insertion,
10 steps, filler removal, 10 seeded random orders, the length baseline, and the test's upper bound
(--no-upper-bound skips it: about half a row's forwards at word granularity). One JSON file per row and
granularity in --out (a rerun skips rows already there).

table: prints, per granularity and mode, each method/ordering's mean AOPC gap to random and to length,
the paired difference to grad_norm over rows (mean, seeded bootstrap 95 % CI, rows better / worse),
and the verdict counts. Markdown.

cost: on the chain-of-thought row (prompt + its 32-token greedy answer): one forward + backward
(compute_span_result, grad_norm + grad_x_input: the first highlight) against leave-one-sentence-out
with and without the KV-prefix reuse, interleaved `--repeats` times (the machine is noisy: ratios are
taken within a repeat), and the share of the rows' tokens the reuse did not recompute; then a
~4,000-token prompt of ~30 paragraphs at paragraph granularity: time and the process's peak RSS growth
(in a child process, so that nothing else the script loaded counts).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sequence_salience as ss  # noqa: E402
from lit_app.data import datasets  # noqa: E402
from sequence_salience import explain as ex  # noqa: E402
from sequence_salience.ablation import AblationConfig, segment_salience  # noqa: E402
from sequence_salience.methods import list_segment_methods  # noqa: E402

TOKEN_METHODS = tuple(ss.list_methods())
METHODS = TOKEN_METHODS + tuple(list_segment_methods())
REFERENCE = "grad_norm"


def shipped_examples(lm, indices=None):
    rows = datasets.shipped_rows()
    for i in (indices if indices is not None else range(len(rows))):
        r = rows[i]
        chat = lm.format_prompt(r["prompt"], system=r.get("system") or None)
        target = r.get("target") or lm.generate(chat, ss.GenerationConfig(max_new_tokens=32))
        yield i, r["case"], chat, target


def evaluate(args) -> None:
    """Granularity by granularity (sentence first: the main table), row by row; each row's token
    salience (every token method, whole response) is computed once and kept in --out for the next."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lm = ss.load_model("default")
    examples = list(shipped_examples(lm, args.examples))
    for gran in args.granularity:
        for i, case, chat, target in examples:
            path = out / f"row{i:02d}_{gran}.json"
            if path.exists():
                continue
            saved = out / f"row{i:02d}_tokens.json"
            t = time.perf_counter()
            if saved.exists():
                result = ss.SalienceResult.load(saved)
                t_tokens = json.loads(saved.with_suffix(".seconds").read_text())
            else:
                result = ss.compute_span_result(lm, chat, target, methods=TOKEN_METHODS)
                t_tokens = time.perf_counter() - t
                result.to_json(saved)
                saved.with_suffix(".seconds").write_text(json.dumps(t_tokens))
            t = time.perf_counter()
            rep = ex.faithfulness_curves(lm, ex.CurvesRequest(
                chat, target, METHODS, result=result,
                config=ex.FaithfulnessConfig(granularity=gran, upper_bound=not args.no_upper_bound)))
            rnd = {m: rep.curves[m][ex.faithfulness.RANDOM] for m in rep.curves}
            record = {"row": i, "case": case, "granularity": gran, "n_segments": len(rep.segments),
                      "num_targets": result.num_targets, "seconds_token_methods": t_tokens,
                      "seconds_curves": time.perf_counter() - t, "n_scored": rep.n_scored,
                      "upper_bound": not args.no_upper_bound,
                      "random_aopc_all": {m: [float(v) for v in rnd[m].all_aopc] for m in rnd},
                      "table": rep.table()}
            path.write_text(json.dumps(record, indent=1))
            print(f"row {i} ({case}) {gran}: {len(rep.segments)} segments, {time.perf_counter() - t:.0f} s", flush=True)


def bootstrap_ci(diffs: np.ndarray, n: int = 10_000, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(diffs), size=(n, len(diffs)))
    means = diffs[idx].mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def table(args) -> None:
    out = Path(args.out)
    for gran in args.granularity:
        records = [json.loads(p.read_text()) for p in sorted(out.glob(f"row*_{gran}.json"))]
        if not records:
            continue
        for mode in ("deletion", "insertion"):
            by = {}
            for rec in records:
                for r in rec["table"]:
                    if r["mode"] == mode:
                        by.setdefault(r["name"], {})[rec["row"]] = r
            ref = by[REFERENCE]
            print(f"\n#### {gran} segments, {mode} ({len(records)} rows; AOPC in nats, higher = more faithful)\n")
            print("| method (ordering) | vs random | vs length | vs grad_norm: mean (95 % CI) | rows better / worse "
                  f"| verdicts ({' / '.join(ex.faithfulness.VERDICTS)}) |")
            print("|---|---:|---:|---|---|---|")
            for name, rows in by.items():
                keys = sorted(rows)
                gap = np.mean([rows[k]["gap"] for k in keys])
                gap_len = np.mean([rows[k]["gap_length"] for k in keys])
                diffs = np.array([rows[k]["aopc"] - ref[k]["aopc"] for k in keys])
                verdicts = [rows[k]["verdict"] for k in keys]
                counts = " / ".join(str(sum(v == x for v in verdicts)) for x in ex.faithfulness.VERDICTS)
                if name == REFERENCE:
                    vs = "—"
                    bw = "—"
                else:
                    lo, hi = bootstrap_ci(diffs)
                    vs = f"{diffs.mean():+.2f} ({lo:+.2f}, {hi:+.2f})"
                    bw = f"{int((diffs > 1e-9).sum())} / {int((diffs < -1e-9).sum())}"
                label = f"{name.split(':')[0]} ({rows[keys[0]]['ordering']})"
                print(f"| {label} | {gap:+.2f} | {gap_len:+.2f} | {vs} | {bw} | {counts} |")
        secs = [rec["seconds_curves"] for rec in records]
        bounded = [rec["row"] for rec in records if rec.get("upper_bound", True)]
        print(f"\n{len(records)} rows; curves {np.sum(secs):.0f} s in all (load-dependent); the upper bound searched "
              f"on {len(bounded)} of them (rows {', '.join(map(str, bounded)) or 'none'}): only those can read 'not decidable'.")


def cost(args) -> None:
    lm = ss.load_model("default")
    rows = datasets.shipped_rows()
    cot = next(i for i, r in enumerate(rows) if "chain-of-thought" in r["case"])
    _, case, chat, target = next(shipped_examples(lm, [cot]))
    ss.compute_span_result(lm, chat, target)  # warm-up
    print(f"\n#### Leave one sentence out on the {case} row\n")
    print("| repeat | forward + backward (s) | leave-one-out, prefix reuse (s) | ratio | without reuse (s) | ratio "
          "| rows | tokens not recomputed |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    ratios, ratios_plain = [], []
    for r in range(args.repeats):
        t = time.perf_counter()
        ss.compute_span_result(lm, chat, target)
        fb = time.perf_counter() - t
        t = time.perf_counter()
        loo = segment_salience(lm, chat, target, "leave_one_out", granularity="sentence")
        t_loo = time.perf_counter() - t
        t = time.perf_counter()
        plain = segment_salience(lm, chat, target, "leave_one_out", granularity="sentence",
                                 config=AblationConfig(reuse_prefix=False))
        t_plain = time.perf_counter() - t
        assert np.allclose(loo.values, plain.values, atol=1e-3), "reuse changed the values"
        ratios.append(t_loo / fb)
        ratios_plain.append(t_plain / fb)
        print(f"| {r + 1} | {fb:.2f} | {t_loo:.2f} | {t_loo / fb:.2f}x | {t_plain:.2f} | {t_plain / fb:.2f}x | "
              f"{loo.stats.rows} | {loo.stats.saved:.0%} |")
    print(f"\nMedian: leave-one-out {np.median(ratios):.2f}x one forward + backward (without reuse "
          f"{np.median(ratios_plain):.2f}x); {len(loo.segments)} sentences, {loo.stats.tokens:,} tokens in all rows.")
    t = time.perf_counter()
    sur = segment_salience(lm, chat, target, "ablation_surrogate", granularity="sentence")
    print(f"Surrogate (32 ablations) on the same row: {time.perf_counter() - t:.2f} s, "
          f"{sur.stats.saved:.0%} of tokens not recomputed, held-out R^2 {sur.quality['r2']:.2f}.")
    if args.long_tokens:
        child = subprocess.run([sys.executable, __file__, "long", "--long-tokens", str(args.long_tokens)],
                               capture_output=True, text=True, check=True)
        print(child.stdout)


PARAGRAPH = ("Paragraph {i}. The archive of station {i} lists {n} crates of equipment, stored in hall {h}. "
             "Each crate was checked on arrival, and the clerk noted the weight, the sender and the date. "
             "Most crates came by rail; a few came by road when the line was closed for repairs in winter. "
             "The inspectors found the records complete, with one exception noted in the margin.")


def long_prompt(args) -> None:
    """Child process: a ~N-token prompt of paragraphs at paragraph granularity, time and peak RSS growth."""
    lm = ss.load_model("default")
    parts, i = [], 0
    while True:
        parts.append(PARAGRAPH.format(i=i, n=10 + 3 * i, h=chr(65 + i % 26)))
        i += 1
        text = "\n\n".join(parts) + "\n\nQuestion: how many crates does station 7 list?"
        if len(lm.tokenize(text).ids) >= args.long_tokens:
            break
    target = " Station 7 lists 31 crates."
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for reuse in (True, False):
        t = time.perf_counter()
        got = segment_salience(lm, text, target, "leave_one_out", granularity="paragraph",
                               config=AblationConfig(reuse_prefix=reuse))
        secs = time.perf_counter() - t
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"Long prompt ({len(lm.tokenize(text).ids):,} tokens, {len(got.segments)} paragraphs), "
              f"leave one paragraph out, reuse={reuse}: {secs:.1f} s, {got.stats.rows} rows, "
              f"{got.stats.saved:.0%} of tokens not recomputed, peak RSS {peak:,.0f} MB (model loaded: {base:,.0f} MB); "
              f"top paragraph: {got.segment_texts()[got.ranked()[0]][:40]!r}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["evaluate", "table", "cost", "long"])
    parser.add_argument("--out", default="artifacts/segment_eval")
    parser.add_argument("--granularity", nargs="+", default=["sentence", "word"])
    parser.add_argument("--examples", nargs="*", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--long-tokens", type=int, default=4000)
    parser.add_argument("--no-upper-bound", action="store_true",
                        help="evaluate: skip the test's upper-bound search (about half of a row's forwards at word "
                             "granularity); the AOPCs and paired differences are the same, no row reads 'not decidable'")
    args = parser.parse_args()
    {"evaluate": evaluate, "table": table, "cost": cost, "long": long_prompt}[args.what](args)


if __name__ == "__main__":
    main()
