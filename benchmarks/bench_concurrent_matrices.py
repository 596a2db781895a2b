"""Peak memory and time of per-token matrix jobs run by several clients at once vs one alone (issue 43).

    python benchmarks/bench_concurrent_matrices.py [--jobs 4] [--tokens 127] [--rounds 2] [--ig_steps 0]

In one process, as the server runs them: the default model in a `SharedLM` (malloc arenas capped, startup
objects frozen, freed memory given back each time the model is let go: lit_app/memory.py), every matrix of
a prompt of about `--tokens` tokens with a 9-token answer (`SharedLM.salience`, the background work of a
matrix job: gradient norm and gradient x input, plus IG's per-token matrices with `--ig_steps N`), each job
on a thread of its own client (`clients.acting_as`), so the scheduler alternates their slices as it does
for several pages. Per round, each phase after the cached results are dropped and the memory given back:

* alone: one job; its seconds and the RSS peak above the idle RSS;
* together: `--jobs` jobs at once, on distinct prompts; the seconds until all are done, each job's
  seconds, and the RSS peak above the idle RSS.

The peak is the kernel's high-water mark (VmHWM, reset per phase through /proc/self/clear_refs), so a
short spike between two samples is not missed. Prints the figures of each round; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import sequence_salience as ss  # noqa: E402
from lit_app import memory  # noqa: E402
from lit_app.edge import clients  # noqa: E402
from lit_app.model.shared_model import SharedLM  # noqa: E402
from lit_app.schema import method_registry  # noqa: E402

ANSWER = " The library opens at nine am."  # 9 tokens on SmolLM2's tokenizer


def _status_mb(key: str) -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        return int(re.search(key + r":\s+(\d+) kB", f.read()).group(1)) / 1024


def _reset_peak() -> None:
    """VmHWM back to the current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")


def _idle(shared: SharedLM) -> float:
    """Drops the cached results, gives the freed memory back; the RSS then (MB)."""
    shared.forget_salience()
    time.sleep(0.5)
    memory.release_memory()
    time.sleep(0.5)
    return _status_mb("VmRSS")


def _prompt(i: int, tokens: int, tokenizer) -> str:
    """About `tokens` tokens of numbered notes, distinct per `i` (no cached result is shared)."""
    lines, k = [], 0
    text = ""
    while len(tokenizer(text)["input_ids"]) < tokens:
        place = ["museum", "harbour", "library", "bakery", "station"][(k + i) % 5]
        lines.append(f"Note {k + 1} of list {i}: the {place} opens at {7 + (k + i) % 5} am.")
        k += 1
        text = "\n".join(lines) + "\nWhen does the library open?"
    return text


def run_phase(shared: SharedLM, chats: list, counts: dict) -> tuple[float, list[float], float, float]:
    """(wall seconds, each job's seconds, idle RSS, peak RSS above it) of the jobs on `chats` at once."""
    idle = _idle(shared)
    _reset_peak()
    times = [0.0] * len(chats)
    errors: list[BaseException] = []

    def job(i: int) -> None:
        start = time.perf_counter()
        try:
            with clients.acting_as(f"bench-client-{i}"):
                shared.salience(chats[i], ANSWER, counts)
        except BaseException as e:  # pylint: disable=broad-except
            errors.append(e)
        times[i] = time.perf_counter() - start

    threads = [threading.Thread(target=job, args=(i,)) for i in range(len(chats))]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if errors:
        raise errors[0]
    return wall, times, idle, _status_mb("VmHWM") - idle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=127)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ig_steps", type=int, default=0, help="also IG's per-token matrices at this step count")
    args = parser.parse_args()

    memory.cap_malloc_arenas()  # as the server does, before any thread runs the model
    lm = ss.load_model("default")
    shared = SharedLM(lm, disk_cache=False)
    memory.freeze_startup_objects()
    ig = next(e for e in method_registry.EXTRA_METHODS if e.method == "integrated_gradients")
    counts = {ig.field: args.ig_steps} if args.ig_steps else {}
    chats = [shared.format_prompt({"prompt": _prompt(i, args.tokens, lm.tokenizer)}) for i in range(args.jobs + 1)]
    print(f"{args.jobs} jobs of every matrix ({', '.join(shared.methods_and_config(counts)[0])}) on prompts of"
          f" {len(lm.tokenizer(chats[0].text)['input_ids'])} tokens (chat template included), a 9-token answer;"
          f" load average {os.getloadavg()[0]:.1f} at start", flush=True)
    run_phase(shared, chats[-1:], counts)  # warm-up: the first pass's one-off allocations
    for r in range(args.rounds):
        wall, _, idle, peak = run_phase(shared, chats[:1], counts)
        print(f"round {r + 1} alone:    {wall:6.1f} s, idle RSS {idle:5.0f} MB, peak +{peak:4.0f} MB"
              f" (+{peak / idle:.0%}); load {os.getloadavg()[0]:.1f}", flush=True)
        wall, times, idle, peak = run_phase(shared, chats[:args.jobs], counts)
        print(f"round {r + 1} together: {wall:6.1f} s (jobs {', '.join(f'{t:.1f}' for t in times)} s), idle RSS"
              f" {idle:5.0f} MB, peak +{peak:4.0f} MB (+{peak / idle:.0%}); load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
