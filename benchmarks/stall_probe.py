"""Where a forward batch's time goes inside a server (issue 43 §4, `bench_loo_word_slowdown.py --server --probe`).

Loaded into the server process by a `sitecustomize.py` that the benchmark writes into a temporary folder on the
server's PYTHONPATH (`install(path)`); nothing of the server imports it. For each forward batch of an ablation
(sequence_salience.ablation.prefix's DEBUG "batch:" line, logged on the job's own thread right after the forward)
it appends one JSON line to `path`:

* t: monotonic time of the line; forward_s: the batch's forward (the line's own figure); gap_s: the time since the
  previous line less forward_s (Python between chunks, progress, the scheduler's yield);
* threads: the batch's torch intra-op thread count; os_threads: the process's thread count;
* run_s / runq_s: the job thread's time on a CPU and waiting on the run queue since the previous line
  (/proc/thread-self/schedstat: a forward that waits for the kernel's scheduler shows as runq_s);
* proc_cpu_s: the whole process's CPU time since the previous line (utime + stime: torch's other intra-op threads);
* yield_s: time in ModelScheduler.yield_to_waiting / acquire on this thread since the previous line (lock wait);
* gc_s, gc_max_s, gc_n: garbage-collector pauses since the previous line (gc.callbacks, every thread);
* minflt / majflt: page faults since the previous line; rss_mb; procs_running: the machine's runnable tasks now.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import sys
import threading
import time

_state = {"gc_s": 0.0, "gc_max_s": 0.0, "gc_n": 0, "gc_start": None}
_waits: dict[int, float] = {}  # thread id -> seconds in the scheduler's acquire / yield since its last batch line


def _proc_stat() -> tuple[int, int, float, int]:
    """(minflt, majflt, utime + stime in s, threads) of this process."""
    with open("/proc/self/stat", encoding="ascii") as f:
        rest = f.read().rsplit(") ", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(rest[7]), int(rest[9]), (int(rest[11]) + int(rest[12])) / tick, int(rest[17])


def _schedstat() -> tuple[float, float]:
    """(seconds on a CPU, seconds waiting on the run queue) of the calling thread."""
    with open("/proc/thread-self/schedstat", encoding="ascii") as f:
        run, wait, _ = f.read().split()
    return int(run) / 1e9, int(wait) / 1e9


def _procs_running() -> int:
    with open("/proc/stat", encoding="ascii") as f:
        for line in f:
            if line.startswith("procs_running"):
                return int(line.split()[1])
    return -1


def _rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _gc(phase: str, _info: dict) -> None:
    if phase == "start":
        _state["gc_start"] = time.perf_counter()
    elif _state["gc_start"] is not None:
        pause = time.perf_counter() - _state["gc_start"]
        _state["gc_s"] += pause
        _state["gc_max_s"] = max(_state["gc_max_s"], pause)
        _state["gc_n"] += 1
        _state["gc_start"] = None


class _Batches(logging.Handler):
    def __init__(self, out):
        super().__init__(logging.DEBUG)
        self.out = out
        self.last: dict[int, tuple] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if "batch:" not in str(record.msg):
            return
        _stage, rows, start, width, threads, seconds = record.args
        now = time.monotonic()
        minflt, majflt, cpu, os_threads = _proc_stat()
        run, runq = _schedstat()
        me = threading.get_ident()
        prev = self.last.get(me)
        self.last[me] = (now, minflt, majflt, cpu, run, runq)
        line = {"t": round(now, 3), "rows": rows, "start": start, "width": width, "threads": threads,
                "forward_s": round(seconds, 3), "os_threads": os_threads, "rss_mb": round(_rss_mb(), 1),
                "procs_running": _procs_running(), "yield_s": round(_waits.pop(me, 0.0), 3),
                "gc_s": round(_state["gc_s"], 4), "gc_max_s": round(_state["gc_max_s"], 4), "gc_n": _state["gc_n"]}
        _state.update(gc_s=0.0, gc_max_s=0.0, gc_n=0)
        if prev is not None:
            line.update(gap_s=round(now - prev[0] - seconds, 3), minflt=minflt - prev[1], majflt=majflt - prev[2],
                        proc_cpu_s=round(cpu - prev[3], 2), run_s=round(run - prev[4], 3),
                        runq_s=round(runq - prev[5], 3))
        self.out.write(json.dumps(line) + "\n")


def _timed(fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            me = threading.get_ident()
            _waits[me] = _waits.get(me, 0.0) + time.perf_counter() - start

    return wrapper


def _patch_scheduler() -> None:
    """Times the scheduler's acquire and yield once lit_app.model.scheduler is imported (polled: nothing imports
    this module's names)."""
    while "lit_app.model.scheduler" not in sys.modules or not hasattr(sys.modules["lit_app.model.scheduler"],
                                                                       "ModelScheduler"):
        time.sleep(0.2)
    cls = sys.modules["lit_app.model.scheduler"].ModelScheduler
    cls.acquire = _timed(cls.acquire)
    cls.yield_to_waiting = _timed(cls.yield_to_waiting)


def install(path: str) -> None:
    out = open(path, "a", buffering=1, encoding="utf-8")
    log = logging.getLogger("sequence_salience.ablation.prefix")
    log.addHandler(_Batches(out))
    log.setLevel(logging.DEBUG)
    log.propagate = False
    gc.callbacks.append(_gc)
    threading.Thread(target=_patch_scheduler, daemon=True, name="stall-probe").start()
