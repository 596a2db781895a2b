"""What a796c18's layer recomputation costs in time: gradient passes with and without it, alternated in one process.

    .venv/bin/python benchmarks/bench_recompute.py [--repeats 5] [--threads 1]

Each gradient pass whose graph a backward needs runs its decoder layers under torch.utils.checkpoint
(methods/gradients.py `layers_recomputed`: one more forward per backward, 2-3x less memory). "without" replaces
that context by a plain one for the measurement (the gradients are the same, tests/unit/test_recomputed_layers.py);
the per-target matrices keep their cut at the output embedding either way. The passes, on the default model's shipped
rows (the chat template as the app formats it, the row's own target; datasets.shipped_rows()):

* highlight: the first highlight's pass (compute_span_result, grad_norm + grad_x_input of the whole target, 1 row);
* IG span: a click's integrated-gradients span (compute_span_salience, target tokens 0-4, IG_STEPS steps in one batch);
* matrix c=9 / c=3: a per-token gradient matrix (compute_salience, grad_norm) at 9 or 3 targets per backward.

Per repeat, each pass runs with and without, in alternating order; the figure is the median ratio of the paired runs
(with ÷ without) and the range. Prints a Markdown table; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import sequence_salience as ss  # noqa: E402
from lit_app.data import datasets  # noqa: E402
from sequence_salience.methods import gradients  # noqa: E402
from sequence_salience.salience import compute_span_result, compute_span_salience, prepare_pair  # noqa: E402

RECOMPUTED = gradients.layers_recomputed
IG_STEPS = 8


@contextlib.contextmanager
def _plain(_model):
    yield


def _passes(lm, rows: list[int]):
    shipped = datasets.shipped_rows()
    out = []
    for i in rows:
        ex = shipped[i]
        prompt = lm.format_prompt(ex["prompt"], system=ex.get("system"))
        target = ex["target"]
        pair = prepare_pair(lm, prompt, target)
        n = len(pair.prompt.ids) + len(pair.target_ids)
        out += [
            (f"highlight, row {i} (~{n} tokens)",
             lambda p=prompt, t=target: compute_span_result(lm, p, t, methods=("grad_norm", "grad_x_input"))),
            (f"IG span (targets 0-4, {IG_STEPS} steps), row {i}",
             lambda p=prompt, t=target: compute_span_salience(lm, p, t, "integrated_gradients", 0, 4,
                                                                  config=ss.SalienceConfig(ig_steps=IG_STEPS))),
            (f"matrix c=9, row {i}",
             lambda p=prompt, t=target: ss.compute_salience(lm, p, t, methods=("grad_norm",),
                                                            config=ss.SalienceConfig(target_chunk_size=9))),
            (f"matrix c=3, row {i}",
             lambda p=prompt, t=target: ss.compute_salience(lm, p, t, methods=("grad_norm",),
                                                            config=ss.SalienceConfig(target_chunk_size=3))),
        ]
    return out


def _timed(fn, recompute: bool) -> float:
    gradients.layers_recomputed = RECOMPUTED if recompute else _plain
    try:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t
    finally:
        gradients.layers_recomputed = RECOMPUTED


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rows", nargs="+", type=int, default=[2, 7], help="indices into shipped_rows()")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    lm = ss.load_model("default")
    passes = _passes(lm, args.rows)
    for _, fn in passes:  # warm-up, both ways
        _timed(fn, True)
        _timed(fn, False)
    runs = {name: [] for name, _ in passes}
    for rep in range(args.repeats):
        for name, fn in passes:
            order = (True, False) if rep % 2 == 0 else (False, True)
            t = {r: _timed(fn, r) for r in order}
            runs[name].append((t[True], t[False]))
    print("| pass | with recomputation (s) | without (s) | with ÷ without, median | range |")
    print("|---|---:|---:|---:|---:|")
    for name, pairs in runs.items():
        ratios = [a / b for a, b in pairs]
        print(f"| {name} | {statistics.median(a for a, _ in pairs):.3f} | {statistics.median(b for _, b in pairs):.3f} "
              f"| ×{statistics.median(ratios):.2f} | {min(ratios):.2f}-{max(ratios):.2f} |")
    print("raw:", runs)


if __name__ == "__main__":
    main()
