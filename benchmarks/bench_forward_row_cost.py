"""What a matrix job's gradient rows cost against its own first forward, through the server's own code
(SharedLM.salience with a job, as a matrix job runs): the bound time_left.FORWARD_ROW_COST, which gives the job a time
left during that forward (issue 44).

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_forward_row_cost.py ROUNDS CONFIG...

CONFIG: MODEL:REPS, MODEL tiny (2 layers, width 32, float64; its context is 2,048 tokens: REPS up to 9) or default,
REPS copies of a 50-token paragraph as the prompt (default: 4 is 215 tokens, 16 is 767; tiny: 2 is 403, 8 is 1,609).
The configs run in turn, ROUNDS times (alternated, one process, one torch thread, a warm-up run of each model first).
One JSON line per run: the forward (from the method's announcement to the report after it), the rows (from there to
the last row), wall and CPU seconds, and the ratio per row, (rows / targets) / forward, against the same run's
forward; with the job's time left read at each layer of the forward (stderr: each (true rest, low, high)), how many
held the truth. docs/benchmarks.md "Session 42 (h2)".
"""
import json
import sys
import time

import torch

import sequence_salience as ss
from lit_app.model import progressive, shared_model
from benchmarks.bench_point_row_cost import PARA, tiny

TARGET = " They agreed to meet again next week to vote on it."


def run(shared, reps: int) -> dict:
    chat = shared.format_prompt({"prompt": PARA * reps})
    job = progressive.Job(group="g", kind="m", heartbeat_s=None)
    events, polls = [], []
    report, within = job.report, job.report_within

    def rep(*a, **k):
        events.append((time.perf_counter(), time.process_time(), *a[-2:]))
        report(*a, **k)

    def reading(*a, **k):
        within(*a, **k)
        if job.done == 0:
            st = job.status()
            polls.append((time.perf_counter(), k.get("ahead", False), st["eta_low_s"], st["eta_high_s"]))

    job.report, job.report_within = rep, reading
    with job.running():
        res = shared.salience(chat, TARGET, job=job)
    end = time.perf_counter()
    num_t = res.num_targets
    zero = [e for e in events if e[2] == 0 and e[3] == num_t]  # the announcement, then the report after the forward
    last = next(e for e in events if e[2] == num_t and e[3] == num_t)
    fw, fc = zero[1][0] - zero[0][0], zero[1][1] - zero[0][1]
    rw, rc = last[0] - zero[1][0], last[1] - zero[1][1]
    during = [(round(end - t, 1), lo, hi) for t, fwd, lo, hi in polls if t <= zero[1][0] and lo is not None]
    print("forward polls (true rest, low, high):", during, file=sys.stderr)
    return dict(tokens=res.n_prompt_tokens, targets=num_t,
                forward_wall=fw, forward_cpu=fc, rows_wall=rw, rows_cpu=rc,
                row_ratio_wall=rw / num_t / fw, row_ratio_cpu=rc / num_t / fc,
                forward_polls=len(during),
                truth_inside=sum(1 for left, lo, hi in during if lo - 0.05 <= left <= hi + 0.05))


if __name__ == "__main__":
    torch.set_num_threads(1)
    rounds, configs = int(sys.argv[1]), [(c.split(":")[0], int(c.split(":")[1])) for c in sys.argv[2:]]
    models = {}
    for which in dict.fromkeys(m for m, _ in configs):
        lm = tiny() if which == "tiny" else ss.load_model("default")
        models[which] = lm
        run(shared_model.SharedLM(lm, max_new_tokens=4, disk_cache=False), 1)  # warm-up
    for r in range(rounds):
        for which, reps in configs:
            # a fresh SharedLM each run: nothing cached, the job's forward runs
            shared = shared_model.SharedLM(models[which], max_new_tokens=4, disk_cache=False)
            with open("/proc/loadavg") as f:
                load = float(f.read().split()[0])
            out = run(shared, reps)
            out.update(round=r, model=which, reps=reps, load=load)
            print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in out.items()}), flush=True)
