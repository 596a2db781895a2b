"""Times sequence_salience.aggregate on an 8,000-token chat prompt at every granularity.

Prints milliseconds per granularity (median of repeats) for segment() and for
segment()+aggregate() with one score row [N] and with T=64 rows [64, N].
Prints figures only; nothing is asserted. Its twin for the browser code is
frontend/test/bench_aggregate.mjs (same synthetic prompt).

    python benchmarks/bench_aggregate.py [--tokens 8000] [--repeats 20]
"""

from __future__ import annotations

import argparse
import re
import statistics
import time

import numpy as np

from sequence_salience import aggregate as agg

SENTENCES = [
    "Dr. Smith paid $3.14 for tea, e.g. green tea.",
    "It was cheap!",
    "Was it really worth it?",
    "The U.S. team won 2,000 points in 3.5 hours.",
    "Don't forget the \u6771\u4eac trip \U0001F600.",
    "Steps follow:\n1. Open the box.\n2. Take it out.",
]


# GPT-2-like pieces: a marker, or optional leading space + (letters | digits | one other char).
_PIECE_RE = re.compile(r"<\|[a-z_]+\|>| ?[A-Za-z]+| ?[0-9]+|\s+|.", re.DOTALL)


def make_prompt(n_tokens: int) -> tuple[str, list[tuple[int, int]], list[tuple[int, int, str]]]:
    """A SmolLM2 chat prompt of about n_tokens word-piece tokens, with offsets and role spans."""
    head = "<|im_start|>system\n"
    system = "You are a careful assistant."
    mid = "<|im_end|>\n<|im_start|>user\n"
    body, i = [], 0
    while len(_PIECE_RE.findall("".join(body))) < n_tokens:
        for _ in range(10):  # grow in batches; pieces may merge across sentences
            body.append(SENTENCES[i % len(SENTENCES)] + ("\n\n" if i % 7 == 6 else " "))
            i += 1
    user = "".join(body)
    tail = "<|im_end|>\n<|im_start|>assistant\n"
    text = head + system + mid + user + tail
    offsets = [m.span() for m in _PIECE_RE.finditer(text)]
    a, b = len(head), len(head) + len(system)
    c, d = b + len(mid), b + len(mid) + len(user)
    spans = [(0, a, "markup"), (a, b, "system"), (b, c, "markup"), (c, d, "user"), (d, len(text), "markup")]
    return text, offsets, spans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    text, offsets, spans = make_prompt(args.tokens)
    offsets = np.array(offsets, dtype=np.int64)  # [N, 2]
    n = len(offsets)
    rng = np.random.default_rng(0)
    row = rng.normal(size=n).astype(np.float32)  # [N]
    matrix = rng.normal(size=(64, n)).astype(np.float32)  # [64, N]
    print(f"aggregate.py: {n} tokens, {len(text)} characters; ms, median (best) of {args.repeats} runs")
    print(f"{'granularity':<12}{'segments':>9}{'segment':>16}{'segment+agg [N]':>18}{'segment+agg [64,N]':>20}")
    total = total_mat = 0.0
    for g in agg.GRANULARITIES:
        kw = {"pattern": r"[^,;.!?]+", "role_spans": spans}
        times = {"seg": [], "row": [], "mat": []}
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            seg = agg.segment(text, offsets, g, **kw)
            t1 = time.perf_counter()
            agg.aggregate(row, seg, "sum")
            t2 = time.perf_counter()
            agg.aggregate(matrix, seg, "sum")
            t3 = time.perf_counter()
            times["seg"].append(t1 - t0)
            times["row"].append(t2 - t0)
            times["mat"].append((t1 - t0) + (t3 - t2))
        cell = {k: f"{statistics.median(v) * 1e3:.2f} ({min(v) * 1e3:.2f})" for k, v in times.items()}
        total += statistics.median(times["row"]) * 1e3
        total_mat += statistics.median(times["mat"]) * 1e3
        print(f"{g:<12}{len(seg):>9}{cell['seg']:>16}{cell['row']:>18}{cell['mat']:>20}")
    print(f"{'all':<12}{'':>9}{'':>16}{total:>18.2f}{total_mat:>20.2f}")


if __name__ == "__main__":
    main()
