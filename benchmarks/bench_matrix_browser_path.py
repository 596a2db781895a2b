"""Per-token matrices of the shipped chain-of-thought row: in-process vs. through the real server as the
browser asks for them (issue 35, point 5).

    python benchmarks/bench_matrix_browser_path.py [--load 0 2] [--poll_ms 700] [--reps 1]

For each `--load` value (busy processes this script starts itself, each a pure-Python busy loop, stopped
afterwards; 0 = the machine as it is):

* server: `python -m lit_app.server` (tests/server_process.py), the chain-of-thought row selected as the
  page does: the first highlight (`detail="span"`, generates the response and starts the "grad" job),
  then `detail="poll"` every `--poll_ms` (the page's POLL_MS) until the matrices come. Prints the time
  from the first highlight's answer to the matrices, and the job's own time from the server's log;
* in-process: `ss.compute_salience(lm, chat, response)` on the same response (the default methods,
  unsliced), the model loaded in this process while no server runs.

Prints both times, their ratio (goal: <= 2, issue 35) and `uptime`'s load before each. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import sequence_salience as ss  # noqa: E402
from lit_app import datasets, fields  # noqa: E402
from tests.server_process import ServerProcess  # noqa: E402

CASE = "chain-of-thought arithmetic"
SAL = fields.model_group_names("smollm2")[1]


def _busy() -> None:
    while True:
        pass


def _row() -> dict:
    row = next(r for r in datasets.shipped_rows() if r["case"] == CASE and not r.get("target"))
    return {"prompt": row["prompt"], "system": row.get("system") or "", "target": ""}


def _post(server: ServerProcess, data: dict, n: int) -> dict:
    body = json.dumps({"inputs": [{"id": f"b{n}", "data": data}]}).encode()
    req = urllib.request.Request(f"{server.base_url.rstrip('/')}/get_preds?model={SAL}", data=body,
                                 headers={**server.headers, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())[0]


def through_server(poll_s: float, workdir: str) -> tuple[str, float, float, float | None, int]:
    """(response, first highlight s, matrices s after it, the job's own s from the log, polls)."""
    data = _row()
    with ServerProcess([], workdir) as server:
        t = time.perf_counter()
        out = _post(server, {**data, "detail": "span"}, 0)
        first = time.perf_counter() - t
        response = out[fields.RESPONSE]
        t, polls = time.perf_counter(), 0
        while True:
            time.sleep(poll_s)
            polls += 1
            out = _post(server, {**data, "detail": "poll"}, polls)
            state = out[fields.SALIENCE]["detail"]["state"]
            if state not in ("queued", "running"):
                break
        matrices = time.perf_counter() - t
        if state != "done":
            raise RuntimeError(f"the grad job ended {state}: {out[fields.SALIENCE]['detail']}\n{server.log_tail()}")
        m = re.findall(r"grad job done in ([0-9.]+) s", server.log_path.read_text())
        job_s = float(m[-1]) if m else None
    return response, first, matrices, job_s, polls


def in_process(response: str) -> float:
    lm = ss.load_model("default")
    data = _row()
    chat = lm.format_prompt(data["prompt"], system=data["system"] or None)
    ss.compute_salience(lm, "Hi", " there")  # warm-up
    t = time.perf_counter()
    result = ss.compute_salience(lm, chat, response)
    seconds = time.perf_counter() - t
    print(f"  in-process: {result.num_targets} targets x {len(result.tokens)} tokens", flush=True)
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--load", type=int, nargs="+", default=[0, 2], help="busy processes started during each run")
    p.add_argument("--poll_ms", type=int, default=700, help="the page's poll interval (controller.ts POLL_MS)")
    args = p.parse_args()
    rows = []
    for load in args.load:
        procs = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(load)]
        for q in procs:
            q.start()
        try:
            time.sleep(2 if load else 0)
            avg = ", ".join(f"{x:.2f}" for x in os.getloadavg())
            print(f"--- {load} busy processes; load before: {avg}", flush=True)
            with tempfile.TemporaryDirectory() as tmp:
                response, first, matrices, job_s, polls = through_server(args.poll_ms / 1000, tmp)
            print(f"  server: first highlight {first:.1f} s, matrices {matrices:.1f} s after it "
                  f"(job {job_s} s, {polls} polls)", flush=True)
            inproc = in_process(response)
            print(f"  in-process: {inproc:.1f} s; ratio server/in-process {matrices / inproc:.2f}", flush=True)
            rows.append((load, avg, first, matrices, job_s, inproc))
        finally:
            for q in procs:
                q.kill()
    print("\n| busy processes | load before | first highlight s | matrices (server, polled) s | job s (log) "
          "| in-process s | ratio |")
    print("|---|---|---|---|---|---|---|")
    for load, avg, first, matrices, job_s, inproc in rows:
        print(f"| {load} | {avg} | {first:.1f} | {matrices:.1f} | {job_s} | {inproc:.1f} | {matrices / inproc:.2f} |")


if __name__ == "__main__":
    main()
