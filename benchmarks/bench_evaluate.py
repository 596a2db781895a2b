"""Rows per minute of `sequence-salience evaluate`: serial vs a local Ray instance with 2 CPU workers.

    python benchmarks/bench_evaluate.py [--lines 5,4,9,11] [--workers 2] [--model default] [--extra "..."]

Runs the command in a subprocess, as a user does, on the given lines of the shipped examples
(`lit_app.data.datasets.shipped_rows()`, numbered from 1: the case studies, then their variants;
default one per case), once serially and once with
`--ray --workers N`. Prints, for each: the command's wall time, its start-up (model load;
for Ray: starting Ray + every worker's model load), the rows phase and rows/minute over it,
the mean per-row worker time; then whether the per-row results are identical and whether a
serial rerun over the Ray run's folder resumes with nothing to do. Prints the machine's load
(the figures on a shared 2-core machine are contention-bound: expect no gain from 2 workers).
--serial-threads N adds a serial run with OMP_NUM_THREADS=N: Ray runs each 1-CPU worker with
one torch thread, and on an oversubscribed machine that alone changes the per-row time.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lit_app.data import datasets  # noqa: E402


def _load() -> str:
    with open("/proc/loadavg", encoding="ascii") as f:
        return " ".join(f.read().split()[:3])


def _run(batch: str, out: str, extra: list[str], threads: int | None = None) -> dict:
    cmd = [sys.executable, "-m", "sequence_salience.cli", "evaluate", "--batch", batch, "--out", out, *extra]
    env = {**os.environ, "PYTHONPATH": ROOT}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)  # torch's intra-op threads (Ray sets 1 per 1-CPU worker)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    took = re.search(r"(\d+) row\(s\) evaluated in ([\d.]+) s", proc.stderr)
    ray_ready = re.search(r"ready after [\d.]+ s \(([\d.]+) s since the start", proc.stderr)
    model_ready = re.search(r"Model ready after ([\d.]+) s", proc.stderr)
    rows = int(took.group(1)) if took else 0
    phase = float(took.group(2)) if took else 0.0
    startup = float(model_ready.group(1)) if model_ready else 0.0
    if ray_ready:  # the CLI's rows timer includes starting Ray and the workers
        startup = float(ray_ready.group(1))
        phase -= startup
    files = sorted(f for f in os.listdir(out) if f.endswith(".json") and f != "summary.json")
    per_row = [json.load(open(os.path.join(out, f), encoding="utf-8"))["meta"]["seconds"] for f in files]
    return {"wall": wall, "rows": rows, "startup": startup, "phase": phase,
            "rows_per_min": 60 * rows / phase if phase > 0 else float("nan"),
            "row_mean": sum(per_row) / max(len(per_row), 1), "stderr": proc.stderr}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # (Before the split into case studies and variants these were lines 1,5,8,11 of case_studies.jsonl.)
    parser.add_argument("--lines", default="5,4,9,11", help="rows of the shipped examples to evaluate (from 1)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", default="default")
    parser.add_argument("--serial-threads", type=int, default=0,
                        help="also run serially with OMP_NUM_THREADS=N (Ray gives each 1-CPU worker 1 thread)")
    parser.add_argument("--extra", default="", help="more evaluate flags, e.g. '--steps 5 --granularity word'")
    args = parser.parse_args()
    lines = [json.dumps(row) for row in datasets.shipped_rows()]
    wanted = [int(x) for x in args.lines.split(",")]
    tmp = tempfile.mkdtemp(prefix="bench_evaluate_")
    batch = os.path.join(tmp, "rows.jsonl")
    with open(batch, "w", encoding="utf-8") as f:
        f.write("\n".join(lines[i - 1] for i in wanted) + "\n")
    extra = ["--model", args.model, *shlex.split(args.extra)]
    print(f"{len(wanted)} shipped rows (lines {args.lines}), model {args.model}; load before: {_load()}")
    serial = _run(batch, os.path.join(tmp, "serial"), extra)
    print(f"load after serial: {_load()}")
    on_ray = _run(batch, os.path.join(tmp, "ray"), extra + ["--ray", "--workers", str(args.workers)])
    print(f"load after ray: {_load()}")
    runs = [("serial", serial), (f"ray x{args.workers}", on_ray)]
    if args.serial_threads:
        runs.append((f"serial {args.serial_threads}t", _run(batch, os.path.join(tmp, "serial_t"), extra,
                                                             args.serial_threads)))
        print(f"load after serial {args.serial_threads}t: {_load()}")
    for name, r in runs:
        print(f"{name:>9}: wall {r['wall']:.1f} s, start-up {r['startup']:.1f} s, rows phase {r['phase']:.1f} s "
              f"= {r['rows_per_min']:.2f} rows/min; mean worker time per row {r['row_mean']:.1f} s")
    print(f"ray/serial rows/min: {on_ray['rows_per_min'] / serial['rows_per_min']:.2f}x; "
          f"wall: {on_ray['wall'] / serial['wall']:.2f}x")
    same = all(
        json.load(open(os.path.join(tmp, "serial", f), encoding="utf-8"))["evaluation"]
        == json.load(open(os.path.join(tmp, "ray", f), encoding="utf-8"))["evaluation"]
        for f in os.listdir(os.path.join(tmp, "serial")) if f.endswith(".json") and f != "summary.json")
    print(f"per-row results identical serial vs ray: {same}")
    resume = _run(batch, os.path.join(tmp, "ray"), extra)
    print("serial rerun over the ray folder: " + ("nothing to do (resumed)" if f"0 to do, {len(wanted)} already done"
                                                  in resume["stderr"] else "REDID ROWS"))
    summary = json.load(open(os.path.join(tmp, "serial", "summary.json"), encoding="utf-8"))["summary"]
    for m, v in summary["verdicts"].items():
        gaps = ", ".join(f"{mode[:3]} vs {b} {s['mean_gap']:+.2f} [{s['ci'][0]:+.2f}, {s['ci'][1]:+.2f}]"
                         for mode in summary["modes"] for b, s in summary["gaps"][mode][m].items())
        print(f"  {m}: {v}; {gaps}")
    print(f"outputs in {tmp}")


if __name__ == "__main__":
    main()
