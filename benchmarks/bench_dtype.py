"""How far bfloat16 salience departs from float32 on the shipped examples, and how much faster it is.

For each distinct (prompt, system, response) of lit_app/data/*.jsonl on the default model:
the response is the row's own target, or else the float32 model's greedy answer (generated
once, in float32, and used for both dtypes). Then, in float32 and in bfloat16:

* `span`: the whole response as one span (one forward + backward per method), timed;
* `matrix`: the full per-target matrices [T, N] of grad_norm + grad_x_input (one shared
  batched backward), timed, compared row by row;
* optionally integrated gradients (whole-response span, few steps) on the first examples.

Scores are aggregated to words (sequence_salience.aggregate, sum; chat markup excluded) over
the prompt, and compared per method: overlap of the top-10 words (by |value| for signed
methods, by value for grad_norm), Spearman rank correlation of the word scores, and the
bfloat16 / float32 time ratio measured in the same run. Prints one table.

    nice python benchmarks/bench_dtype.py [--ig_steps 8] [--ig_examples 2] [--max_new_tokens 64]
"""

from __future__ import annotations

import argparse
import glob
import json
import pathlib
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
METHODS = ("grad_norm", "grad_x_input")
TOP_K = 10


def load_rows() -> list[dict]:
    rows = []
    for path in sorted(glob.glob(str(ROOT / "lit_app/data/*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    def ranks(x):
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x))
        for v in np.unique(x):  # average ties
            tie = x == v
            if tie.sum() > 1:
                r[tie] = r[tie].mean()
        return r
    ra, rb = ranks(np.asarray(a, float)), ranks(np.asarray(b, float))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def top_k(values: np.ndarray, signed: bool, k: int = TOP_K) -> set[int]:
    key = np.abs(values) if signed else values
    return set(np.argsort(-key, kind="stable")[:k].tolist())


def word_scores(aggregate, text: str, offsets, prompt_end: int, scores: np.ndarray):
    """Word scores over the prompt's non-markup words: float64 [..., W]."""
    seg, values = aggregate.aggregate_salience(text, offsets, scores, "word")
    keep = (~seg.excluded) & (seg.starts < prompt_end) & np.isin(np.array(seg.kinds), ["word"])
    return values[..., keep]


def compare(a: np.ndarray, b: np.ndarray, signed: bool) -> tuple[float, float]:
    """(top-10 overlap in [0, 1], Spearman) of two word-score vectors."""
    k = min(TOP_K, len(a))
    overlap = len(top_k(a, signed, k) & top_k(b, signed, k)) / max(1, k)
    return overlap, spearman(a, b)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def text_and_offsets(lm, chat, target):
    """The (prompt + target) text and token offsets that compute_salience would report."""
    prompt = lm.encode_prompt(chat)
    if isinstance(target, str):
        target_text, target_offsets = target, lm.tokenize(target).offsets
    else:
        target_text, target_offsets = target.text, target.offsets
    shift = len(chat.text)
    offsets = list(prompt.offsets) + [(a + shift, b + shift) for a, b in target_offsets]
    return chat.text + target_text, np.array(offsets, dtype=np.int64), len(prompt.ids), len(target_offsets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--ig_steps", type=int, default=8)
    parser.add_argument("--ig_examples", type=int, default=2, help="examples that also run IG spans (0: none)")
    parser.add_argument("--matrix_examples", type=int, default=2,
                        help="examples (with 2+ response tokens) that also compare the full per-target matrices")
    parser.add_argument("--long_tokens", type=int, default=1500,
                        help="also time one whole-response span on a prompt of about this many tokens (0: skip)")
    parser.add_argument("--only", default="", help="comma-separated example indices to run (default: all)")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per measurement (the best counts)")
    args = parser.parse_args()

    import torch

    import sequence_salience as ss
    from sequence_salience import aggregate

    lms = {"float32": ss.load_model("default", dtype="float32"), "bfloat16": ss.load_model("default", dtype="bfloat16")}
    fp32 = lms["float32"]
    config = ss.SalienceConfig(ig_steps=args.ig_steps)

    # Distinct examples with their response, generated once in float32 where the row has none.
    examples, seen = [], set()
    for row in load_rows():
        chat = fp32.format_prompt(row["prompt"], system=row.get("system") or None)
        key = (chat.text, row.get("target", ""))
        if key in seen:
            continue
        seen.add(key)
        target = row.get("target") or fp32.generate(chat, ss.GenerationConfig(max_new_tokens=args.max_new_tokens))
        examples.append((row.get("case", "?"), chat, target))
    if args.long_tokens:
        base = examples[0][1]
        reps = max(1, args.long_tokens // len(fp32.encode_prompt(base).ids))
        long_chat = fp32.format_prompt("\n\n".join([load_rows()[0]["prompt"]] * reps))
        examples.append((f"long prompt (first example x{reps})", long_chat, " Negative"))

    for lm in lms.values():  # warm-up: first calls pay one-time costs
        ss.compute_span_salience(lm, lm.format_prompt("Hi"), " Hello", "grad_norm", config=config)

    stats: dict[str, dict[str, list[float]]] = {}

    only = {int(i) for i in args.only.split(",") if i.strip()}
    matrix_left = args.matrix_examples

    def best(fn):
        runs = [timed(fn) for _ in range(max(1, args.repeats))]
        return runs[0][0], min(t for _, t in runs)

    def add(name, **kv):
        for k, v in kv.items():
            stats.setdefault(name, {}).setdefault(k, []).append(v)

    print(f"{len(examples)} examples; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'example':40s} {'P+T':>8s} {'measure':28s} {'top10':>6s} {'rho':>6s} {'fp32 s':>7s} {'bf16 s':>7s}")
    for i, (case, chat, target) in enumerate(examples):
        if only and i not in only:
            continue
        text, offsets, n_prompt, t_len = text_and_offsets(fp32, chat, target)
        prompt_end = len(chat.text)
        label = f"{i}: {case}"[:40]
        size = f"{n_prompt}+{t_len}"
        long = case.startswith("long prompt")
        ig = i < args.ig_examples and args.ig_steps > 0 and not long
        order = list(lms.items()) if i % 2 == 0 else list(lms.items())[::-1]  # alternate who runs first

        def words(scores):
            return word_scores(aggregate, text, offsets, prompt_end, scores)

        span_methods = METHODS + (("integrated_gradients",) if ig else ())
        for method in span_methods:
            spans, secs = {}, {}
            for dtype, lm in order:
                spans[dtype], secs[dtype] = best(
                    lambda: ss.compute_span_salience(lm, chat, target, method, config=config))
            overlap, rho = compare(words(spans["float32"]), words(spans["bfloat16"]), method != "grad_norm")
            name = ("long:" if long else "span:") + method + (
                f"@{args.ig_steps}" if method == "integrated_gradients" else "")
            add(name, overlap=overlap, rho=rho, fp32=secs["float32"], bf16=secs["bfloat16"])
            print(f"{label:40s} {size:>8s} {name:28s} {overlap:6.2f} {rho:6.3f} "
                  f"{secs['float32']:7.2f} {secs['bfloat16']:7.2f}", flush=True)
        if matrix_left <= 0 or long or t_len < 2:
            continue
        matrix_left -= 1
        mats, secs = {}, {}
        for dtype, lm in order:
            res, secs[dtype] = best(lambda: ss.compute_salience(lm, chat, target, methods=METHODS))
            mats[dtype] = res.matrices
        for method in METHODS:
            a, b = words(mats["float32"][method]), words(mats["bfloat16"][method])
            rows = [compare(a[t], b[t], method != "grad_norm") for t in range(t_len)]  # per target token
            overlap, rho = float(np.mean([r[0] for r in rows])), float(np.nanmean([r[1] for r in rows]))
            worst = float(np.nanmin([r[1] for r in rows]))
            name = f"matrix:{method}"
            add(name, overlap=overlap, rho=rho, fp32=secs["float32"], bf16=secs["bfloat16"])
            print(f"{label:40s} {size:>8s} {name:28s} {overlap:6.2f} {rho:6.3f} "
                  f"{secs['float32']:7.2f} {secs['bfloat16']:7.2f}   (mean over {t_len} target rows, "
                  f"worst row rho {worst:.3f}; time: both methods together)", flush=True)

    print("\nSummary (mean over examples, min in brackets; seconds summed; speed-up = fp32 s / bf16 s)")
    print(f"{'measure':28s} {'n':>3s} {'top-10 overlap':>15s} {'Spearman rho':>15s} "
          f"{'fp32 s':>8s} {'bf16 s':>8s} {'speed-up':>8s}")
    for name, s in stats.items():
        ov, rho = np.array(s["overlap"]), np.array(s["rho"])
        f32, b16 = sum(s["fp32"]), sum(s["bf16"])
        print(f"{name:28s} {len(ov):3d} {ov.mean():7.2f} [{ov.min():.2f}] {np.nanmean(rho):7.3f} [{np.nanmin(rho):.3f}] "
              f"{f32:8.1f} {b16:8.1f} {f32 / b16:7.2f}x")


if __name__ == "__main__":
    main()
