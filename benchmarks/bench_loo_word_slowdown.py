"""Leave one word out on a shipped row, batch by batch: where does the time per forward go? (issue 43 §4)

    python benchmarks/bench_loo_word_slowdown.py [--case chain] [--burn 1] [--server] [--select] [--probe]

The issue: in the browser, leave one word out slowed from 0.8 s to ~27 s per forward after word 68 at a
steady load. This runs `ablation.segment_salience(..., "leave_one_out", granularity="word")` on a shipped
row (lit_app/data/case_studies.jsonl: "chain" = the chain-of-thought row with its greedy response of up to
192 tokens, "constitutional" = the constitutional row with its shipped target) with the server's slices
(`SliceSizer(0.25)`), and prints every forward batch: rows, the first recomputed token (the batch's shared
prefix), positions recomputed per row, seconds, seconds per row, the process's RSS and the machine's load.

In process, the run's progress reports (with their known cost, the positions each batch recomputes) are then
replayed through lit_app/model/time_left.py polled every 0.5 s, from rows only and with the cost: the share of polls
whose true time left lies in the range (issue 43, docs/benchmarks.md "Session 34 (h6)").
--threads N: torch's intra-op threads (default: torch's own choice, the cores).
--compare_threads R: in one process (one model), R rounds of the first --batches forward batches with
  2 torch threads, with 1, and with the ThreadChooser (measured: sequence_salience/threads.py),
  alternating (a load that drifts touches each alike); prints s/row per round.
--burn N: N busy processes (`python -c "while 1: pass"`, nice 0) load the CPU meanwhile (stopped at the end).
--server: the same job through the real server instead (`python -m lit_app.server`, tests/server_process.py):
  one client (its own client id) polls the segment request every 0.3 s, as the page does, and every poll's
  `done`, `total`, `waiting` and the time since the last change of `done` are printed; with --select the client
  first selects the row as the browser does (the first-highlight span request, which starts that client's
  per-token gradient job beside the segment job). --probe: the server also writes one line per forward batch
  (benchmarks/stall_probe.py: forward, the time between batches, the job thread's CPU and run-queue seconds,
  thread counts, GC pauses, page faults, RSS, lock waits), printed at the end; --pyspy PATH: `py-spy dump` of the
  server's threads whenever `done` has not changed for --stall_s seconds (at most 6 dumps; py-spy is not a
  dependency: install it anywhere, e.g. a temporary venv).
Prints what it measured; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.timing import burners  # noqa: E402

CASES = {"chain": "chain-of-thought arithmetic", "constitutional": "constitutional principles"}


def _row(case: str) -> dict:
    for line in (ROOT / "lit_app" / "data" / "case_studies.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["case"] == CASES[case]:
            return row
    raise SystemExit(f"no row {CASES[case]!r} in lit_app/data/case_studies.jsonl")


def _rss_mb(pid: int | None = None) -> float:
    with open(f"/proc/{pid or 'self'}/status", encoding="ascii") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) / 1024


def _load() -> float:
    return os.getloadavg()[0]


class _Batches(logging.Handler):
    """Collects sequence_salience.ablation.prefix's per-batch DEBUG lines with the time and RSS."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.rows: list[tuple] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "batch:" in record.msg:
            # (stage, rows, start, positions, ["packed" | "each",] threads, seconds): the kind since packed batches
            _stage, rows, start, width, *_kind, threads, seconds = record.args
            self.rows.append((rows, start, width, seconds, _rss_mb(), _load(), threads))


def in_process(case: str, threads: int) -> None:
    import torch

    import sequence_salience as ss
    from sequence_salience.ablation import costed, segment_salience
    from sequence_salience.slices import SliceSizer

    if threads:
        torch.set_num_threads(threads)
    row = _row(case)
    lm = ss.load_model("default")
    chat = lm.format_prompt(row["prompt"], system=row.get("system") or None)
    target = row.get("target") or lm.generate(chat, ss.GenerationConfig(
        max_new_tokens=int(row.get("max_new_tokens", 64)))).text
    n_prompt = len(lm.encode_prompt(chat).ids) if hasattr(lm, "encode_prompt") else -1
    print(f"case {row['case']!r}: {n_prompt} prompt tokens, target {len(target)} characters;"
          f" torch threads {torch.get_num_threads()}, load {_load():.2f}", flush=True)
    handler = _Batches()
    log = logging.getLogger("sequence_salience.ablation.prefix")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    marks: list[tuple[float, int, int, tuple[int, int]]] = []  # (seconds, done, total, (cost done, cost total))
    t0 = time.perf_counter()
    seg = segment_salience(lm, chat, target, "leave_one_out", granularity="word", slice_s=SliceSizer(0.25),
                           progress=costed(lambda _s, done, total, cost: marks.append(
                               (time.perf_counter() - t0, done, total, (cost.done, cost.total)))))
    total_s = time.perf_counter() - t0
    print(f"{len(seg.segments)} words, {seg.stats.rows} rows, {seg.stats.computed} of {seg.stats.tokens} tokens"
          f" computed, {total_s:.1f} s")
    print(" batch  done/total  rows  start  width  threads  seconds  s/row   RSS MB  load")
    for i, ((rows, start, width, seconds, rss, load, threads), (_, done, total, _c)) in enumerate(zip(handler.rows,
                                                                                                      marks)):
        print(f" {i:5d}  {done:4d}/{total:<4d}  {rows:4d}  {start:5d}  {width:5d}  {threads:7d}  {seconds:7.3f}"
              f"  {seconds / rows:5.3f}  {rss:7.0f}  {load:4.1f}")
    replay_time_left(marks)


def replay_time_left(marks: list[tuple[float, int, int, tuple[int, int]]], poll_s: float = 0.5) -> None:
    """The run's progress reports replayed through lit_app/model/time_left.py, polled every `poll_s` seconds, as
    rows only (before issue 43's cost channel) and with their known cost (after): in how many polls with rows
    outstanding the true time left lies in the range, above its high end, below its low end."""
    from lit_app.model.time_left import TimeLeft

    end = marks[-1][0]
    for with_cost in (False, True):
        now = [0.0]
        estimate = TimeLeft(lambda: now[0])
        counts, worst, t, done = {"in": 0, "above": 0, "below": 0}, 0.0, 0.0, 0
        missed: list[str] = []  # "t s at done/total: truth vs low-high" of the polls outside the range
        for at, new_done, total, cost in marks:
            while t < at:
                now[0] = t
                got = estimate.range() if done < total else None
                if got is not None:
                    left = end - t
                    where = "above" if left > got.high + 0.05 else "below" if left < got.low - 0.05 else "in"
                    counts[where] += 1
                    if where != "in":
                        missed.append(f"{t:.1f} s at {done}/{total}: {left:.1f} vs {got.low:.1f}-{got.high:.1f}")
                    worst = max(worst, left / max(got.high, 1e-9))
                t += poll_s
            now[0] = at
            estimate.report(new_done, total, cost=cost if with_cost else None)
            done = new_done
        polls = sum(counts.values())
        how = "with the rows' cost" if with_cost else "from rows only"
        print(f"time left replayed {how}: {polls} polls,"
              f" truth in the range {counts['in']} ({100 * counts['in'] / max(polls, 1):.0f} %), above the high end"
              f" {counts['above']}, below the low end {counts['below']}; truth / high end at most {worst:.2f}")
        if missed:
            print("  outside: " + "; ".join(missed[:12]) + (" ..." if len(missed) > 12 else ""))


def compare_threads(case: str, rounds: int, batches: int) -> None:
    import statistics

    import torch

    import sequence_salience as ss
    from sequence_salience.ablation import segment_salience
    from sequence_salience.threads import ThreadChooser
    from sequence_salience.slices import SliceSizer

    row = _row(case)
    lm = ss.load_model("default")
    chat = lm.format_prompt(row["prompt"], system=row.get("system") or None)
    target = row.get("target") or lm.generate(chat, ss.GenerationConfig(
        max_new_tokens=int(row.get("max_new_tokens", 64)))).text
    handler = _Batches()
    log = logging.getLogger("sequence_salience.ablation.prefix")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    settings = {"2 threads": lambda: ThreadChooser(most=2, measure=False),
                "1 thread": lambda: ThreadChooser(most=1), "measured": lambda: ThreadChooser(most=2)}
    per_row: dict[str, list[float]] = {name: [] for name in settings}
    print(f"case {row['case']!r}: the first {batches} forward batches of leave one word out, {rounds} rounds")
    for r in range(rounds):
        for name, chooser in settings.items():
            torch.set_num_threads(2)
            handler.rows.clear()
            t0 = time.perf_counter()
            try:
                segment_salience(lm, chat, target, "leave_one_out", granularity="word", slice_s=SliceSizer(0.25),
                                 cancel=lambda: len(handler.rows) >= batches, threads=chooser())
            except ss.ComputationCancelled:
                pass
            rows = sum(b[0] for b in handler.rows)
            secs = sum(b[3] for b in handler.rows)
            per_row[name].append(secs / rows)
            print(f"  round {r}: {name}: {rows} rows in {secs:.1f} s of forwards ({secs / rows:.3f} s/row;"
                  f" wall {time.perf_counter() - t0:.1f} s), load {_load():.1f}", flush=True)
    for name, values in per_row.items():
        print(f"{name}: median {statistics.median(values):.3f} s/row over {len(values)} rounds")


def _probe_env(tmp: Path, probe: Path) -> dict[str, str]:
    """The server's environment with benchmarks/stall_probe.py loaded at its start (a sitecustomize.py in `tmp`)."""
    site = tmp / "probe_site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                                           f"from benchmarks import stall_probe\nstall_probe.install({str(probe)!r})\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _print_probe(probe: Path) -> None:
    """The probe's lines (benchmarks/stall_probe.py), one per forward batch."""
    print("\n  unit  thr  forward  gap  run   runq  proc_cpu  yield  gc(n, max)  minflt majflt  RSS  running  os_thr")
    for i, line in enumerate(json.loads(x) for x in probe.read_text().splitlines()):
        print(f"  {i:4d}  {line['threads']:3d}  {line['forward_s']:7.3f}  {line.get('gap_s', 0):5.2f}"
              f"  {line.get('run_s', 0):5.2f}  {line.get('runq_s', 0):5.2f}  {line.get('proc_cpu_s', 0):6.2f}"
              f"  {line['yield_s']:5.2f}  {line['gc_s']:5.3f} ({line['gc_n']}, {line['gc_max_s']:.3f})"
              f"  {line.get('minflt', 0):6d} {line.get('majflt', 0):4d}  {line['rss_mb']:6.0f}  {line['procs_running']:3d}"
              f"  {line['os_threads']:3d}")


def through_server(case: str, select: bool, probe: bool = False, pyspy: str = "", stall_s: float = 3.0) -> None:
    import subprocess

    from lit_app.schema import fields, method_registry
    from sequence_salience.methods import leave_one_out
    from tests.server_process import ServerProcess, client_header

    _, sal, _ = fields.model_group_names("smollm2")
    row = _row(case)
    data = {fields.PROMPT: row["prompt"], fields.SYSTEM: row.get("system", ""), fields.TARGET: row.get("target", "")}
    if row.get("max_new_tokens"):
        data[fields.MAX_NEW_TOKENS] = row["max_new_tokens"]
    headers = client_header("bench-loo")
    with tempfile.TemporaryDirectory() as tmp:
        probe_path = Path(tmp) / "probe.jsonl"
        server = ServerProcess([], Path(tmp), env=_probe_env(Path(tmp), probe_path) if probe else None)
        dumps, last_dump = 0, 0.0
        try:
            def post(extra: dict) -> dict:
                status, _, body = server.post_json(f"/get_preds?model={sal}",
                                                   {"inputs": [{"id": "r", "data": {**data, **extra}}]}, headers)
                if status != 200:
                    raise SystemExit(f"HTTP {status}: {body[:300]}")
                return json.loads(body)[0]

            if select:
                t = time.perf_counter()
                post({fields.DETAIL: "span"})
                print(f"first highlight (span request; starts the client's gradient job): {time.perf_counter() - t:.1f} s")
            seg = {fields.DETAIL: method_registry.SEGMENT_DETAIL, fields.SEGMENT_METHOD: leave_one_out.NAME,
                   fields.GRANULARITY: "word"}
            t0 = time.perf_counter()
            last_done, last_change = -1, t0
            print("    t s  done/total  waiting  s since the last change  server RSS MB  load")
            while True:
                detail = post(seg)[fields.SALIENCE]["detail"]
                now = time.perf_counter()
                if detail["done"] != last_done or detail["state"] != "running":
                    print(f"  {now - t0:6.1f}  {detail['done']:4d}/{detail['total']:<4d}  {str(detail.get('waiting')):7s}"
                          f"  {now - last_change:6.1f}  {_rss_mb(server.proc.pid):7.0f}  {_load():4.1f}  {detail['state']}",
                          flush=True)
                    last_done, last_change = detail["done"], now
                if detail["state"] not in ("queued", "running"):
                    break
                if pyspy and now - max(last_change, last_dump) > stall_s and dumps < 6:  # a stall: where is every thread now?
                    dumps += 1
                    out = subprocess.run([pyspy, "dump", "--pid", str(server.proc.pid)], capture_output=True,
                                         text=True, timeout=60)
                    print(f"--- py-spy dump {dumps} at {time.perf_counter() - t0:.1f} s, {now - last_change:.1f} s"
                          f" after the last change of done ({detail['done']}):\n{out.stdout}{out.stderr}---", flush=True)
                    last_dump = time.perf_counter()  # at most one dump per stall_s
                time.sleep(0.3)
            print(f"done in {time.perf_counter() - t0:.1f} s")
            print("\n".join(line for line in server.log_path.read_text().splitlines() if "leave_one_out" in line)[-3000:])
            if probe:
                _print_probe(probe_path)
        finally:
            server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", choices=sorted(CASES), default="chain")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (in process; 0: torch's default)")
    ap.add_argument("--compare_threads", type=int, default=0, help="rounds of 1 vs 2 torch threads")
    ap.add_argument("--batches", type=int, default=20, help="--compare_threads: forward batches per run")
    ap.add_argument("--burn", type=int, default=0, help="busy processes loading the CPU meanwhile")
    ap.add_argument("--server", action="store_true", help="through the real server's segment job")
    ap.add_argument("--select", action="store_true", help="--server: select the row first, as the browser does")
    ap.add_argument("--probe", action="store_true", help="--server: per-batch probe lines (benchmarks/stall_probe.py)")
    ap.add_argument("--pyspy", default="", help="--server: a py-spy binary; dumps the server's threads at each stall")
    ap.add_argument("--stall_s", type=float, default=3.0, help="--pyspy: seconds without progress that are a stall")
    args = ap.parse_args()
    burning = burners(args.burn)
    try:
        print(f"load average {_load():.2f}, {args.burn} busy process(es)")
        if args.compare_threads:
            compare_threads(args.case, args.compare_threads, args.batches)
        elif args.server:
            through_server(args.case, args.select, args.probe, args.pyspy, args.stall_s)
        else:
            in_process(args.case, args.threads)
    finally:
        for p in burning:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
