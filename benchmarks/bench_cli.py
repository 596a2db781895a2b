"""Wall time of `sequence-salience explain` on a shipped prompt: the whole answer directly vs per-token matrices.

    python benchmarks/bench_cli.py [--match "arrive?"] [--repeats 1] [--skip_full]

Runs the command in a subprocess as a user does (model load, greedy generation, salience,
terminal output), on the shipped prompt whose text contains --match, once per mode:
  span       `explain --prompt ...` (the default: one forward + backward for the whole answer)
  per-token  `explain --prompt ... --per-token` (every answer token's row: the cost before the
             default changed, when every explain computed the matrices)
Prints the wall time, the CPU time of the command (user + system, less sensitive to other
load on the machine), the generation and salience times the command reports, and the
per-token / span ratios measured in this run, with the machine's load (uptime). Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load() -> str:
    with open("/proc/loadavg", encoding="ascii") as f:
        return " ".join(f.read().split()[:3])


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(prompt: str, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "sequence_salience.cli", "explain", "--prompt", prompt, "--top", "5", *extra]
    env = {**os.environ, "PYTHONPATH": ROOT}
    start, cpu = time.perf_counter(), _cpu()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600, check=False)
    wall, cpu = time.perf_counter() - start, _cpu() - cpu
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:5])} ... exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    m = re.search(r"Explained (.*?) in ([\d.]+) s \(generation: ([\d.]+) s\)", proc.stderr)
    if not m:
        raise SystemExit(f"no timing line in the command's output:\n{proc.stderr[-2000:]}")
    return {"wall": wall, "cpu": cpu, "salience": float(m.group(2)), "generation": float(m.group(3)),
            "what": m.group(1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--match", default="arrive?", help="text of the shipped prompt to use")
    parser.add_argument("--repeats", type=int, default=1, help="runs per mode (the best is reported)")
    parser.add_argument("--skip_full", action="store_true", help="run only the span mode")
    args = parser.parse_args()
    with open(os.path.join(ROOT, "lit_app/data/case_studies.jsonl"), encoding="utf-8") as f:
        case = next(json.loads(line) for line in f if args.match in line)
    print(f"case: {case['case']!r}, prompt {len(case['prompt'])} chars, greedy answer (up to 64 tokens), "
          f"method grad_x_input, CPU; load before: {_load()}")
    modes = [("span", [])] + ([] if args.skip_full else [("per-token", ["--per-token"])])
    best = {}
    for name, extra in modes:
        r = best[name] = min((_run(case["prompt"], extra) for _ in range(args.repeats)), key=lambda x: x["wall"])
        print(f"{name:>9}: wall {r['wall']:6.1f} s  CPU {r['cpu']:6.1f} s  generation {r['generation']:5.1f} s  "
              f"salience {r['salience']:6.1f} s  ({r['what']}; load now {_load()})")
    if "per-token" in best:
        full, span = best["per-token"], best["span"]
        print("per-token / span: " + ", ".join(f"{k} {full[k] / span[k]:.1f}x" for k in ("wall", "cpu", "salience")))


if __name__ == "__main__":
    main()
