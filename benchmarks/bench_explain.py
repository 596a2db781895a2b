"""Figures for the explanation tests on the default model (docs/benchmarks.md, "Explanation tests").

    .venv/bin/python benchmarks/bench_explain.py [--examples N] [--ig_max_steps 64]

1. Time of a 10-step deletion curve (two methods + 3 random orders, sentence segments), an
   input reduction and a flip search on a shipped example, next to the time of the salience
   computation they start from (the baseline measured in the same run).
2. Deletion AOPC per method vs. the seeded random reference on the shipped examples.
3. IG auto-steps: completeness error by step count for the whole response of a shipped example.
Prints Markdown tables.

    .venv/bin/python benchmarks/bench_explain.py --first_result [--rows 3,1] [--full_timeout 900]

4. Time to the first (coarse) and the full faithfulness-curves result on the real server
   (`python -m lit_app.server`, default model), as the browser runs them: the row's response is
   generated first (the salience module has it when the user opens the tab), then one "curves"
   request with the module's defaults (word segments, 10 steps, grad_norm + grad_x_input, filler)
   runs while "status" is polled every 0.25 s; the first result is the first status that carries
   the coarse `partial`. Rows of datasets.shipped_rows() (3: the simple question, 1: chain of
   thought). Prints `uptime`'s load next to each figure; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sequence_salience as ss  # noqa: E402
from lit_app.data import datasets  # noqa: E402
from sequence_salience import explain as ex  # noqa: E402

METHODS = ("grad_norm", "grad_x_input", "smooth_grad")


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def load_examples(lm, indices):
    rows = datasets.shipped_rows()
    out = []
    for r in (rows[i] for i in indices):
        chat = lm.format_prompt(r["prompt"], system=r.get("system") or None)
        target = r.get("target") or lm.generate(chat, ss.GenerationConfig(max_new_tokens=32))
        out.append((r["case"], chat, target))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    # (Before the split into case studies and variants these were rows 0,4,7,10 of case_studies.jsonl.)
    p.add_argument("--examples", default="4,3,8,10",
                   help="rows of datasets.shipped_rows(): the case studies, then their variants (comma-separated)")
    p.add_argument("--smooth_grad_samples", type=int, default=4)
    p.add_argument("--ig_max_steps", type=int, default=64)
    p.add_argument("--skip_timings", action="store_true")
    p.add_argument("--first_result", action="store_true", help="only section 4 (see the module docstring)")
    p.add_argument("--rows", default="3,1", help="section 4: rows of datasets.shipped_rows()")
    p.add_argument("--full_timeout", type=float, default=900.0, help="section 4: cancel the full run after this")
    args = p.parse_args()
    if args.first_result:
        first_result([int(i) for i in args.rows.split(",")], args.full_timeout)
        return
    lm = ss.load_model("default")
    examples = load_examples(lm, [int(i) for i in args.examples.split(",")])
    sal_config = ss.SalienceConfig(smooth_grad_samples=args.smooth_grad_samples)

    # 1. Timings on the first shipped example (few-shot classification, target " Negative").
    case, chat, target = examples[0]
    if not args.skip_timings:
        timings(lm, case, chat, target)

    # 2. AOPC per method vs random on the shipped examples.
    print(f"\n## Deletion AOPC (nats, sentence segments, filler ' ', 10 steps, 3 random orders; "
          f"smooth_grad with {args.smooth_grad_samples} samples)\n")
    print("| example | sentences | " + " | ".join(METHODS) + " | random |")
    print("|---|---:|" + "---:|" * (len(METHODS) + 1))
    gaps = {m: [] for m in METHODS}
    for case, chat, target in examples:
        user = tuple((s, e) for s, e, r in chat.role_spans if r in ("user", "system"))
        try:
            rep = ex.faithfulness_curves(lm, ex.CurvesRequest(
                chat, target, METHODS, salience_config=sal_config,
                config=ex.FaithfulnessConfig(granularity="sentence", steps=10,
                                             modes=("deletion",), n_random=3, regions=user)))
        except ss.SalienceError as e:
            print(f"| {case} | - | {e} |")
            continue
        for m in METHODS:
            gaps[m].append(rep.gap(m))
        cells = " | ".join(f"{rep.aopc(m):.2f} ({rep.gap(m):+.2f})" for m in METHODS)
        print(f"| {case} | {len(rep.segments)} | {cells} | {rep.aopc('random'):.2f} |", flush=True)
    print("| **mean gap to random** | | " + " | ".join(f"**{np.mean(gaps[m]):+.2f}**" for m in METHODS) + " | |")

    # 3. IG auto-steps.
    case, chat, target = examples[-1]
    q, t_ig = timed(lambda: ex.ig_auto_steps(lm, chat, target, tolerance=0.05, start_steps=8,
                                             max_steps=args.ig_max_steps))
    print(f"\n## IG auto-steps on {case!r} (whole response, zero baseline, Gauss-Legendre; {t_ig:.0f} s)\n")
    print("| steps | completeness error (nats) | relative error | seconds |\n|---:|---:|---:|---:|")
    for s in q.tried:
        print(f"| {s.steps} | {s.error:+.3f} | {s.relative_error:.1%} | {s.seconds:.1f} |")
    print(f"\nstopped by: {q.stopped_by} (tolerance 5 %, cap {args.ig_max_steps}); "
          f"F(x) - F(x') = {q.delta:.3f}")


def timings(lm, case, chat, target) -> None:
    user = [(s, e) for s, e, r in chat.role_spans if r == "user"]
    result, t_sal = timed(lambda: ss.compute_salience(lm, chat, target, methods=METHODS[:2]))
    cfg = ex.FaithfulnessConfig(granularity="sentence", steps=10, modes=("deletion",), n_random=3)
    rep, t_curve = timed(lambda: ex.faithfulness_curves(lm, ex.CurvesRequest(
        chat, target, METHODS[:2], result=result, config=cfg)))
    red, t_red = timed(lambda: ex.reduce_prompt(
        lm, chat, target, result=result, config=ex.ReductionConfig(
            granularity="sentence", criterion="logprob", tolerance=1.0, regions=tuple(user), max_seconds=None)))
    flips, t_flip = timed(lambda: ex.token_flips(lm, chat, target, top_k=5, n_verify=32, regions=user))
    print(f"\n## Timings on {case!r} ({result.n_prompt_tokens} prompt tokens, target {target!r})\n")
    print("| step | seconds | work |\n|---|---:|---|")
    print(f"| salience (grad_norm + grad_x_input, full matrix; baseline) | {t_sal:.1f} | 1 forward + backward |")
    print(f"| 10-step deletion curve, 2 methods + 3 random orders | {t_curve:.1f} | "
          f"{rep.n_scored} distinct edited prompts, {len(rep.segments)} sentences |")
    print(f"| input reduction (sentences, log p within 1 nat) | {t_red:.1f} | {red.n_checks} checks, "
          f"removed {len(red.removed)}/{len(red.segments)} |")
    print(f"| flip search (rank all word swaps, verify 32) | {t_flip:.1f} | {flips.n_positions} positions x "
          f"{flips.n_vocabulary} word tokens; best delta {flips.flips[0].delta:+.2f} "
          f"({flips.flips[0].old_text!r} -> {flips.flips[0].new_text!r}) |", flush=True)


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used: the work done, whatever else loads the machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def first_result(rows: list[int], full_timeout: float) -> None:
    import json
    import tempfile

    from lit_app.wrappers import explain as lit_explain
    from lit_app.schema import fields
    from tests.server_process import ServerProcess

    model = "smollm2"
    gen, _, _ = fields.model_group_names(model)
    explain_model = lit_explain.explain_model_name(model)

    def preds(server, name, data):
        status, _, body = server.post_json(f"/get_preds?model={name}", {"inputs": [{"id": "r", "data": data}]})
        assert status == 200, body[:500]
        return json.loads(body)[0]

    print("\n## Time to the first (coarse) and the full curves result (real server, word segments, 10 steps, "
          "grad_norm + grad_x_input)\n")
    print("| row | segments | first result (coarse): wall / server CPU | full result: wall / server CPU | stages seen "
          "| load at start / end |")
    print("|---|---:|---:|---:|---|---|")
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(["--host", "127.0.0.1"], Path(tmp)) as server:
        for i in rows:
            r = datasets.shipped_rows()[i]
            data = {fields.PROMPT: r["prompt"], fields.SYSTEM: r.get("system") or "", fields.TARGET: r.get("target") or ""}
            if not data[fields.TARGET]:  # the response the salience module generated before the tab is opened
                data[fields.TARGET] = preds(server, gen, data)["response"]
            request = {**data, lit_explain.ACTION: "curves", lit_explain.GRANULARITY: "word", lit_explain.STEPS: 10,
                       lit_explain.METHODS: "grad_norm,grad_x_input", lit_explain.REMOVAL: "filler"}
            load0 = load()
            pid = server.proc.pid
            c0 = cpu_s(pid)
            t0 = time.perf_counter()
            conn = server.send_json(f"/get_preds?model={explain_model}", {"inputs": [{"id": "r", "data": request}]},
                                    timeout=full_timeout + 60)
            first = None
            stages: list[str] = []
            n_segments = "?"
            while True:
                job = preds(server, explain_model, {**data, lit_explain.ACTION: "status"})[lit_explain.EXPLAIN]["job"]
                now = time.perf_counter() - t0
                if job is None and now > 2:
                    break
                if job is not None:
                    if not stages or stages[-1] != job["stage"]:
                        stages.append(job["stage"])
                    if first is None and "partial" in job:
                        first, first_cpu = now, cpu_s(pid) - c0
                        n_segments = job["partial"]["n_segments"]
                if now > full_timeout:
                    preds(server, explain_model, {**data, lit_explain.ACTION: "cancel"})
                    break
                time.sleep(0.25)
            res = conn.getresponse()
            out = json.loads(res.read().decode())[0][lit_explain.EXPLAIN]
            conn.close()
            full, full_cpu = time.perf_counter() - t0, cpu_s(pid) - c0
            full_s = (f"cancelled after {full:.1f} s" if out.get("cancelled") else f"{full:.1f} s") + f" / {full_cpu:.1f} s"
            first_s = "none" if first is None else f"{first:.1f} s / {first_cpu:.1f} s"
            print(f"| {i}: {r['case']} | {n_segments} | {first_s} | {full_s} | {' → '.join(stages)} | "
                  f"{load0} / {load()} |", flush=True)


if __name__ == "__main__":
    main()
