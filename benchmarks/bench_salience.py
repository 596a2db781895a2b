"""Salience speed on the default model: full [T, N] matrices vs. the plain per-target loop.

Prints seconds per method, the same for the plain per-target loop (one forward +
backward per target token, as tests/unit/reference.py), their ratio, and the peak
memory (RSS growth over the loaded model) of each measurement. Each measurement runs
in its own process so peaks do not mix. Machines here are noisy: compare ratios
measured in the same run, not absolute figures across runs.

    python benchmarks/bench_salience.py [--device cpu] [--ig_steps 16] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

PROMPT_SYSTEM = (
    "You are a careful assistant for a bookshop. Follow these principles: be concise; never invent facts; "
    "when a question cannot be answered from the context, say so; answer in one or two sentences."
)
PROMPT_USER = (
    "Here are some notes from today's shift.\n\n"
    "The delivery van arrived late because of roadworks on the bridge. Maria sorted the poetry shelf and found "
    "two damaged copies. The coffee machine in the back room was repaired in the afternoon. A customer asked "
    "about signed editions, but none were in stock. The shop will be closed on Monday for the public holiday. "
    "Tom ordered fifty copies of the new mystery novel for the book club on Thursday. The window display now "
    "shows autumn travel guides. The card reader failed twice before lunch and was restarted.\n\n"
    "Question: How many copies of the new mystery novel did Tom order, and for what event? Explain briefly."
)


# A fixed ~40-token response, so that runs compare like with like (the model's own answer
# to this prompt is shorter).
RESPONSE = (
    "Tom ordered fifty copies of the new mystery novel for the book club meeting on Thursday, according to "
    "the notes from today's shift, before the shop closes for the public holiday on Monday."
)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _setup(device: str):
    import sequence_salience as ss

    lm = ss.load_model("default", device=device)
    prompt = lm.format_prompt(PROMPT_USER, system=PROMPT_SYSTEM)
    return ss, lm, prompt, RESPONSE


def run_one(name: str, device: str, ig_steps: int, repeats: int) -> dict:
    import torch

    ss, lm, prompt, gen = _setup(device)
    from sequence_salience.methods.base import SalienceConfig

    strategy = "auto"
    if "@" in name:
        name, strategy = name.split("@")
    config = SalienceConfig(ig_steps=ig_steps, backward=strategy)
    n_prompt = len(lm.encode_prompt(prompt).ids)
    target_ids = lm.tokenize(gen).ids
    n_target = len(target_ids)

    def sync():
        if lm.device.type == "cuda":
            torch.cuda.synchronize()

    if name.startswith("matrix:"):
        methods = tuple(name.split(":", 1)[1].split("+"))
        fn = lambda: ss.compute_salience(lm, prompt, gen, methods=methods, config=config)
    elif name.startswith("span:"):
        method = name.split(":", 1)[1]
        fn = lambda: ss.compute_span_salience(lm, prompt, gen, method, config=config)
    elif name == "loop:grad":
        sys.path.insert(0, ".")
        from tests.unit.reference import reference_salience

        ids = list(lm.encode_prompt(prompt).ids) + list(target_ids)
        fn = lambda: reference_salience(lm.model, ids, n_prompt)
    elif name == "loop:ig_span":  # IG for the whole response as one span, one step at a time
        from sequence_salience.methods import paths
        from sequence_salience.methods.gradients import weighted_gradient
        from sequence_salience.salience import build_inputs

        inputs = build_inputs(lm, [(lm.encode_prompt(prompt).ids, target_ids)])
        alphas, weights = paths.quadrature(ig_steps)
        w = torch.ones(1, n_target)

        def fn():
            total = torch.zeros_like(inputs.embeds)
            for a, wt in zip(alphas, weights):
                total += weighted_gradient(inputs, inputs.embeds * float(a), w)[1] * float(wt)
            return (total * inputs.embeds).sum(-1)
    else:
        raise SystemExit(f"unknown measurement {name}")
    rss0 = _rss_mb()
    if lm.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    peak = (torch.cuda.max_memory_allocated() / 2**20) if lm.device.type == "cuda" else _rss_mb() - rss0
    return {"name": f"{name}@{strategy}", "seconds": min(times), "peak_mb": peak, "n_prompt": n_prompt, "n_target": n_target}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--ig_steps", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--skip_ig_matrix", action="store_true", help="skip the slow full IG matrix")
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(run_one(args.one, args.device, args.ig_steps, args.repeats)))
        return
    names = ["loop:grad", "matrix:grad_norm", "matrix:grad_x_input", "matrix:grad_norm+grad_x_input",
             "matrix:grad_norm+grad_x_input@vmap", "matrix:grad_norm+grad_x_input@loop",
             "span:grad_norm", "span:grad_x_input", "span:integrated_gradients", "loop:ig_span"]
    if not args.skip_ig_matrix:
        names.append("matrix:integrated_gradients")
    results = {}
    for name in names:
        out = subprocess.run(
            [sys.executable, __file__, "--one", name, "--device", args.device, "--ig_steps", str(args.ig_steps),
             "--repeats", str(args.repeats if "ig" not in name else 1)],
            capture_output=True, text=True,
        )
        line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
        if not line:
            print(f"{name}: FAILED\n{out.stderr[-2000:]}")
            continue
        r = json.loads(line[0][7:])
        results[name] = r
        print(f"{name:34s} {r['seconds']:8.2f} s   peak +{r['peak_mb']:7.0f} MB", flush=True)
    any_r = next(iter(results.values()))
    print(f"\nprompt {any_r['n_prompt']} tokens, response {any_r['n_target']} tokens, device {args.device}, "
          f"IG steps {args.ig_steps}")
    base = results.get("loop:grad", {}).get("seconds")
    if base:
        for name in ("matrix:grad_norm", "matrix:grad_x_input", "matrix:grad_norm+grad_x_input",
                     "matrix:grad_norm+grad_x_input@vmap", "matrix:grad_norm+grad_x_input@loop"):
            if name in results:
                print(f"speed-up of {name} over the per-target loop: {base / results[name]['seconds']:.1f}x")
    if "loop:ig_span" in results and "span:integrated_gradients" in results:
        print(f"IG whole-response span, {args.ig_steps} steps batched vs. sequential: "
              f"{results['loop:ig_span']['seconds'] / results['span:integrated_gradients']['seconds']:.1f}x")
    if "span:grad_norm" in results and base:
        print(f"whole-response span (grad) costs {results['span:grad_norm']['seconds']:.2f} s "
              f"= {results['span:grad_norm']['seconds'] / base * any_r['n_target']:.1f} per-target loop iterations")


if __name__ == "__main__":
    main()
