"""Learned attention attribution against exact leave-one-out on held-out prompts, its cost, and its memory.

    .venv/bin/python benchmarks/bench_attention_attribution.py collect --out artifacts/attention_eval [--n 20]
    .venv/bin/python benchmarks/bench_attention_attribution.py table --out artifacts/attention_eval [--estimator F]
    .venv/bin/python benchmarks/bench_attention_attribution.py memory [--tokens 4000 8000]

collect: the first --n prompts of the held-out split (sequence_salience/attention/prompts.py, split "eval": names,
places and topics disjoint from the training split; none of the shipped rows), --min-tokens..--max-tokens long,
at sentence granularity up to --sentence-max-tokens, paragraph above (principles: line), filler removal. Per prompt:
exact leave one segment out (the reference), gradient norm of the whole target (one forward + backward; summed
over each segment's tokens), and the attention features (one forward with the hooks), each timed. One .npz per
prompt in --out (a rerun skips prompts already there). No estimator is needed to collect.

table: applies the estimator (default: the shipped one for the default model) to the collected features and
prints, per method, the mean Spearman rank correlation with leave-one-out, top-1 agreement (same first segment)
and top-3 agreement (shared segments of the two top threes, out of 3), with the prompts' count, the notes prompts'
rank of the fact's segment, the paired difference to grad_norm (seeded bootstrap 95 % CI over prompts), and the median time of the attention map and of leave-one-out relative to one
forward + backward on the same prompt. Markdown.

memory: peak resident-memory growth of the feature capture on a --tokens-long notes prompt, and of a plain
forward of the base model (no hooks) on the same tokens, each in a fresh child process (sampled every 5 ms).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sequence_salience as ss  # noqa: E402
from sequence_salience.ablation import segment_salience  # noqa: E402
from sequence_salience.attention import capture_features, estimator_for, load_estimator, span_rows  # noqa: E402
from sequence_salience.attention.prompts import generate_prompt  # noqa: E402
from sequence_salience.calibration import chat_prompt  # noqa: E402
from sequence_salience.methods import AblationConfig  # noqa: E402


def granularity(item, n_tokens: int, sentence_max: int) -> str:
    if item.kind == "principles":
        return "line"
    return "sentence" if n_tokens <= sentence_max else "paragraph"


def collect(args) -> None:
    import torch  # pylint: disable=import-outside-toplevel

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lm = ss.load_model(args.model)
    count = lambda text: len(lm.tokenize(text).ids)
    for i in range(args.start, args.n):
        path = out / f"eval-{args.seed}-{i:04d}.npz"
        if path.exists():
            continue
        item = generate_prompt(args.seed, i, "eval", args.min_tokens, args.max_tokens, count)
        n = count(item.user) + (count(item.system) if item.system else 0)
        g = granularity(item, n, args.sentence_max_tokens)
        prompt = chat_prompt(lm, item)
        t = time.perf_counter()
        loo = segment_salience(lm, prompt, item.target, "leave_one_out", granularity=g, config=AblationConfig())
        loo_s = time.perf_counter() - t
        r = loo.result
        t = time.perf_counter()
        grad = ss.compute_span_salience(lm, prompt, item.target, "grad_norm")  # [N]
        grad_s = time.perf_counter() - t
        t = time.perf_counter()
        features = capture_features(lm.model, r.ids, span_rows(r.n_prompt_tokens, loo.span), loo.segment_tokens)
        att_s = time.perf_counter() - t
        grad_seg = np.array([grad[toks].sum() for toks in loo.segment_tokens])
        fact = -1
        if item.kind == "notes":  # the segment holding the fact's sentence
            start = loo.text.index(item.target.strip())
            fact = next(k for k, (s, e) in enumerate(loo.segments) if s <= start < e)
        np.savez(path, loo=loo.values, grad_norm=grad_seg, features=features, span_tokens=loo.span[1] - loo.span[0],
                 loo_s=loo_s, grad_s=grad_s, att_s=att_s, n_tokens=len(r.ids), fact_segment=fact,
                 meta=np.asarray(json.dumps({"id": item.id, "kind": item.kind, "granularity": g})))
        print(f"[{i + 1}/{args.n}] {item.id} {item.kind} {len(r.ids)} tokens, {len(loo.values)} {g}s: leave-one-out "
              f"{loo_s:.1f} s, forward+backward {grad_s:.1f} s, attention {att_s:.1f} s", flush=True)


def ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(len(x))
    for v in np.unique(x):  # average ties
        r[x == v] = r[x == v].mean()
    return r


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def top(x: np.ndarray, k: int) -> set[int]:
    return {int(i) for i in np.argsort(-x, kind="stable")[:k]}


def table(args) -> None:
    est = load_estimator(args.estimator) if args.estimator else estimator_for(ss.model.DEFAULT_MODEL_DESCRIPTION)
    rows = []
    for path in sorted(Path(args.out).glob("*.npz")):
        with np.load(path) as z:
            d = {k: z[k] for k in z.files}
        d["attention_attribution"] = est.values(d["features"], int(d["span_tokens"]))
        d["meta"] = json.loads(str(d["meta"]))
        rows.append(d)
    if not rows:
        sys.exit(f"no collected prompts in {args.out}")
    print(f"{len(rows)} held-out prompts, {min(int(r['n_tokens']) for r in rows)}-{max(int(r['n_tokens']) for r in rows)}"
          f" tokens, {min(len(r['loo']) for r in rows)}-{max(len(r['loo']) for r in rows)} segments; estimator: "
          f"{est.model}, {int(est.quality.get('prompts', 0))} training prompts, cv R² {est.quality.get('cv_r2', float('nan')):.2f}\n")
    print("| method | Spearman with leave-one-out (mean, min–max) | top-1 agreement | top-3 agreement | fact segment "
          "ranked first (notes) |")
    print("|---|---|---|---|---|")
    for m in ("attention_attribution", "grad_norm"):
        rho = np.array([spearman(r[m], r["loo"]) for r in rows])
        t1 = np.mean([top(r[m], 1) == top(r["loo"], 1) for r in rows])
        t3 = np.mean([len(top(r[m], 3) & top(r["loo"], 3)) / 3 for r in rows])
        notes = [r for r in rows if int(r["fact_segment"]) >= 0]
        fact = sum(int(np.argmax(r[m])) == int(r["fact_segment"]) for r in notes)
        print(f"| {m} | {np.nanmean(rho):.2f} ({np.nanmin(rho):.2f}–{np.nanmax(rho):.2f}) | {t1:.2f} | {t3:.2f} | "
              f"{fact}/{len(notes)} |")
    notes = [r for r in rows if int(r["fact_segment"]) >= 0]
    fact = sum(int(np.argmax(r["loo"])) == int(r["fact_segment"]) for r in notes)
    print(f"| leave_one_out (reference) | 1 | 1 | 1 | {fact}/{len(notes)} |\n")
    rng = np.random.default_rng(0)  # paired bootstrap over prompts, attention_attribution minus grad_norm
    for name, per in (("Spearman", lambda r, m: spearman(r[m], r["loo"])),
                      ("top-1", lambda r, m: float(top(r[m], 1) == top(r["loo"], 1))),
                      ("top-3", lambda r, m: len(top(r[m], 3) & top(r["loo"], 3)) / 3)):
        d = np.array([per(r, "attention_attribution") - per(r, "grad_norm") for r in rows])
        d = d[np.isfinite(d)]
        boot = [rng.choice(d, len(d)).mean() for _ in range(2000)]
        print(f"{name}: attention_attribution minus grad_norm {d.mean():+.2f} (95 % CI {np.percentile(boot, 2.5):+.2f}"
              f" to {np.percentile(boot, 97.5):+.2f}; paired bootstrap over {len(d)} prompts)")
    att = np.median([float(r["att_s"] / r["grad_s"]) for r in rows])
    loo = np.median([float(r["loo_s"] / r["grad_s"]) for r in rows])
    print(f"Cost, median over prompts of the time relative to one forward + backward of the same prompt: attention "
          f"map {att:.2f}×, exact leave-one-out {loo:.2f}× (median forward + backward "
          f"{np.median([float(r['grad_s']) for r in rows]):.1f} s).")
    by_kind = {}
    for r in rows:
        by_kind.setdefault(r["meta"]["kind"], []).append(spearman(r["attention_attribution"], r["loo"]))
    print("Spearman of attention_attribution by kind: " + ", ".join(
        f"{k} {np.nanmean(v):.2f} (n={len(v)})" for k, v in sorted(by_kind.items())))


CHILD = r"""
import sys, threading, time, os, torch, json
torch.set_num_threads(int(sys.argv[3]))
import sequence_salience as ss
from sequence_salience.attention import capture_features, span_rows
from sequence_salience.attention.prompts import generate_prompt
from sequence_salience.calibration import chat_prompt
lm = ss.load_model("default")
n = int(sys.argv[1])
count = lambda text: len(lm.tokenize(text).ids)
item = generate_prompt(1, 0, "eval", n - 60, n - 40, count, kind="notes")
prompt = chat_prompt(lm, item)
ids = list(lm.encode_prompt(prompt).ids) + list(lm.tokenize(item.target).ids)
ids = ids[:n]
P = len(ids) - 12
paras, start = [], 1
for k in range(P // 100):
    paras.append(list(range(1 + 100 * k, 1 + 100 * (k + 1))))
page = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
peak = [0]
stop = [False]
def sample():
    while not stop[0]:
        peak[0] = max(peak[0], page()); time.sleep(0.005)
torch.manual_seed(0)
base = page()
th = threading.Thread(target=sample); th.start()
t = time.perf_counter()
if sys.argv[2] == "features":
    f = capture_features(lm.model, ids, span_rows(P, (0, 12)), paras)
else:
    with torch.no_grad():
        lm.model.base_model(input_ids=torch.tensor([ids]), use_cache=False)
s = time.perf_counter() - t
stop[0] = True; th.join()
print(json.dumps({"tokens": len(ids), "what": sys.argv[2], "peak_growth_mb": (peak[0] - base) / 2**20, "seconds": s}))
"""


def memory(args) -> None:
    for n in args.tokens:
        for what in ("forward", "features"):
            out = subprocess.run([sys.executable, "-c", CHILD, str(n), what, str(args.threads)], capture_output=True,
                                 text=True, check=True, cwd=Path(__file__).resolve().parents[1])
            print(out.stdout.strip().splitlines()[-1], flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--out", required=True)
    c.add_argument("--model", default="default")
    c.add_argument("--n", type=int, default=20)
    c.add_argument("--start", type=int, default=0, help="first prompt index (several collectors can share --out)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--min-tokens", type=int, default=300)
    c.add_argument("--max-tokens", type=int, default=800)
    c.add_argument("--sentence-max-tokens", type=int, default=400)
    c.add_argument("--threads", type=int, default=1)
    t = sub.add_parser("table")
    t.add_argument("--out", required=True)
    t.add_argument("--estimator", default=None)
    m = sub.add_parser("memory")
    m.add_argument("--tokens", type=int, nargs="+", default=[4000, 8000])
    m.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    {"collect": collect, "table": table, "memory": memory}[args.command](args)


if __name__ == "__main__":
    main()
